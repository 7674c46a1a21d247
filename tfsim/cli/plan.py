"""``tfsim plan``: which cluster to rent, from one profile and a catalogue of instance types."""

from __future__ import annotations

import argparse
from pathlib import Path

from tfsim.cli.options import (
    add_latency_option,
    add_mode_option,
    add_seed_option,
    add_sweep_options,
    jobs_count,
    positive_int,
    sweep_journal,
    sweep_run,
    with_latency,
)

EPILOG = """\
catalogue (TOML), one [[type]] table per instance type:
  [[type]]
  name = "c6in.2xlarge"
  price = 0.45          # $ per hour
  link = "25gbit"       # its network
  compute_scale = 1.0   # its computation time relative to the profiled host (0.5: twice as fast)

Every type is predicted as the host of the whole cluster (workers and parameter servers), with
the calibration at the type's link rate and the profile's computation scaled. The cheapest
configuration meeting --target (examples/s) or --deadline (hours per epoch of --examples) is
the one with the lowest cost per example.
"""


def register(sub) -> None:
    p = sub.add_parser(
        "plan", help="which cluster to rent: cost and throughput over a catalogue of instance types",
        description="Predict the job on every instance type of a catalogue for W workers, cost each "
                    "configuration, print the configurations no other beats on both throughput and cost, and name "
                    "the cheapest that meets a target.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("profile", type=Path, metavar="PROFILE")
    p.add_argument("--cluster", type=Path, metavar="CLUSTER.json", required=True,
                   help="the calibrated cluster (its windows and overheads are kept; each type sets the link rate)")
    p.add_argument("--catalogue", type=Path, required=True, metavar="TYPES.toml", help="the instance types")
    p.add_argument("--workers", default="1-16", help="worker counts (default: 1-16)")
    add_latency_option(p)
    p.add_argument("--examples", type=float, metavar="N", help="an epoch's examples (hours per epoch)")
    goal = p.add_mutually_exclusive_group()
    goal.add_argument("--target", type=float, metavar="EPS", help="the throughput to reach, examples/s")
    goal.add_argument("--deadline", type=float, metavar="HOURS", help="an epoch within this many hours")
    add_mode_option(p)
    p.add_argument("--steps", type=positive_int, default=300, help="simulated steps per worker (default: 300)")
    add_seed_option(p)
    p.add_argument("--json", type=Path, metavar="OUT.json", help="write every costed configuration as JSON")
    p.add_argument("--jobs", type=jobs_count, help="parallel processes (default: the machine's cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_sweep_options(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    from simulate.catalogue import plan_types, read_catalogue
    from simulate.cluster_file import load_cluster
    from simulate.planning import cheapest, pareto_front
    from simulate.sweep import default_jobs
    from tfbase.errors import UsageError
    from tfbase.fileio import Outputs, write_json
    from tfprofile.profile_io import load_profile
    from tfsim.cli.console import console
    from tfsim.prediction import prediction_rows

    if args.deadline is not None and args.examples is None:
        raise UsageError("--deadline", "needs --examples (an epoch's size)")
    with Outputs() as outputs:
        json_out = outputs.file(args.json, "--json") if args.json else None
        console.text_to_stderr = outputs.to_stdout
        run_options = sweep_run(args, outputs)
        profile = load_profile(args.profile)
        cluster = with_latency(load_cluster(args.cluster), args.latency)
        types = read_catalogue(args.catalogue)
        planned = plan_types(profile, cluster, types, workers=args.workers, examples=args.examples, mode=args.mode,
                             steps=args.steps, warmup=min(50, args.steps // 5), seed=args.seed)
        run_options = sweep_journal(run_options, planned.sweeps)
        console.release()
        frame = planned.run(jobs=args.jobs or default_jobs(), progress=not args.no_progress, **run_options)
        front = pareto_front(frame)
        show = front[["instance", "workers", "throughput_eps", "usd_per_hour", "usd_per_million_examples"]
                     + (["hours_per_epoch"] if args.examples else [])]
        out = console.out
        print(f"{len(frame)} configurations ({len(types)} instance types x W = {args.workers}); the ones no other "
              "beats on both throughput and cost per hour:", file=out)
        print(show.to_string(index=False, float_format=lambda x: f"{x:,.2f}"), file=out)
        plan = None
        if args.target is not None or args.deadline is not None:
            best = cheapest(frame, target_eps=args.target, deadline_h=args.deadline)
            plan = {"instance": best["instance"], "workers": int(best["workers"]),
                    "throughput_eps": float(best["throughput_eps"]), "usd_per_hour": float(best["usd_per_hour"]),
                    "usd_per_million_examples": float(best["usd_per_million_examples"])}
            print(f"cheapest that meets the target: {plan['workers']} x {plan['instance']} (and its PS): "
                  f"{plan['throughput_eps']:,.1f} examples/s at ${plan['usd_per_hour']:,.2f}/hour, "
                  f"${plan['usd_per_million_examples']:,.2f} per million examples", file=out)
        if json_out is not None:
            write_json(json_out, {"format": "tfsim.plan/1", "profile": str(args.profile),
                                  "catalogue": str(args.catalogue), "plan": plan,
                                  "rows": prediction_rows(frame)})
        outputs.commit()
    return 0
