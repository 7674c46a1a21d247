"""The ``tfsim`` command line: one program, a subcommand per job.

Exit status: 0 on success, 2 on bad input or usage (one line on stderr), 1 when a run
fails or on an internal error, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import warnings
from pathlib import Path
from typing import Callable, Sequence

from tfsim import __version__
from tfsim.argtypes import non_negative_int, positive_int
from tfbase.errors import CollectError, InputError, TfsimWarning

DESCRIPTION = """\
Predict how fast a TensorFlow parameter-server training job runs on W workers,
from a 1-PS/1-worker profiling run.

workflow:
  tfsim collect   run a real 1-PS/1-worker TF1 job here and trace it
  tfsim profile   turn the traces into an op DAG profile; summarise a profile
  tfsim calibrate fit bandwidth, HTTP/2 window and parsing overhead from a captured run
  tfsim order     TicTac transfer priorities (TIC, TAC) and scheduling efficiency
  tfsim predict   simulate the job on W workers and M servers: throughput table and plot
  tfsim compare   the simulation beside the coarse analytical baselines (and measurements)
  tfsim report    one self-contained HTML page: calibration, job, throughput over W, orders, steps
  tfsim lab       measure real W-worker throughput on emulated clusters; publish the error
  tfsim demo      summary, prediction, orderings and baselines on the bundled real data
"""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), as every other tfsim error."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        self.exit(2, f"tfsim: error: {message} (see {self.prog} --help)\n")



def _deferred(module: str) -> Callable:
    """The handler of a command whose work is ``module.run_cli(args)``; the module (and what it
    imports: numba, pandas, matplotlib) loads only when that command runs, so ``--help`` stays fast."""

    def handler(args) -> int:
        return importlib.import_module(module).run_cli(args)

    return handler

# ---------------------------------------------------------------------------- collect

def _add_collect(sub) -> None:
    p = sub.add_parser(
        "collect", help="run a real TF1 parameter-server job here and trace it",
        description="Run a real TF1 graph-mode parameter-server job on this machine (each PS and worker a "
                    "separate process, async SGD on synthetic data) and write a run directory: per-step "
                    "RunMetadata (FULL_TRACE with partition graphs), variables.json, step_times.csv and "
                    "run.json. Needs TensorFlow (pip install 'tfsim[tf]').",
        epilog="The user's model contract for --model-fn: MODULE:FUNCTION names a function "
               "f(options) -> (loss, batch_size), called inside tf.compat.v1.device(replica_device_setter), "
               "that builds the model's graph with tf.compat.v1 ops on its own (synthetic) input. "
               "options has batch_size, image_size and num_classes. MODULE must be importable.",
    )
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", default="tiny",
                       help="built-in model: tiny, alexnet, vgg11, resnet50, inception3, wide_mlp (default: tiny)")
    model.add_argument("--model-fn", metavar="MODULE:FUNC", help="your own model function (see below)")
    p.add_argument("--batch", type=positive_int, default=32, help="examples per step and worker (default: 32)")
    p.add_argument("--image-size", type=non_negative_int, default=0,
                   help="input image side in pixels (default: the model's own)")
    p.add_argument("--num-classes", type=non_negative_int, default=0, help="classes (default: the model's own)")
    p.add_argument("--steps", type=positive_int, default=20, help="measured steps per worker (default: 20)")
    p.add_argument("--warmup", type=non_negative_int, default=5,
                   help="untimed steps before the measured ones (default: 5)")
    p.add_argument("--trace-every", type=positive_int, default=1, metavar="K",
                   help="trace every K-th measured step, starting with the first (default: 1)")
    p.add_argument("--workers", type=positive_int, help="worker tasks (default: 1; with --role: the cluster's)")
    p.add_argument("--ps-tasks", type=positive_int,
                   help="parameter-server tasks (default: 1; with --role: the cluster's)")
    p.add_argument("--placement", "--ps-strategy", dest="placement", choices=("round_robin", "greedy"),
                   default="round_robin",
                   help="variable placement over PS tasks (default: round_robin, TensorFlow's default)")
    p.add_argument("--zero-init", action="store_true",
                   help="initialise the weights to zero: same timings, but captures compress a thousandfold")
    p.add_argument("--grpc-options", metavar="OPTS",
                   help="TF_GRPC_DEFAULT_OPTIONS for every task, e.g. "
                        "'grpc.http2.bdp_probe=0,grpc.http2.lookahead_bytes=65535' to pin a small HTTP/2 window")
    p.add_argument("--intra-op-threads", type=non_negative_int, default=0, help="0: TensorFlow's default")
    p.add_argument("--inter-op-threads", type=non_negative_int, default=0, help="0: TensorFlow's default")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S", help="give up after S seconds")
    p.add_argument("--capture", action="store_true",
                   help="also measure the link with iperf3 -J (both directions, 3 runs each) and capture the job's "
                        "gRPC traffic with tcpdump into capture.pcap.gz, for tfsim calibrate (needs root); with "
                        "--role: the chief's capture only (see --iperf)")
    p.add_argument("--out", type=Path, metavar="RUN_DIR",
                   help="run directory to create (required, except on a PS or a non-chief worker with --role)")
    p.add_argument("--force", action="store_true", help="replace RUN_DIR if it exists")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--capture-interface", metavar="IFACE",
                   help="interface tcpdump listens on (default: lo; with --role: the one routing to PS 0)")
    role = p.add_argument_group(
        "one task per host (a real cluster)",
        "With --role, --task-index, --cluster-spec or TF_CONFIG set, collect starts only this host's task of the "
        "job. The cluster comes from TF_CONFIG ({\"cluster\": {\"ps\": [\"host:port\", ...], \"worker\": [...]}, "
        "\"task\": {\"type\": \"worker\", \"index\": 0}}) or --cluster-spec FILE (the same JSON, or just the "
        "cluster object). Worker 0, the chief, writes the run directory; every task must get the same model and "
        "run options.")
    role.add_argument("--role", choices=("ps", "worker"), help="this task's type (default: TF_CONFIG's task)")
    role.add_argument("--task-index", type=non_negative_int, metavar="I",
                      help="this task's index (default: TF_CONFIG's task)")
    role.add_argument("--cluster-spec", type=Path, metavar="FILE", help="the cluster, instead of TF_CONFIG")
    role.add_argument("--connect-timeout", type=float, default=30.0, metavar="S",
                      help="a worker fails if a PS does not answer within S seconds (default: 30)")
    role.add_argument("--iperf", action="store_true",
                      help="chief: measure the link to every PS host with iperf3 -J, both directions, before "
                           "training (each PS host needs --iperf-server)")
    role.add_argument("--iperf-server", action="store_true", help="PS: run an iperf3 server beside the task")
    role.add_argument("--iperf-port", type=positive_int, default=5201, metavar="PORT",
                      help="iperf3's TCP port (default: 5201)")
    role.add_argument("--iperf-repeats", type=positive_int, default=3, metavar="N",
                      help="iperf3 runs per direction and PS host (default: 3)")
    role.add_argument("--iperf-seconds", type=float, default=3.0, metavar="S",
                      help="length of one iperf3 run (default: 3)")
    p.set_defaults(handler=_run_collect)


def _role_mode(args) -> bool:
    """One task per host: asked for explicitly, or TF_CONFIG describes the job."""
    import os

    return bool(args.role or args.task_index is not None or args.cluster_spec or os.environ.get("TF_CONFIG"))


def _run_collect(args) -> int:
    from tfprofile.harness.launcher import CollectConfig, collect

    role = _role_options(args) if _role_mode(args) else None
    if role is None:
        for flag, given in (("--iperf", args.iperf), ("--iperf-server", args.iperf_server)):
            if given:
                raise InputError(flag, "belongs to one task of a cluster job: give --role (or TF_CONFIG)")
    if args.out is None and (role is None or role.task.is_chief):
        raise InputError("--out", "give the run directory to create (--out RUN_DIR)")
    config = CollectConfig(
        out_dir=args.out or Path("."), model=args.model_fn and "custom" or args.model, model_fn=args.model_fn,
        batch_size=args.batch, image_size=args.image_size, num_classes=args.num_classes, steps=args.steps,
        warmup_steps=args.warmup, trace_every=args.trace_every,
        workers=len(role.cluster.worker) if role else args.workers or 1,
        ps_tasks=len(role.cluster.ps) if role else args.ps_tasks or 1,
        placement=args.placement, intra_op_threads=args.intra_op_threads, inter_op_threads=args.inter_op_threads,
        timeout_s=args.timeout, capture=args.capture, zero_init=args.zero_init,
        iperf_repeats=args.iperf_repeats, iperf_seconds=args.iperf_seconds,
        env=(("TF_GRPC_DEFAULT_OPTIONS", args.grpc_options),) if args.grpc_options else (),
    )
    if role is not None:
        from tfprofile.harness.role import run_task

        out = run_task(config, role, progress=not args.no_progress, overwrite=args.force)
        print(out if out is not None else f"{role.task.label}: done")
        return 0
    out = collect(config, progress=not args.no_progress, overwrite=args.force,
                  capture_interface=args.capture_interface or "lo")
    print(out)
    return 0


def _role_options(args):
    """This host's task, its cluster and its side jobs, from the options and TF_CONFIG."""
    import os

    from tfprofile.harness.role import RoleOptions
    from tfprofile.harness.tfconfig import load_task
    from tfbase.errors import ClusterError

    cluster, task, source = load_task(os.environ, args.cluster_spec, args.role, args.task_index)
    for flag, given, count in (("--workers", args.workers, len(cluster.worker)),
                               ("--ps-tasks", args.ps_tasks, len(cluster.ps))):
        if given is not None and given != count:
            raise ClusterError(task.label, f"{flag} {given} disagrees with the cluster in {source} ({count})")
    return RoleOptions(task, cluster, source, connect_timeout_s=args.connect_timeout, iperf=args.iperf,
                       iperf_server=args.iperf_server, iperf_port=args.iperf_port,
                       capture_interface=args.capture_interface)


# ---------------------------------------------------------------------------- profile

def _add_profile(sub) -> None:
    p = sub.add_parser(
        "profile", help="build an op-DAG profile from a run directory or traces; summarise a profile",
        description="Build a profile (op DAG + per-step durations, format tfsim.profile/1) from a run "
                    "directory or from RunMetadata files (.pb, .pbtxt, optionally .gz) or Chrome trace JSON "
                    "of one 1-PS/1-worker run; or, with --summary, print what a profile holds.",
    )
    p.add_argument("inputs", nargs="+", metavar="RUN_DIR|TRACE|PROFILE")
    p.add_argument("-o", "--output", type=Path, metavar="PROFILE", help="profile file to write (.npz)")
    p.add_argument("--summary", action="store_true", help="summarise the PROFILE given as input")
    p.add_argument("--json", action="store_true", help="with --summary: one JSON object on stdout")
    p.add_argument("--batch", type=positive_int, help="batch size, for trace files outside a run directory")
    p.add_argument("--variables", type=Path, metavar="FILE",
                   help="variables.json, for trace files outside a run directory")
    p.set_defaults(handler=_run_profile)


def _run_profile(args) -> int:
    from tfprofile import api

    if args.summary:
        if len(args.inputs) != 1:
            raise InputError("--summary", "takes exactly one PROFILE")
        from tfprofile.summary import format_summary, summarize

        summary = summarize(api.load_profile(args.inputs[0]))
        print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
        return 0
    if args.output is None:
        raise InputError("-o", "give the profile file to write (-o PROFILE), or --summary to read one")
    profile = api.read_profile(args.inputs, batch_size=args.batch, variables=args.variables)
    api.save_profile(profile, args.output)
    from tfprofile.summary import format_summary, summarize

    print(format_summary(summarize(profile)), file=sys.stderr)
    print(args.output)
    return 0


# ---------------------------------------------------------------------------- calibrate

def _add_calibrate(sub) -> None:
    p = sub.add_parser(
        "calibrate", help="fit B, the HTTP/2 window and the parsing overhead from a captured run",
        description="Fit the cluster's link bandwidth B (iperf3 -J, per direction), the HTTP/2 flow-control window "
                    "WIN (from the capture's SETTINGS and BDP-probe raises), and the parsing overhead alpha*size+beta "
                    "(last DATA frame on the wire to the end of the RecvTensor record, robust Theil-Sen fit), and "
                    "check how well each transfer model reproduces the captured stream end times (ICPE Table 1). "
                    "RUN_DIR comes from tfsim collect --capture.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="CLUSTER.json")
    p.add_argument("--backend", choices=("scapy", "tshark"), default="scapy",
                   help="capture decoder (default: scapy; tshark is the slower, independent reference)")
    p.add_argument("--plots", type=Path, metavar="DIR", help="write overhead.png and streams.png to DIR")
    p.add_argument("--json", action="store_true", help="print the CLUSTER.json object instead of a summary")
    p.set_defaults(handler=_deferred("calibration.cli"))



def _add_cluster_options(p) -> None:
    """--cluster/--bandwidth/--workers/--cores, as predict and compare take them."""
    p.add_argument("--cluster", type=Path, metavar="CLUSTER.json", help="calibrated cluster (tfsim calibrate)")
    p.add_argument("--bandwidth", metavar="RATE",
                   help="link bandwidth; without --cluster: no parsing overhead, unlimited window (a warning says "
                        "so); with --cluster: a what-if at this bandwidth")
    p.add_argument("--workers", default="1-16", help="worker counts (default: 1-16)")
    p.add_argument("--cores", type=float, help="all tasks share one host with this many cores (co-location)")


def _add_output_options(p) -> None:
    """--jobs and the table, plot and progress options of predict and compare."""
    p.add_argument("--jobs", type=positive_int, help="parallel processes (default: the machine's cores)")
    p.add_argument("--json", type=Path, metavar="OUT.json", help="write the table as JSON")
    p.add_argument("--csv", type=Path, metavar="OUT.csv", help="write the table as CSV")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="plot throughput against W")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


# ---------------------------------------------------------------------------- predict

def _add_predict(sub) -> None:
    p = sub.add_parser(
        "predict", help="simulate the job on W workers: throughput table and plot",
        description="Replay a 1-worker profile for W workers (and M parameter servers) with the trace-generation "
                    "simulation of ICPE Alg. 3.1 and report throughput (examples/s, summed over workers) with a "
                    "95%% confidence interval, step times and link utilisation, one row per configuration.",
        epilog="Rates: 1gbit, 100mbit, 10Gbps (bits/s) or 125MB/s, 1.25e8 (bytes/s). Lists: --workers 1-16 or "
               "1,2,4,8; --transfer http2,fifo; --sharing ps,fcfs.",
    )
    p.add_argument("profile", type=Path, metavar="PROFILE")
    _add_cluster_options(p)
    p.add_argument("--ps", dest="servers", type=positive_int, metavar="M",
                   help="re-partition the variables over M parameter servers with TensorFlow's greedy rule "
                        "(default: as profiled)")
    p.add_argument("--mode", default="async", choices=("async", "sync", "allreduce"), help="default: async")
    p.add_argument("--sharing", default="ps", help="link sharing: ps, fcfs, hybrid, flow_cap (default: ps)")
    p.add_argument("--transfer", default=None,
                   help="transfer scheduler(s): grpc (today's gRPC: whole streams in send-ready order, pausing "
                        "where an HTTP/2 window runs out), http2 (ICPE's model of TF 1.13's gRPC), fifo, or the "
                        "name of a --priorities file's order (default: the cluster's default_transfer, grpc for "
                        "clusters calibrated from TF 2.x captures; http2 without a calibration)")
    p.add_argument("--priorities", type=Path, action="append", default=[], metavar="NAME=FILE|FILE",
                   help="a TicTac priority file (name<TAB>priority); its order is used by --transfer NAME "
                        "(default NAME: the file's stem). Repeatable.")
    p.add_argument("--flow-cap", metavar="RATE", help="per-flow cap for --sharing flow_cap")
    p.add_argument("--steps", type=positive_int, default=1000, help="steps per worker (default: 1000)")
    p.add_argument("--warmup", type=non_negative_int, default=50, help="steps dropped per worker (default: 50)")
    p.add_argument("--stagger", type=float, default=1.0, metavar="STEPS",
                   help="workers start spread evenly over this many profiled steps, as real workers never start "
                        "at one instant (default: 1; 0 starts all at once, as the papers' algorithm does, and "
                        "leaves them in lock step)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--ci-target", type=float, metavar="F",
                   help="double the steps until the 95%% half-width is below F x throughput")
    p.add_argument("--trace-out", type=Path, metavar="OUT.json",
                   help="write a Chrome trace (Perfetto, chrome://tracing) of a simulated run")
    p.add_argument("--trace-workers", type=positive_int, help="workers in the traced run (default: the largest W)")
    p.add_argument("--trace-steps", type=positive_int, default=3, help="steps per worker in the trace (default: 3)")
    _add_output_options(p)
    p.set_defaults(handler=_deferred("tfsim.prediction"))



# ---------------------------------------------------------------------------- compare

def _add_compare(sub) -> None:
    p = sub.add_parser(
        "compare", help="the simulation beside the coarse analytical baselines, and measurements",
        description="One table and one plot of every method over W: tfsim's fine-grained simulation, and the "
                    "coarse baselines of the SGD mode (async: Lin et al. with and without the overlap correction, "
                    "Cynthia and its halved-T_C variant; sync: TPDS Eqs. 7-10; allreduce: ring all-reduce), with "
                    "the measured points and each method's error when --measured is given (e.g. tfsim lab's "
                    "results.csv).",
    )
    p.add_argument("profile", type=Path, metavar="PROFILE")
    _add_cluster_options(p)
    p.add_argument("--mode", default="async", choices=("async", "sync", "allreduce"))
    p.add_argument("--measured", type=Path, metavar="LAB.csv", help="measured throughput (workers, measured_eps)")
    p.add_argument("--setting", help="which setting of a lab results.csv with several")
    p.add_argument("--steps", type=positive_int, default=600, help="simulated steps per worker (default: 600)")
    _add_output_options(p)
    p.set_defaults(handler=_deferred("tfsim.comparison"))



# ---------------------------------------------------------------------------- report

def _add_report(sub) -> None:
    p = sub.add_parser(
        "report", help="one self-contained HTML page: how many workers, and is an enforced order worth it",
        description="Write DIR/report.html, one page that works offline: the cluster's calibration and its fit, "
                    "the job (ops, bytes, critical path, TicTac's E and S), predicted throughput against W with its "
                    "95%% band, the saturation point, the coarse baselines and the measurements when given, the "
                    "transfer-order what-if (tic, tac, fifo, random, against the cluster's default transfer model), "
                    "Gantt pictures of simulated steps with "
                    "1 and with W workers, and a plain-language recommendation. Beside it: report.json, "
                    "prediction.json (as tfsim predict --json writes it), and CSV tables.",
        epilog="The reference is the cluster's default transfer model (grpc for clusters calibrated from TF 2.x "
               "captures, http2 without a calibration). The prediction is tfsim predict --transfer "
               "REFERENCE,http2,fifo,tic,tac,random with the same --workers, --steps, --warmup and --seed, so its "
               "numbers match tfsim predict --json. Calibration plots are "
               "taken from the <name>-plots/ directory beside CLUSTER.json, or from --cluster-plots.",
    )
    p.add_argument("profile", type=Path, metavar="PROFILE")
    _add_cluster_options(p)
    p.add_argument("--mode", default="async", choices=("async", "sync", "allreduce"), help="default: async")
    p.add_argument("--measured", type=Path, metavar="LAB.csv", help="measured throughput (workers, measured_eps)")
    p.add_argument("--setting", help="which setting of a lab results.csv with several")
    p.add_argument("--cluster-plots", type=Path, metavar="DIR",
                   help="the calibration plots (tfsim calibrate --plots DIR; default: <cluster name>-plots/)")
    p.add_argument("--steps", type=positive_int, default=1000, help="steps per worker (default: 1000)")
    p.add_argument("--warmup", type=non_negative_int, default=50, help="steps dropped per worker (default: 50)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--gantt-workers", type=positive_int, metavar="W",
                   help="workers in the second Gantt picture (default: the saturation point)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory to write the report into")
    p.add_argument("--jobs", type=positive_int, help="parallel processes (default: the machine's cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or stage messages")
    p.set_defaults(handler=_deferred("tfsim.report.command"))



# ---------------------------------------------------------------------------- lab

def _add_lab(sub) -> None:
    p = sub.add_parser(
        "lab", help="measure real W-worker throughput on emulated clusters and the prediction error",
        description="Build emulated clusters on this machine (one network namespace per task on a bridge, "
                    "tbf-shaped links), profile each setting with 1 worker (capture + iperf3), calibrate, "
                    "predict W = 1..K, run the real job with W = 1..K workers, and write results.csv, "
                    "results.md and plots. Needs root and TensorFlow. Namespaces are always torn down; "
                    "--cleanup removes any that a killed run left behind.",
    )
    p.add_argument("--preset", choices=("quick", "matrix"), default="quick",
                   help="quick: tiny model, W=1..2, a few minutes; matrix: 3 models x 2 rates x W=1..4 plus a "
                        "pinned window and 2 PS (default: quick)")
    p.add_argument("--only", default="", metavar="NAMES", help="comma-separated settings of the preset to run")
    p.add_argument("--out", type=Path, default=Path("lab-results"), help="output directory (default: lab-results)")
    p.add_argument("--cleanup", action="store_true", help="only remove namespaces left by dead lab runs, then exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=_run_lab)


def _run_lab(args) -> int:
    if args.cleanup:
        from tfsim.lab.netns import cleanup, require_lab_tools

        require_lab_tools()
        removed = cleanup()
        print(f"removed {len(removed)} namespace(s)" + (": " + ", ".join(removed) if removed else ""))
        return 0
    from tfsim.lab.validate import run_lab

    only = [n.strip() for n in args.only.split(",") if n.strip()]
    rows = run_lab(args.preset, args.out, progress=not args.no_progress, only=only)
    print((args.out / "results.md").read_text())
    return 0 if rows else 2


# ---------------------------------------------------------------------------- demo

def _add_demo(sub) -> None:
    p = sub.add_parser(
        "demo", help="the whole pipeline on the bundled real data",
        description="Summarise the bundled real profiles, predict the sweep over W, and write the tables and "
                    "plots to a directory. Needs neither TensorFlow nor a network.",
    )
    p.add_argument("--out", type=Path, default=Path("tfsim-demo"), help="output directory (default: tfsim-demo)")
    p.add_argument("--data", type=Path, help="the bundled data directory (default: the project's data/)")
    p.add_argument("--steps", type=positive_int, default=400, help="steps per worker (default: 400)")
    p.add_argument("--jobs", type=positive_int, help="parallel processes (default: the machine's cores)")
    p.set_defaults(handler=_deferred("tfsim.demo"))



# ---------------------------------------------------------------------------- main

def _add_order(sub) -> None:
    from tfprofile import order_cli

    order_cli.add_parser(sub)


_COMMANDS: tuple[Callable, ...] = (_add_collect, _add_profile, _add_calibrate, _add_order, _add_predict, _add_compare,
                                   _add_report, _add_lab, _add_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfsim", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tfsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for add in _COMMANDS:
        add(sub)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    if issubclass(category, TfsimWarning):
        print(f"tfsim: warning: {message}", file=sys.stderr)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


_default_showwarning = warnings.showwarning


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        return args.handler(args)
    except InputError as err:
        print(f"tfsim: error: {err}", file=sys.stderr)
        return 2
    except CollectError as err:
        print(f"tfsim: {args.command} failed: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tfsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
