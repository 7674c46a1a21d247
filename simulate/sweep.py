"""Throughput for every configuration of a sweep, as a DataFrame (:func:`predict`).

One configuration (a :class:`Scenario`) is a worker count, a server count, a mode, a
sharing model and a transfer scheduler. Each is prepared (:mod:`simulate.prepare`) and
simulated (:mod:`simulate.engine`) independently, so sweeps run in parallel processes
when ``jobs > 1``; results do not depend on ``jobs``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from simulate.cluster import ClusterModel
from simulate.cluster_file import resolve_cluster
from simulate.config import Colocation, Mode, Sharing, SimConfig, Transfer, parse_enum
from simulate.engine import SimRun, run
from simulate.prepare import prepare
from simulate.results import efficiency_one_worker, saturation_point, summarise
from tfbase.errors import TfsimWarning, UsageError
from tfprofile.dag import Profile

ROW_COLUMNS = (
    "workers", "servers", "mode", "sharing", "transfer", "policy", "seed", "throughput_eps", "ci95_eps",
    "step_time_s", "step_time_mean_s", "step_time_p95_s", "step_time_by_worker_s", "util_downlink", "util_uplink",
    "bandwidth_down_Bps",
    "bandwidth_up_Bps", "steps", "warmup", "batches", "op_events", "efficiency_E", "saturated",
)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One configuration of a sweep. ``policy`` labels the transfer order (e.g. ``tic``)."""

    workers: int
    servers: int | None
    mode: Mode
    sharing: Sharing
    transfer: Transfer
    policy: str
    priorities: np.ndarray | None = None


def _as_list(value) -> list:
    if value is None:
        return [None]
    if isinstance(value, (str, int, float, np.integer)) or isinstance(value, (Mode, Sharing, Transfer)):
        return [value]
    return list(value)


def staggered_starts(profile: Profile, workers: int, stagger: float) -> tuple[float, ...] | None:
    """Start times spreading the workers evenly over ``stagger`` profiled steps (median makespan).

    Real workers never start at one instant; in a deterministic model, workers started
    together share every link in lock step and stay so (all of them download, then all
    compute, then all upload), leaving each link idle while the others work. Spreading the
    starts lets the model find the staggered pattern that a real asynchronous job settles
    into. ``stagger = 0`` starts every worker at time 0 (the papers' Alg. 3.1).
    """
    if stagger == 0 or workers == 1:
        return None
    step = float(np.median(profile.step_makespan_s))
    return tuple(stagger * step * w / workers for w in range(workers))


def simulate_one(profile: Profile, cluster: ClusterModel, scenario: Scenario, *, steps: int, warmup: int,
                 seed: int = 0, flow_cap_Bps: float | None = None, colocation=None, stagger: float = 0.0,
                 trace_steps: int = 0) -> SimRun:
    """Prepare and simulate one scenario; the raw :class:`~simulate.engine.SimRun`.

    ``colocation`` is a :class:`~simulate.config.Colocation`, or a callable of (workers,
    servers) that builds one for this scenario's size (what a sweep over W passes).
    ``trace_steps`` > 0 records every chunk of each worker's first steps.
    """
    if colocation is not None and callable(colocation):
        colocation = colocation(scenario.workers, scenario.servers or max(profile.graph.n_servers, 1))
    graph = prepare(profile, cluster, workers=scenario.workers, mode=scenario.mode, servers=scenario.servers,
                    priorities=scenario.priorities)
    config = SimConfig(workers=scenario.workers, mode=scenario.mode, sharing=scenario.sharing,
                       transfer=scenario.transfer, steps=steps, warmup=warmup, seed=seed, flow_cap_Bps=flow_cap_Bps,
                       colocation=colocation, trace_steps=trace_steps,
                       start_offsets_s=staggered_starts(profile, scenario.workers, stagger))
    return run(graph, cluster, config)


def _single_run(profile: Profile, cluster: ClusterModel, scenario: Scenario, sharing: Sharing, options: dict,
                with_efficiency: bool = False):
    result = simulate_one(profile, cluster, dataclasses.replace(scenario, sharing=sharing), steps=options["steps"],
                          warmup=options["warmup"], seed=options["seed"], flow_cap_Bps=options.get("flow_cap_Bps"),
                          colocation=options.get("colocation"), stagger=options.get("stagger", 0.0))
    graph = result.graph
    efficiency = math.nan
    if with_efficiency:
        capacity = np.array([[cluster.downlink_Bps] * graph.n_servers, [cluster.uplink_Bps] * graph.n_servers])
        values = efficiency_one_worker(result, capacity)
        efficiency = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
    return graph, summarise(result), efficiency


def traced_run(profile: Profile, cluster: ClusterModel, *, workers: int, transfer: str, priorities: Mapping,
               sharing: str = "ps", mode: str = "async", servers: int | None = None, cores: float | None = None,
               steps: int = 3, seed: int = 0, flow_cap_Bps: float | None = None, stagger: float = 1.0) -> SimRun:
    """Simulate ``steps`` steps per worker of one configuration, recording every chunk (a
    :class:`~simulate.engine.SimRun` with a ``trace``), for timelines and Gantt pictures.

    ``transfer`` is a scheduler name or a key of ``priorities`` (then the priority scheduler
    with that order). Hybrid sharing is an average of two runs, so it is traced as ``ps``
    (with a warning). Workers start as :func:`staggered_starts` spreads them.
    """
    kind = Transfer.PRIORITY if transfer in priorities else parse_enum(Transfer, transfer, "transfer")
    sharing_ = parse_enum(Sharing, sharing, "sharing")
    if sharing_ is Sharing.HYBRID:
        warnings.warn(TfsimWarning("sharing", "hybrid sharing is traced as ps"), stacklevel=2)
        sharing_ = Sharing.PS
    scenario = Scenario(workers, servers, parse_enum(Mode, mode, "mode"), sharing_, kind, transfer,
                        priorities.get(transfer))
    return simulate_one(profile, cluster, scenario, steps=steps, warmup=0, seed=seed, flow_cap_Bps=flow_cap_Bps,
                        colocation=_single_host(cores) if cores else None, stagger=stagger, trace_steps=steps)


def run_scenario(profile: Profile, cluster: ClusterModel, scenario: Scenario, options: dict) -> dict:
    """Simulate one scenario; return its table row. Hybrid sharing averages a PS and an FCFS run."""
    steps, target = options["steps"], options.get("ci_target")
    while True:
        opts = {**options, "steps": steps, "warmup": min(options["warmup"], steps - 1)}
        one = scenario.workers == 1
        if scenario.sharing is Sharing.HYBRID:
            (graph, a, efficiency), (_, b, _) = (_single_run(profile, cluster, scenario, s, opts, one)
                                                 for s in (Sharing.PS, Sharing.FCFS))
            thr, ci = (a.throughput_eps + b.throughput_eps) / 2, (a.ci95_eps + b.ci95_eps) / 2
            summary = a
            step_time = (a.step_time_s + b.step_time_s) / 2
        else:
            graph, summary, efficiency = _single_run(profile, cluster, scenario, scenario.sharing, opts, one)
            thr, ci, step_time = summary.throughput_eps, summary.ci95_eps, summary.step_time_s
        # Adaptive stopping: double the steps until the interval is tight enough (or the cap).
        if target is None or ci <= target * thr or steps >= options["max_steps"]:
            break
        steps = min(2 * steps, options["max_steps"])
    util = summary.link_bytes_per_s / np.array([[cluster.downlink_Bps], [cluster.uplink_Bps]])
    return {
        "workers": scenario.workers, "servers": graph.n_servers, "mode": scenario.mode.value,
        "sharing": scenario.sharing.value, "transfer": scenario.transfer.value, "policy": scenario.policy,
        "seed": options["seed"], "throughput_eps": thr, "ci95_eps": ci, "step_time_s": step_time,
        "step_time_mean_s": summary.step_time_mean_s, "step_time_p95_s": summary.step_time_p95_s,
        "step_time_by_worker_s": list(summary.step_time_by_worker_s),
        "util_downlink": float(util[0].max()), "util_uplink": float(util[1].max()),
        "bandwidth_down_Bps": cluster.downlink_Bps, "bandwidth_up_Bps": cluster.uplink_Bps,
        "steps": opts["steps"], "warmup": opts["warmup"], "batches": summary.batches,
        # No wall-clock time here: a prediction is identical for a seed, whatever the machine's load.
        "op_events": summary.op_events, "efficiency_E": efficiency,
    }


def _pool_task(args):
    return run_scenario(*args)


def run_scenarios(profile: Profile, cluster: ClusterModel, scenarios: Sequence[Scenario], options: dict, *,
                  jobs: int = 1, progress: bool = False) -> list[dict]:
    """Rows for every scenario, in the order given; ``jobs`` > 1 runs them in parallel processes."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(scenarios), desc="predict", unit="config", dynamic_ncols=True)
    try:
        if jobs <= 1 or len(scenarios) <= 1:
            rows = []
            for scenario in scenarios:
                rows.append(run_scenario(profile, cluster, scenario, options))
                if bar is not None:
                    bar.update(1)
            return rows
        rows: list[dict | None] = [None] * len(scenarios)
        # Larger configurations first, so the pool does not end waiting on one big run.
        order = sorted(range(len(scenarios)), key=lambda i: -scenarios[i].workers)
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_pool_task, (profile, cluster, scenarios[i], options)): i for i in order}
            from concurrent.futures import as_completed

            for future in as_completed(futures):
                rows[futures[future]] = future.result()
                if bar is not None:
                    bar.update(1)
        return rows  # type: ignore[return-value]
    finally:
        if bar is not None:
            bar.close()


def parse_workers(text: str) -> list[int]:
    """``"1-16"``, ``"1,2,4,8"`` or ``"1-4,8"`` -> sorted distinct worker counts."""
    out: set[int] = set()
    try:
        for part in str(text).split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                out.update(range(lo, hi + 1))
            elif part:
                out.add(int(part))
    except ValueError:
        raise UsageError("workers", f"{text!r} is not a list of counts like 1-16 or 1,2,4") from None
    if not out:
        raise UsageError("workers", "no worker count given")
    return sorted(out)


def predict(
    profile: Profile,
    cluster: ClusterModel | str | os.PathLike | None = None,
    *,
    workers: int | Iterable[int] | str = 1,
    servers: int | Iterable[int] | None = None,
    mode: str | Mode = Mode.ASYNC,
    sharing: str | Sharing | Iterable = Sharing.PS,
    transfer: str | Transfer | Iterable | None = None,
    priorities: Mapping[str, Mapping[str, float] | np.ndarray] | None = None,
    bandwidth_Bps: float | None = None,
    steps: int = 1000,
    warmup: int = 50,
    seed: int = 0,
    flow_cap_Bps: float | None = None,
    colocation: Colocation | None = None,
    cores: float | None = None,
    ci_target: float | None = None,
    max_steps: int = 16000,
    stagger: float = 1.0,
    jobs: int = 1,
    progress: bool = False,
):
    """Predict throughput over a sweep of configurations, one DataFrame row per configuration.

    Every combination of ``workers``, ``servers``, ``sharing`` and ``transfer`` is simulated
    (docs/model.md §2-5) for ``steps`` steps per worker, of which the first ``warmup`` are
    dropped (ICPE §4.1). Results depend on the inputs and ``seed`` only, never on ``jobs``.

    Parameters
    ----------
    profile : tfprofile.Profile
        A 1-PS/1-worker profile (:func:`tfprofile.load_profile`, :func:`tfprofile.read_profile`).
    cluster : ClusterModel, path or None
        The calibrated cluster, or the path of its CLUSTER.json. ``None`` needs
        ``bandwidth_Bps`` and assumes no parsing overhead and unlimited windows (a
        :class:`~tfbase.errors.TfsimWarning` says so).
    workers : int, iterable of int or str
        Worker counts: ``4``, ``[1, 2, 4]`` or ``"1-16"``, ``"1,2,4-8"``.
    servers : int, iterable of int or None
        Parameter-server counts to re-partition the variables over (greedy by bytes, as
        TensorFlow's ``GreedyLoadBalancingStrategy``); ``None`` keeps the profile's placement.
    mode : {"async", "sync", "allreduce"} or Mode
        How the workers synchronise (docs/model.md §2.6).
    sharing : str, Sharing or a list of them
        Link sharing: ``"ps"``, ``"fcfs"``, ``"hybrid"``, ``"flow_cap"`` (docs/model.md §4).
    transfer : str, Transfer, a list of them, or None
        Link schedulers: ``"grpc"``, ``"http2"``, ``"fifo"``, or a key of ``priorities`` (the
        priority scheduler with that order; docs/model.md §3). ``None``: the cluster's
        ``default_transfer``.
    priorities : mapping, optional
        Transfer orders by name: ``{name: {transfer op name: priority}}`` (e.g. from
        :func:`simulate.ordering_priorities`) or ``{name: array of per-op priorities}``.
    bandwidth_Bps : float, optional
        Rescale the links to this downlink bandwidth, bytes/s, the uplink in proportion (a
        what-if on a calibrated cluster; the only network number without one).
    steps, warmup, seed : int
        Steps simulated per worker, steps dropped per worker, and the seed that samples the
        profiled steps.
    flow_cap_Bps : float, optional
        The per-flow cap of ``sharing="flow_cap"``, bytes/s.
    colocation : Colocation, optional
        Tasks sharing hosts' cores; ``cores`` is the common case of one host.
    cores : float, optional
        Every task on one host with this many cores (docs/model.md §4.3).
    ci_target : float, optional
        Double the steps (up to ``max_steps``) until the 95% half-width is below this fraction
        of the throughput; the ``steps`` column says what was used.
    stagger : float
        Workers start spread evenly over this many profiled steps (:func:`staggered_starts`;
        0 starts them all at time 0, as the papers' algorithm does).
    jobs : int
        Parallel processes.
    progress : bool
        Show a progress bar.

    Returns
    -------
    pandas.DataFrame
        One row per configuration, columns ``ROW_COLUMNS`` (docs/formats.md §6):
        ``throughput_eps`` (examples/s summed over workers) and ``ci95_eps``; step times (the
        gaps between a worker's step completions in the measured window: median, mean and
        p95 over all workers, and each worker's median); ``util_downlink``/``util_uplink``
        (the busiest server's link utilisation); ``efficiency_E`` (TicTac's scheduling
        efficiency of the simulated steps, W = 1 rows only); ``saturated`` (the saturation
        point of each curve: the smallest W within 5% of its best throughput).

    Raises
    ------
    tfbase.errors.UsageError
        A parameter out of range; the error names the parameter.

    Examples
    --------
    >>> import tfprofile, simulate
    >>> profile = tfprofile.load_profile("data/profiles/tiny.npz")
    >>> table = simulate.predict(profile, "data/clusters/lab-1gbit.json", workers="1-2", steps=60, warmup=10)
    >>> table[["workers", "transfer"]].values.tolist()
    [[1, 'grpc'], [2, 'grpc']]
    >>> bool(table["throughput_eps"].iloc[1] > table["throughput_eps"].iloc[0])
    True
    """
    import pandas as pd

    cluster = resolve_cluster(cluster, bandwidth_Bps)
    if transfer is None:
        transfer = cluster.default_transfer
    worker_list = parse_workers(workers) if isinstance(workers, str) else [int(w) for w in _as_list(workers)]
    mode_ = mode if isinstance(mode, Mode) else parse_enum(Mode, mode, "mode")
    priorities = dict(priorities or {})
    scenarios = []
    for server_count in _as_list(servers):
        for share in _as_list(sharing):
            share_ = share if isinstance(share, Sharing) else parse_enum(Sharing, share, "sharing")
            if share_ is Sharing.FLOW_CAP and not flow_cap_Bps:
                raise UsageError("flow_cap_Bps", "flow_cap sharing needs a per-flow cap")
            for tr in _as_list(transfer):
                name = tr.value if isinstance(tr, Transfer) else str(tr)
                if name in priorities:
                    tr_, prio = Transfer.PRIORITY, priorities[name]
                else:
                    tr_, prio = (tr if isinstance(tr, Transfer) else parse_enum(Transfer, name, "transfer")), None
                    if tr_ is Transfer.PRIORITY:
                        raise UsageError("transfer", "the priority scheduler needs an order (a priorities file)")
                for w in worker_list:
                    scenarios.append(Scenario(w, server_count, mode_, share_, tr_, name, prio))
    col = colocation
    if col is None and cores is not None:
        col = _single_host(cores)
    if not (math.isfinite(stagger) and stagger >= 0):
        raise UsageError("stagger", f"must be finite and non-negative, not {stagger}")
    options = {"steps": steps, "warmup": warmup, "seed": seed, "flow_cap_Bps": flow_cap_Bps, "colocation": col,
               "ci_target": ci_target, "max_steps": max(max_steps, steps), "stagger": float(stagger)}
    SimConfig(workers=1, steps=steps, warmup=warmup)  # validate the shared options before spawning work
    rows = run_scenarios(profile, cluster, scenarios, options, jobs=jobs, progress=progress)
    frame = pd.DataFrame(rows, columns=[c for c in ROW_COLUMNS if c != "saturated"])
    frame["saturated"] = False
    for _, group in frame.groupby(["servers", "mode", "sharing", "policy"], sort=False):
        point = saturation_point(group["workers"].to_numpy(), group["throughput_eps"].to_numpy())
        frame.loc[group.index[group["workers"] == point], "saturated"] = True
    return frame


@dataclasses.dataclass(frozen=True)
class _single_host:
    """Every task on one host with ``cores`` cores; callable so that it fits any W and M."""

    cores: float

    def __call__(self, workers: int, servers: int) -> Colocation:
        if not (self.cores > 0 and math.isfinite(self.cores)):
            raise UsageError("cores", f"must be positive, not {self.cores}")
        return Colocation.single_host(workers, servers, self.cores)


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))
