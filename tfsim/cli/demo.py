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
    from tfbase.fileio import Outputs
    from tfsim.cli.console import console
    from tfsim.demo import plan_demo_files, run_demo

    closing: list[str] = []
    with Outputs() as outputs:
        directory = outputs.directory(args.out, "--out")
        plan_demo_files(directory)
        run_demo(directory, data=args.data, steps=args.steps, jobs=args.jobs or default_jobs(), say=console.say,
                 ready=console.release, after_commit=closing)
        outputs.commit()
    print("\n".join(closing))
    return 0
