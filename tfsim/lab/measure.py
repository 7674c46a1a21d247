"""Measured throughput of a real run, the way ICPE §4.1 measures it."""

from __future__ import annotations

import numpy as np

from tfprofile.rundir import open_run_dir


def measured_throughput(run_dir) -> dict:
    """Examples/s summed over workers, each worker's rate the time-average over the last half
    of its measured steps: batch × steps / (end of its last step − start of the first step of
    that half). Also the per-worker rates and median step times."""
    run = open_run_dir(run_dir)
    batch = run.batch_size
    rates, medians = [], []
    workers = sorted({r["worker"] for r in run.step_times})
    for w in workers:
        rows = sorted((r for r in run.step_times if r["worker"] == w and r["measured"]), key=lambda r: r["step"])
        half = rows[len(rows) // 2:]
        if len(half) < 1:
            continue
        start = half[0]["start_unix_s"]
        end = half[-1]["start_unix_s"] + half[-1]["wall_s"]
        rates.append(batch * len(half) / (end - start))
        medians.append(float(np.median([r["wall_s"] for r in half])))
    return {"throughput_eps": float(np.sum(rates)), "workers": len(workers), "per_worker_eps": rates,
            "step_time_median_s": float(np.median(medians)) if medians else float("nan")}
