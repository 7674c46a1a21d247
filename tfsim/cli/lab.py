"""``tfsim lab``: measure real W-worker throughput on emulated clusters and the prediction error."""

from __future__ import annotations

import argparse
from pathlib import Path

from tfsim.cli.options import PLACEMENT_CHOICES, positive_int

EPILOG = """\
hosts: every task runs in a network namespace of its own and in a cgroup of its own. With a
quota (the default) each task is an emulated host of that many cores: by default an equal
share of this machine, its cores over the largest cluster's task count, so that the quota holds
at every W. --colocated lets every task share the machine's cores (the older lab). The
prediction is always made for the same hosts.

examples:
  tfsim lab                                     the quick preset (tiny model, W = 1..2)
  tfsim lab --preset matrix --out lab-results
  tfsim lab --model-fn mymodels:recommender --batch 256 --rate 400mbit,1gbit --workers 1-6 --out rec
  tfsim lab --settings matrix.toml --repeat 5
  tfsim lab --model tiny --rate 100mbit --workers 1-4 --timeline   where the time goes at each W
  tfsim lab --api tf2-pss --model tiny --rate 100mbit --workers 1-2 --repeat 1   a TF2 PSS job

The task processes import --model-fn's module with the current directory and this project on
PYTHONPATH. Each measured run's load is recorded (lab.json in its directory): a run during
which other processes used more than 0.1 core is measured again once (--no-rerun: kept) and
flagged in the results; so is a profiling run whose untraced steps carried such load.
"""


def register(sub) -> None:
    p = sub.add_parser(
        "lab", help="measure real W-worker throughput on emulated clusters and the prediction error",
        description="Build emulated clusters on this machine (one network namespace and one cgroup per task, "
                    "tbf-shaped links), profile each setting with 1 worker (capture + iperf3), calibrate, "
                    "measure the real job with W = 1..K workers (each point --repeat times on a fresh cluster, in "
                    "rounds, each round beginning with one more untraced one-worker run for the one-worker "
                    "correction), predict W = 1..K for the same hosts, and write results.csv, results.md and "
                    "plots. Needs root "
                    "and TensorFlow. Namespaces and cgroups are always removed; --cleanup removes any that a "
                    "killed run left behind.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--preset", choices=("quick", "matrix"),
                      help="quick: tiny model, W=1..2, a few minutes; matrix: the published matrix, 4 models (tiny, "
                           "a recommender, a convnet, wide_mlp) x 2 rates x W=1..6, about 60 minutes with 3 "
                           "repeats (default: quick, unless --model, --model-fn or --settings)")
    what.add_argument("--settings", type=Path, metavar="FILE.toml",
                      help="a whole matrix: one [[setting]] table per setting (keys: name, model or model_fn, "
                           "batch, rate, workers, ps, image_size, grpc_options, ps_cores, worker_cores, colocated, "
                           "queue_ms or queue_bytes, congestion_control, slow_start_after_idle, profile_steps, "
                           "measure_steps, warmup_steps, timeline, keep_captures, profile_ps, placement, api, packet, "
                           "packet_steps, cpu_period_ms, tail_runs, busy_ps_workers)")
    what.add_argument("--model", help="a zoo model to run (see tfsim collect --help)")
    what.add_argument("--model-fn", metavar="MODULE:FUNC", help="your own model function (as tfsim collect takes it)")
    job = p.add_argument_group("a job of your own (with --model or --model-fn)")
    job.add_argument("--batch", type=positive_int, default=32, help="batch size per worker (default: 32)")
    p.add_argument("--api", choices=("tf1", "tf2-pss"), default="tf1",
                   help="how the jobs train, as tfsim collect --api: tf1 graph mode, or tf2-pss, TensorFlow 2's "
                        "ParameterServerStrategy, whose coordinator runs on one more emulated host (default: tf1, or "
                        "a settings file's api; tf2-pss with --preset or --settings applies to every setting and "
                        "appends -tf2-pss to its name)")
    job.add_argument("--rate", default="1gbit", help="link rates, comma-separated (default: 1gbit)")
    job.add_argument("--workers", default="1-4", help="worker counts to measure (default: 1-4)")
    job.add_argument("--ps", type=positive_int, default=1, help="parameter servers (default: 1)")
    job.add_argument("--profile-ps", type=positive_int, metavar="N",
                     help="profile and calibrate with N PS (e.g. 1) while the measured runs have --ps: the "
                          "prediction re-places the profile's variables over --ps servers (default: --ps)")
    job.add_argument("--placement", choices=PLACEMENT_CHOICES, default="round_robin",
                     help="how the jobs place their variables over the PS tasks, as tfsim collect --placement "
                          "(tf1 only; default: round_robin, TensorFlow's); the prediction places them the same way")
    job.add_argument("--image-size", type=int, default=0, help="image models: input size (default: the model's)")
    job.add_argument("--grpc-options", metavar="OPTS",
                     help="gRPC channel options for every task (TF_GRPC_DEFAULT_OPTIONS), e.g. a pinned window")
    job.add_argument("--profile-steps", type=positive_int,
                     help="steps of the profiling run, the first half traced (default: 24; 48 for --api tf2-pss)")
    job.add_argument("--measure-steps", type=positive_int, default=60,
                     help="measured steps per run (default: 60; the last half count)")
    hosts = p.add_argument_group("hosts")
    hosts.add_argument("--ps-cores", type=float, metavar="N",
                       help="CPU quota of each PS task (default: an equal share)")
    hosts.add_argument("--worker-cores", type=float, metavar="N",
                       help="CPU quota of each worker task (default: an equal share)")
    hosts.add_argument("--colocated", action="store_true",
                       help="no quotas: every task shares this machine's cores (and is predicted so)")
    hosts.add_argument("--cpu-period", type=float, metavar="MS",
                       help="the CFS period over which each quota holds (default: 100, the kernel's); a task that "
                            "used its quota waits for the next period, so a shorter one stalls a busy host less")
    link = p.add_argument_group("the links' transport")
    link.add_argument("--queue", metavar="DEPTH",
                      help="the shaper's queue: a time at the link rate (5ms, the default: what a data-centre "
                           "port holds) or bytes (64kb, 2mb)")
    link.add_argument("--cc", choices=("bbr", "cubic", "reno"),
                      help="TCP congestion control in every namespace (default: the host's); allowed on the host "
                           "for the run and restored after")
    link.add_argument("--slow-start-after-idle", choices=("on", "off"),
                      help="TCP's slow start after an idle period (default: the host's)")
    p.add_argument("--timeline", action="store_true",
                   help="for every W, one more run captured at the PS, laid beside the simulation of that W: the "
                        "link's busy fraction per direction in the results, timeline-w<W>.png (a few steps, "
                        "measured above simulated) and a Perfetto trace of both (one PS only)")
    p.add_argument("--keep-captures", action="store_true",
                   help="keep the profiling run's capture, and with --timeline each timeline run's capture and "
                        "trace, so that tfsim calibrate (and tfsim report --timeline-run) can read their "
                        "directories again (tens of MB per run)")
    p.add_argument("--packet", action="store_true",
                   help="also predict every point with the packet transfer model (ns-3's TCP, docs/model.md §12; "
                        "needs the packet extra; minutes per setting) and publish its error beside grpc's")
    p.add_argument("--packet-steps", type=positive_int, metavar="N",
                   help="steps per worker the packet model replays (default: 120; fewer for a job whose steps "
                        "move tens of MB, where ns-3 takes seconds per worker and step)")
    p.add_argument("--repeat", type=positive_int, default=3,
                   help="measurements per point, each on a fresh cluster (default: 3)")
    p.add_argument("--no-fork-server", action="store_true",
                   help="start every task from nothing, importing TensorFlow under its host's quota (seconds "
                        "per task), instead of forking it from a process that has imported TensorFlow once")
    p.add_argument("--no-rerun", action="store_true",
                   help="keep a run during which outside load exceeded 0.1 core (it is flagged either way)")
    p.add_argument("--only", default="", metavar="NAMES", help="comma-separated settings to run")
    p.add_argument("--out", type=Path, default=Path("lab-results"), help="output directory (default: lab-results)")
    p.add_argument("--cleanup", action="store_true",
                   help="only remove namespaces and cgroups left by dead lab runs, then exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=run)


def settings_of(args) -> tuple[str, list]:
    """The settings the command line asks for, and a label for the results."""
    import dataclasses

    from simulate.sweep import parse_workers
    from tfbase.errors import UsageError
    from tfbase.units import parse_rate
    from tfsim.lab.validate import PRESETS, LabSetting, read_settings

    if args.settings is not None:
        settings, label = read_settings(args.settings), args.settings.stem
    elif args.model or args.model_fn:
        rates = [r.strip() for r in args.rate.split(",") if r.strip()]
        if not rates:
            raise UsageError("rate", "give at least one link rate")
        workers = tuple(parse_workers(args.workers))
        label = args.model or args.model_fn.split(":")[-1]
        settings = []
        for text in rates:
            rate_bit = int(parse_rate(text, "rate") * 8)
            settings.append(LabSetting(
                f"{label}-{text.lower()}", args.model or label, args.batch, rate_bit, image_size=args.image_size,
                workers=workers, ps_tasks=args.ps, profile_ps=args.profile_ps, placement=args.placement,
                grpc_options=args.grpc_options,
                profile_steps=args.profile_steps, measure_steps=args.measure_steps, model_fn=args.model_fn,
                api=args.api))
    else:
        label = args.preset or "quick"
        settings = list(PRESETS[label])
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    if only:
        unknown = sorted(set(only) - {s.name for s in settings})
        if unknown:
            raise UsageError("only", f"no setting named {', '.join(unknown)} (settings: "
                                     f"{', '.join(s.name for s in settings)})")
        settings = [s for s in settings if s.name in only]
    if args.api != "tf1" and not (args.model or args.model_fn):
        settings = [dataclasses.replace(s, api=args.api, name=f"{s.name}-{args.api}") for s in settings]
    transport = transport_options(args)
    if transport:
        settings = [dataclasses.replace(s, **transport) for s in settings]
    if args.timeline:
        settings = [dataclasses.replace(s, timeline=True) for s in settings]
    if args.packet:
        settings = [dataclasses.replace(s, packet=True) for s in settings]
    if args.packet_steps is not None:
        settings = [dataclasses.replace(s, packet_steps=args.packet_steps) for s in settings]
    if args.keep_captures:
        settings = [dataclasses.replace(s, keep_captures=True) for s in settings]
    if args.colocated or args.ps_cores is not None or args.worker_cores is not None:
        settings = [dataclasses.replace(s, colocated=args.colocated, ps_cores=args.ps_cores,
                                        worker_cores=args.worker_cores) for s in settings]
    if args.cpu_period is not None:
        settings = [dataclasses.replace(s, cpu_period_ms=args.cpu_period) for s in settings]
    return label, settings


def transport_options(args) -> dict:
    """The LabSetting fields that --queue, --cc and --slow-start-after-idle set."""
    import re

    from tfbase.errors import UsageError
    from tfbase.units import parse_size

    out: dict = {}
    if args.queue:
        time = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s)\s*", args.queue.lower())
        if time:
            value = float(time.group(1))
            out["queue_ms"], out["queue_bytes"] = value * (1000.0 if time.group(2) == "s" else 1.0), None
        else:
            try:
                out["queue_bytes"] = parse_size(args.queue, "queue")
            except UsageError:
                raise UsageError("queue", f"{args.queue!r} is not a time (5ms) or a size (64kb, 2mb)") from None
    if args.cc:
        out["congestion_control"] = args.cc
    if args.slow_start_after_idle:
        out["slow_start_after_idle"] = args.slow_start_after_idle == "on"
    return out


def run(args) -> int:
    if args.cleanup:
        from tfprofile.harness.fork_server import remove_stale_directories
        from tfsim.lab.cgroups import cleanup_cgroups
        from tfsim.lab.netns import cleanup, require_lab_tools

        require_lab_tools()
        removed, groups = cleanup(), cleanup_cgroups()
        remove_stale_directories()  # a killed lab's fork server directories: nothing running, said nowhere
        print(f"removed {len(removed)} namespace(s)" + (": " + ", ".join(removed) if removed else ""))
        print(f"removed {len(groups)} cgroup(s)" + (": " + ", ".join(groups) if groups else ""))
        return 0
    from tfsim.lab.validate import run_lab

    label, settings = settings_of(args)
    rows = run_lab(settings, args.out, label=label, progress=not args.no_progress, repeat=args.repeat,
                   rerun_loaded=not args.no_rerun, fork_server=not args.no_fork_server)
    print((args.out / "results.md").read_text())
    return 0 if rows else 2
