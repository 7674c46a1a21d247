"""``tfsim report``: one self-contained HTML page, its numbers beside it as JSON and CSV."""

from __future__ import annotations

from pathlib import Path

from tfsim.cli.options import (
    add_cluster_options,
    add_enforcement_option,
    add_jobs_option,
    add_measured_options,
    add_mode_option,
    add_replicas_option,
    add_seed_option,
    add_steps_options,
    add_sweep_options,
    add_tie_order_option,
    positive_int,
    sweep_run,
)


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="one self-contained HTML page: how many workers, and is an enforced order worth it",
        description="Write DIR/report.html, one page that works offline: the cluster's calibration and its fit, "
                    "the job (ops, bytes, critical path, TicTac's E and S), predicted throughput against W with its "
                    "95% band, the saturation point, the coarse baselines and the measurements when given, the "
                    "transfer-order what-if (tic, tac, fifo, random, against the recorded order, each order's gains "
                    "under work-conserving and under strict enforcement side by side), "
                    "Gantt pictures of simulated steps with "
                    "1 and with W workers, and a plain-language recommendation. Beside it: report.json, "
                    "prediction.json (as tfsim predict --json writes it), and CSV tables.",
        epilog="The reference is the cluster's default transfer model (grpc for clusters calibrated from TF 2.x "
               "captures, http2 without a calibration). The prediction is tfsim predict --transfer "
               "REFERENCE,recorded,http2,fifo,tic,tac,random with the same --workers, --steps, --warmup, --seed, "
               "--enforcement and --tie-order, so its numbers match tfsim predict --json; the what-if's other "
               "enforcement is tfsim predict --transfer recorded,tic,tac,random --enforcement OTHER. Calibration "
               "plots are "
               "taken from the <name>-plots/ directory beside CLUSTER.json, or from --cluster-plots.",
    )
    p.add_argument("profile", type=Path, metavar="PROFILE")
    add_cluster_options(p)
    add_mode_option(p)
    add_measured_options(p)
    p.add_argument("--cluster-plots", type=Path, metavar="DIR",
                   help="the calibration plots (tfsim calibrate --plots DIR; default: <cluster name>-plots/)")
    add_steps_options(p, steps=1000)
    add_seed_option(p)
    add_replicas_option(p)
    add_enforcement_option(p)
    add_tie_order_option(p)
    p.add_argument("--gantt-workers", type=positive_int, metavar="W",
                   help="workers in the second Gantt picture (default: the saturation point)")
    p.add_argument("--price", metavar="worker=P,ps=P",
                   help="$/hour of a worker host and of a PS host: adds a cost section (cost per example, the "
                        "Pareto front of throughput against cost)")
    p.add_argument("--examples", type=float, metavar="N", help="with --price: an epoch's examples (hours per epoch)")
    p.add_argument("--timeline-run", type=Path, metavar="RUN_DIR",
                   help="a W-worker run captured at PS 0 (tfsim collect --capture --capture-at ps; on a real "
                        "cluster with PS 0's capture copied in): adds a section with its measured timeline beside "
                        "tfsim's simulation of the same W (a figure of a few steps, where the two differ) and "
                        "writes both as DIR/timeline.trace.json for Perfetto")
    p.add_argument("--worker-speed", metavar="F,F,...|lognormal:SIGMA",
                   help="stragglers: adds a section that predicts async and sync SGD side by side, with every "
                        "worker at the profiled speed and with these speeds (worker 0, 1, ... at F, the others at 1; "
                        "or a lognormal of median 1 seeded by --seed), and what the stragglers cost in each; the "
                        "rest of the report is for workers at the profiled speed")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory to write the report into")
    add_jobs_option(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar or stage messages")
    add_sweep_options(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    from simulate.config import Enforcement, TieOrder
    from simulate.sweep import default_jobs
    from tfbase.fileio import Outputs
    from tfsim.cli.console import console
    from tfsim.report import ReportRequest, make_report
    from tfsim.report.outputs import plan_report_files

    request = ReportRequest(
        profile_path=args.profile, cluster_path=args.cluster, bandwidth=args.bandwidth, workers=args.workers,
        steps=args.steps, warmup=args.warmup, seed=args.seed, replicas=args.replicas, mode=args.mode, cores=args.cores,
        ps_cores=args.ps_cores, worker_cores=args.worker_cores, price=args.price, examples=args.examples,
        worker_speed=args.worker_speed, latency=args.latency, enforcement=Enforcement(args.enforcement),
        tie_order=TieOrder(args.tie_order),
        measured_path=args.measured, setting=args.setting, gantt_workers=args.gantt_workers,
        plots_dir=args.cluster_plots, timeline_run=args.timeline_run, jobs=args.jobs or default_jobs(),
        progress=not args.no_progress, executor=args.executor, journal=args.journal, resume=args.resume)
    say = (lambda message: None) if args.no_progress else console.say
    with Outputs() as outputs:
        directory = outputs.directory(args.out, "--out")
        plan_report_files(directory, timeline=args.timeline_run is not None)
        sweep_run(args, outputs)  # --resume without --journal, a journal that is one of the report's files
        _, page = make_report(request, directory, say, ready=console.release)
        outputs.commit()
    print(page)
    return 0
