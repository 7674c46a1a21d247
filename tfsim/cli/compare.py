"""``tfsim compare``: the simulation beside the coarse analytical baselines, and measurements."""

from __future__ import annotations

import math
from pathlib import Path

from tfsim.cli.options import (
    add_cluster_options,
    add_measured_options,
    add_mode_option,
    add_output_options,
    add_replicas_option,
    add_seed_option,
    add_sweep_options,
    add_tie_order_option,
    positive_int,
    sweep_journal,
    sweep_run,
    task_hosts,
    with_latency,
)


def register(sub) -> None:
    p = sub.add_parser(
        "compare", help="the simulation beside the coarse analytical baselines, and measurements",
        description="One table and one plot of every method over W: tfsim's fine-grained simulation, and the "
                    "coarse baselines of the SGD mode (async: Lin et al. with and without the overlap correction, "
                    "Cynthia and its halved-T_C variant; sync: TPDS Eqs. 7-10; allreduce: ring all-reduce), with "
                    "the measured points and each method's error when --measured is given (e.g. tfsim lab's "
                    "results.csv).",
    )
    p.add_argument("profile", type=Path, metavar="PROFILE")
    add_cluster_options(p)
    add_mode_option(p)
    add_measured_options(p)
    p.add_argument("--steps", type=positive_int, default=600, help="simulated steps per worker (default: 600)")
    add_seed_option(p)
    add_replicas_option(p)
    add_tie_order_option(p)
    add_output_options(p)
    add_sweep_options(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    from simulate.cluster_file import resolve_cluster
    from simulate.coarse import baselines
    from simulate.sweep import default_jobs, parse_workers, plan_sweep
    from tfbase.errors import InputError, UsageError
    from tfbase.figures import save_figure
    from tfbase.fileio import Outputs, atomic_output, write_json
    from tfbase.units import parse_rate
    from tfprofile.profile_io import load_profile
    from tfsim.cli.console import console
    from tfsim.comparison import check_measured_in_sweep, comparison_table, read_measured
    from tfsim.plots import throughput_figure

    with Outputs() as outputs:
        csv_out = outputs.file(args.csv, "--csv") if args.csv else None
        json_out = outputs.file(args.json, "--json") if args.json else None
        plot_out = outputs.file(args.plot, "--plot", binary=True) if args.plot else None
        console.text_to_stderr = outputs.to_stdout
        run_options = sweep_run(args, outputs)

        profile = load_profile(args.profile)
        cluster = with_latency(resolve_cluster(args.cluster, parse_rate(args.bandwidth, "bandwidth")
                                               if args.bandwidth else None), args.latency)
        workers = parse_workers(args.workers)
        measured = read_measured(args.measured, args.setting) if args.measured else None
        if measured is not None:
            check_measured_in_sweep(measured, workers, args.measured)
        sweep = plan_sweep(profile, cluster, workers=workers, mode=args.mode, steps=args.steps,
                           warmup=min(50, args.steps // 5), cores=args.cores,
                           colocation=task_hosts(args), seed=args.seed, replicas=args.replicas,
                           tie_order=args.tie_order)
        try:  # the baselines (closed forms) before the sweep runs: a profile they cannot describe fails at once
            base = baselines(profile, cluster, workers, args.mode)
        except UsageError as err:
            if err.source != "profile":
                raise
            raise InputError(args.profile, err.problem) from None
        run_options = sweep_journal(run_options, [sweep])
        console.release()

        simulated = sweep.run(jobs=args.jobs or default_jobs(), progress=not args.no_progress, **run_options)
        table = comparison_table(simulated, base, measured)
        out = console.out
        print(table.to_string(index=False, float_format=lambda x: f"{x:,.3f}"), file=out)
        if measured is not None:
            errors = {c[len("error_"):]: float(table[c].abs().mean()) for c in table.columns
                      if c.startswith("error_")}
            print("mean |error| against the measurements: " + ", ".join(
                f"{m} {e * 100:.1f}%" for m, e in sorted(errors.items(), key=lambda kv: kv[1]) if not math.isnan(e)),
                file=out)
        if csv_out is not None:
            with atomic_output(csv_out) as handle:
                table.to_csv(handle, index=False, float_format="%.9g")
        if json_out is not None:
            rows = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
                    for row in table.to_dict(orient="records")]
            # The tie order is stated only when it is not the default, as prediction.json does.
            settings = {"tie_order": args.tie_order} if args.tie_order != "index" else {}
            write_json(json_out, {"format": "tfsim.comparison/1", "mode": args.mode, **settings, "rows": rows})
        if plot_out is not None:
            save_figure(throughput_figure(simulated, baselines=base, measured=measured,
                                          title=f"{profile.meta.get('model') or Path(args.profile).stem}: "
                                                f"tfsim and the coarse baselines ({args.mode} SGD)"), plot_out)
        outputs.commit()
    return 0
