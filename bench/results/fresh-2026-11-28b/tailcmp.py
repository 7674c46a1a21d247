"""Each lab setting's profiling tail (the untraced steps after the third CPU reading) beside its
W = 1 measuring runs: CPU per step of the PS and the worker, and the step time. Run from
bench/results: ``python fresh-2026-11-28b/tailcmp.py DIR...`` with setting directories (each
holding profile-run/ and measure-w1-r*/). A study tool, not part of tfsim."""

import csv
import glob
import os
import statistics
import sys
from collections import defaultdict


def readings(path):
    rows = defaultdict(list)
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            rows[row["task"]].append((int(row["step"]), float(row["time_unix_s"]), float(row["cpu_s"])))
    return rows


def per_step(rows):
    """CPU ms and wall ms per step between the last two readings."""
    (s0, t0, c0), (s1, t1, c1) = rows[-2], rows[-1]
    return (c1 - c0) / (s1 - s0) * 1e3, (t1 - t0) / (s1 - s0) * 1e3


def main():
    for setting in sys.argv[1:]:
        if not os.path.exists(f"{setting}/profile-run/task_cpu.csv"):
            continue
        profile = readings(f"{setting}/profile-run/task_cpu.csv")
        if len(profile["ps0"]) < 3:
            continue
        tail = {task: per_step(rows) for task, rows in profile.items()}
        measured = defaultdict(list)
        for run in sorted(glob.glob(f"{setting}/measure-w1-r*")):
            if os.path.exists(f"{run}/task_cpu.csv"):
                for task, rows in readings(f"{run}/task_cpu.csv").items():
                    measured[task].append(per_step(rows))
        if not measured:
            continue
        out = []
        for task in ("ps0", "worker0"):
            if task in tail and measured.get(task):
                cpu = statistics.mean(c for c, _ in measured[task])
                out.append(f"{task} tail {tail[task][0]:.1f} ms CPU vs W=1 runs {cpu:.1f} ({tail[task][0] / cpu:.2f}x)")
        step = statistics.mean(s for _, s in measured["ps0"])
        out.append(f"step tail {tail['ps0'][1]:.0f} vs runs {step:.0f} ms")
        print(setting, "|", "; ".join(out))


if __name__ == "__main__":
    main()
