"""The step DAG replayed over a packet-level network (docs/model.md §12).

The flow engine (:mod:`simulate.engine`) shares a link's bandwidth as a fluid; past the link's
limit the real transport is not a fluid: a drop-tail buffer overflows, TCP senders lose packets
and wait for their timers, congestion controls differ. This backend keeps the engine's DAG and
its slots, and hands every byte that crosses the network to ns-3 (the ``ns3`` package on PyPI),
which simulates the parameter servers' links packet by packet with Linux-like TCP
(:file:`simulate/packet_network.cpp`).

What it replays, per worker and step (async: the next step starts when the last op ends; sync:
when every worker's has):

- computation ops on the worker's slot, one at a time, in ready order; a server's ops for
  worker w on its slot for w, every busy slot of one server sharing its host's cores
  (docs/model.md §4.3: ``min(1, cores / busy)`` each);
- a transfer as one message of its size on the worker's connection with that server: a
  parameter on connection A (the worker's channel: requests up, responses down), a gradient
  on connection B (the server's channel); each direction of a connection carries whole
  messages in the order they became ready, as gRPC sends streams;
- the RPC chain (docs/model.md §2.9), when the cluster has one: each message crosses its link
  as bytes (RunGraph and the worker's requests up on A, the server's requests down on B, the
  RunGraph response down on A), then waits what the calibration measured beyond one idle
  crossing;
- parse ops where the cluster places them (a delay, or a lane or the receiver's slot, one op
  at a time), latency ops as delays.

Every direction of every host's link is a shaper in front of a fast wire, as the lab's tbf is:
the cluster's :class:`~simulate.cluster.LinkShaper` where it records one (the lab's), else the
calibrated token bucket (its sustained rate, its bucket spent at the bandwidth), else the
bandwidth alone, all as wire rates at a full segment's header overhead; each holds at most the
cluster's buffer (unknown: ``DEFAULT_QUEUE_S`` of its rate) and drops what does not fit. A
connection keeps in flight what its congestion window allows (socket buffers of
``PacketNetwork.send_buffer_bytes``), or at most the calibrated queue window with
``WindowLimit.QUEUE_WINDOW``. Where the calibration caps one worker's connection in a
direction (docs/model.md §4.8), every socket sending in that direction is paced at most at the
cap. ns-3 runs its own event loop; the replay's events are ns-3 events
too, so that every tie is broken by ns-3's FIFO order of equal times, which makes a run
deterministic for its seed.

ns-3 and cppyy are imported by :func:`replay_packets` only (the ``packet`` extra).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from simulate.cluster import ClusterModel
from simulate.codes import ParseLane
from simulate.config import MAX_PACKET_WORKERS, Mode, PacketNetwork, Sharing, WindowLimit
from simulate.engine import SimRun, sample_steps
from simulate.prepare import KIND_LATENCY, KIND_MESSAGE, KIND_OVERHEAD, KIND_TRANSFER, SimGraph
from tfbase.errors import UsageError
from tfprofile.dag import Resource

NETWORK_SOURCE = Path(__file__).with_name("packet_network.cpp")
DEFAULT_QUEUE_S = 0.005           # a data-centre port's depth when the cluster does not know its buffer
SEGMENT_HEADER_BYTES = 54         # IP 20 + TCP 20 + timestamps 12 + the point-to-point frame's 2
CONNECT_S = 0.01                  # the replay starts once every connection is up (a handshake takes ~0.1 ms)
# The RPC chain's messages as the lab's captures show them (HEADERS and DATA frames of one gRPC call):
RECV_REQUEST_BYTES = 400          # a RecvTensor request, per tensor requested
RUNGRAPH_REQUEST_BYTES = 1500     # RunGraph: the step's feeds and the partition's handle
RUNGRAPH_RESPONSE_BYTES = 300
RESPONSE_OVERHEAD_BYTES = 120     # a RecvTensor response's headers and proto framing around the tensor
CONNECTION_A, CONNECTION_B = 0, 1
DOWN, UP = 0, 1


@dataclasses.dataclass(frozen=True)
class PacketRun:
    """One packet-level replay: every step's end, and what the transport did.

    Attributes:
        step_start_s, step_end_s: (W, N) start and end of each worker's steps (the network's
            connections are set up before 0).
        batch_size: examples per worker step.
        warmup: steps dropped at the start of every worker's run.
        drops_down, drops_up: packets the servers' ports dropped (their egress; the switch's
            egress to them).
        timeouts: retransmission timeouts over every connection; recoveries: fast recoveries.
    """

    step_start_s: np.ndarray
    step_end_s: np.ndarray
    batch_size: int
    warmup: int
    op_events: int
    drops_down: int
    drops_up: int
    timeouts: int
    recoveries: int

    @property
    def throughput_eps(self) -> float:
        """docs/model.md §5.1 on this run's step ends (t_w(0) = 0)."""
        t = np.concatenate([np.zeros((self.step_end_s.shape[0], 1)), self.step_end_s], axis=1)
        n = t.shape[1] - 1
        return float(np.sum(self.batch_size * (n - self.warmup) / (t[:, n] - t[:, self.warmup])))


@contextlib.contextmanager
def _native_stderr_silenced():
    """Hold back what native code writes to file descriptor 2 (cling reports ns-3's static
    initialisers it skips while ns-3's package loads: harmless, and no user's business)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _load_network():
    with _native_stderr_silenced():
        from ns import ns  # heavy: loads ns-3's libraries and headers into cling

    gbl = ns.cppyy.gbl
    if not hasattr(gbl, "tfsim_packet"):
        ns.cppyy.cppdef(NETWORK_SOURCE.read_text())
    return ns, gbl.tfsim_packet


def link_rates_Bps(cluster: ClusterModel) -> tuple[float, float]:
    """Each direction's sustained payload rate: the token bucket's where it has one."""
    directions = ((cluster.downlink_Bps, cluster.bucket_downlink), (cluster.uplink_Bps, cluster.bucket_uplink))
    down, up = (float(bucket.sustained_Bps) if bucket is not None else float(bandwidth)
                for bandwidth, bucket in directions)
    return down, up


def _shaper(sustained_Bps: float, bandwidth_Bps: float, bucket, wire: float) -> tuple[float, float, int]:
    """A direction's shaper as (rate, peak rate, bucket) in wire bits/s and bytes: the sustained
    rate (:func:`link_rates_Bps`), with a token bucket spent at the bandwidth (docs/model.md
    §4.4); none: a plain rate."""
    if bucket is None:
        return 8 * sustained_Bps * wire, 0.0, 0
    return 8 * sustained_Bps * wire, 8 * bandwidth_Bps * wire, int(float(bucket.bucket_bytes) * wire)


def receive_window_bytes(network: PacketNetwork, cluster: ClusterModel) -> int:
    """Each socket's receive buffer: the network's explicit one, else the calibrated queue window
    under ``WindowLimit.QUEUE_WINDOW`` (where the cluster has one), else the send buffer."""
    if network.receive_window_bytes is not None:
        return int(network.receive_window_bytes)
    if network.window is WindowLimit.QUEUE_WINDOW:
        window = max(cluster.queue_window_downlink_bytes, cluster.queue_window_uplink_bytes)
        if window > 0:
            return int(window)
    return network.send_buffer_bytes


def _pacing_cap_bps(cap_Bps: float) -> float:
    """A calibrated connection cap (payload bytes/s, inf: none) as ns-3's pacing limit: payload
    bits/s, ns-3 paces a segment's data bytes; 0 for no cap.

    Examples
    --------
    >>> _pacing_cap_bps(28.3e6), _pacing_cap_bps(math.inf)
    (226400000.0, 0.0)
    """
    return 8 * cap_Bps if math.isfinite(cap_Bps) else 0.0


def wire_per_payload(network: PacketNetwork) -> float:
    """Wire bytes per payload byte of a full segment."""
    return (network.segment_bytes + SEGMENT_HEADER_BYTES) / network.segment_bytes


class _Replay:
    """The DAG's side of one run; ns-3 calls back into :meth:`fire` and :meth:`delivered`."""

    def __init__(self, graph: SimGraph, net, *, workers: int, steps: int, samples: np.ndarray, ps_cores: float,
                 worker_rate: float, mode: Mode, idle_crossing_s: tuple[float, float], rates_Bps: tuple[float, float]):
        self.g, self.net, self.W, self.N, self.mode = graph, net, workers, steps, mode
        self.rate_Bps = rates_Bps
        self.samples = samples
        self.M = graph.n_servers
        self.ps_cores = ps_cores
        self.worker_rate = worker_rate
        self.op_events = 0
        self.succ = [graph.succ_idx[graph.succ_ptr[i]:graph.succ_ptr[i + 1]].tolist() for i in range(graph.n_ops)]
        self.roots = np.flatnonzero(graph.in_degree == 0).tolist()
        self.in_degree = graph.in_degree.astype(np.int64)
        self.step_start = np.full((workers, steps), np.nan)
        self.step_end = np.full((workers, steps), np.nan)
        self.step = [0] * workers
        self.pending = [None] * workers
        self.left = [0] * workers
        # Slots: ("w", worker) compute; ("p", worker, server) the server's ops for a worker;
        # ("lw", worker) and ("lp", worker, server) parse lanes.
        self.queue: dict = {}
        self.busy: dict = {}
        self.ps_running: list[dict] = [{} for _ in range(self.M)]  # slot -> [op, work left]
        self.ps_last_t = [0.0] * self.M
        self.ps_version = [0] * self.M
        self.callbacks: dict[int, Callable[[], None]] = {}
        self.next_id = 0
        self.tokens: dict[int, tuple[int, int, int]] = {}
        self.next_token = 0
        (self.message_bytes, self.message_stream, self.message_server,
         self.message_wait_s) = self._messages(idle_crossing_s)
        self.barrier = 0

    # -- plumbing ------------------------------------------------------------------------------
    def at(self, delay_s: float, callback: Callable[[], None]) -> None:
        self.next_id += 1
        self.callbacks[self.next_id] = callback
        self.net.schedule(max(delay_s, 0.0), self.next_id)

    def fire(self, event_id: int) -> None:
        self.callbacks.pop(event_id)()

    def delivered(self, token: int) -> None:
        worker, step, op = self.tokens.pop(token)
        if step != self.step[worker]:
            raise RuntimeError("a message arrived for a step that has ended")  # cannot happen: every op ends its step
        if self.g.kind[op] == KIND_MESSAGE:
            self.at(self.message_wait_s[op], lambda: self.done(worker, op))
        else:
            self.done(worker, op)

    def _messages(self, idle_crossing_s) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each message op's bytes, its stream role (2 * connection + direction), its server,
        and the wait it keeps beyond one idle crossing; zeros and -1 for every other op."""
        g, M = self.g, self.M
        nbytes = np.zeros(g.n_ops)
        role = np.full(g.n_ops, -1)
        server = np.full(g.n_ops, -1)
        wait_s = np.zeros(g.n_ops)
        if not np.any(g.kind == KIND_MESSAGE):
            return nbytes, role, server, wait_s
        for m in range(M):
            downlinks = int(np.sum((g.resource == Resource.DOWNLINK) & (g.server == m) & (g.kind == KIND_TRANSFER)))
            uplinks = int(np.sum((g.resource == Resource.UPLINK) & (g.server == m) & (g.kind == KIND_TRANSFER)))
            rungraph, ps_requests, worker_requests, response = 3 * m, 3 * m + 1, 3 * m + 2, g.n_ops - M + m
            for op, size, conn, direction in ((rungraph, RUNGRAPH_REQUEST_BYTES, CONNECTION_A, UP),
                                              (ps_requests, RECV_REQUEST_BYTES * max(uplinks, 1), CONNECTION_B, DOWN),
                                              (worker_requests, RECV_REQUEST_BYTES * max(downlinks, 1),
                                               CONNECTION_A, UP),
                                              (response, RUNGRAPH_RESPONSE_BYTES, CONNECTION_A, DOWN)):
                nbytes[op] = size
                role[op] = 2 * conn + direction
                server[op] = m
                # The calibrated latency was measured with one worker: one idle crossing of these bytes
                # is in it already, and the network now adds its own.
                idle_s = idle_crossing_s[direction] + size / self.rate_Bps[direction]
                wait_s[op] = max(0.0, float(g.work[0, op]) - idle_s)
        return nbytes, role, server, wait_s

    # -- steps -----------------------------------------------------------------------------------
    def start(self, w: int) -> None:
        self.step_start[w, self.step[w]] = self.net.now()
        self.pending[w] = self.in_degree.copy()
        self.left[w] = self.g.n_ops
        for op in self.roots:
            self.ready(w, op)

    def ready(self, w: int, op: int) -> None:
        g = self.g
        kind = g.kind[op]
        if kind == KIND_TRANSFER:
            direction = DOWN if g.resource[op] == Resource.DOWNLINK else UP
            conn = CONNECTION_A if direction == DOWN else CONNECTION_B
            size = float(g.work[self.samples[w, self.step[w]], op]) + RESPONSE_OVERHEAD_BYTES
            self._send(w, op, int(g.server[op]), conn, direction, size)
        elif kind == KIND_MESSAGE:
            role = int(self.message_stream[op])
            self._send(w, op, int(self.message_server[op]), role // 2, role % 2, float(self.message_bytes[op]))
        elif kind == KIND_LATENCY or (kind == KIND_OVERHEAD and g.parse_lane[op] == ParseLane.DELAY):
            self.at(self._work(w, op), lambda: self.done(w, op))
        else:
            self._queue(w, op, self._slot(w, op))

    def _send(self, w: int, op: int, server: int, conn: int, direction: int, size: float) -> None:
        self.next_token += 1
        self.tokens[self.next_token] = (w, self.step[w], op)
        self.net.send(self.net.stream_index(w, server, conn, direction), max(1, round(size)), self.next_token)

    def _work(self, w: int, op: int) -> float:
        return float(self.g.work[self.samples[w, self.step[w]], op])

    def _slot(self, w: int, op: int) -> tuple:
        g = self.g
        on_ps = g.resource[op] == Resource.PS
        if g.kind[op] == KIND_OVERHEAD and g.parse_lane[op] == ParseLane.LANE:
            return ("lp", w, int(g.server[op])) if on_ps else ("lw", w)
        return ("p", w, int(g.server[op])) if on_ps else ("w", w)

    def _queue(self, w: int, op: int, slot: tuple) -> None:
        self.queue.setdefault(slot, deque()).append(op)
        if not self.busy.get(slot):
            self._next(slot)

    def _next(self, slot: tuple) -> None:
        queue = self.queue.get(slot)
        if not queue:
            self.busy[slot] = False
            return
        op = queue.popleft()
        self.busy[slot] = True
        w = slot[1]
        work = self._work(w, op)
        if slot[0] == "p":
            self._ps_add(slot, op, work)
        else:
            self.at(work / self.worker_rate if slot[0] in ("w", "lw") else work, lambda: self._slot_done(slot, op))

    def _slot_done(self, slot: tuple, op: int) -> None:
        self.done(slot[1], op)
        self._next(slot)

    # -- a server's host: its busy slots share its cores ----------------------------------------
    def _ps_settle(self, m: int) -> None:
        now = self.net.now()
        running = self.ps_running[m]
        if running:
            rate = min(1.0, self.ps_cores / len(running))
            for entry in running.values():
                entry[1] -= (now - self.ps_last_t[m]) * rate
        self.ps_last_t[m] = now

    def _ps_plan(self, m: int) -> None:
        self.ps_version[m] += 1
        running = self.ps_running[m]
        if not running:
            return
        version = self.ps_version[m]
        rate = min(1.0, self.ps_cores / len(running))
        slot, entry = min(running.items(), key=lambda item: (item[1][1], item[0]))
        self.at(max(entry[1], 0.0) / rate, lambda: self._ps_finish(m, slot, version))

    def _ps_add(self, slot: tuple, op: int, work: float) -> None:
        m = slot[2]
        self._ps_settle(m)
        self.ps_running[m][slot] = [op, work]
        self._ps_plan(m)

    def _ps_finish(self, m: int, slot: tuple, version: int) -> None:
        if version != self.ps_version[m]:
            return
        self._ps_settle(m)
        op, _ = self.ps_running[m].pop(slot)
        self._ps_plan(m)
        self._slot_done(slot, op)

    # -- progress --------------------------------------------------------------------------------
    def done(self, w: int, op: int) -> None:
        self.op_events += 1
        pending = self.pending[w]
        for succ in self.succ[op]:
            pending[succ] -= 1
            if pending[succ] == 0:
                self.ready(w, succ)
        self.left[w] -= 1
        if self.left[w] == 0:
            self._step_ended(w)

    def _step_ended(self, w: int) -> None:
        self.step_end[w, self.step[w]] = self.net.now()
        k = self.step[w] = self.step[w] + 1
        if self.mode is Mode.SYNC:
            self.barrier += 1
            if self.barrier < self.W:
                return
            self.barrier = 0
            if k < self.N:
                for worker in range(self.W):
                    self.start(worker)
            elif np.all(np.isfinite(self.step_end[:, -1])):
                self.net.stop()
            return
        if k < self.N:
            self.start(w)
        elif np.all(np.isfinite(self.step_end[:, -1])):
            self.net.stop()


def replay_packets(graph: SimGraph, cluster: ClusterModel, workers: int, *, steps: int = 200, warmup: int = 20,
                   seed: int = 0, start_offsets_s: tuple[float, ...] | None = None, mode: Mode = Mode.ASYNC,
                   ps_cores: float = math.inf, worker_rate: float = 1.0,
                   network: PacketNetwork | None = None) -> PacketRun:
    """Replay a prepared step DAG by ``workers`` workers over a packet-level network (docs/model.md §12).

    Parameters
    ----------
    graph : SimGraph
        The profile prepared for this cluster and W (:func:`simulate.prepare.prepare`).
    cluster : ClusterModel
        Its rates, token buckets or shaper, buffers and queue windows shape the network.
    workers : int
        W, each on a host of its own; each of the graph's servers on a host of ``ps_cores``.
    steps, warmup, seed : int
        Steps per worker, the first ``warmup`` of them dropped, and the seed that samples the
        profiled steps (as the flow engine samples them, docs/model.md §2.3).
    start_offsets_s : tuple of float, optional
        Each worker's first step start (docs/model.md §2.7); None: all at once.
    mode : Mode
        ``ASYNC`` or ``SYNC``.
    ps_cores : float
        The cores of each server's host, shared by its busy slots (docs/model.md §4.3).
    worker_rate : float
        The speed of a worker's computation (its host's cores, at most 1).
    network : PacketNetwork, optional
        The transport (default: ``PacketNetwork()``).

    Returns
    -------
    PacketRun
        Every step's end and the transport's drops, timeouts and recoveries.

    Examples
    --------
    >>> import tfprofile, simulate  # doctest: +SKIP
    >>> from simulate.prepare import prepare  # doctest: +SKIP
    >>> profile = tfprofile.load_profile("data/profiles/tiny.npz")  # doctest: +SKIP
    >>> cluster = simulate.load_cluster("data/clusters/lab-1gbit.json")  # doctest: +SKIP
    >>> run = replay_packets(prepare(profile, cluster, workers=2), cluster, 2, steps=40, warmup=5)  # doctest: +SKIP
    """
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or not (
            1 <= workers <= MAX_PACKET_WORKERS):
        raise UsageError("workers", f"a packet-level replay takes 1 to {MAX_PACKET_WORKERS} workers, not {workers!r}")
    if not 0 <= warmup < steps:
        raise UsageError("warmup", f"must be at least 0 and below steps ({steps}), not {warmup}")
    if mode not in (Mode.ASYNC, Mode.SYNC):
        raise UsageError("mode", f"a packet-level replay is async or sync, not {mode.value}")
    if not ps_cores > 0:
        raise UsageError("ps_cores", f"must be above 0, not {ps_cores}")
    if not 0 < worker_rate <= 1:
        raise UsageError("worker_rate", f"must be above 0 and at most 1, not {worker_rate}")
    workers = int(workers)
    network = network or PacketNetwork()
    wire = wire_per_payload(network)
    rates = link_rates_Bps(cluster)
    buffers = []
    for direction, rate in zip(("downlink", "uplink"), rates):
        buffer = float(getattr(cluster, f"buffer_{direction}_bytes"))
        buffers.append(int(buffer) if math.isfinite(buffer) else int(rate * wire * DEFAULT_QUEUE_S))
    down = _shaper(rates[0], cluster.downlink_Bps, cluster.bucket_downlink, wire)
    up = _shaper(rates[1], cluster.uplink_Bps, cluster.bucket_uplink, wire)
    peak_bucket = network.segment_bytes + SEGMENT_HEADER_BYTES
    if cluster.shaper is not None:  # the link as it was configured, not its calibrated summary
        shaper = cluster.shaper
        down = up = (8 * shaper.rate_Bps, 8 * shaper.peak_rate_Bps, int(shaper.burst_bytes))
        peak_bucket = int(shaper.peak_burst_bytes)
    samples = sample_steps(graph.n_steps, workers, steps, seed)
    starts = tuple(start_offsets_s) if start_offsets_s is not None else (0.0,) * workers
    if len(starts) != workers:
        raise UsageError("start_offsets_s", f"needs one start per worker ({workers}), not {len(starts)}")
    _, module = _load_network()
    net = module.Network()
    idle = (2 * network.one_way_delay_s, 2 * network.one_way_delay_s)
    replay = _Replay(graph, net, workers=workers, steps=steps, samples=samples, ps_cores=ps_cores,
                     worker_rate=worker_rate, mode=mode, idle_crossing_s=idle, rates_Bps=rates)
    net.on_event = replay.fire
    net.on_delivered = replay.delivered
    try:
        net.build(workers, graph.n_servers, down[0], up[0], down[1], up[1], down[2], up[2], peak_bucket,
                  buffers[0], buffers[1], network.one_way_delay_s, network.congestion_control.value,
                  network.segment_bytes, network.min_rto_s, network.send_buffer_bytes,
                  receive_window_bytes(network, cluster), network.initial_cwnd_segments, seed,
                  *(_pacing_cap_bps(cap) for cap in (cluster.connection_cap_downlink_Bps,
                                                     cluster.connection_cap_uplink_Bps)))
        for w in range(workers):
            replay.at(CONNECT_S + starts[w], lambda w=w: replay.start(w))
        net.run()
        if not np.all(np.isfinite(replay.step_end)):
            raise RuntimeError("the packet-level replay stopped before every worker's last step")
        return PacketRun(step_start_s=replay.step_start - CONNECT_S, step_end_s=replay.step_end - CONNECT_S,
                         batch_size=graph.batch_size, warmup=warmup, op_events=replay.op_events,
                         drops_down=int(net.drops_down()), drops_up=int(net.drops_up()),
                         timeouts=int(net.timeouts()), recoveries=int(net.recoveries()))
    finally:
        net.destroy()


def packet_hosts(colocation, workers: int, servers: int) -> tuple[float, float]:
    """(PS cores, worker rate) of a packet-level replay from the sweep's host model: none, or a
    host per task (:class:`simulate.config.TaskHosts`); tasks sharing a host are refused, since
    the replay gives every task its own."""
    if colocation is None:
        return math.inf, 1.0
    if callable(colocation):
        colocation = colocation(workers, servers)
    hosts = list(colocation.worker_host) + list(colocation.server_host)
    if len(set(hosts)) != len(hosts):
        raise UsageError("colocation", "the packet transfer model gives every task a host of its own: use "
                                       "ps_cores/worker_cores (a host per task), not one shared host")
    cores = colocation.cores
    ps_cores = min(cores[h] for h in colocation.server_host)
    return ps_cores, min(1.0, min(cores[h] for h in colocation.worker_host))


def check_packet_scenario(scenario, options: dict) -> None:
    """What a packet-level replay cannot take, refused before any simulation runs."""
    if scenario.workers > MAX_PACKET_WORKERS:
        raise UsageError("workers", f"the packet transfer model simulates at most {MAX_PACKET_WORKERS} workers "
                                    f"(not {scenario.workers}): use grpc for larger sweeps")
    if scenario.mode not in (Mode.ASYNC, Mode.SYNC):
        raise UsageError("mode", f"the packet transfer model runs async or sync steps, not {scenario.mode.value}")
    if scenario.sharing is not Sharing.PS:
        raise UsageError("sharing", f"the packet transfer model's links are shared by TCP, not by the "
                                    f"{scenario.sharing.value} rule: leave sharing at ps")
    if options.get("worker_speed") is not None:
        raise UsageError("worker_speed", "the packet transfer model has no stragglers yet: use grpc")
    packet_hosts(options.get("colocation"), scenario.workers, scenario.servers or 1)
    network = options.get("network")
    if network is not None and not isinstance(network, PacketNetwork):
        raise UsageError("network", f"must be a PacketNetwork, not {type(network).__name__}")
    if find_spec("ns") is None:
        raise UsageError("transfer", "the packet transfer model needs ns-3's Python package: "
                                     "pip install 'tfsim[packet]'")


def packet_sim_run(graph: SimGraph, cluster: ClusterModel, config, *, network: PacketNetwork | None = None):
    """A packet-level replay of ``graph`` under the flow engine's ``config`` (its W, mode, steps,
    warmup, seed, starts and hosts), as the engine's :class:`~simulate.engine.SimRun`, so that
    every summary of a run applies to it."""
    ps_cores, worker_rate = packet_hosts(config.colocation, config.workers, graph.n_servers)
    started = time.perf_counter()
    run = replay_packets(graph, cluster, config.workers, steps=config.steps, warmup=config.warmup, seed=config.seed,
                         start_offsets_s=config.start_offsets_s, mode=config.mode, ps_cores=ps_cores,
                         worker_rate=worker_rate, network=network or PacketNetwork())
    return SimRun(config=config, graph=graph, step_start_s=run.step_start_s, step_end_s=run.step_end_s,
                  op_events=run.op_events, wall_s=time.perf_counter() - started)
