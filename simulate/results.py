"""What a simulated run means: throughput with its confidence interval, step times,
link utilisation (ICPE §4.1, docs/model.md §5)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from simulate.engine import SimRun
from tfbase.errors import UsageError

# The columns of a prediction table, one row per configuration (docs/formats.md §6).
ROW_COLUMNS = (
    "workers", "servers", "mode", "sharing", "transfer", "policy", "seed", "replicas", "throughput_eps", "ci95_eps",
    "throughput_min_eps", "throughput_max_eps", "step_time_s", "step_time_mean_s", "step_time_p95_s",
    "step_time_by_worker_s", "util_downlink", "util_uplink", "bandwidth_down_Bps", "bandwidth_up_Bps", "steps",
    "warmup", "batches", "op_events", "efficiency_E", "ps_cpu_limit_eps", "throughput_drift", "settled", "saturated",
)

# A run whose two halves of measured steps differ by more than this has not settled
# (docs/model.md §5.8): a drift of 5% moves the whole window's rate by about 2.5% from the
# second half's, which is inside the lab's own run-to-run spread (CV 1-10% at W >= 2), while
# the phase drift of processor sharing moves a run by 20-40% (docs/model.md §10).
DRIFT_TOLERANCE = 0.05

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def t95(dof: int) -> float:
    """The 0.975 quantile of Student's t with ``dof`` degrees of freedom (normal above 30)."""
    if dof < 1:
        return math.inf
    return _T95[dof - 1] if dof <= len(_T95) else 1.96 + 2.4 / dof  # within 0.1% of the exact value


def measurement_stats(values: Sequence[float]) -> dict:
    """Mean, min, max, coefficient of variation and the 95% CI half-width (Student's t) of
    repeated measurements of one point (the lab's repeats, ``tfsim collect --role --repeat``'s
    repetitions).

    Examples
    --------
    >>> stats = measurement_stats([100.0, 110.0, 90.0])
    >>> stats["mean"], stats["min"], stats["max"], round(stats["cv"], 3), round(stats["ci95"], 1)
    (100.0, 90.0, 110.0, 0.1, 24.8)
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise UsageError("repeat", "no measurement to summarise")
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if x.size > 1 else 0.0
    half = t95(x.size - 1) * sd / math.sqrt(x.size) if x.size > 1 else math.nan
    return {"mean": mean, "min": float(x.min()), "max": float(x.max()), "cv": sd / mean if mean else math.nan,
            "ci95": half}


def completion_times(run: SimRun) -> np.ndarray:
    """(W, N + 1) array t_w(k): completion time of worker w's k-th step, t_w(0) = 0."""
    W = run.step_end_s.shape[0]
    return np.concatenate([np.zeros((W, 1)), run.step_end_s], axis=1)


def throughput_eps(run: SimRun) -> float:
    """docs/model.md §5.1: Σ_w batch · (N − warmup) / (t_w(N) − t_w(warmup)), in examples/s."""
    t = completion_times(run)
    n, warmup = run.config.steps, run.config.warmup
    return float(np.sum(run.graph.batch_size * (n - warmup) / (t[:, n] - t[:, warmup])))


def batch_means(run: SimRun, batches: int = 10) -> tuple[float, float, int]:
    """Mean and 95% half-width of the throughput over ``batches`` consecutive batches of steps.

    Each worker's measured steps are cut into the same number of consecutive batches; batch
    b's throughput is the sum over workers of batch b's examples / duration. With fewer than
    2 measured steps per batch the number of batches shrinks (at least 2, else the
    half-width is inf).
    """
    t = completion_times(run)
    n, warmup = run.config.steps, run.config.warmup
    measured = n - warmup
    batches = max(1, min(batches, measured // 2))
    edges = warmup + np.round(np.linspace(0, measured, batches + 1)).astype(int)
    values = np.array([np.sum(run.graph.batch_size * (edges[b + 1] - edges[b]) / (t[:, edges[b + 1]] - t[:, edges[b]]))
                       for b in range(batches)])
    if batches < 2:
        return float(values.mean()), math.inf, batches
    half = t95(batches - 1) * float(values.std(ddof=1)) / math.sqrt(batches)
    return float(values.mean()), half, batches


def half_throughputs_eps(run: SimRun) -> tuple[float, float]:
    """The throughput (§5.1's sum over workers) of the first and of the second half of the
    measured steps, split at the same step for every worker; NaN for a half without a step.

    Examples
    --------
    A run whose workers' steps lengthen as it goes (a phase drift) reads a lower second half:

    >>> import numpy as np, types
    >>> ends = np.cumsum([1.0] * 4 + [2.0] * 4)[None, :]
    >>> run = types.SimpleNamespace(step_end_s=ends, graph=types.SimpleNamespace(batch_size=1),
    ...                             config=types.SimpleNamespace(steps=8, warmup=0))
    >>> half_throughputs_eps(run)
    (1.0, 0.5)
    """
    t = completion_times(run)
    n, warmup = run.config.steps, run.config.warmup
    middle = warmup + (n - warmup) // 2
    if middle == warmup or middle == n:
        return math.nan, math.nan
    first = np.sum(run.graph.batch_size * (middle - warmup) / (t[:, middle] - t[:, warmup]))
    second = np.sum(run.graph.batch_size * (n - middle) / (t[:, n] - t[:, middle]))
    return float(first), float(second)


def drift(first_eps: float, second_eps: float) -> float:
    """How far a run's rate moved between the halves of its measured steps, as a fraction of
    the first half's: ``second / first − 1`` (NaN if either is unknown)."""
    if not (math.isfinite(first_eps) and math.isfinite(second_eps)) or first_eps <= 0:
        return math.nan
    return second_eps / first_eps - 1.0


def is_settled(drift_fraction: float, tolerance: float = DRIFT_TOLERANCE) -> bool:
    """Whether a run's drift is within ``tolerance``: an unknown drift (too few steps) is not."""
    return bool(math.isfinite(drift_fraction) and abs(drift_fraction) <= tolerance)


def step_times_s(run: SimRun) -> np.ndarray:
    """(W, N − warmup) measured step times: the gaps between consecutive completions."""
    t = completion_times(run)
    return np.diff(t[:, run.config.warmup:], axis=1)


def link_bytes_per_s(run: SimRun) -> np.ndarray:
    """(2, M) mean bytes/s each link carries over the measured windows.

    Row 0 is the downlinks, row 1 the uplinks, one column per server: the bytes each worker
    moves per step, times the rate at which its measured window completes steps. Divided by
    the link's bandwidth, this is the link's utilisation.
    """
    t = completion_times(run)
    n, warmup = run.config.steps, run.config.warmup
    steps_per_s = np.sum((n - warmup) / (t[:, n] - t[:, warmup]))
    per_step = run.graph.link_bytes_per_step()
    return per_step * steps_per_s


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """The numbers one configuration reports."""

    throughput_eps: float
    ci95_eps: float
    batches: int
    step_time_s: float
    step_time_mean_s: float
    step_time_p95_s: float
    step_time_by_worker_s: tuple[float, ...]
    link_bytes_per_s: np.ndarray  # (2, M)
    op_events: int
    wall_s: float
    first_half_eps: float = math.nan   # the measured steps' first half (half_throughputs_eps)
    second_half_eps: float = math.nan


def summarise(run: SimRun) -> RunSummary:
    times = step_times_s(run)
    _, half, batches = batch_means(run)
    first, second = half_throughputs_eps(run)
    return RunSummary(
        throughput_eps=throughput_eps(run),
        ci95_eps=half,
        batches=batches,
        step_time_s=float(np.median(times)),
        step_time_mean_s=float(np.mean(times)),
        step_time_p95_s=float(np.percentile(times, 95)),
        step_time_by_worker_s=tuple(float(x) for x in np.median(times, axis=1)),
        link_bytes_per_s=link_bytes_per_s(run),
        op_events=run.op_events,
        wall_s=run.wall_s,
        first_half_eps=first,
        second_half_eps=second,
    )


def saturation_point(workers: np.ndarray, throughput: np.ndarray, within: float = 0.05) -> int:
    """The smallest W whose throughput is within ``within`` of the sweep's maximum (docs/model.md §5.5)."""
    workers = np.asarray(workers)
    throughput = np.asarray(throughput, dtype=float)
    if workers.size == 0:
        raise ValueError("empty sweep")
    best = np.nanmax(throughput)
    ok = throughput >= (1.0 - within) * best
    return int(workers[ok].min())


def efficiency_one_worker(run: SimRun, capacity_Bps: np.ndarray) -> np.ndarray:
    """TicTac's scheduling efficiency ``E = (U − m) / (U − L)`` (Eqs. 1-3) of worker 0's
    measured steps, where nothing contends with it (meaningful for W = 1).

    Per step: each op takes its simulated time alone (a transfer ``size / B`` of its link, a
    computation its sampled duration, a parse op its overhead); ``U`` is their sum (everything
    in sequence), ``L`` the busiest resource's sum (perfect overlap), ``m`` the simulated step
    time. ``capacity_Bps`` is (2, M): the downlink and uplink rate of each server.
    """
    from tfprofile.dag import Resource

    graph = run.graph
    W = run.config.workers
    warmup = run.config.warmup
    res, server = graph.resource, np.maximum(graph.server, 0)
    link_rate = np.ones(graph.n_ops)
    down, up = res == Resource.DOWNLINK, res == Resource.UPLINK
    link_rate[down] = capacity_Bps[0][server[down]]
    link_rate[up] = capacity_Bps[1][server[up]]
    from simulate.engine import slot_of

    classes = slot_of(res, graph.server, graph.n_servers, graph.parse_lane)  # one class per engine slot
    rng = np.random.default_rng(run.config.seed)
    samples = rng.integers(0, graph.n_steps, size=(W, run.config.steps))[0]  # the engine's draw
    values = []
    for k in range(warmup, run.config.steps):
        time_s = graph.work[samples[k]] / link_rate
        upper = time_s.sum()
        lower = np.bincount(classes, weights=time_s).max()
        makespan = run.step_end_s[0, k] - run.step_start_s[0, k]
        values.append((upper - makespan) / (upper - lower) if upper > lower else np.nan)
    return np.array(values)
