"""Throughput for every configuration of a sweep, as a DataFrame (:func:`predict`).

One configuration (a :class:`Scenario`) is a worker count, a server count, a mode, a
sharing model and a transfer scheduler. Each is prepared (:mod:`simulate.prepare`) and
simulated (:mod:`simulate.engine`) independently, so sweeps run in parallel processes
when ``jobs > 1``; results do not depend on ``jobs``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from simulate.cluster import ClusterModel
from simulate.cluster_file import resolve_cluster
from simulate.config import (
    MAX_REPLICAS,
    MAX_SEED,
    MAX_SERVERS,
    MAX_STAGGER,
    MAX_STEPS,
    MAX_TRACE_CHUNKS,
    MAX_WORKERS,
    Colocation,
    Enforcement,
    Mode,
    PacketNetwork,
    Placement,
    Sharing,
    SimConfig,
    TieOrder,
    Transfer,
    WorkerSpeeds,
    as_member,
    host_model,
    max_sweep_op_events,
    parse_enum,
)
from simulate.engine import SimRun, run
from simulate.executors import parse_executor
from simulate.packet_replay import check_packet_scenario, packet_sim_run
from simulate.prepare import _priorities, check_strict_order, prepare, profile_placement
from simulate.results import (
    ROW_COLUMNS,
    drift,
    efficiency_one_worker,
    is_settled,
    saturation_point,
    summarise,
    t95,
)
from simulate.workers import MAX_JOBS, run_in_child
from tfbase.errors import InputError, TfsimWarning, UsageError
from tfbase.progress import progress_bar
from tfprofile.dag import Profile, Resource


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
                 trace_steps: int = 0, worker_speed: WorkerSpeeds | None = None,
                 enforcement: Enforcement = Enforcement.WORK_CONSERVING,
                 tie_order: TieOrder = TieOrder.INDEX, network: PacketNetwork | None = None,
                 placement: Placement | None = None) -> SimRun:
    """Prepare and simulate one scenario; the raw :class:`~simulate.engine.SimRun`.

    ``colocation`` is a :class:`~simulate.config.Colocation`, or a callable of (workers,
    servers) that builds one for this scenario's size (what a sweep over W passes).
    ``trace_steps`` > 0 records every chunk of each worker's first steps. The ``packet``
    transfer model replays the graph over ns-3's packet-level network (``network``, docs/model.md
    §12) instead of the flow engine.
    """
    if scenario.transfer is Transfer.PACKET and trace_steps:
        raise UsageError("trace_steps", "the packet transfer model records no chunks: trace a grpc run")
    if colocation is not None and callable(colocation):
        colocation = colocation(scenario.workers, scenario.servers or max(profile.graph.n_servers, 1))
    graph = prepare(profile, cluster, workers=scenario.workers, mode=scenario.mode, servers=scenario.servers,
                    priorities=scenario.priorities, placement=placement)
    config = SimConfig(workers=scenario.workers, mode=scenario.mode, sharing=scenario.sharing,
                       transfer=scenario.transfer, steps=steps, warmup=warmup, seed=seed, flow_cap_Bps=flow_cap_Bps,
                       colocation=colocation, trace_steps=trace_steps,
                       start_offsets_s=staggered_starts(profile, scenario.workers, stagger),
                       worker_speed=worker_speed(scenario.workers) if worker_speed is not None else None,
                       enforcement=enforcement, tie_order=tie_order)
    if scenario.transfer is Transfer.PACKET:
        return packet_sim_run(graph, cluster, config, network=network)
    try:
        return run(graph, cluster, config)
    except ValueError as exc:
        if "window-return buffer overflow" not in str(exc):
            raise
        # The compiled engine keeps a bounded buffer of the grpc model's pending WINDOW_UPDATEs;
        # more chunks than it holds finishing within one update delay overflow it.
        raise InputError(cluster.source or "cluster", "the grpc model's window updates overflow the engine's buffer: "
                                                      "flow_control update_delay_s is too long for this job's steps "
                                                      "(a shorter delay, or the http2 transfer model)") from None


def _single_run(profile: Profile, cluster: ClusterModel, scenario: Scenario, sharing: Sharing, options: dict,
                with_efficiency: bool = False):
    result = simulate_one(profile, cluster, dataclasses.replace(scenario, sharing=sharing), steps=options["steps"],
                          warmup=options["warmup"], seed=options["seed"], flow_cap_Bps=options.get("flow_cap_Bps"),
                          colocation=options.get("colocation"), stagger=options.get("stagger", 0.0),
                          worker_speed=options.get("worker_speed"),
                          enforcement=options.get("enforcement", Enforcement.WORK_CONSERVING),
                          tie_order=options.get("tie_order", TieOrder.INDEX), network=options.get("network"),
                          placement=options.get("placement"))
    graph = result.graph
    efficiency = math.nan
    if with_efficiency and scenario.transfer is not Transfer.PACKET:
        capacity = np.array([[cluster.downlink_Bps] * graph.n_servers, [cluster.uplink_Bps] * graph.n_servers])
        values = efficiency_one_worker(result, capacity)
        efficiency = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
    return graph, summarise(result), efficiency


def trace_chunks(profile: Profile, workers: int, steps: int) -> int:
    """An upper bound of the chunks a traced run of ``workers`` x ``steps`` records (what the
    engine allocates for its trace): two per op and step, parse ops included."""
    transfers = int(np.isin(profile.graph.resource, (Resource.DOWNLINK, Resource.UPLINK)).sum())
    return int(workers) * int(steps) * 2 * (profile.graph.n_ops + transfers)


def check_traced_run(profile: Profile, workers: int, steps: int, *, workers_parameter: str = "workers",
                     steps_parameter: str = "steps") -> None:
    """Refuse a traced run beyond the limits (:data:`~simulate.config.MAX_WORKERS`,
    :data:`~simulate.config.MAX_TRACE_CHUNKS`), naming the parameters that set it."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise UsageError(workers_parameter, f"must be between 1 and {MAX_WORKERS}, not {workers}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise UsageError(steps_parameter, f"must be between 1 and {MAX_STEPS:,}, not {steps}")
    chunks = trace_chunks(profile, workers, steps)
    if chunks > MAX_TRACE_CHUNKS:
        per_worker, per_step = trace_chunks(profile, 1, steps), trace_chunks(profile, 1, 1)
        if per_worker > MAX_TRACE_CHUNKS:
            raise UsageError(steps_parameter, f"a trace of {steps:,} steps of this profile records up to "
                                              f"{per_worker:,} chunks per worker, more than the limit of "
                                              f"{MAX_TRACE_CHUNKS:,}: trace at most "
                                              f"{max(1, MAX_TRACE_CHUNKS // per_step):,} steps")
        raise UsageError(workers_parameter, f"a trace of {workers} workers x {steps:,} steps of this profile records "
                                            f"up to {chunks:,} chunks, more than the limit of {MAX_TRACE_CHUNKS:,}: "
                                            f"trace at most {MAX_TRACE_CHUNKS // per_worker} workers")


def plan_traced_run(profile: Profile, cluster: ClusterModel, *, workers: int, transfer: str, priorities: Mapping,
                    sharing: str = "ps", mode: str = "async", servers: int | None = None, cores: float | None = None,
                    colocation=None, steps: int = 3, seed: int = 0, flow_cap_Bps: float | None = None,
                    stagger: float = 1.0, enforcement: str | Enforcement = Enforcement.WORK_CONSERVING,
                    tie_order: str | TieOrder = TieOrder.INDEX, workers_parameter: str = "workers",
                    steps_parameter: str = "steps", placement: str | Placement | None = None) -> dict:
    """Check a traced run (see :func:`traced_run`) before anything runs, naming the parameters
    that set W and the steps; the arguments of :func:`simulate_one` that run it."""
    check_traced_run(profile, workers, steps, workers_parameter=workers_parameter, steps_parameter=steps_parameter)
    kind = Transfer.PRIORITY if transfer in priorities else parse_enum(Transfer, transfer, "transfer")
    sharing_ = parse_enum(Sharing, sharing, "sharing")
    if sharing_ is Sharing.HYBRID:
        warnings.warn(TfsimWarning("sharing", "hybrid sharing is traced as ps"), stacklevel=3)
        sharing_ = Sharing.PS
    scenario = Scenario(workers, servers, parse_enum(Mode, mode, "mode"), sharing_, kind, transfer,
                        priorities.get(transfer))
    colocation = host_model(colocation, cores, cluster)
    enforcement = as_member(Enforcement, enforcement, "enforcement")
    tie_order = as_member(TieOrder, tie_order, "tie_order")
    placement = profile_placement(profile, placement)
    options = {"steps": steps, "warmup": 0, "seed": seed, "colocation": colocation, "flow_cap_Bps": flow_cap_Bps,
               "stagger": stagger, "max_steps": steps, "enforcement": enforcement, "tie_order": tie_order,
               "placement": placement}
    if scenario.transfer is Transfer.AUTO:  # a traced run records chunks: the flow model's
        scenario = resolve_auto(scenario, cluster, options, traced=True)
    _check_scenario(profile, cluster, scenario, options)
    check_events(sweep_op_events(profile, [scenario], options, cluster), f"a traced run of {workers} workers",
                 workers_parameter)
    return {"profile": profile, "cluster": cluster, "scenario": scenario, "steps": steps, "warmup": 0, "seed": seed,
            "flow_cap_Bps": flow_cap_Bps, "colocation": colocation, "stagger": stagger, "trace_steps": steps,
            "enforcement": enforcement, "tie_order": tie_order, "placement": placement}


def traced_run(profile: Profile, cluster: ClusterModel, *, workers: int, transfer: str, priorities: Mapping,
               sharing: str = "ps", mode: str = "async", servers: int | None = None, cores: float | None = None,
               colocation=None, steps: int = 3, seed: int = 0, flow_cap_Bps: float | None = None,
               stagger: float = 1.0, enforcement: str | Enforcement = Enforcement.WORK_CONSERVING,
               tie_order: str | TieOrder = TieOrder.INDEX, placement: str | Placement | None = None) -> SimRun:
    """Simulate ``steps`` steps per worker of one configuration, recording every chunk (a
    :class:`~simulate.engine.SimRun` with a ``trace``), for timelines and Gantt pictures.

    ``transfer`` is a scheduler name or a key of ``priorities`` (then the priority scheduler
    with that order, enforced as ``enforcement`` says). Hybrid sharing is an average of two
    runs, so it is traced as ``ps`` (with a warning). Workers start as
    :func:`staggered_starts` spreads them. Checked first (:func:`plan_traced_run`); the
    simulation runs in a child process (:func:`simulate.workers.run_in_child`).
    """
    arguments = plan_traced_run(profile, cluster, workers=workers, transfer=transfer, priorities=priorities,
                                sharing=sharing, mode=mode, servers=servers, cores=cores, colocation=colocation,
                                steps=steps, seed=seed,
                                flow_cap_Bps=flow_cap_Bps, stagger=stagger, enforcement=enforcement,
                                tie_order=tie_order, placement=placement)
    return run_in_child(_traced, arguments)


def _traced(arguments: dict) -> SimRun:
    arguments = dict(arguments)
    return simulate_one(arguments.pop("profile"), arguments.pop("cluster"), arguments.pop("scenario"), **arguments)


def run_scenario(profile: Profile, cluster: ClusterModel, scenario: Scenario, options: dict) -> dict:
    """Simulate one scenario; return its table row. With ``options["replicas"]`` = K > 1 the
    scenario is simulated K times, with seeds ``seed``, ``seed + 1``, .. (docs/model.md §5.2):
    the row's throughput is their mean, its interval their Student t interval, and it gives
    their range. The row holds plain Python values (no numpy scalars), as a journal gives it
    back (:mod:`simulate.sweep_journal`)."""
    replicas = options.get("replicas", 1)
    if replicas == 1:
        return plain(_one_replica(profile, cluster, scenario, options))
    rows = [_one_replica(profile, cluster, scenario, {**options, "seed": options["seed"] + k}) for k in range(replicas)]
    return plain(combine_replicas(rows, seed=options["seed"]))


def plain(value):
    """``value`` with numpy scalars as Python numbers and arrays and tuples as lists, through
    dicts and lists: what JSON holds, so that a row read back from a journal is the row.

    Examples
    --------
    >>> plain({"a": np.float64(0.5), "b": [np.int64(3)], "c": (1, 2)})
    {'a': 0.5, 'b': [3], 'c': [1, 2]}
    """
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def combine_replicas(rows: Sequence[dict], *, seed: int) -> dict:
    """One row from the rows of independent replications of a configuration: the mean of each
    number (each worker's median step time too; ``settled`` only if every replica settled),
    the throughput's Student t 95% half-width over the replicas, its range, and the largest
    step count an adaptive run reached.

    Examples
    --------
    >>> rows = [{"throughput_eps": t, "ci95_eps": 1.0, "throughput_min_eps": t, "throughput_max_eps": t,
    ...          "step_time_by_worker_s": [0.1], "steps": 100, "efficiency_E": None} for t in (90.0, 110.0)]
    >>> row = combine_replicas(rows, seed=0)
    >>> row["replicas"], row["throughput_eps"], row["throughput_min_eps"], row["throughput_max_eps"]
    (2, 100.0, 90.0, 110.0)
    >>> round(row["ci95_eps"], 1)  # 12.706 x 14.14 / sqrt(2)
    127.1
    """
    throughputs = np.array([row["throughput_eps"] for row in rows], dtype=float)
    combined = {}
    for key, first in rows[0].items():
        values = [row[key] for row in rows]
        if key == "step_time_by_worker_s":
            combined[key] = list(np.mean(np.array(values, dtype=float), axis=0))
        elif key == "settled":
            combined[key] = bool(all(values))  # every replica's run settled
        elif key in ("steps", "batches", "op_events"):
            combined[key] = max(values) if key == "steps" else int(sum(values))
        elif isinstance(first, (float, np.floating)) and not isinstance(first, bool):
            combined[key] = float(np.mean(values))
        else:
            combined[key] = first
    k = len(rows)
    combined.update(seed=seed, replicas=k, throughput_eps=float(throughputs.mean()),
                    ci95_eps=float(t95(k - 1) * throughputs.std(ddof=1) / math.sqrt(k)),
                    throughput_min_eps=float(throughputs.min()), throughput_max_eps=float(throughputs.max()))
    return combined


def _one_replica(profile: Profile, cluster: ClusterModel, scenario: Scenario, options: dict) -> dict:
    """One simulation of a scenario (two for hybrid sharing, averaged): its table row."""
    steps, target, settle = options["steps"], options.get("ci_target"), options.get("settle", False)
    while True:
        opts = {**options, "steps": steps, "warmup": min(options["warmup"], steps - 1)}
        one = scenario.workers == 1
        if scenario.sharing is Sharing.HYBRID:
            (graph, a, efficiency), (_, b, _) = (_single_run(profile, cluster, scenario, s, opts, one)
                                                 for s in (Sharing.PS, Sharing.FCFS))
            thr, ci = (a.throughput_eps + b.throughput_eps) / 2, (a.ci95_eps + b.ci95_eps) / 2
            summary = a
            step_time = (a.step_time_s + b.step_time_s) / 2
            halves = ((a.first_half_eps + b.first_half_eps) / 2, (a.second_half_eps + b.second_half_eps) / 2)
        else:
            graph, summary, efficiency = _single_run(profile, cluster, scenario, scenario.sharing, opts, one)
            thr, ci, step_time = summary.throughput_eps, summary.ci95_eps, summary.step_time_s
            halves = (summary.first_half_eps, summary.second_half_eps)
        # Adaptive stopping: double the steps until the interval is tight enough and, with
        # settle, the run's two halves agree (docs/model.md §5.8), or the cap.
        limit = ps_cpu_limit_eps(profile, cluster, graph.n_servers, scenario.mode, scenario.workers)
        # Each half is held to the PS CPU bound too: a run that drifts above it is settled there.
        run_drift = drift(*(min(h, limit) if math.isfinite(limit) else h for h in halves))
        tight = target is None or ci <= target * thr
        if (tight and (not settle or is_settled(run_drift))) or steps >= options["max_steps"]:
            break
        steps = min(2 * steps, options["max_steps"])
    util = summary.link_bytes_per_s / np.array([[cluster.downlink_Bps], [cluster.uplink_Bps]])
    # The PS hosts serve no more steps than their CPU allows (docs/model.md §4.7): every worker's
    # steps stretch alike, and the links carry proportionally less (a NaN limit binds nothing).
    slower = thr / limit if thr > limit else 1.0
    thr, ci, util = thr / slower, ci / slower, util / slower
    return {
        "workers": scenario.workers, "servers": graph.n_servers, "mode": scenario.mode.value,
        "sharing": scenario.sharing.value, "transfer": scenario.transfer.value, "policy": scenario.policy,
        "seed": options["seed"], "replicas": 1, "throughput_eps": thr, "ci95_eps": ci,
        "throughput_min_eps": thr, "throughput_max_eps": thr, "step_time_s": step_time * slower,
        "step_time_mean_s": summary.step_time_mean_s * slower, "step_time_p95_s": summary.step_time_p95_s * slower,
        "step_time_by_worker_s": [s * slower for s in summary.step_time_by_worker_s],
        "util_downlink": float(util[0].max()), "util_uplink": float(util[1].max()),
        "bandwidth_down_Bps": cluster.downlink_Bps, "bandwidth_up_Bps": cluster.uplink_Bps,
        "steps": opts["steps"], "warmup": opts["warmup"], "batches": summary.batches,
        # No wall-clock time here: a prediction is identical for a seed, whatever the machine's load.
        "op_events": summary.op_events, "efficiency_E": efficiency, "ps_cpu_limit_eps": limit,
        "throughput_drift": run_drift, "settled": is_settled(run_drift),
    }


def ps_cpu_limit_eps(profile: Profile, cluster: ClusterModel, servers: int, mode: Mode, workers: int = 1) -> float:
    """The examples per second the parameter servers' CPU allows ``workers`` workers
    (docs/model.md §4.7): NaN without a measured :class:`~simulate.cluster.PsCpu` or without
    servers (all-reduce)."""
    if cluster.ps_cpu is None or mode is Mode.ALLREDUCE:
        return math.nan
    scale = float((profile.meta.get("what_if") or {}).get("ps_compute_scale", 1.0))
    return cluster.ps_cpu.ceiling_steps_per_s(max(servers, 1), scale, workers) * profile.batch_size


def _batch_task(shared, item) -> dict:
    part, scenario = item
    profile, cluster, options = shared[part]
    return run_scenario(profile, cluster, scenario, options)


def run_sweeps(sweeps: Sequence[Sweep], *, jobs: int = 1, progress: bool = False, executor=None, journal=None,
               resume: bool = False) -> list:
    """Run several sweeps as one: their configurations share the worker processes (or the Dask
    cluster), one progress bar counts them all, and one journal records them. One DataFrame
    per sweep, each as :meth:`Sweep.run` would give it.

    Parameters
    ----------
    sweeps : sequence of Sweep
        Checked sweeps (:func:`plan_sweep`).
    jobs : int
        Worker processes of this machine (:class:`simulate.workers.WorkerPool`: one even for
        ``jobs`` = 1, so that a signal stops the sweep at once).
    progress : bool
        Show a progress bar over every configuration.
    executor : str, executor or None
        Where the configurations run (:func:`simulate.executors.parse_executor`: ``"local"``,
        ``"dask://HOST:PORT"``); None: ``jobs`` processes of this machine.
    journal : path or SweepJournal, optional
        Record each finished configuration in this file as it finishes
        (:mod:`simulate.sweep_journal`), so that an interrupted run can be resumed.
    resume : bool
        Take the configurations the journal already holds instead of simulating them again; the
        journal must record these very sweeps (same profile, cluster and options).

    Returns
    -------
    list of pandas.DataFrame
        The same rows, to the last bit, whether run here, on a Dask cluster, or resumed.
    """
    from simulate.sweep_journal import SweepJournal, open_journal

    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_JOBS:
        raise UsageError("jobs", f"must be between 1 and {MAX_JOBS}, not {jobs}")
    executor = parse_executor(executor)
    if resume and journal is None:
        raise UsageError("resume", "needs a journal to resume from")
    if journal is not None and not isinstance(journal, SweepJournal):
        journal = open_journal(journal, sweeps, resume=resume)
    items = [(part, index) for part, sweep in enumerate(sweeps) for index in range(len(sweep.scenarios))]
    rows: dict[tuple[int, int], dict] = {}
    with contextlib.ExitStack() as stack:
        append = None
        if journal is not None:
            done, append = stack.enter_context(journal.writing())
            rows.update(done)
        # Larger configurations first, so the pool does not end waiting on one big run.
        todo = sorted((item for item in items if item not in rows),
                      key=lambda item: -sweeps[item[0]].scenarios[item[1]].workers)
        bar = None
        if progress:
            bar = stack.enter_context(progress_bar(total=len(items), initial=len(rows), desc="predict",
                                                   unit="config", dynamic_ncols=True))

        def finished(position: int, row: dict) -> None:
            rows[todo[position]] = row
            if append is not None:
                append(todo[position], row)
            if bar is not None:
                bar.update(1)

        if todo:
            executor.map(_batch_task, tuple((sweep.profile, sweep.cluster, sweep.options) for sweep in sweeps),
                         [(part, sweeps[part].scenarios[index]) for part, index in todo], jobs=jobs,
                         on_result=finished)
    return [sweep.frame([rows[(part, index)] for index in range(len(sweep.scenarios))])
            for part, sweep in enumerate(sweeps)]


def parse_workers(text: str) -> list[int]:
    """``"1-16"``, ``"1,2,4,8"`` or ``"1-4,8"`` -> sorted distinct worker counts, each from 1 to
    :data:`~simulate.config.MAX_WORKERS`."""
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        try:
            if not part:
                raise ValueError
            lo_text, dash, hi_text = part.partition("-")
            lo = _count(lo_text)
            hi = _count(hi_text) if dash else lo
        except ValueError:
            raise UsageError("workers", f"{text!r} is not a list of counts like 1-16 or 1,2,4") from None
        if lo > hi:
            raise UsageError("workers", f"{part!r} is an empty range")
        if lo < 1 or hi > MAX_WORKERS:
            raise UsageError("workers", f"worker counts must be between 1 and {MAX_WORKERS}, not {part!r}")
        out.update(range(lo, hi + 1))
    return sorted(out)


def _count(text: str) -> int:
    text = text.strip()
    if not text.isdigit() or len(text) > 9:  # digits only: no sign, no blanks inside, no 10**100
        raise ValueError(text)
    return int(text)


def _as_counts(value, parameter: str, limit: int) -> list:
    out = []
    for item in _as_list(value):
        if item is None:
            out.append(None)
            continue
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)) or not 1 <= int(item) <= limit:
            raise UsageError(parameter, f"must be whole numbers between 1 and {limit}, not {item!r}")
        out.append(int(item))
    return list(dict.fromkeys(out))


@dataclasses.dataclass(frozen=True, eq=False)
class Sweep:
    """A checked sweep: its configurations and options, ready to run (:func:`plan_sweep`)."""

    profile: Profile
    cluster: ClusterModel
    scenarios: tuple[Scenario, ...]
    options: dict

    @property
    def op_events(self) -> int:
        """The sweep's estimated op events (what bounds its run time)."""
        return sweep_op_events(self.profile, self.scenarios, self.options, self.cluster)

    def run(self, *, jobs: int = 1, progress: bool = False, executor=None, journal=None, resume: bool = False):
        """Simulate every configuration; one row each (see :func:`predict`). ``executor``: where
        (:mod:`simulate.executors`; None: ``jobs`` processes of this machine); ``journal`` and
        ``resume``: record each finished configuration in a file, and resume from it
        (:func:`run_sweeps`)."""
        return run_sweeps([self], jobs=jobs, progress=progress, executor=executor, journal=journal,
                          resume=resume)[0]

    def frame(self, rows: Sequence[dict]):
        """The sweep's table from its configurations' rows (in :attr:`scenarios`' order): the
        rows, and each curve's saturation point marked."""
        import pandas as pd

        frame = pd.DataFrame(list(rows), columns=[c for c in ROW_COLUMNS if c != "saturated"])
        frame["saturated"] = False
        for _, group in frame.groupby(["servers", "mode", "sharing", "policy"], sort=False):
            point = saturation_point(group["workers"].to_numpy(), group["throughput_eps"].to_numpy())
            frame.loc[group.index[group["workers"] == point], "saturated"] = True
        return frame


def step_chunks(profile: Profile, cluster: ClusterModel, transfer: Transfer) -> int:
    """An upper bound of the chunks one worker's step runs: every op and parse op once, and the
    streams the transfer model cuts: ``http2`` once at most, ``grpc`` at every window's worth of
    bytes (a small window and a large tensor make many chunks)."""
    graph = profile.graph
    links = np.isin(graph.resource, (Resource.DOWNLINK, Resource.UPLINK))
    chunks = graph.n_ops + int(links.sum())
    if transfer is Transfer.HTTP2:
        chunks += int(links.sum())
    elif transfer is Transfer.GRPC:
        for resource, flow in ((Resource.DOWNLINK, cluster.flow_downlink), (Resource.UPLINK, cluster.flow_uplink)):
            window = min(v for _, v in flow.window_timeline)
            if math.isfinite(window) and window > 0:
                sizes = graph.size_bytes[graph.resource == resource].astype(np.float64)
                chunks += int(np.ceil(sizes / window).sum())
    return chunks


def adaptive(options: dict) -> bool:
    """Whether a sweep's runs may double their steps up to ``max_steps`` (``ci_target`` or ``settle``)."""
    return options.get("ci_target") is not None or bool(options.get("settle"))


def sweep_op_events(profile: Profile, scenarios: Sequence[Scenario], options: dict,
                    cluster: ClusterModel | None = None) -> int:
    """An upper bound of the events of a sweep: W x the steps it may reach x the chunks of a step
    (:func:`step_chunks`), summed over the configurations (hybrid sharing counts twice)."""
    steps = options["max_steps"] if adaptive(options) else options["steps"]
    per_step: dict[Transfer, int] = {}
    total = 0
    for s in scenarios:
        if s.transfer not in per_step:
            per_step[s.transfer] = (step_chunks(profile, cluster, s.transfer) if cluster is not None
                                    else profile.graph.n_ops + int(np.isin(profile.graph.resource, (
                                        Resource.DOWNLINK, Resource.UPLINK)).sum()))
        total += s.workers * steps * per_step[s.transfer] * (2 if s.sharing is Sharing.HYBRID else 1)
    return total * options.get("replicas", 1)


def check_events(events: int, what: str, parameter: str = "workers") -> None:
    """Refuse work beyond :func:`~simulate.config.max_sweep_op_events`."""
    limit = max_sweep_op_events()
    if events > limit:
        raise UsageError(parameter, f"{what} would simulate about {events:.2g} events, more than the limit of "
                                    f"{limit:.2g} (TFSIM_MAX_OP_EVENTS; 2 to 5 million a second on one core): fewer "
                                    "worker counts, steps or orders")


AUTO_PACKET_FROM_WORKERS = 2  # docs/model.md §12, "Auto": where the packet model was the better one on the lab


def auto_picks_packet(workers: int, buffer_bytes: float) -> bool:
    """Whether ``auto`` hands ``workers`` workers to the packet model (docs/model.md §12, "Auto"):
    from :data:`AUTO_PACKET_FROM_WORKERS` on, where a bounded buffer at the parameter server's
    port (``buffer_bytes``, inf: unknown) says where the packet model's queues overflow.

    Examples
    --------
    >>> auto_picks_packet(1, 160_804), auto_picks_packet(2, 160_804), auto_picks_packet(6, math.inf)
    (False, True, False)
    """
    return workers >= AUTO_PACKET_FROM_WORKERS and math.isfinite(buffer_bytes)


def resolve_auto(scenario: Scenario, cluster: ClusterModel, options: dict, *, traced: bool = False) -> Scenario:
    """The transfer model ``auto`` picks for one configuration (docs/model.md §12, "Auto").

    From two workers on, where the cluster bounds the buffer at the parameter server's port
    (calibrated, or a what-if), the packet model (:func:`auto_picks_packet`): there the
    workers' senders meet in that buffer and lose packets, which the flow model's lossless
    links leave out. At one worker, or without a bounded buffer, the cluster's default flow
    model. Where the packet model cannot run the configuration (W above 64, sharing other than
    ps, all-reduce, a shared host, stragglers, a traced run, ns-3 not installed), the flow
    model too. The scenario keeps its policy (``auto``), so a table's rows say which model each
    W ran in their ``transfer`` column.

    Examples
    --------
    >>> from simulate.cluster import ClusterModel
    >>> cluster = ClusterModel(1.25e7, 1.25e7, buffer_uplink_bytes=160_804)
    >>> auto = Scenario(1, None, Mode.ASYNC, Sharing.PS, Transfer.AUTO, "auto")
    >>> resolve_auto(auto, cluster, {}).transfer.value
    'http2'
    """
    flow = dataclasses.replace(scenario, transfer=Transfer(cluster.default_transfer))
    if traced or not auto_picks_packet(scenario.workers, cluster.buffer_uplink_bytes):
        return flow
    packet = dataclasses.replace(scenario, transfer=Transfer.PACKET)
    try:
        check_packet_scenario(packet, options)
    except UsageError:
        return flow
    return packet


def _check_scenario(profile: Profile, cluster: ClusterModel, scenario: Scenario, options: dict) -> None:
    """Everything about one configuration that would otherwise fail in a worker process."""
    if scenario.transfer is Transfer.PACKET:
        check_packet_scenario(scenario, options)
    servers = scenario.servers
    if servers is not None and servers != profile.graph.n_servers and len(profile.variables) == 0:
        raise UsageError("servers", "re-partitioning the variables needs the profile's variable table "
                                    "(variables.json)")
    steps = options["max_steps"] if adaptive(options) else options["steps"]
    colocation = options.get("colocation")
    if colocation is not None and callable(colocation):
        colocation = colocation(scenario.workers, servers or max(profile.graph.n_servers, 1))
    sharing = Sharing.PS if scenario.sharing is Sharing.HYBRID else scenario.sharing
    SimConfig(workers=scenario.workers, mode=scenario.mode, sharing=sharing, transfer=scenario.transfer, steps=steps,
              warmup=options["warmup"], seed=options["seed"], flow_cap_Bps=options.get("flow_cap_Bps"),
              colocation=colocation, start_offsets_s=staggered_starts(profile, scenario.workers,
                                                                      options.get("stagger", 0.0)),
              worker_speed=options["worker_speed"](scenario.workers) if options.get("worker_speed") else None,
              enforcement=options.get("enforcement", Enforcement.WORK_CONSERVING),
              tie_order=options.get("tie_order", TieOrder.INDEX))
    if colocation is not None and len(colocation.server_host) != (servers or max(profile.graph.n_servers, 1)):
        raise UsageError("colocation", f"colocation places {len(colocation.server_host)} servers, not "
                                       f"{servers or max(profile.graph.n_servers, 1)}")
    if scenario.priorities is not None:
        _priorities(profile.graph, scenario.priorities)
        if scenario.transfer is Transfer.PRIORITY and options.get("enforcement") is Enforcement.STRICT:
            # A deadlocking order is refused here, not in a worker process after others ran.
            check_strict_order(prepare(profile, cluster, workers=scenario.workers, mode=scenario.mode,
                                       servers=scenario.servers, priorities=scenario.priorities,
                                       placement=options.get("placement")))


def plan_sweep(
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
    worker_speed: WorkerSpeeds | None = None,
    replicas: int = 1,
    enforcement: str | Enforcement = Enforcement.WORK_CONSERVING,
    tie_order: str | TieOrder = TieOrder.INDEX,
    network: PacketNetwork | None = None,
    placement: str | Placement | None = None,
    settle: bool = False,
) -> Sweep:
    """Check a sweep before any simulation runs, and return it ready to run (:meth:`Sweep.run`).

    Every configuration is checked as a worker would check it, and the whole sweep against
    the limits of :mod:`simulate.config` (W, steps, W x steps, servers, the sweep's op events),
    so that a bad option fails at once, naming its parameter. Arguments as :func:`predict`.
    """
    if profile.graph.n_ops == 0:
        raise UsageError("profile", "has no ops: there is nothing to simulate")
    cluster = resolve_cluster(cluster, bandwidth_Bps)
    if transfer is None:
        transfer = cluster.default_transfer
    worker_list = (parse_workers(workers) if isinstance(workers, str)
                   else sorted(_as_counts(workers, "workers", MAX_WORKERS)))
    if not worker_list or None in worker_list:
        raise UsageError("workers", "no worker count given")
    server_list = _as_counts(servers, "servers", MAX_SERVERS)
    mode_ = mode if isinstance(mode, Mode) else parse_enum(Mode, mode, "mode")
    priorities = dict(priorities or {})
    for name, value in (("steps", steps), ("warmup", warmup), ("max_steps", max_steps)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise UsageError(name, f"must be a whole number, not {value!r}")
    if not 1 <= steps <= MAX_STEPS:
        raise UsageError("steps", f"must be between 1 and {MAX_STEPS:,}, not {steps}")
    if not 0 <= warmup < steps:
        raise UsageError("warmup", f"must be at least 0 and below steps ({steps}), not {warmup}")
    if ci_target is not None and (isinstance(ci_target, bool) or not isinstance(ci_target, (int, float))
                                  or not 0 < ci_target < 1):
        raise UsageError("ci_target", f"must be a fraction between 0 and 1 (e.g. 0.02), not {ci_target}")
    if not isinstance(settle, bool):
        raise UsageError("settle", f"must be True or False, not {settle!r}")
    if ci_target is not None or settle:
        max_steps = min(max(max_steps, steps), MAX_STEPS)
    else:
        max_steps = max(max_steps, steps)
    if isinstance(replicas, bool) or not isinstance(replicas, (int, np.integer)) or not 1 <= replicas <= MAX_REPLICAS:
        raise UsageError("replicas", f"must be a whole number from 1 to {MAX_REPLICAS}, not {replicas!r}")
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed + replicas - 1 > MAX_SEED:
        raise UsageError("seed", f"with {replicas} replicas the seeds run to {seed + replicas - 1}, above {MAX_SEED}")
    if isinstance(stagger, bool) or not isinstance(stagger, (int, float)) or not (
            math.isfinite(stagger) and 0 <= stagger <= MAX_STAGGER):
        raise UsageError("stagger", f"must be between 0 and {MAX_STAGGER:g} steps, not {stagger}")
    if flow_cap_Bps is not None:
        from simulate.cluster import check_rate

        check_rate(flow_cap_Bps, "flow_cap_Bps")
    scenarios = []
    for server_count in server_list:
        for share in dict.fromkeys(_as_list(sharing)):
            share_ = share if isinstance(share, Sharing) else parse_enum(Sharing, share, "sharing")
            if share_ is Sharing.FLOW_CAP and not flow_cap_Bps:
                raise UsageError("flow_cap_Bps", "flow_cap sharing needs a per-flow cap")
            for tr in dict.fromkeys(_as_list(transfer)):
                name = tr.value if isinstance(tr, Transfer) else str(tr)
                if name in priorities:
                    tr_, prio = Transfer.PRIORITY, priorities[name]
                else:
                    tr_, prio = (tr if isinstance(tr, Transfer) else parse_enum(Transfer, name, "transfer")), None
                    if tr_ is Transfer.PRIORITY:
                        raise UsageError("transfer", "the priority scheduler needs an order (a priorities file)")
                for w in worker_list:
                    scenarios.append(Scenario(w, server_count, mode_, share_, tr_, name, prio))
    if not scenarios:
        raise UsageError("transfer", "give at least one transfer scheduler and sharing model")
    col = host_model(colocation, cores, cluster)
    if worker_speed is not None and not isinstance(worker_speed, WorkerSpeeds):
        raise UsageError("worker_speed", f"must be a WorkerSpeeds, not {type(worker_speed).__name__}")
    options = {"steps": int(steps), "warmup": int(warmup), "seed": seed, "flow_cap_Bps": flow_cap_Bps,
               "colocation": col, "ci_target": ci_target, "settle": settle, "max_steps": int(max_steps),
               "stagger": float(stagger),
               "worker_speed": worker_speed, "replicas": int(replicas),
               "enforcement": as_member(Enforcement, enforcement, "enforcement"),
               "tie_order": as_member(TieOrder, tie_order, "tie_order"), "network": network,
               "placement": profile_placement(profile, placement)}
    scenarios = [resolve_auto(sc, cluster, options) if sc.transfer is Transfer.AUTO else sc for sc in scenarios]
    checked = set()
    for scenario in sorted(scenarios, key=lambda sc: -sc.workers):  # the largest first: its limits bind first
        key = (scenario.workers, scenario.servers, scenario.sharing, scenario.transfer, scenario.policy)
        if key not in checked:
            checked.add(key)
            _check_scenario(profile, cluster, scenario, options)
    check_events(sweep_op_events(profile, scenarios, options, cluster),
                 f"this sweep ({len(scenarios)} configuration{'s' if len(scenarios) != 1 else ''})")
    return Sweep(profile, cluster, tuple(scenarios), options)


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
    worker_speed: WorkerSpeeds | None = None,
    replicas: int = 1,
    enforcement: str | Enforcement = Enforcement.WORK_CONSERVING,
    tie_order: str | TieOrder = TieOrder.INDEX,
    network: PacketNetwork | None = None,
    placement: str | Placement | None = None,
    settle: bool = False,
    jobs: int = 1,
    progress: bool = False,
    executor: str | None = None,
    journal: str | os.PathLike | None = None,
    resume: bool = False,
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
        Parameter-server counts to re-partition the variables over, placed as ``placement``
        says; ``None`` keeps the profile's placement.
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
    colocation : Colocation or TaskHosts, optional
        Where tasks run and with how many cores (docs/model.md §4.3): a
        :class:`~simulate.config.Colocation`, or :class:`~simulate.config.TaskHosts` (every
        task on a host of its own, e.g. ``TaskHosts(worker_cores=1, ps_cores=1)``); ``cores``
        is the common case of one shared host. Default: computation is never short of cores.
    cores : float, optional
        Every task on one host with this many cores (docs/model.md §4.3).
    ci_target : float, optional
        Double the steps (up to ``max_steps``) until the 95% half-width is below this fraction
        of the throughput; the ``steps`` column says what was used.
    settle : bool
        Double the steps (up to ``max_steps``) until the rate of the second half of the
        measured steps is within 5% of the first half's (docs/model.md §5.8); every row
        reports its ``throughput_drift`` and whether it ``settled`` either way.
    stagger : float
        Workers start spread evenly over this many profiled steps (:func:`staggered_starts`;
        0 starts them all at time 0, as the papers' algorithm does).
    worker_speed : WorkerSpeeds, optional
        Stragglers: each worker's computation speed relative to the profiled host
        (docs/model.md §4.6), e.g. ``WorkerSpeeds(factors=(1, 1, 1, 0.5))`` or
        ``WorkerSpeeds(sigma=0.2, seed=1)``.
    replicas : int
        Independent replications of each configuration, with seeds ``seed`` .. ``seed +
        replicas - 1`` (docs/model.md §5.2). With several workers sharing a link, a run can
        settle into one of several phase patterns depending on the sampled steps, and one run's
        batch-means interval does not show that: the row then gives the replicas' mean, their
        t interval and their range (``throughput_min_eps``, ``throughput_max_eps``).
    enforcement : {"work-conserving", "strict"} or Enforcement
        How the priority scheduler enforces an order (docs/model.md §3.3): work-conserving
        (the default) serves the lowest number among the transfers waiting; strict (TicTac
        §5.1) starts a transfer only after every lower-numbered one of its worker and link
        has started, and refuses an order under which that would deadlock. Other schedulers
        ignore it.
    tie_order : {"recorded", "index"} or TieOrder
        How the ``fifo``, ``http2`` and ``grpc`` schedulers queue the ops that become ready at
        one instant on one slot (docs/model.md §2.4): ``index`` (the default), ascending op
        index, the engine's own order; ``recorded`` replays the profiled run's order, the
        parameter transfers (and the PS ops that send them) by their median recorded start. A
        profile without recorded starts gets op-index order either way; ``priority`` ignores it.
    network : PacketNetwork, optional
        The transport of the ``packet`` transfer model (docs/model.md §12): congestion
        control, segment size, least RTO, windows. Default: ``PacketNetwork()``.
    placement : {"round_robin", "greedy"}, Placement or None
        How ``servers`` re-places the variables (docs/model.md §2.2), as TensorFlow's
        ``replica_device_setter`` does: ``round_robin`` (its default: variable i on server
        i mod M, in creation order) or ``greedy`` (each on the server holding the fewest bytes).
        ``None``: as the profiled job placed them (its run.json's ``placement``), else round robin.
    jobs : int
        Parallel processes.
    progress : bool
        Show a progress bar.
    executor : str, optional
        Where the configurations run: ``"local"`` (default: ``jobs`` processes here) or
        ``"dask://HOST:PORT"``, the scheduler of a Dask cluster (:mod:`simulate.executors`);
        the rows are the same either way.
    journal : path, optional
        Record each configuration's row in this file as it finishes (docs/model.md §11.3), so
        that a sweep that is stopped (an error, a signal, a killed process) can be resumed.
    resume : bool
        With ``journal``: take the rows it already holds and simulate only the rest; the rows
        are those of an uninterrupted run. A journal of another sweep is refused
        (:class:`~tfbase.errors.InputError` naming the file); without ``resume`` a journal
        that already holds rows is refused (:class:`~tfbase.errors.UsageError` naming
        ``journal``).

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
    return plan_sweep(profile, cluster, workers=workers, servers=servers, mode=mode, sharing=sharing,
                      transfer=transfer, priorities=priorities, bandwidth_Bps=bandwidth_Bps, steps=steps,
                      warmup=warmup, seed=seed, flow_cap_Bps=flow_cap_Bps, colocation=colocation, cores=cores,
                      ci_target=ci_target, max_steps=max_steps, stagger=stagger,
                      worker_speed=worker_speed, replicas=replicas,
                      enforcement=enforcement, tie_order=tie_order, network=network,
                      placement=placement, settle=settle).run(jobs=jobs, progress=progress,
                                                                        executor=executor, journal=journal,
                                                                        resume=resume)


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))
