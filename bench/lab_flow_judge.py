#!/usr/bin/env python3
"""Re-predict a lab directory's points with the flow model of the tfsim on ``sys.path``, against the
same measurements: ``python bench/lab_flow_judge.py LAB_DIR OUT.csv [SETTING,...] [--refit]``.

For every setting of LAB_DIR/results.csv: ``simulate.predict(transfer="grpc")`` of the setting's
saved (corrected) profile on its CLUSTER.json, 400 steps, 5 replicas, each task on a host of the
lab's quota (max(1, q) model cores, docs/model.md §4.3), the PS CPU bound where the calibration
has one, as the lab predicts. Prints each point's error beside the one the lab published (the
model of its day) and the summary; writes OUT.csv. Run it with ``PYTHONPATH`` at a worktree to
judge a model change on saved measurements. ``--refit`` fits the one-worker correction again
as the tfsim on ``sys.path`` does (``profile.npz``'s own factor taken out, the target the mean
untraced step of the setting's saved ``profile-run`` and tail runs, ``tfsim.lab.validate.one_worker_tails``;
the profile is built again from that run's traces where they were kept), to judge a change of
the correction. A study tool, not part
of tfsim.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from simulate.cluster_file import load_cluster
from simulate.config import TaskHosts, model_cores
from simulate.sweep import predict
from simulate.untrace import fit_computation_scale, scale_computation
from tfprofile.profile_io import load_profile
from tfprofile.rundir import profile_from_run_dir
from tfsim.lab.validate import CLOSE_ENOUGH, PREDICT_REPLICAS, one_worker_tails

STEPS, WARMUP = 400, 50


def main() -> None:
    refit = "--refit" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--refit"]
    lab, out = Path(args[0]), args[1]
    only = args[2].split(",") if len(args) > 2 else None
    results = pd.read_csv(lab / "results.csv")
    rows = []
    for setting, group in results.groupby("setting", sort=False):
        if only and setting not in only:
            continue
        first = group.iloc[0]
        profile = load_profile(lab / setting / "profile.npz")
        cluster = load_cluster(lab / setting / "CLUSTER.json")
        hosts = TaskHosts(worker_cores=model_cores(first["worker_cores"]), ps_cores=model_cores(first["ps_cores"]))
        if refit:
            if (lab / setting / "profile-run" / "trace").is_dir():
                # From the traces again: a factor at MIN_SCALE cannot be divided back out.
                profile = profile_from_run_dir(lab / setting / "profile-run")
            else:
                profile = scale_computation(profile, 1.0 / profile.meta.get("computation_scale", 1.0))
            target = one_worker_tails(lab / setting).mean_step_s
            scale = fit_computation_scale(profile, cluster, target, statistic="mean", steps=STEPS, warmup=WARMUP,
                                          replicas=PREDICT_REPLICAS, colocation=hosts)
            profile = scale_computation(profile, scale)
            print(f"{setting}: computation scaled by {scale:.3f} (lab {float(first['computation_scale']):.3f})",
                  flush=True)
        frame = predict(profile, cluster, workers=[int(w) for w in group["workers"]], servers=int(first.get("ps", 1)),
                        transfer="grpc", steps=STEPS,
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
