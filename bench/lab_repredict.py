#!/usr/bin/env python3
"""Re-predict lab settings from their saved profiling runs with the one-worker correction fitted
over as many simulated steps as the prediction (400; the lab fitted over 80 until 2026-11-26),
against the same measurements: ``python bench/lab_repredict.py SETTING_DIR [SETTING_DIR ...]``.

Each SETTING_DIR holds ``profile-run/`` (its traces kept), ``CLUSTER.json`` and, one directory up,
the lab's ``results.csv``. The ``grpc`` prediction is the mean of 5 replicas for the lab's
emulated hosts (a host per task of max(1, quota) model cores, docs/model.md §4.3), as the lab makes it.
"""

from __future__ import annotations

import csv
import sys
import warnings
from pathlib import Path

import numpy as np

from simulate.cluster_file import load_cluster
from simulate.config import TaskHosts, model_cores
from simulate.sweep import predict
from simulate.untrace import fit_computation_scale, scale_computation
from tfprofile.rundir import profile_from_run_dir
from tfsim.lab.validate import PREDICT_REPLICAS, untraced_step_s

STEPS, WARMUP = 400, 50


def main(settings: list[Path]) -> None:
    print("| setting | W | measured (range) | lab: fit over 80 steps | error | fit over 400 steps | error |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    lab_errors, new_errors = [], []
    for setting in settings:
        with open(setting.parent / "results.csv", newline="") as handle:
            rows = [r for r in csv.DictReader(handle) if r["setting"] == setting.name]
        profile = profile_from_run_dir(setting / "profile-run")
        cluster = load_cluster(setting / "CLUSTER.json")
        hosts = TaskHosts(model_cores(rows[0]["worker_cores"]), model_cores(rows[0]["ps_cores"]))
        target = untraced_step_s(setting / "profile-run")
        scale = fit_computation_scale(profile, cluster, target, statistic="mean", colocation=hosts, steps=STEPS,
                                      warmup=WARMUP)
        frame = predict(scale_computation(profile, scale), cluster, workers=[int(r["workers"]) for r in rows],
                        transfer="grpc", steps=STEPS, warmup=WARMUP, replicas=PREDICT_REPLICAS, colocation=hosts,
                        jobs=1)
        for row, predicted in zip(rows, frame["throughput_eps"]):
            measured = float(row["measured_eps"])
            lab, new = float(row["error_grpc"]), float(predicted) / measured - 1
            lab_errors.append(abs(lab))
            new_errors.append(abs(new))
            print(f"| {setting.name} | {row['workers']} | {measured:.0f} ({float(row['measured_min_eps']):.0f}.."
                  f"{float(row['measured_max_eps']):.0f}) | {float(row['predicted_grpc_eps']):.0f} (scale "
                  f"{float(row['computation_scale']):.2f}) | {lab:+.1%} | {predicted:.0f} (scale {scale:.2f}) | "
                  f"{new:+.1%} |")
    print(f"\nmean |error|: lab {np.mean(lab_errors):.1%} (max {max(lab_errors):.1%}); fit over {STEPS} steps "
          f"{np.mean(new_errors):.1%} (max {max(new_errors):.1%})")


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[0])
    main([Path(p) for p in sys.argv[1:]])
