#!/usr/bin/env python3
"""The machine's speed beside each one-worker run of a lab directory:
``python speed_vs_runs.py LAB_DIR PROBE.csv``.

For every setting's profiling run, tail runs (``profile-tail-r<k>``) and one-worker measuring
runs (``measure-w1-r<k>``): the median wall time of ``speed_probe.py``'s fixed loop over the
run's measured steps (task_cpu.csv's first reading to its last; the profiling run's from its
third reading, its untraced tail), the worker's CPU per step and its steps per second over the
same span, and per setting the correlation between the probe and the worker's CPU per step: how
far the machine's own speed explains a quota-bound one-worker step. A study tool, not part of
tfsim.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def readings(run: Path) -> dict[str, list[tuple[int, float, float]]]:
    rows: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    with open(run / "task_cpu.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            rows[row["task"]].append((int(row["step"]), float(row["time_unix_s"]), float(row["cpu_s"])))
    return rows


def main() -> None:
    lab, probe_path = Path(sys.argv[1]), sys.argv[2]
    probe = np.loadtxt(probe_path, delimiter=",", ndmin=2)
    for setting in sorted(p for p in lab.iterdir() if (p / "CLUSTER.json").is_file()):
        runs = [setting / "profile-run", *sorted(setting.glob("profile-tail-r[0-9]")),
                *sorted(setting.glob("measure-w1-r[0-9]"))]
        xs, ys = [], []
        print(setting.name)
        for run in runs:
            if not (run / "task_cpu.csv").is_file():
                continue
            worker = readings(run)["worker0"]
            first, last = (worker[-2], worker[-1]) if run.name == "profile-run" else (worker[0], worker[-1])
            steps, seconds = last[0] - first[0], last[1] - first[1]
            inside = probe[(probe[:, 0] >= first[1]) & (probe[:, 0] <= last[1]), 1]
            if steps <= 0 or len(inside) == 0:
                continue
            cpu_ms = (last[2] - first[2]) / steps * 1e3
            speed = float(statistics.median(inside))
            xs.append(speed)
            ys.append(cpu_ms)
            print(f"  {run.name:18s} {steps / seconds:5.2f} steps/s  worker CPU {cpu_ms:5.1f} ms/step  "
                  f"probe median {speed:5.2f} ms over {len(inside)} samples")
        if len(xs) > 2:
            r = np.corrcoef(xs, ys)[0, 1]
            print(f"  correlation, probe against worker CPU per step: {r:.2f} over {len(xs)} runs")


if __name__ == "__main__":
    main()
