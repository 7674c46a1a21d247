"""Measured throughput of a real run: the examples every worker completes while all of them run.

ICPE §4.1 sums each worker's own time-average over the last half of its steps. That is the
job's throughput only while the workers' halves coincide. When W workers share a link
unevenly (TCP gives some connections more than others), a worker that got more finishes its
fixed number of steps early, and the others speed up once it has gone: each worker's
half-window then lies elsewhere, and the sum counts rates that never held at one time (in
the lab, tiny at 100 Mbit/s with W = 4: 886 examples/s by the per-worker sum, more than the
link can carry, 597-654 with every worker running). A real job's workers do not stop, so its
throughput is the rate while all run: the lab measures over the last half of the window in
which every worker is in its measured steps, counting a step that crosses the window's edge
by the part of it inside.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from tfprofile.rundir import open_run_dir


def read_step_spans(run_dir: str | Path, measured_only: bool = True) -> tuple[dict[int, np.ndarray], int]:
    """Per worker, the (n, 2) start/end times (unix s) of its steps in step order, from the run
    directory's ``step_times.csv`` (its measured steps only, by default); and the batch size
    from ``run.json``. Unlike :func:`~tfprofile.rundir.open_run_dir` it needs no trace: the lab
    deletes a measuring run's traced step once it is measured."""
    run_dir = Path(run_dir)
    batch = int(json.loads((run_dir / "run.json").read_text())["batch_size"])
    rows: dict[int, list] = {}
    with open(run_dir / "step_times.csv", newline="") as handle:
        for r in csv.DictReader(handle):
            if measured_only and r["measured"] != "1":
                continue
            start = float(r["start_unix_s"])
            rows.setdefault(int(r["worker"]), []).append((int(r["step"]), start, start + float(r["wall_s"])))
    return {w: np.array([(a, b) for _, a, b in sorted(v)]) for w, v in rows.items()}, batch


def measured_window(steps: dict[int, np.ndarray]) -> tuple[float, float]:
    """The last half of the window in which every worker runs its measured steps: from the
    latest first start to the earliest last end (``start >= end`` when they never overlap).

    Examples
    --------
    >>> measured_window({0: np.array([[0.0, 1.0], [1.0, 6.0]]), 1: np.array([[2.0, 10.0]])})
    (4.0, 6.0)
    """
    t0 = max(float(s[0, 0]) for s in steps.values())
    t1 = min(float(s[-1, 1]) for s in steps.values())
    return (t0 + t1) / 2 if t1 > t0 else t1, t1


def per_worker_sum(steps: dict[int, np.ndarray], batch: int) -> float:
    """ICPE §4.1's rule: each worker's batch × steps over the time of the last half of its own
    steps, summed.

    Examples
    --------
    >>> per_worker_sum({0: np.array([[0.0, 1.0], [1.0, 2.0]]), 1: np.array([[0.0, 0.5], [0.5, 1.0]])}, 32)
    96.0
    """
    total = 0.0
    for s in steps.values():
        half = s[len(s) // 2:]
        total += batch * len(half) / float(half[-1, 1] - half[0, 0])
    return total


def window_throughput(steps: dict[int, np.ndarray], batch: int) -> dict:
    """Examples/s over the last half of the window in which every worker runs measured steps.

    Parameters
    ----------
    steps : dict of int to numpy.ndarray
        Per worker, an (n, 2) array of its measured steps' start and end times (s), in order.
    batch : int
        Examples per step and worker.

    Returns
    -------
    dict
        ``throughput_eps`` (NaN when the workers' measured steps never all overlap),
        ``window_s`` (the half-window measured over), ``per_worker_eps`` (each worker's rate
        inside it).

    Examples
    --------
    Two workers each doing a step per second, for ten seconds, a step out of phase:

    >>> a = np.array([[t, t + 1.0] for t in range(10)], dtype=float)
    >>> r = window_throughput({0: a, 1: a + 0.5}, batch=32)
    >>> round(r["throughput_eps"], 6), round(r["window_s"], 6)
    (64.0, 4.75)
    """
    start, t1 = measured_window(steps)
    if not t1 > start:
        return {"throughput_eps": float("nan"), "window_s": 0.0, "window_unix_s": (math.nan, math.nan),
                "per_worker_eps": []}
    per_worker = []
    for s in steps.values():
        inside = np.clip(np.minimum(s[:, 1], t1) - np.maximum(s[:, 0], start), 0.0, None)
        per_worker.append(float(batch * np.sum(inside / (s[:, 1] - s[:, 0])) / (t1 - start)))
    return {"throughput_eps": float(np.sum(per_worker)), "window_s": t1 - start, "window_unix_s": (start, t1),
            "per_worker_eps": per_worker}


def spans_throughput(steps: dict[int, np.ndarray], batch: int) -> dict:
    """The lab's measurement of a run from its workers' step spans (as :func:`read_step_spans`
    gives them): ``throughput_eps`` by the common window (:func:`window_throughput`; when the
    workers' measured steps never all overlap, one finished before another began, nothing
    better than the per-worker sum is left, and ``rule`` says which), ``window_s`` and
    ``window_unix_s`` (its start and end, nan when there is none),
    ``per_worker_eps``, ICPE §4.1's ``per_worker_sum_eps`` (:func:`per_worker_sum`),
    ``workers``, and ``finish_spread_s``, the spread of the workers' last step ends (how
    unevenly they shared).

    Examples
    --------
    >>> a = np.array([[t, t + 1.0] for t in range(10)], dtype=float)
    >>> r = spans_throughput({0: a, 1: a + 0.5}, batch=32)
    >>> r["rule"], round(r["throughput_eps"], 6), r["finish_spread_s"]
    ('common window', 64.0, 0.5)
    """
    if not steps:
        return {"throughput_eps": float("nan"), "rule": "common window", "window_s": 0.0,
                "window_unix_s": (math.nan, math.nan), "per_worker_eps": [], "per_worker_sum_eps": float("nan"),
                "workers": 0, "finish_spread_s": 0.0}
    window = window_throughput(steps, batch)
    own_sum = per_worker_sum(steps, batch)
    common = bool(np.isfinite(window["throughput_eps"]))
    ends = [float(s[-1, 1]) for s in steps.values()]
    return {"throughput_eps": window["throughput_eps"] if common else own_sum,
            "rule": "common window" if common else "per-worker sum", "window_s": window["window_s"],
            "window_unix_s": window["window_unix_s"],
            "per_worker_eps": window["per_worker_eps"], "per_worker_sum_eps": own_sum,
            "workers": len(steps), "finish_spread_s": max(ends) - min(ends)}


def measured_throughput(run_dir) -> dict:
    """:func:`spans_throughput` of the run directory's measured steps (read and checked by
    :func:`~tfprofile.rundir.open_run_dir`), and the median over workers of each worker's
    median step in the last half of its steps (``step_time_median_s``)."""
    run = open_run_dir(run_dir)
    steps, medians = {}, []
    for w in sorted({r["worker"] for r in run.step_times}):
        rows = sorted((r for r in run.step_times if r["worker"] == w and r["measured"]), key=lambda r: r["step"])
        if not rows:
            continue
        steps[w] = np.array([(r["start_unix_s"], r["start_unix_s"] + r["wall_s"]) for r in rows], dtype=float)
        medians.append(float(np.median([r["wall_s"] for r in rows[len(rows) // 2:]])))
    return {**spans_throughput(steps, run.batch_size),
            "step_time_median_s": float(np.median(medians)) if medians else float("nan")}
