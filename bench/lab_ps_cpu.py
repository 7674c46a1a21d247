#!/usr/bin/env python3
"""The parameter server's CPU per worker-step in a lab directory's measuring runs:
``python bench/lab_ps_cpu.py LAB_DIR``.

For every ``SETTING/measure-wW-rK`` run with a ``task_cpu.csv`` (docs/formats.md §2.3.1): PS 0's
CPU between the first and the last reading over the worker-steps between them (a TF1 chief's
steps times W, a tf2-pss coordinator's steps as they are: it counts every worker's), its use of
its quota over that time, the scheduler's slices per worker-step where the file has them, and
the worker-steps per second. Beside each setting: its calibration's ``ps_cpu`` (the profiling
run's estimate the PS CPU bound uses, docs/model.md §4.7). A study tool, not part of tfsim.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path


def run_row(run_dir: Path, workers: int) -> dict | None:
    path = run_dir / "task_cpu.csv"
    if not path.is_file():
        return None
    readings = defaultdict(list)
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            readings[row["task"]].append(row)
    servers = sorted(task for task in readings if task.startswith("ps"))
    if not servers:
        return None
    first, last = readings[servers[0]][0], readings[servers[0]][-1]
    steps = int(last["step"]) - int(first["step"])
    seconds = float(last["time_unix_s"]) - float(first["time_unix_s"])
    cpu = float(last["cpu_s"]) - float(first["cpu_s"])
    worker_steps = steps if "coordinator0" in readings else steps * workers
    limits = json.loads((run_dir / "run.json").read_text()).get("task_cpu", {}).get("limits", {})
    cores = (limits.get(servers[0]) or {}).get("cores")
    slices = int(last["slices"]) - int(first["slices"]) if "slices" in first else None
    return {"cpu_ms_per_step": 1e3 * cpu / worker_steps, "quota_used": cpu / seconds / cores if cores else None,
            "slices_per_step": None if slices is None else slices / worker_steps,
            "steps_per_s": worker_steps / seconds}


def main() -> None:
    lab = Path(sys.argv[1])
    for setting in sorted(p for p in lab.iterdir() if p.is_dir()):
        cluster = setting / "CLUSTER.json"
        estimate = json.loads(cluster.read_text()).get("ps_cpu") if cluster.is_file() else None
        if estimate:
            print(f"{setting.name}: calibration's ps_cpu {1e3 * estimate['cpu_s_per_step']:.2f} ms per step over "
                  f"{estimate['steps']} steps, {estimate['cores']:g} core(s)")
        for run in sorted(setting.glob("measure-w*-r*"), key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)]):
            workers = int(re.search(r"measure-w(\d+)-r", run.name).group(1))
            row = run_row(run, workers)
            if row is None:
                continue
            used = "" if row["quota_used"] is None else f", {row['quota_used']:.2f} of its quota"
            slices = "" if row["slices_per_step"] is None else f", {row['slices_per_step']:.0f} slices"
            print(f"  {run.name}: {row['cpu_ms_per_step']:.2f} ms per worker-step{used}{slices}, "
                  f"{row['steps_per_s']:.1f} worker-steps/s")


if __name__ == "__main__":
    main()
