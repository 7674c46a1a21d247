"""Take FULL_TRACE's own cost out of a profile's computation times.

Tracing a step records every op, and on small ops this costs as much as the op itself: the
traced steps of a run are slower than the untraced ones (the tiny model here: 99 ms traced,
83 ms untraced per step). A profile built from traced steps then predicts a slower job than
the one that runs. When the run also measured untraced steps, the worker's computation ops
can be scaled by one factor so that the model's one-worker step time matches the untraced
step time; transfers are left alone, as their time comes from the cluster's calibration, and
so are the PS's ops, whose host may be shared by many workers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from simulate.cluster import ClusterModel
from simulate.config import SimConfig, Transfer, host_model
from tfbase.errors import UsageError
from tfprofile.dag import DISPATCH_OP, Profile, Resource

MAX_SCALE = 4.0  # a one-worker step off by more than this is a wrong profile or cluster, not a correction
MIN_SCALE = 1e-6  # computation at (next to) nothing: the transfers alone already take the step


def scale_computation(profile: Profile, factor: float) -> Profile:
    """``profile`` with every WORKER op's duration multiplied by ``factor``.

    Only the worker's: the step the correction matches is the worker's step, and what it puts
    back (host work around the ops) or takes out (tracing's cost, which small ops pay most) is
    the worker's; scaling the PS ops as well would load a PS host of limited cores with the
    worker's missing time (the lab's recommender job, W = 2: -25.8% scaling both, -18.0% the
    worker's alone; docs/model.md §6)."""
    if not (0 < factor <= MAX_SCALE):
        raise ValueError(f"a one-worker correction factor must be in (0, {MAX_SCALE:g}], not {factor}")
    # A tf2-pss profile's coordinator dispatch is measured between untraced steps: not tracing's cost.
    compute = (profile.graph.resource == Resource.WORKER) & (profile.graph.op_type != DISPATCH_OP)
    duration = profile.duration_s.copy()
    duration[:, compute] *= factor
    meta = {**profile.meta, "computation_scale": factor * profile.meta.get("computation_scale", 1.0)}
    return dataclasses.replace(profile, duration_s=duration, meta=meta)


def one_worker_step_s(profile: Profile, cluster: ClusterModel, transfer: Transfer, steps: int = 80,
                      warmup: int | None = None, *, colocation=None, cores: float | None = None,
                      statistic: str = "median", replicas: int = 1) -> float:
    """The model's median (or, with ``statistic="mean"``, mean) step time with one worker, over
    ``steps`` steps after ``warmup`` (default: a quarter of them, at most 10), on the hosts
    ``colocation``/``cores`` describe (as :func:`simulate.predict` takes them; default: the
    cluster's recorded hosts, else no limit on cores). The mean is what sets throughput: 1 / mean step time.

    With ``replicas`` = K > 1, K runs with seeds 0..K-1 (as :func:`simulate.predict`'s
    replicas): the mean step of the replicas' mean throughput, 1 / mean(1 / mean step), or the
    mean of their medians. A profile whose traced steps differ widely gives each seed's sample
    of them its own mean (a tf2-pss tiny job on 0.33-core hosts: 5 seeds from -4% to +6%)."""
    from simulate.workers import run_in_child

    if statistic not in STATISTICS:
        raise UsageError("statistic", f"must be one of {', '.join(STATISTICS)}, not {statistic!r}")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise UsageError("replicas", f"must be a whole number of at least 1, not {replicas!r}")
    warmup = min(10, steps // 4) if warmup is None else warmup
    hosts = host_model(colocation, cores, cluster)
    if hosts is not None and callable(hosts):
        hosts = hosts(1, max(profile.graph.n_servers, 1))
    configs = [SimConfig(workers=1, transfer=transfer, steps=steps, warmup=warmup, colocation=hosts, seed=seed)
               for seed in range(replicas)]
    return run_in_child(_step_statistic_s, profile, cluster, configs, statistic)


STATISTICS = ("median", "mean")


def _step_statistic_s(profile: Profile, cluster: ClusterModel, configs: list[SimConfig], statistic: str) -> float:
    """The simulations' median or mean step time, combined over the configurations' seeds as
    :func:`one_worker_step_s` says (run in a child process: compiled code)."""
    from simulate.engine import run
    from simulate.prepare import prepare
    from simulate.results import step_times_s

    prepared = prepare(profile, cluster)
    values = []
    for config in configs:
        times = step_times_s(run(prepared, cluster, config))
        values.append(np.mean(times) if statistic == "mean" else np.median(times))
    if statistic == "mean":
        return float(1.0 / np.mean(1.0 / np.asarray(values)))
    return float(np.mean(values))


def fit_computation_scale(profile: Profile, cluster: ClusterModel, untraced_step_s: float, *,
                          transfer: Transfer | None = None, iterations: int = 30, colocation=None,
                          cores: float | None = None, statistic: str = "median", steps: int = 80,
                          warmup: int | None = None, replicas: int = 1) -> float:
    """The factor for :func:`scale_computation` that makes the model's one-worker step time
    ``untraced_step_s``, in either direction (bisection; the step time grows with the factor).

    Below 1 it takes tracing's own cost out (a traced step is slower than an untraced one);
    above 1 it puts back what a one-worker step spends that the model has no term for (host
    work around the ops, docs/model.md §10), at the rate of the computation. :data:`MIN_SCALE`
    when even computation at nothing is too slow (the transfers alone take
    longer); :data:`MAX_SCALE` when even that much computation is too fast. ``colocation``
    and ``cores``: the hosts the one-worker run had (as :func:`simulate.predict` takes them);
    ``statistic``: match the model's median or mean step time (the mean when ``untraced_step_s``
    is a mean: it is what throughput follows). ``steps``/``warmup``: the simulated run the fit
    matches (as :func:`one_worker_step_s`); a profile whose traced steps differ widely (some met
    a throttled CPU quota) gives a mean that moves with the steps sampled, so fit over as many
    as the prediction simulates, and over as many ``replicas`` (seeds 0..K-1) as it averages.
    """
    transfer = transfer or Transfer(cluster.default_transfer)
    hosts = {"colocation": colocation, "cores": cores, "statistic": statistic, "steps": steps, "warmup": warmup,
             "replicas": replicas}
    low, high = 0.0, 1.0
    if one_worker_step_s(profile, cluster, transfer, **hosts) < untraced_step_s:
        low, high = 1.0, MAX_SCALE
        if one_worker_step_s(scale_computation(profile, high), cluster, transfer, **hosts) <= untraced_step_s:
            return MAX_SCALE
    for _ in range(iterations):
        mid = (low + high) / 2
        scaled = scale_computation(profile, max(mid, MIN_SCALE))
        if one_worker_step_s(scaled, cluster, transfer, **hosts) > untraced_step_s:
            high = mid
        else:
            low = mid
    return max(low, MIN_SCALE)
