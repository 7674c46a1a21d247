"""``tfsim lab``: measure real W-worker throughput on emulated clusters and the prediction error."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
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
    p.set_defaults(handler=run)


def run(args) -> int:
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
