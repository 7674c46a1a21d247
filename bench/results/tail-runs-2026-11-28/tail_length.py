#!/usr/bin/env python3
"""How well a profiling tail of k untraced one-worker steps measures the one-worker step:
``python tail_length.py LAB_DIR [LAB_DIR ...]``.

Every saved one-worker measuring run (``SETTING/measure-w1-rK/step_times.csv``, TF1 jobs: the
chief's untraced measured steps) stands in for a profiling run's tail: the mean of its steps
from the 13th on (a profiling run's tail follows 12 traced steps) over k steps, for k = 12 (the
lab's tail before this study) and k = 46 (as many as the saved 60-step runs hold after the
13th), is set against the lab's measurement of the same point: the mean step of the *other*
runs' last halves (what the lab measures, from runs the window did not take part in). Prints,
per setting, each run's two errors, then the mean and largest |error| for each k: the part of
the one-worker correction's error that comes from the tail's length. A study tool, not part
of tfsim.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

FIRST_UNTRACED = 12  # a TF1 profiling run's tail starts after its 12 traced steps
WINDOWS = (12, 46)


def untraced_walls(run: Path) -> list[float]:
    with open(run / "step_times.csv", newline="") as handle:
        return [float(r["wall_s"]) for r in csv.DictReader(handle) if r["measured"] == "1" and r["traced"] == "0"]


def main(labs: list[str]) -> None:
    errors: dict[int, list[float]] = {k: [] for k in WINDOWS}
    settings = sorted({p.resolve() for lab in labs for p in Path(lab).iterdir() if p.is_dir()})
    for setting in settings:
        runs = sorted(setting.glob("measure-w1-r*"))
        walls = {run.name: untraced_walls(run) for run in runs if (run / "step_times.csv").is_file()}
        walls = {name: w for name, w in walls.items() if len(w) >= FIRST_UNTRACED + max(WINDOWS)}
        if len(walls) < 2:
            continue
        halves = {name: statistics.mean(w[len(w) // 2:]) for name, w in walls.items()}
        line = []
        for name, w in walls.items():
            others = statistics.mean(h for n, h in halves.items() if n != name)
            errs = []
            for k in WINDOWS:
                e = statistics.mean(w[FIRST_UNTRACED:FIRST_UNTRACED + k]) / others - 1
                errors[k].append(e)
                errs.append(f"{e:+.1%}")
            line.append(f"{name[-2:]} {'/'.join(errs)}")
        print(f"{setting.parent.name}/{setting.name}: " + "  ".join(line))
    for k in WINDOWS:
        xs = [abs(e) for e in errors[k]]
        print(f"tail of {k} steps: mean |error| {statistics.mean(xs):.2%}, median {statistics.median(xs):.2%}, "
              f"max {max(xs):.2%} over {len(xs)} runs")


if __name__ == "__main__":
    main(sys.argv[1:])
