"""Run one simulation: lay a :class:`~simulate.prepare.SimGraph` out for the compiled event
loop (:mod:`simulate.kernel`), run it, and hand back the raw timings.

The slot layout per worker is DOWNLINK_0..M-1, WORKER, UPLINK_0..M-1, PS_0..M-1 (slot
order is the tie-break order of docs/model.md §2.4), then the parse lanes PARSE_WORKER and
PARSE_PS_0..M-1 (used only with ``OverheadPlacement.LANE``). Link ``m`` is server m's
downlink, link ``M + m`` its uplink.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from simulate.cluster import ClusterModel
from simulate.codes import Direction, ParseLane, Scheduler, Share
from simulate.config import Enforcement, Mode, Sharing, SimConfig, TieOrder, Transfer
from simulate.kernel_io import KernelInputs, KernelOutputs
from simulate.prepare import SimGraph, check_strict_order
from tfbase.errors import UsageError
from tfprofile.dag import Resource

# The one place where the settings become the kernel's codes.
SCHEDULER_OF = {Transfer.FIFO: Scheduler.FIFO, Transfer.HTTP2: Scheduler.HTTP2, Transfer.PRIORITY: Scheduler.PRIORITY,
                Transfer.GRPC: Scheduler.GRPC}
SHARE_OF = {Sharing.PS: Share.PS, Sharing.FCFS: Share.FCFS, Sharing.FLOW_CAP: Share.FLOW_CAP}


@dataclasses.dataclass(frozen=True, eq=False)
class SimRun:
    """Raw output of one run.

    Attributes
    ----------
    config : SimConfig
        The settings of the run.
    graph : SimGraph
        The graph it replayed.
    step_start_s, step_end_s : numpy.ndarray
        (W, N): when each worker's k-th step started and ended.
    op_events : int
        Ops completed, over every worker and step.
    wall_s : float
        Wall time of the compiled loop.
    trace : dict of str to numpy.ndarray, optional
        When asked for (``config.trace_steps``): one row per chunk of each worker's first
        steps, as ``worker, step, slot, op, start_s, end_s``.
    """

    config: SimConfig
    graph: SimGraph
    step_start_s: np.ndarray
    step_end_s: np.ndarray
    op_events: int
    wall_s: float
    trace: dict[str, np.ndarray] | None = None


@dataclasses.dataclass(frozen=True)
class SlotLayout:
    """Where each resource sits in a worker's slots, for ``n_servers`` servers (see the module
    docstring). ``m`` may be a server index or an array of them."""

    n_servers: int

    def downlink(self, m):
        return m

    @property
    def worker(self) -> int:
        return self.n_servers

    def uplink(self, m):
        return self.n_servers + 1 + m

    def ps(self, m):
        return 2 * self.n_servers + 1 + m

    @property
    def worker_parse(self) -> int:
        return 3 * self.n_servers + 1

    def ps_parse(self, m):
        return 3 * self.n_servers + 2 + m

    def delay(self, i):
        """The slot of the ``i``-th delay op (``ParseLane.DELAY``), after every other slot."""
        return 4 * self.n_servers + 2 + i


def n_slots_for(n_servers: int, parse_lane: np.ndarray | None = None) -> int:
    """Slots per worker: the resources, the parse lanes, and one slot per delay op.

    Parameters
    ----------
    n_servers : int
        Parameter servers M.
    parse_lane : numpy.ndarray, optional
        Each op's :class:`~simulate.codes.ParseLane` code (None: no delay ops).

    Returns
    -------
    int
    """
    delays = int((parse_lane == ParseLane.DELAY).sum()) if parse_lane is not None else 0
    return SlotLayout(n_servers).delay(delays)


def slot_of(resource: np.ndarray, server: np.ndarray, n_servers: int, parse_lane: np.ndarray | None = None
            ) -> np.ndarray:
    """Slot of each op in the per-worker layout.

    Parameters
    ----------
    resource, server : numpy.ndarray
        Each op's :class:`~tfprofile.dag.Resource` and server (-1 for WORKER).
    n_servers : int
        Parameter servers M.
    parse_lane : numpy.ndarray, optional
        Each op's :class:`~simulate.codes.ParseLane` code (None: every op in line).

    Returns
    -------
    numpy.ndarray
        int64 slot indices, one per op.
    """
    layout = SlotLayout(n_servers)
    m = np.maximum(server, 0).astype(np.int64)
    out = np.empty(len(resource), dtype=np.int64)
    out[resource == Resource.DOWNLINK] = layout.downlink(m[resource == Resource.DOWNLINK])
    out[resource == Resource.WORKER] = layout.worker
    out[resource == Resource.UPLINK] = layout.uplink(m[resource == Resource.UPLINK])
    out[resource == Resource.PS] = layout.ps(m[resource == Resource.PS])
    if parse_lane is not None and parse_lane.any():
        lane_worker = (parse_lane == ParseLane.LANE) & (resource == Resource.WORKER)
        lane_ps = (parse_lane == ParseLane.LANE) & (resource == Resource.PS)
        out[lane_worker] = layout.worker_parse
        out[lane_ps] = layout.ps_parse(m[lane_ps])
        # A delay op has a slot of its own: it never waits for another op, and shares nothing.
        delays = np.flatnonzero(parse_lane == ParseLane.DELAY)
        out[delays] = layout.delay(np.arange(delays.size))
    return out


def slot_names(n_servers: int) -> list[str]:
    """Human names of the per-worker slots, in slot order (delay ops' slots have none).

    Parameters
    ----------
    n_servers : int
        Parameter servers M; with one, the names carry no server index.

    Returns
    -------
    list of str
    """
    suffix = (lambda m: f"{m}") if n_servers > 1 else (lambda m: "")
    return ([f"DOWNLINK{suffix(m)}" for m in range(n_servers)] + ["WORKER"]
            + [f"UPLINK{suffix(m)}" for m in range(n_servers)] + [f"PS{suffix(m)}" for m in range(n_servers)]
            + ["PARSE"] + [f"PS{suffix(m)} PARSE" for m in range(n_servers)])


def strict_need(priority: np.ndarray, op_slot: np.ndarray, slot_link: np.ndarray) -> np.ndarray:
    """For strict enforcement: how many transfers of each op's link slot have a strictly lower
    priority number, i.e. must have started (in the worker's step) before the op may start.

    Parameters
    ----------
    priority : numpy.ndarray
        Each op's priority number; +inf for none (after every numbered transfer).
    op_slot : numpy.ndarray
        Each op's slot in a worker's layout.
    slot_link : numpy.ndarray
        Each slot's link, -1 for a computation slot.

    Returns
    -------
    numpy.ndarray
        int64, one count per op; 0 for computation ops.

    Examples
    --------
    >>> strict_need(np.array([2.0, 0.0, np.inf, 0.0, 5.0]), np.array([0, 0, 0, 0, 1]), np.array([0, -1]))
    array([2, 0, 3, 0, 0])
    """
    need = np.zeros(priority.shape[0], dtype=np.int64)
    for slot in np.flatnonzero(slot_link >= 0):
        ops = np.flatnonzero(op_slot == slot)
        # Equal numbers are not ordered against each other: count only the strictly lower ones.
        need[ops] = np.searchsorted(np.sort(priority[ops]), priority[ops], side="left")
    return need


def tie_ordered(groups: np.ndarray, ops: np.ndarray, op_slot: np.ndarray, tie_key: np.ndarray) -> np.ndarray:
    """``ops`` in the order they are examined under the recorded tie order (docs/model.md §2.4).

    ``ops`` is cut into groups (``groups``: one id per entry, e.g. the op whose successors they
    are), each in ascending op index. Within a group the ops of one slot keep the places they
    hold among the others and take them in ascending (``tie_key``, op index) order; ops of
    different slots never trade places.

    Parameters
    ----------
    groups, ops : numpy.ndarray
        One group id and one op per entry, ``ops`` ascending within each group.
    op_slot : numpy.ndarray
        Each op's slot in a worker's layout.
    tie_key : numpy.ndarray
        Each op's key (:attr:`simulate.prepare.SimGraph.tie_key`).

    Returns
    -------
    numpy.ndarray
        ``ops`` re-ordered within each (group, slot).

    Examples
    --------
    >>> ops = np.array([1, 2, 3, 4])  # one group; ops 1, 2 and 4 share slot 0
    >>> tie_ordered(np.zeros(4), ops, np.array([0, 0, 0, 1, 0]), np.array([0.0, 5.0, 2.0, 0.0, 1.0]))
    array([4, 2, 3, 1])
    """
    places = np.lexsort((np.arange(len(ops)), op_slot[ops], groups))
    turns = np.lexsort((ops, tie_key[ops], op_slot[ops], groups))
    out = np.empty_like(ops)
    out[places] = ops[turns]
    return out


def sample_steps(n_profiled: int, workers: int, steps: int, seed: int) -> np.ndarray:
    """(W, N) profiled step each worker's k-th step replays (docs/model.md §2.3): uniform with
    replacement, numpy's default generator seeded with ``seed``; every backend samples so."""
    return np.random.default_rng(seed).integers(0, n_profiled, size=(workers, steps)).astype(np.int64)


def kernel_inputs(graph: SimGraph, cluster: ClusterModel, config: SimConfig) -> KernelInputs:
    """Lay a run out for :func:`simulate.kernel.run_kernel`.

    Parameters
    ----------
    graph : SimGraph
        The prepared op graph (:func:`simulate.prepare.prepare`).
    cluster : ClusterModel
        Link bandwidths, HTTP/2 window and grpc flow control.
    config : SimConfig
        Workers, steps, mode, sharing, transfer model, colocation, start times, seed.

    Returns
    -------
    KernelInputs
        The kernel's read-only inputs; ``samples`` is drawn from ``config.seed``.

    Raises
    ------
    UsageError
        When the colocation places another number of servers than the graph has, or when
        strict enforcement of the graph's priorities would deadlock (naming ``priorities``).
    """
    M = graph.n_servers
    layout = SlotLayout(M)
    n_slots = n_slots_for(M, graph.parse_lane)
    op_slot = slot_of(graph.resource, graph.server, M, graph.parse_lane)
    servers = np.arange(M)
    slot_link = np.full(n_slots, -1, dtype=np.int64)
    slot_link[layout.downlink(servers)] = servers
    slot_link[layout.uplink(servers)] = M + servers
    slot_scheduler = np.full(n_slots, Scheduler.FIFO, dtype=np.int64)
    slot_scheduler[slot_link >= 0] = SCHEDULER_OF[config.transfer]
    counts = np.bincount(op_slot, minlength=n_slots)
    # An HTTP/2 stream cut once is queued twice; the extra 1 keeps a full ring from looking empty.
    slot_queue_cap = np.where(slot_link >= 0, 2 * counts, counts).astype(np.int64) + 1
    link_capacity = np.array([cluster.downlink_Bps] * M + [cluster.uplink_Bps] * M, dtype=np.float64)
    buckets = [cluster.bucket_downlink] * M + [cluster.bucket_uplink] * M
    link_sustained = np.array([b.sustained_Bps if b is not None else c for b, c in zip(buckets, link_capacity)])
    link_bucket = np.array([b.bucket_bytes if b is not None and b.sustained_Bps < c else 0.0
                            for b, c in zip(buckets, link_capacity)])
    link_direction = np.array([Direction.DOWNLINK] * M + [Direction.UPLINK] * M, dtype=np.int64)
    share = Share.NONE if config.mode is Mode.ALLREDUCE else SHARE_OF[config.sharing]
    W = config.workers
    slot_host = np.full(W * n_slots, -1, dtype=np.int64)
    host_cores = np.zeros(0)
    if config.colocation is not None:
        col = config.colocation
        if len(col.server_host) != M:
            raise UsageError("colocation", f"colocation places {len(col.server_host)} servers, not {M}")
        # Parsing runs on the receiving task's host, on a lane or in line.
        for w in range(W):
            slot_host[w * n_slots + layout.worker] = col.worker_host[w]
            slot_host[w * n_slots + layout.worker_parse] = col.worker_host[w]
            for m in range(M):
                slot_host[w * n_slots + layout.ps(m)] = col.server_host[m]
                slot_host[w * n_slots + layout.ps_parse(m)] = col.server_host[m]
        host_cores = np.array(col.cores, dtype=np.float64)
    slot_work_scale = np.ones(W * n_slots)
    if config.worker_speed is not None:
        # A slow worker's host computes and parses slowly; its links and its PS ops are not its own.
        for w, speed in enumerate(config.worker_speed):
            slot_work_scale[w * n_slots + layout.worker] = 1.0 / speed
            slot_work_scale[w * n_slots + layout.worker_parse] = 1.0 / speed
    flows = (cluster.flow_downlink, cluster.flow_uplink)  # in Direction order
    K = max(len(f.window_timeline) for f in flows)
    window_t = np.zeros((len(flows), K))
    window_bytes = np.zeros((len(flows), K))
    for d, flow in enumerate(flows):
        for j, (t, v) in enumerate(flow.window_timeline):
            window_t[d, j], window_bytes[d, j] = t, v
    strict = config.transfer is Transfer.PRIORITY and config.enforcement is Enforcement.STRICT
    if strict:
        check_strict_order(graph)
    need = strict_need(graph.priority, op_slot, slot_link) if strict else np.zeros(graph.n_ops, dtype=np.int64)
    succ_idx = graph.succ_idx
    roots = np.flatnonzero(graph.in_degree == 0).astype(np.int64)
    if config.tie_order is TieOrder.RECORDED and config.transfer is not Transfer.PRIORITY:
        # The priority scheduler has an order of its own to enforce; the others replay the profiled run's.
        succ_idx = tie_ordered(np.repeat(np.arange(graph.n_ops), np.diff(graph.succ_ptr)), succ_idx, op_slot,
                               graph.tie_key)
        roots = tie_ordered(np.zeros(len(roots), dtype=np.int64), roots, op_slot, graph.tie_key)
    samples = sample_steps(graph.n_steps, W, config.steps, config.seed)
    return KernelInputs(
        succ_ptr=graph.succ_ptr, succ_idx=succ_idx, roots=roots, in_degree=graph.in_degree, op_slot=op_slot,
        op_fifo_link=graph.fifo_link,
        work=graph.work, priority=graph.priority, strict=strict, need=need, samples=samples, n_slots=n_slots,
        slot_link=slot_link,
        slot_scheduler=slot_scheduler, slot_queue_cap=slot_queue_cap, slot_host=slot_host,
        slot_work_scale=slot_work_scale,
        link_capacity_Bps=link_capacity, link_sustained_Bps=link_sustained, link_bucket_bytes=link_bucket,
        link_queue_window_bytes=np.array([cluster.queue_window_downlink_bytes] * M
                                         + [cluster.queue_window_uplink_bytes] * M, dtype=np.float64),
        link_buffer_bytes=np.array([cluster.buffer_downlink_bytes] * M + [cluster.buffer_uplink_bytes] * M,
                                   dtype=np.float64),
        link_connection_cap_Bps=np.array([cluster.connection_cap_downlink_Bps] * M
                                         + [cluster.connection_cap_uplink_Bps] * M, dtype=np.float64),
        link_reverse=np.concatenate([M + np.arange(M), np.arange(M)]).astype(np.int64),
        link_direction=link_direction, n_servers=M, share=int(share),
        flow_cap_Bps=float(config.flow_cap_Bps or math.inf),
        win_bytes=float(cluster.win_bytes) if config.transfer is Transfer.HTTP2 else math.inf,
        sync=config.mode is not Mode.ASYNC, host_cores=host_cores,
        flow_window_t_s=window_t, flow_window_bytes=window_bytes,
        flow_window_n=np.array([len(f.window_timeline) for f in flows], dtype=np.int64),
        # A window update waits for the data to arrive and crosses back: a what-if latency adds both ways.
        flow_update_delay_s=np.array([f.update_delay_s + cluster.window_round_trip_s for f in flows]),
        start_at_s=np.array(config.start_offsets_s or (0.0,) * W, dtype=np.float64),
        trace_steps=config.trace_steps,
    )


def kernel_outputs(inputs: KernelInputs, trace_capacity: int | None = None) -> KernelOutputs:
    """Zeroed outputs for a run laid out as ``inputs``.

    Parameters
    ----------
    inputs : KernelInputs
        The run's layout (:func:`kernel_inputs`).
    trace_capacity : int, optional
        Trace rows; default: two chunks per op of each worker's first ``inputs.trace_steps``
        steps (HTTP/2 cuts a stream at most once; :func:`run` retries with more room when
        grpc's window edges cut more).

    Returns
    -------
    KernelOutputs
        Step-time arrays of shape (W, N) and the trace rows.
    """
    W, N = inputs.samples.shape
    n_ops = inputs.in_degree.shape[0]
    trace_cap = W * inputs.trace_steps * 2 * n_ops if inputs.trace_steps else 0
    if trace_capacity is not None:
        trace_cap = trace_capacity
    return KernelOutputs(step_start_s=np.zeros((W, N)), step_end_s=np.zeros((W, N)),
                         trace_worker_step_slot=np.zeros((trace_cap, 3), dtype=np.int64),
                         trace_op=np.zeros(trace_cap, dtype=np.int64), trace_span_s=np.zeros((trace_cap, 2)))


def run(graph: SimGraph, cluster: ClusterModel, config: SimConfig) -> SimRun:
    """Simulate ``config.workers`` workers for ``config.steps`` steps each.

    Parameters
    ----------
    graph : SimGraph
        The prepared op graph (:func:`simulate.prepare.prepare`).
    cluster : ClusterModel
        Link bandwidths, HTTP/2 window and grpc flow control.
    config : SimConfig
        The run's settings; ``config.seed`` fixes which profiled steps are replayed, and
        the same seed gives the same result.

    Returns
    -------
    SimRun

    Raises
    ------
    UsageError
        When the colocation places another number of servers than the graph has, or when
        strict enforcement of the graph's priorities would deadlock (naming ``priorities``).
    """
    if config.transfer is Transfer.PACKET:
        raise UsageError("transfer", "the flow engine does not run the packet transfer model: "
                                     "simulate.packet_replay does (simulate.predict routes it there)")
    if config.transfer is Transfer.AUTO:
        raise UsageError("transfer", "auto is a choice between models, made per configuration by "
                                     "simulate.predict (simulate.sweep.resolve_auto): run the model it picks")
    # Imported here, not at the top: importing numba takes some 0.2 s, which commands and
    # modules that never simulate need not pay.
    from simulate.kernel import run_kernel

    inputs = kernel_inputs(graph, cluster, config)
    out = kernel_outputs(inputs)
    started = time.perf_counter()
    op_events, n_trace = run_kernel(inputs, out)
    # The trace has room for two chunks per op (http2 cuts a stream once); grpc can cut one
    # at every window edge. A full trace may have dropped chunks: run again with more room
    # (the run is deterministic, so the rerun is the same run, traced whole).
    while config.trace_steps and n_trace == out.trace_op.shape[0]:
        out = kernel_outputs(inputs, trace_capacity=2 * max(n_trace, 1))
        op_events, n_trace = run_kernel(inputs, out)
    wall = time.perf_counter() - started
    trace = None
    if config.trace_steps:
        tw, to, tt = out.trace_worker_step_slot[:n_trace], out.trace_op[:n_trace], out.trace_span_s[:n_trace]
        trace = {"worker": tw[:, 0], "step": tw[:, 1], "slot": tw[:, 2], "op": to, "start_s": tt[:, 0],
                 "end_s": tt[:, 1]}
    return SimRun(config, graph, out.step_start_s, out.step_end_s, int(op_events), wall, trace)
