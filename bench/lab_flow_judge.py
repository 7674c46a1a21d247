#!/usr/bin/env python3
"""Re-predict a lab directory's points with the flow model of the tfsim on ``sys.path``, against the
same measurements: ``python bench/lab_flow_judge.py LAB_DIR OUT.csv [SETTING,...]``.

For every setting of LAB_DIR/results.csv: ``simulate.predict(transfer="grpc")`` of the setting's
saved (corrected) profile on its CLUSTER.json, 400 steps, 5 replicas, each task on a host of the
lab's quota (max(1, q) model cores, docs/model.md §4.3), the PS CPU bound where the calibration
has one, as the lab predicts. Prints each point's error beside the one the lab published (the
model of its day) and the summary; writes OUT.csv. Run it with ``PYTHONPATH`` at a worktree to
judge a model change on saved measurements. A study tool, not part of tfsim.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from simulate.cluster_file import load_cluster
from simulate.config import TaskHosts
from simulate.sweep import predict
from tfprofile.profile_io import load_profile
from tfsim.lab.validate import CLOSE_ENOUGH, PREDICT_REPLICAS

STEPS, WARMUP = 400, 50


def main() -> None:
    lab, out = Path(sys.argv[1]), sys.argv[2]
    only = sys.argv[3].split(",") if len(sys.argv) > 3 else None
    results = pd.read_csv(lab / "results.csv")
    rows = []
    for setting, group in results.groupby("setting", sort=False):
        if only and setting not in only:
            continue
        first = group.iloc[0]
        profile = load_profile(lab / setting / "profile.npz")
        cluster = load_cluster(lab / setting / "CLUSTER.json")
        hosts = TaskHosts(worker_cores=max(1.0, float(first["worker_cores"])),
                          ps_cores=max(1.0, float(first["ps_cores"])))
        frame = predict(profile, cluster, workers=[int(w) for w in group["workers"]], transfer="grpc", steps=STEPS,
                        warmup=WARMUP, replicas=PREDICT_REPLICAS, colocation=hosts, jobs=2)
        for (_, row), predicted in zip(group.iterrows(), frame["throughput_eps"]):
            measured = float(row["measured_eps"])
            error = float(predicted) / measured - 1
            inside = (float(row["measured_min_eps"]) <= predicted <= float(row["measured_max_eps"])
                      or abs(error) <= CLOSE_ENOUGH)
            rows.append({"setting": setting, "workers": int(row["workers"]), "measured": measured,
                         "predicted": float(predicted), "error": error, "inside": bool(inside),
                         "lab_error": float(row["error_grpc"])})
            print(f"{setting} W={int(row['workers'])}: {error:+.1%} (lab {float(row['error_grpc']):+.1%})", flush=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(out, index=False)
    errors = frame["error"].abs()
    print(f"mean |error| {errors.mean():.1%} max {errors.max():.1%} inside {int(frame['inside'].sum())}/{len(frame)}; "
          f"W>=2 mean {frame[frame['workers'] >= 2]['error'].abs().mean():.1%}")


if __name__ == "__main__":
    main()
