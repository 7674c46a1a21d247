"""``tfsim collect``: run a real parameter-server job here (or this host's task of one) and trace it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tfbase.errors import ClusterError, InputError
from tfsim.cli.options import PLACEMENT_CHOICES, non_negative_int, positive_int


def register(sub) -> None:
    p = sub.add_parser(
        "collect", help="run a real parameter-server job here and trace it",
        description="Run a real parameter-server job on this machine (each PS and worker a separate process, "
                    "async SGD on synthetic data) and write a run directory. --api tf1 (the default): TF1 graph "
                    "mode, per-step RunMetadata (FULL_TRACE with partition graphs). --api tf2-pss: TensorFlow 2's "
                    "ParameterServerStrategy with a ClusterCoordinator (one more process), one profiler XSpace "
                    "per task and the step function's partition graphs. Both write variables.json, "
                    "step_times.csv and run.json. Needs TensorFlow (pip install 'tfsim[tf]').",
        epilog="The user's model contract for --model-fn: MODULE:FUNCTION names a function "
               "f(options) -> (loss, batch_size) that builds the model with tf.compat.v1 ops "
               "(tf.compat.v1.get_variable for its weights) on its own (synthetic) input. With --api tf1 it is "
               "called inside tf.compat.v1.device(replica_device_setter); with --api tf2-pss it is wrapped in "
               "tf.compat.v1.make_template, called once under the strategy's scope to create the variables "
               "and then inside the tf.function step; there it may instead return (model, batch_size) with a "
               "built Keras model (Keras 3 or tf_keras), trained on a synthetic batch of its input shape. "
               "options has batch_size, image_size and num_classes. MODULE must be importable.",
    )
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", default="tiny",
                       help="built-in model: tiny, alexnet, vgg11, resnet50, inception3, wide_mlp (default: tiny)")
    model.add_argument("--model-fn", metavar="MODULE:FUNC", help="your own model function (see below)")
    p.add_argument("--api", choices=("tf1", "tf2-pss"), default="tf1",
                   help="how the job trains: tf1 graph mode with sessions, or tf2-pss, TensorFlow 2's "
                        "ParameterServerStrategy with a ClusterCoordinator (default: tf1)")
    p.add_argument("--trace-ms", type=positive_int, default=1500, metavar="MS",
                   help="tf2-pss: length of the profiler trace, taken while the measured steps run (default: 1500)")
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
    p.add_argument("--placement", "--ps-strategy", dest="placement", choices=PLACEMENT_CHOICES,
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
                        "--role: the capture only (see --iperf and --capture-at); a tf2-pss job's coordinator "
                        "(--role chief) and the task that captures both get it")
    p.add_argument("--capture-at", dest="capture_site", choices=("chief-worker", "ps"), default="chief-worker",
                   help="with --capture, where tcpdump runs: chief-worker (default; the one-worker run calibrate "
                        "reads; for tf2-pss worker 0's host) or ps: PS 0's host, every worker's traffic with it "
                        "(the W-worker run tfsim report --timeline-run reads); with --role give it to PS 0, which "
                        "captures into its own --out, and to the chief, which records where the capture is; with "
                        "--api tf2-pss to the capturing task (worker 0, or PS 0 with ps) and to the coordinator, "
                        "which fetches the capture into its run directory")
    p.add_argument("--out", type=Path, metavar="RUN_DIR",
                   help="run directory to create (required, except on a PS or a non-chief worker with --role; "
                        "PS 0 with --capture-at ps: the directory for its capture)")
    p.add_argument("--force", action="store_true", help="replace RUN_DIR if it exists")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--capture-interface", metavar="IFACE",
                   help="interface tcpdump listens on (default: lo; with --role: on the capturing worker 0 the "
                        "one routing to PS 0, or on PS 0 with --capture-at ps the one routing to worker 0)")
    role = p.add_argument_group(
        "one task per host (a real cluster)",
        "With --role, --task-index, --cluster-spec or TF_CONFIG set, collect starts only this host's task of the "
        "job. The cluster comes from TF_CONFIG ({\"cluster\": {\"ps\": [\"host:port\", ...], \"worker\": [...]}, "
        "\"task\": {\"type\": \"worker\", \"index\": 0}}) or --cluster-spec FILE (the same JSON, or just the "
        "cluster object). Worker 0, the chief, writes the run directory; every task must get the same model and "
        "run options. With --api tf2-pss the cluster also has \"chief\": [\"host:port\"], the coordinator "
        "(--role chief), which writes the run directory; each PS's and worker's profiler listens on its port "
        "plus 10000. There --capture runs tcpdump on worker 0's host (or PS 0's with --capture-at ps) and --iperf, "
        "given to the coordinator, has worker 0's host run iperf3 to every PS host (--iperf-server); the "
        "coordinator fetches both into its run directory, which tfsim calibrate reads as a one-host run's.")
    role.add_argument("--role", choices=("ps", "worker", "chief"),
                      help="this task's type (default: TF_CONFIG's task); chief: a tf2-pss job's coordinator")
    role.add_argument("--task-index", type=non_negative_int, metavar="I",
                      help="this task's index (default: TF_CONFIG's task)")
    role.add_argument("--cluster-spec", type=Path, metavar="FILE", help="the cluster, instead of TF_CONFIG")
    role.add_argument("--connect-timeout", type=float, default=30.0, metavar="S",
                      help="a worker fails if a PS does not answer within S seconds (default: 30)")
    role.add_argument("--iperf", action="store_true",
                      help="chief: measure the link to every PS host with iperf3 -J, both directions, before "
                           "training (each PS host needs --iperf-server); a tf2-pss job's coordinator has worker "
                           "0's host measure them")
    role.add_argument("--iperf-server", action="store_true", help="PS: run an iperf3 server beside the task")
    role.add_argument("--iperf-port", type=positive_int, default=5201, metavar="PORT",
                      help="iperf3's TCP port (default: 5201)")
    role.add_argument("--iperf-repeats", type=positive_int, default=3, metavar="N",
                      help="iperf3 runs per direction and PS host (default: 3)")
    role.add_argument("--iperf-seconds", type=float, default=3.0, metavar="S",
                      help="length of one iperf3 run (default: 3)")
    role.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                      help="run the job N times in step, each time on fresh TF servers (give every task the same "
                           "N): the chief (with --api tf2-pss the coordinator) writes RUN_DIR/r1 ... RUN_DIR/rN, "
                           "each a run directory, and RUN_DIR/repeats.json, each repetition's throughput and every "
                           "host's outside load, with mean, min, max, CV and 95%% CI (default: 1, one run "
                           "directory RUN_DIR)")
    p.set_defaults(handler=run)


def _role_mode(args) -> bool:
    """One task per host: asked for explicitly, or TF_CONFIG describes the job."""
    return bool(args.role or args.task_index is not None or args.cluster_spec or os.environ.get("TF_CONFIG"))


def run(args) -> int:
    from tfprofile.harness.launcher import CaptureSite, CollectConfig, TrainingApi, collect

    if args.repeat != 1 and not _role_mode(args):
        raise InputError("--repeat", "repeats a job with one task per host: give --role (or TF_CONFIG); on one "
                                     "machine, tfsim lab --repeat measures each point N times")
    if args.api == "tf2-pss":
        for flag, given in (("--trace-every", args.trace_every != 1), ("--placement", args.placement != "round_robin")):
            if given:
                raise InputError(flag, "applies to --api tf1 only (tf2-pss traces a time window: --trace-ms)")
    role = _role_options(args) if _role_mode(args) else None
    if role is None:
        for flag, given in (("--iperf", args.iperf), ("--iperf-server", args.iperf_server)):
            if given:
                raise InputError(flag, "belongs to one task of a cluster job: give --role (or TF_CONFIG)")
    capture_site = CaptureSite(args.capture_site)
    writes_run = role is None or (role.task.is_coordinator if args.api == "tf2-pss" else role.task.is_chief)
    if args.out is None and writes_run:
        raise InputError("--out", "give the run directory to create (--out RUN_DIR)")
    if (args.out is None and args.capture and capture_site is CaptureSite.PS and role.task.label == "ps0"
            and args.api == "tf1"):  # a tf2-pss job's coordinator fetches PS 0's capture
        raise InputError("--out", "ps0 writes its capture into a directory: give it (--out DIR)")
    config = CollectConfig(
        out_dir=args.out or Path("."), model=(args.model_fn and "custom") or args.model, model_fn=args.model_fn,
        batch_size=args.batch, image_size=args.image_size, num_classes=args.num_classes, steps=args.steps,
        warmup_steps=args.warmup, trace_every=args.trace_every,
        workers=len(role.cluster.worker) if role else args.workers or 1,
        ps_tasks=len(role.cluster.ps) if role else args.ps_tasks or 1,
        placement=args.placement, intra_op_threads=args.intra_op_threads, inter_op_threads=args.inter_op_threads,
        timeout_s=args.timeout, capture=args.capture, capture_site=capture_site, zero_init=args.zero_init,
        iperf_repeats=args.iperf_repeats, iperf_seconds=args.iperf_seconds,
        env=(("TF_GRPC_DEFAULT_OPTIONS", args.grpc_options),) if args.grpc_options else (),
        api=TrainingApi(args.api), trace_ms=args.trace_ms,
    )
    if role is not None:
        from tfprofile.harness.role import run_task

        out = run_task(config, role, progress=not args.no_progress, overwrite=args.force)
        if out is not None and writes_run and role.repeat > 1:
            from tfsim.repeats import summary_line, write_repeats

            print(summary_line(write_repeats(out, role.repeat)), file=sys.stderr, flush=True)
        print(out if out is not None else f"{role.task.label}: done")
        return 0
    out = collect(config, progress=not args.no_progress, overwrite=args.force,
                  capture_interface=args.capture_interface or "lo")
    print(out)
    return 0


def _role_options(args):
    """This host's task, its cluster and its side jobs, from the options and TF_CONFIG."""
    from tfprofile.harness.role import RoleOptions
    from tfprofile.harness.tfconfig import load_task

    cluster, task, source = load_task(os.environ, args.cluster_spec, args.role, args.task_index,
                                      coordinator=args.api == "tf2-pss")
    for flag, given, count in (("--workers", args.workers, len(cluster.worker)),
                               ("--ps-tasks", args.ps_tasks, len(cluster.ps))):
        if given is not None and given != count:
            raise ClusterError(task.label, f"{flag} {given} disagrees with the cluster in {source} ({count})")
    return RoleOptions(task, cluster, source, connect_timeout_s=args.connect_timeout, iperf=args.iperf,
                       iperf_server=args.iperf_server, iperf_port=args.iperf_port,
                       capture_interface=args.capture_interface, repeat=args.repeat)
