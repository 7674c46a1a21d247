#!/usr/bin/env python3
"""Re-predict a lab setting from its saved profiling run, with the one-worker correction fitted
to the untraced steps' median (as the lab did before 2026-11-24) or mean (since), against the
same measurements: ``python bench/lab_refit.py SETTING_DIR QUOTA_CORES``.

SETTING_DIR holds ``profile-run/``, ``CLUSTER.json`` and the lab's ``results.csv``. The
prediction is for the lab's emulated hosts (a host per task of max(1, QUOTA_CORES) model
cores, docs/model.md §4.3) with the grpc model.
"""

from __future__ import annotations

import csv
import sys
import warnings
from pathlib import Path

import numpy as np

from simulate.cluster_file import load_cluster
from simulate.config import TaskHosts
from simulate.sweep import predict
from simulate.untrace import fit_computation_scale, scale_computation
from tfprofile.rundir import profile_from_run_dir


def untraced_walls(run: Path) -> list[float]:
    with open(run / "step_times.csv", newline="") as handle:
        return [float(r["wall_s"]) for r in csv.DictReader(handle) if r["measured"] == "1" and r["traced"] == "0"]


def main(setting: Path, quota: float) -> None:
    with open(setting / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    walls = untraced_walls(setting / "profile-run")
    profile = profile_from_run_dir(setting / "profile-run")
    cluster = load_cluster(setting / "CLUSTER.json")
    hosts = TaskHosts(max(1.0, quota), max(1.0, quota))
    workers = [int(r["workers"]) for r in rows]
    for statistic, target in (("median", float(np.median(walls))), ("mean", float(np.mean(walls)))):
        scale = fit_computation_scale(profile, cluster, target, colocation=hosts, statistic=statistic)
        frame = predict(scale_computation(profile, scale), cluster, workers=workers, transfer="grpc", steps=400,
                        warmup=50, colocation=hosts, jobs=1)
        errors = []
        for row, predicted in zip(rows, frame["throughput_eps"]):
            measured = float(row["measured_eps"])
            errors.append(predicted / measured - 1)
            print(f"{statistic:6s} W={row['workers']} scale {scale:.3f} predicted {predicted:8.1f} measured "
                  f"{measured:8.1f} ({float(row['measured_min_eps']):.1f}..{float(row['measured_max_eps']):.1f}) "
                  f"error {100 * errors[-1]:+.1f}%")
        print(f"{statistic}: mean |error| {100 * np.mean(np.abs(errors)):.1f}%")


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    main(Path(sys.argv[1]), float(sys.argv[2]))
