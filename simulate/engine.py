"""Run one simulation: lay a :class:`~simulate.prepare.SimGraph` out for the compiled event
loop (:mod:`simulate.kernel`), run it, and hand back the raw timings.

The slot layout per worker is DOWNLINK_0..M-1, WORKER, UPLINK_0..M-1, PS_0..M-1 (slot
order is the tie-break order of SPEC §3), then the parse lanes PARSE_WORKER and
PARSE_PS_0..M-1 (used only with ``OverheadPlacement.LANE``). Link ``m`` is server m's
downlink, link ``M + m`` its uplink.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from tfprofile.dag import Resource

from simulate.cluster import ClusterModel
from simulate.codes import Direction, ParseLane, Scheduler, Share
from simulate.config import Mode, Sharing, SimConfig, Transfer
from simulate.prepare import SimGraph

# The one place where the settings become the kernel's codes.
SCHEDULER_OF = {Transfer.FIFO: Scheduler.FIFO, Transfer.HTTP2: Scheduler.HTTP2, Transfer.PRIORITY: Scheduler.PRIORITY,
                Transfer.GRPC: Scheduler.GRPC}
SHARE_OF = {Sharing.PS: Share.PS, Sharing.FCFS: Share.FCFS, Sharing.FLOW_CAP: Share.FLOW_CAP}


@dataclasses.dataclass(frozen=True, eq=False)
class SimRun:
    """Raw output of one run.

    ``step_start_s``/``step_end_s`` are (W, N): when each worker's k-th step started and
    ended. ``trace`` (when asked for) holds one row per chunk of the first steps:
    ``worker, step, slot, op, start_s, end_s``.
    """

    config: SimConfig
    graph: SimGraph
    step_start_s: np.ndarray
    step_end_s: np.ndarray
    op_events: int
    wall_s: float
    trace: dict[str, np.ndarray] | None = None


def n_slots_for(n_servers: int, parse_lane: np.ndarray | None = None) -> int:
    """Slots per worker: the resources, the parse lanes, and one slot per delay op."""
    delays = int((parse_lane == ParseLane.DELAY).sum()) if parse_lane is not None else 0
    return 4 * n_servers + 2 + delays


def slot_of(resource: np.ndarray, server: np.ndarray, n_servers: int, parse_lane: np.ndarray | None = None
            ) -> np.ndarray:
    """Slot index of each (resource, server) pair in the per-worker layout."""
    m = np.maximum(server, 0).astype(np.int64)
    out = np.empty(len(resource), dtype=np.int64)
    out[resource == Resource.DOWNLINK] = m[resource == Resource.DOWNLINK]
    out[resource == Resource.WORKER] = n_servers
    out[resource == Resource.UPLINK] = n_servers + 1 + m[resource == Resource.UPLINK]
    out[resource == Resource.PS] = 2 * n_servers + 1 + m[resource == Resource.PS]
    if parse_lane is not None and parse_lane.any():
        lane_worker = (parse_lane == ParseLane.LANE) & (resource == Resource.WORKER)
        lane_ps = (parse_lane == ParseLane.LANE) & (resource == Resource.PS)
        out[lane_worker] = 3 * n_servers + 1
        out[lane_ps] = 3 * n_servers + 2 + m[lane_ps]
        # A delay op has a slot of its own: it never waits for another op, and shares nothing.
        delays = np.flatnonzero(parse_lane == ParseLane.DELAY)
        out[delays] = 4 * n_servers + 2 + np.arange(delays.size)
    return out


def slot_names(n_servers: int) -> list[str]:
    """Human names of the per-worker slots, in slot order."""
    suffix = (lambda m: f"{m}") if n_servers > 1 else (lambda m: "")
    return ([f"DOWNLINK{suffix(m)}" for m in range(n_servers)] + ["WORKER"]
            + [f"UPLINK{suffix(m)}" for m in range(n_servers)] + [f"PS{suffix(m)}" for m in range(n_servers)]
            + ["PARSE"] + [f"PS{suffix(m)} PARSE" for m in range(n_servers)])


def kernel_inputs(graph: SimGraph, cluster: ClusterModel, config: SimConfig) -> dict:
    """Everything :func:`simulate.kernel.run_kernel` takes, as named arrays."""
    M = graph.n_servers
    n_slots = n_slots_for(M, graph.parse_lane)
    op_slot = slot_of(graph.resource, graph.server, M, graph.parse_lane)
    slot_link = np.full(n_slots, -1, dtype=np.int64)
    slot_link[:M] = np.arange(M)
    slot_link[M + 1:2 * M + 1] = M + np.arange(M)
    slot_sched = np.zeros(n_slots, dtype=np.int64)
    slot_sched[slot_link >= 0] = SCHEDULER_OF[config.transfer]
    counts = np.bincount(op_slot, minlength=n_slots)
    slot_cap = np.where(slot_link >= 0, 2 * counts, counts).astype(np.int64) + 1
    link_capacity = np.array([cluster.downlink_Bps] * M + [cluster.uplink_Bps] * M, dtype=np.float64)
    link_dir = np.array([Direction.DOWNLINK] * M + [Direction.UPLINK] * M, dtype=np.int64)
    sharing = int(Share.NONE if config.mode is Mode.ALLREDUCE else SHARE_OF[config.sharing])
    W = config.workers
    slot_host = np.full(W * n_slots, -1, dtype=np.int64)
    host_cores = np.zeros(0)
    if config.colocation is not None:
        col = config.colocation
        if len(col.server_host) != M:
            from tfsim.errors import UsageError

            raise UsageError("--cores", f"colocation places {len(col.server_host)} servers, not {M}")
        for w in range(W):
            slot_host[w * n_slots + M] = col.worker_host[w]
            slot_host[w * n_slots + 3 * M + 1] = col.worker_host[w]
            for m in range(M):
                slot_host[w * n_slots + 2 * M + 1 + m] = col.server_host[m]
                slot_host[w * n_slots + 3 * M + 2 + m] = col.server_host[m]
        host_cores = np.array(col.cores, dtype=np.float64)
    flows = (cluster.flow_downlink, cluster.flow_uplink)  # in Direction order
    K = max(len(f.window_timeline) for f in flows)
    win_t = np.zeros((2, K))
    win_v = np.zeros((2, K))
    for d, flow in enumerate(flows):
        for j, (t, v) in enumerate(flow.window_timeline):
            win_t[d, j], win_v[d, j] = t, v
    rng = np.random.default_rng(config.seed)
    samples = rng.integers(0, graph.n_steps, size=(W, config.steps)).astype(np.int64)
    trace_cap = W * config.trace_steps * 2 * graph.n_ops if config.trace_steps else 0
    return dict(
        succ_ptr=graph.succ_ptr, succ_idx=graph.succ_idx, in_degree=graph.in_degree, op_slot=op_slot,
        work=graph.work, priority=graph.priority, samples=samples, n_slots=n_slots, slot_link=slot_link,
        slot_sched=slot_sched, slot_cap=slot_cap, link_capacity=link_capacity, link_dir=link_dir, n_servers=M,
        sharing=sharing, flow_cap=float(config.flow_cap_Bps or math.inf),
        win_bytes=float(cluster.win_bytes) if config.transfer is Transfer.HTTP2 else math.inf,
        sync=config.mode is not Mode.ASYNC, slot_host=slot_host, host_cores=host_cores,
        win_t=win_t, win_v=win_v, win_n=np.array([len(f.window_timeline) for f in flows], dtype=np.int64),
        update_delay=np.array([f.update_delay_s for f in flows]),
        start_at=np.array(config.start_offsets_s or (0.0,) * W, dtype=np.float64),
        trace_steps=config.trace_steps, trace_w=np.zeros((trace_cap, 3), dtype=np.int64),
        trace_op=np.zeros(trace_cap, dtype=np.int64), trace_t=np.zeros((trace_cap, 2)),
    )


def run(graph: SimGraph, cluster: ClusterModel, config: SimConfig) -> SimRun:
    """Simulate ``config.workers`` workers for ``config.steps`` steps each."""
    from simulate.kernel import run_kernel

    inputs = kernel_inputs(graph, cluster, config)
    started = time.perf_counter()
    step_start, step_end, op_events, n_trace = run_kernel(**inputs)
    wall = time.perf_counter() - started
    trace = None
    if config.trace_steps:
        tw, to, tt = inputs["trace_w"][:n_trace], inputs["trace_op"][:n_trace], inputs["trace_t"][:n_trace]
        trace = {"worker": tw[:, 0], "step": tw[:, 1], "slot": tw[:, 2], "op": to, "start_s": tt[:, 0],
                 "end_s": tt[:, 1]}
    return SimRun(config, graph, step_start, step_end, int(op_events), wall, trace)
