#!/usr/bin/env python3
"""Compare a W = 1 lab run's profiling tail with its uncaptured measuring runs:
``python bench/results/capture-cost-2026-11-28/compare.py LAB_DIR [LAB_DIR ...]`` (seconds).

Per setting: the profiling run's untraced tail (mean step; PS and worker CPU per step between
the reading as the trace ended and the last step) against the measuring runs' (mean step of
worker 0; CPU per step between their two readings), and the lab's W = 1 error (grpc). A study
tool, reading run directories only.
"""
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from calibration.pscpu import _span, ps_cpu_record  # noqa: E402  (the readings calibration takes)


def worker_cpu_per_step(run_dir: Path) -> float:
    """Worker 0's CPU per step between the readings calibration would take for the PS."""
    readings = defaultdict(list)
    for r in csv.DictReader((run_dir / "task_cpu.csv").open()):
        readings[r["task"]].append((int(r["step"]), float(r["time_unix_s"]), float(r["cpu_s"])))
    (first_step, _, first_cpu), (last_step, _, last_cpu) = _span(sorted(readings["worker0"]))
    return (last_cpu - first_cpu) / (last_step - first_step)


def ps_cpu_per_step(run_dir: Path) -> float:
    return ps_cpu_record(run_dir, json.loads((run_dir / "run.json").read_text()))["cpu_s_per_step"]


def mean_step(step_times: Path, untraced_only: bool) -> float:
    rows = [r for r in csv.DictReader(step_times.open()) if r["measured"] == "1" and r["worker"] == "0"]
    return statistics.mean(float(r["wall_s"]) for r in rows if r["traced"] == "0" or not untraced_only)


print(f"{'lab':28s} {'setting':22s} {'step tail/meas (ms)':>20s} {'PS CPU tail/meas':>17s} "
      f"{'worker CPU tail/meas':>21s} {'W=1 error':>9s}")
for lab in map(Path, sys.argv[1:]):
    results = {r["setting"]: r for r in csv.DictReader((lab / "results.csv").open()) if r["workers"] == "1"}
    for setting in sorted(results):
        d = lab / setting
        tail = mean_step(d / "profile-run" / "step_times.csv", True)
        ps_tail = ps_cpu_per_step(d / "profile-run")
        w_tail = worker_cpu_per_step(d / "profile-run")
        runs = sorted(d.glob("measure-w1-r*"))
        measured = statistics.mean(mean_step(r / "step_times.csv", False) for r in runs)
        ps_meas = statistics.mean(ps_cpu_per_step(r) for r in runs)
        w_meas = statistics.mean(worker_cpu_per_step(r) for r in runs)
        error = float(results[setting]["error_grpc"])
        captured = json.loads((d / "profile-run" / "run.json").read_text())["capture"]
        print(f"{lab.name:28s} {setting:22s} {tail * 1e3:9.1f} /{measured * 1e3:7.1f}  "
              f"{ps_tail * 1e3:7.1f} /{ps_meas * 1e3:6.1f}  {w_tail * 1e3:9.1f} /{w_meas * 1e3:7.1f}  "
              f"{error:+8.1%}  (captured {captured.get('packets_captured', captured.get('captured', '?'))} packets)")
