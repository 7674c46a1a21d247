"""``tfsim calibrate``: fit the cluster from a captured run, write CLUSTER.json and the figures, print a summary."""

from __future__ import annotations

import json
from pathlib import Path


def register(sub) -> None:
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
    p.add_argument("--allow-loss", action="store_true",
                   help="calibrate although a direction of the capture lost more than 1%% of its bytes (dropped "
                        "packets); streams that lost frames are left out either way, and CLUSTER.json records the "
                        "loss")
    p.add_argument("--link-rate", metavar="RATE",
                   help="the link's rate on the wire (e.g. 10gbit, the NIC's speed), in place of the one run.json "
                        "records (the lab records its shaper): every rate measured is held to what TCP payload can "
                        "carry on it")
    p.add_argument("--buffer", metavar="SIZE",
                   help="the bytes the link's queue holds before it drops (e.g. 256kb: the switch port's or NIC's "
                        "buffer), in place of the one run.json records (the lab records its shaper's); the model's "
                        "queue at the link is at most this (CLUSTER.json buffer_bytes). Default: as recorded, else "
                        "unbounded")
    p.add_argument("--allow-above-ceiling", action="store_true",
                   help="calibrate although a measured rate (the capture's busy rate, iperf3's) is above what TCP "
                        "payload can carry on the link; CLUSTER.json records it")
    p.add_argument("--busy-ps-run", type=Path, action="append", default=[], metavar="DIR",
                   help="a run of the same job on the same cluster with several workers, untraced (tfsim collect "
                        "--workers N --steps S --trace-every S+1, no capture; repeatable): its PS CPU per "
                        "worker-step, which falls as a busy PS serves several requests per wake-up, bounds the "
                        "predictions past the PS's saturation (CLUSTER.json ps_cpu.busy)")
    p.add_argument("--plots", type=Path, metavar="DIR", help="write overhead.png and streams.png to DIR")
    p.add_argument("--json", action="store_true", help="print the CLUSTER.json object instead of a summary")
    p.set_defaults(handler=run)


def run(args) -> int:
    from calibration.calibrate import calibrate_run
    from calibration.capture_loss import MAX_LOSS_FRACTION, CaptureLossError
    from calibration.ceiling import RateAboveCeilingError
    from calibration.pscpu import read_busy_ps_run, with_busy_runs
    from calibration.summary import format_calibration
    from simulate.cluster_file import save_cluster
    from tfbase.errors import UsageError
    from tfbase.fileio import Outputs
    from tfbase.units import parse_rate, parse_size
    from tfsim.cli.console import console

    link_rate = parse_rate(args.link_rate, "--link-rate") if args.link_rate is not None else None
    buffer = parse_size(args.buffer, "--buffer") if args.buffer is not None else None
    with Outputs() as outputs:
        output = outputs.file(args.output, "-o")
        plots = None
        if args.plots:
            directory = outputs.directory(args.plots, "--plots")
            plots = (directory.file("overhead.png", binary=True), directory.file("streams.png", binary=True))
        if args.json and outputs.to_stdout:
            raise UsageError("--json", "prints the cluster on standard output, which -o - already writes to")
        console.text_to_stderr = outputs.to_stdout
        busy = [read_busy_ps_run(d) for d in args.busy_ps_run]  # before the long fit: a bad one fails fast
        try:
            calibration = calibrate_run(args.run_dir, backend=args.backend, allow_loss=args.allow_loss,
                                        link_rate_Bps=link_rate, allow_above_ceiling=args.allow_above_ceiling,
                                        buffer_bytes=buffer)
        except CaptureLossError as exc:
            raise CaptureLossError(exc.source, f"the {exc.direction} lost {exc.loss.describe()}, more than "
                                   f"{100 * MAX_LOSS_FRACTION:g}%: capture again with a larger buffer (tcpdump -B), "
                                   "or accept the loss with --allow-loss", exc.direction, exc.loss) from None
        except RateAboveCeilingError as exc:
            raise RateAboveCeilingError(exc.source, f"{exc.finding}: a measurement error (or a wrong link rate: "
                                        "--link-rate gives it), or accept it with --allow-above-ceiling",
                                        exc.direction, exc.what, exc.rate_Bps, exc.ceiling_Bps, exc.finding) from None
        document = calibration.to_cluster_json()
        if busy:
            if "ps_cpu" not in document:
                raise UsageError("--busy-ps-run", f"{args.run_dir} has no PS CPU readings to add a busy-PS run's to "
                                                 "(collected with --role, or before tfsim read them)")
            document = {**document, "ps_cpu": with_busy_runs(document["ps_cpu"], busy)}
        save_cluster(document, output)
        if plots is not None:
            from calibration.plots import overhead_figure, stream_timeline_figure
            from tfbase.figures import save_figure

            save_figure(overhead_figure(calibration), plots[0])
            save_figure(stream_timeline_figure(calibration), plots[1])
        outputs.commit()
    print(json.dumps(document, indent=2) if args.json else format_calibration(document), file=console.out)
    return 0
