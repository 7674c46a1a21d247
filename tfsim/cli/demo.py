"""``tfsim demo``: the whole pipeline on the bundled real data."""

from __future__ import annotations

from pathlib import Path

from tfsim.cli.options import add_jobs_option, positive_int


def register(sub) -> None:
    p = sub.add_parser(
        "demo", help="the whole pipeline on the bundled real data",
        description="Summarise the bundled real profiles, predict the sweep over W, and write the tables and "
                    "plots to a directory. Needs neither TensorFlow nor a network.",
    )
    p.add_argument("--out", type=Path, default=Path("tfsim-demo"), help="output directory (default: tfsim-demo)")
    p.add_argument("--data", type=Path, help="the bundled data directory (default: the project's data/)")
    p.add_argument("--steps", type=positive_int, default=400, help="steps per worker (default: 400)")
    add_jobs_option(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    from simulate.sweep import default_jobs
    from tfsim.demo import run_demo

    return run_demo(args.out, data=args.data, steps=args.steps, jobs=args.jobs or default_jobs())
