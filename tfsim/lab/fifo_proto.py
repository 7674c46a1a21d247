"""Prototype: the PS's link as two coupled FIFO byte queues with window-limited connections and
the job's RPC chain (research-w4). Pure Python, for evaluation only.

What it adds to the flow-level engine (:mod:`simulate.engine`), each term from a measurement:

1. **The link is a FIFO of bytes per direction** (the shaper's queue at the PS), served by a
   token bucket (rate R on the wire, bucket ``burst``, peak rate ``peak`` with a bucket of
   ``peak_bucket``; a real NIC: burst = peak_bucket = 0). Every message, however small,
   waits for every byte queued ahead of it: no processor sharing.
2. **Connections are window-limited** (TCP): a connection direction keeps at most ``window``
   bytes in flight (sent, not yet acknowledged); a chunk is acknowledged when its ACK has
   crossed the *opposite* direction's FIFO, behind that direction's backlog. So a lone flow
   gets ``window / RTT`` with RTT = its own queueing delay + the reverse queue's, which is
   below the link rate when the reverse direction is loaded (measured: cwnd ~0.27 MB, RTT
   5-15 ms at W = 4, a lone flow 20-30 MB/s on a 47.8 MB/s link).
3. **The RPC chain of a step**: the worker's RunGraph request crosses the uplink before the PS
   partition starts; each receiver's RecvTensor requests (issued when its partition starts)
   cross the other direction before the sender may respond; the PS's RunGraph response
   crosses the downlink before the step ends; plus measured host delays at each end.
4. Two connections per worker, as gRPC has them: A (worker is the client: RunGraph and the
   worker's RecvTensor requests up, their responses down) and B (the PS is the client: the
   PS's requests down, the uplink tensors up). Inside a connection direction, messages go
   out whole, in the order they became ready (HTTP/2 as gRPC sends it).

Computation: each (worker, resource) runs one op at a time, FIFO by ready time, as the
engine's slots do (no core sharing: the lab's tasks use < 0.5 of 2 cores).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque

import numpy as np

from tfprofile.dag import Resource

DOWN, UP = 0, 1


@dataclasses.dataclass(frozen=True)
class LinkParams:
    """One direction of the PS's link (the shaper), wire bytes."""

    rate_Bps: float                 # R, bytes/s on the wire
    burst_bytes: float = 0.0        # main bucket (tbf burst); 0: a NIC
    peak_Bps: float = math.inf      # peak rate (tbf peakrate); inf: none
    peak_bucket_bytes: float = 0.0  # the peak bucket (tbf mtu)
    wire_per_payload: float = 1514 / 1448  # Ethernet + IP + TCP headers per MSS of payload


@dataclasses.dataclass(frozen=True)
class ProtoParams:
    down: LinkParams
    up: LinkParams
    window_bytes: float = 270_000      # TCP in-flight cap per connection direction
    chunk_bytes: int = 16_384          # granularity of the FIFO (GSO packets are 20-64 KB)
    ack_wire_bytes: int = 400          # ACK packets per data chunk, wire bytes
    rungraph_request_bytes: int = 1500
    rungraph_response_bytes: int = 300
    recv_request_bytes: int = 400
    response_overhead_bytes: int = 120
    # host delays (s), from the 1-worker capture
    worker_request_delay_s: float = 0.0013   # step start -> the worker's RecvTensor requests leave
    rungraph_delay_s: float = 0.0006         # step start -> RunGraph request leaves
    ps_start_delay_s: float = 0.0008         # RunGraph arrival -> PS partition starts, its requests leave
    step_end_delay_s: float = 0.0012         # RunGraph response arrival -> next step starts
    pacing: bool = False               # BBR-like pacing: rate = gain x max delivery rate over bbr_rounds rounds
    bbr_rounds: int = 10
    gain_cycle: tuple = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    cycle_per_ack: bool = False        # advance the gain cycle per ACK (BBR with min_rtt ~ 0) instead of per round
    jitter: bool = False               # host delays exponential (mean as given), compute ops x lognormal(0, 0.2)
    fifo: bool = True                  # False: small messages skip the queue (processor-sharing-like ablation)
    rpc: bool = True                   # False: no RunGraph / request crossings (ablation)


class _Link:
    """A FIFO served by a dual token bucket; items leave whole when both buckets allow."""

    def __init__(self, p: LinkParams):
        self.p = p
        self.queue: deque = deque()
        self.busy_until = 0.0
        self.serving = False
        self.t_last = 0.0
        self.tokens = p.burst_bytes
        self.ptokens = p.peak_bucket_bytes
        self.backlog = 0.0
        self.departures: list[tuple[float, float]] = []  # (time, wire bytes)
        self.backlog_trace: list[tuple[float, float]] = []  # (time, backlog after a change)

    def _refill(self, t: float) -> None:
        dt = t - self.t_last
        if dt > 0:
            self.tokens = min(self.p.burst_bytes, self.tokens + self.p.rate_Bps * dt) if self.p.burst_bytes else 0.0
            if math.isfinite(self.p.peak_Bps):
                self.ptokens = min(self.p.peak_bucket_bytes, self.ptokens + self.p.peak_Bps * dt)
            self.t_last = t

    def departure_time(self, t: float, size: float) -> float:
        """When an item of ``size`` wire bytes at the head at time t leaves (and take the tokens)."""
        self._refill(t)
        p = self.p
        # main bucket: with no burst, an item takes size / R after the previous one
        if p.burst_bytes:
            wait = max(0.0, (size - self.tokens) / p.rate_Bps) if size > self.tokens else 0.0
        else:
            wait = size / p.rate_Bps
        if math.isfinite(p.peak_Bps):
            wait = max(wait, (size - self.ptokens) / p.peak_Bps if size > self.ptokens else 0.0)
        t_out = t + wait
        self._refill(t_out)
        if p.burst_bytes:
            self.tokens -= size
        if math.isfinite(p.peak_Bps):
            self.ptokens -= size
        return t_out


@dataclasses.dataclass
class _Msg:
    worker: int
    step: int
    kind: str          # "tensor", "req", "rg_req", "rg_resp"
    op: int            # the transfer op (tensor, req), -1 otherwise
    payload: float
    remaining: float = 0.0
    first_t: float = math.nan
    last_t: float = math.nan
    enq_t: float = math.nan


class _Conn:
    """One direction of one TCP connection: a queue of messages, an in-flight window and,
    with pacing, BBR's bandwidth filter (max delivery rate over the last rounds)."""

    def __init__(self, direction: int, window: float, initial_bw: float = math.inf, cycle_start: int = 0):
        self.direction = direction
        self.window = window
        self.queue: deque = deque()
        self.inflight = 0.0
        self.delivered = 0.0
        self.delivered_t = 0.0
        self.first_tx_t = 0.0
        self.round = 0
        self.next_round_delivered = 0.0
        self.samples: deque = deque([(0, initial_bw)])
        self.bw = initial_bw
        self.cycle = cycle_start
        self.next_send_t = 0.0
        self.pump_at = None
        self.app_limited_until = 0.0


class FifoProto:
    def __init__(self, graph, params: ProtoParams, workers: int, steps: int, warmup: int, seed: int = 0,
                 start_offsets_s=None, trace: bool = True):
        self.g, self.P, self.W, self.N, self.warmup = graph, params, workers, steps, warmup
        rng = np.random.default_rng(seed)
        self.rng = np.random.default_rng(seed + 1000)
        self.samples = rng.integers(0, graph.n_steps, size=(workers, steps))
        self.offsets = start_offsets_s or (0.0,) * workers
        self.links = [_Link(params.down), _Link(params.up)]
        # conns[w]["A"][dir], conns[w]["B"][dir]
        bw0 = [params.down.rate_Bps / params.down.wire_per_payload, params.up.rate_Bps / params.up.wire_per_payload]
        self.conns = [{c: [_Conn(d, params.window_bytes, bw0[d], int(rng.integers(0, len(params.gain_cycle))))
                           for d in (DOWN, UP)] for c in "AB"} for _ in range(workers)]
        self.heap: list = []
        self.seq = 0
        self.rtts = ([], [])
        self.step_start = np.full((workers, steps), np.nan)
        self.step_end = np.full((workers, steps), np.nan)
        self.trace = trace
        self.tensor_rows: list[dict] = []
        self.msg_rows: list[dict] = []
        g = graph
        self.succ = [g.succ_idx[g.succ_ptr[i]:g.succ_ptr[i + 1]] for i in range(g.n_ops)]
        self.is_tx = np.isin(g.resource, (Resource.DOWNLINK, Resource.UPLINK)) & (g.kind == 1)
        self.is_ps_side = (g.resource == Resource.PS) | (g.resource == Resource.UPLINK)
        self.sources_worker = [i for i in range(g.n_ops) if g.in_degree[i] == 0 and not self.is_ps_side[i]]
        self.sources_ps = [i for i in range(g.n_ops) if g.in_degree[i] == 0 and self.is_ps_side[i]]
        self.tx_down = [i for i in range(g.n_ops) if self.is_tx[i] and g.resource[i] == Resource.DOWNLINK]
        self.tx_up = [i for i in range(g.n_ops) if self.is_tx[i] and g.resource[i] == Resource.UPLINK]
        self.n_ps_side = int(self.is_ps_side.sum())
        # per-worker step state
        self.st = [None] * workers

    # -- event plumbing ---------------------------------------------------------------------
    def d(self, mean: float) -> float:
        """A host delay: ``mean``, or exponential with that mean when jitter is on."""
        return float(self.rng.exponential(mean)) if self.P.jitter and mean > 0 else mean

    def at(self, t: float, kind: str, *data) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, data))

    # -- steps ---------------------------------------------------------------------------------
    def start_step(self, w: int, k: int, t: float) -> None:
        g, P = self.g, self.P
        self.step_start[w, k] = t
        s = int(self.samples[w, k])
        st = {"k": k, "s": s, "pending": g.in_degree.astype(np.int64).copy(), "done": 0, "ps_done": 0,
              "tx_ready": set(), "req_arrived": set(), "rg_resp": False, "ps_started": False,
              "queues": {Resource.WORKER: [], Resource.PS: []}, "busy": {Resource.WORKER: False, Resource.PS: False},
              "ps_waiting": [], "first": {}, "last": {}}
        self.st[w] = st
        for op in self.sources_worker:
            self.ready(w, op, t)
        if P.rpc:
            request = _Msg(w, k, "rg_req", -1, P.rungraph_request_bytes)
            self.at(t + self.d(P.rungraph_delay_s), "send", w, k, "A", UP, request)
            for op in self.tx_down:
                self.at(t + self.d(P.worker_request_delay_s), "send", w, k, "A", UP,
                        _Msg(w, k, "req", op, P.recv_request_bytes))
        else:
            self.at(t, "ps_start", w, k)
            for op in self.tx_down:
                st["req_arrived"].add(op)

    def ps_start(self, w: int, k: int, t: float) -> None:
        st = self.st[w]
        if st is None or st["k"] != k:
            return
        st["ps_started"] = True
        for op in self.sources_ps:
            self.ready(w, op, t)
        for op, tr in st["ps_waiting"]:
            self.ready(w, op, tr if tr > t else t)
        st["ps_waiting"].clear()
        if self.P.rpc:
            for op in self.tx_up:
                self.at(t, "send", w, k, "B", DOWN, _Msg(w, k, "req", op, self.P.recv_request_bytes))
        else:
            for op in self.tx_up:
                st["req_arrived"].add(op)
                if op in st["tx_ready"]:
                    self.send_tensor(w, k, op, t)

    def ready(self, w: int, op: int, t: float) -> None:
        """All predecessors of ``op`` are done at time t."""
        g, st = self.g, self.st[w]
        if self.is_ps_side[op] and not st["ps_started"] and not self.is_tx[op]:
            st["ps_waiting"].append((op, t))
            return
        if self.is_tx[op]:
            st["tx_ready"].add(op)
            if op in st["req_arrived"]:
                self.send_tensor(w, st["k"], op, t)
            return
        res = Resource.PS if g.resource[op] == Resource.PS else Resource.WORKER
        q = st["queues"][res]
        heapq.heappush(q, (t, op))
        if not st["busy"][res]:
            self.run_next(w, res, t)

    def run_next(self, w: int, res, t: float) -> None:
        st = self.st[w]
        q = st["queues"][res]
        if not q:
            st["busy"][res] = False
            return
        tr, op = heapq.heappop(q)
        st["busy"][res] = True
        dur = float(self.g.work[st["s"], op])
        if self.P.jitter and dur > 0:
            dur *= float(self.rng.lognormal(0.0, 0.2))
        self.at(max(t, tr) + dur, "op_done", w, st["k"], op, res)

    def op_done(self, w: int, k: int, op: int, t: float) -> None:
        st = self.st[w]
        st["done"] += 1
        if self.is_ps_side[op]:
            st["ps_done"] += 1
        for s in self.succ[op]:
            st["pending"][s] -= 1
            if st["pending"][s] == 0:
                self.ready(w, int(s), t)
        if st["ps_done"] == self.n_ps_side and not st.get("rg_sent"):
            st["rg_sent"] = True
            if self.P.rpc:
                self.at(t, "send", w, k, "A", DOWN, _Msg(w, k, "rg_resp", -1, self.P.rungraph_response_bytes))
            else:
                st["rg_resp"] = True
        self.maybe_end(w, k, t)

    def maybe_end(self, w: int, k: int, t: float) -> None:
        st = self.st[w]
        if st["done"] == self.g.n_ops and st["rg_resp"] and not st.get("ended"):
            st["ended"] = True
            end = t + (self.d(self.P.step_end_delay_s) if self.P.rpc else 0.0)
            self.step_end[w, k] = end
            if k + 1 < self.N:
                self.at(end, "start", w, k + 1)

    def send_tensor(self, w: int, k: int, op: int, t: float) -> None:
        g = self.g
        d = DOWN if g.resource[op] == Resource.DOWNLINK else UP
        conn = "A" if d == DOWN else "B"
        size = float(g.work[self.st[w]["s"], op]) + self.P.response_overhead_bytes
        self.enqueue(w, conn, d, _Msg(w, k, "tensor", op, size), t)

    # -- connections and the link ----------------------------------------------------------------
    def enqueue(self, w: int, conn: str, d: int, msg: _Msg, t: float) -> None:
        msg.remaining = msg.payload
        msg.enq_t = t
        c = self.conns[w][conn][d]
        c.queue.append(msg)
        self.pump(w, conn, d, t)

    def pump(self, w: int, conn: str, d: int, t: float) -> None:
        c = self.conns[w][conn][d]
        P = self.P
        while c.queue and (c.inflight < c.window):
            if P.pacing and t < c.next_send_t - 1e-12:
                if c.pump_at is None or c.pump_at > c.next_send_t:
                    c.pump_at = c.next_send_t
                    self.at(c.next_send_t, "pump", w, conn, d)
                return
            msg = c.queue[0]
            size = min(P.chunk_bytes, msg.remaining)
            msg.remaining -= size
            last = msg.remaining <= 0
            if last:
                c.queue.popleft()
            if c.inflight <= 0:
                c.first_tx_t = c.delivered_t = t
            rs = (c.delivered, c.delivered_t, c.first_tx_t, t, c.app_limited_until > 0)
            c.inflight += size
            if P.pacing:
                gain = P.gain_cycle[c.cycle % len(P.gain_cycle)]
                c.next_send_t = max(t, c.next_send_t) + size / (gain * c.bw)
            small = msg.kind != "tensor" or msg.payload < 2 * P.chunk_bytes
            wire = size * self.links[d].p.wire_per_payload
            self.link_push(d, ("data", w, conn, d, msg, size, last, rs), wire, t, bypass=small and not P.fifo)
        if not c.queue and c.inflight < c.window:
            c.app_limited_until = c.delivered + c.inflight  # samples until then are app-limited

    def link_push(self, d: int, item, wire: float, t: float, bypass: bool = False) -> None:
        link = self.links[d]
        if bypass:  # ablation: served at once, as processor sharing would
            self.at(t + wire / link.p.rate_Bps, "depart", d, item, wire, True)
            return
        link.queue.append((item, wire))
        link.backlog += wire
        link.backlog_trace.append((t, link.backlog))
        if not link.serving:
            self.link_serve(d, t)

    def link_serve(self, d: int, t: float) -> None:
        link = self.links[d]
        if not link.queue:
            link.serving = False
            return
        item, wire = link.queue[0]
        link.serving = True
        t_out = link.departure_time(max(t, link.busy_until), wire)
        link.busy_until = t_out
        self.at(t_out, "depart", d, item, wire, False)

    def depart(self, d: int, item, wire: float, bypass: bool, t: float) -> None:
        link = self.links[d]
        if not bypass:
            link.queue.popleft()
            link.backlog -= wire
            link.backlog_trace.append((t, link.backlog))
            link.departures.append((t, wire))
            self.link_serve(d, t)
        else:
            link.departures.append((t, wire))
        if item[0] == "ack":
            _, w, conn, dd, size, rs = item
            c = self.conns[w][conn][dd]
            c.inflight -= size
            self.on_ack(c, size, rs, t)
            self.pump(w, conn, dd, t)
            return
        _, w, conn, dd, msg, size, last, rs = item
        if math.isnan(msg.first_t):
            msg.first_t = t - wire / self.links[d].p.rate_Bps
        # the ACK crosses the other direction's FIFO
        self.link_push(1 - d, ("ack", w, conn, dd, size, rs), self.P.ack_wire_bytes, t, bypass=not self.P.fifo)
        if last:
            msg.last_t = t
            self.deliver(msg, t)

    def on_ack(self, c: _Conn, size: float, rs, t: float) -> None:
        """BBR's delivery-rate sample and bandwidth filter (Linux tcp_rate.c, tcp_bbr.c, simplified)."""
        delivered_at_send, delivered_t_at_send, first_tx_at_send, sent_t, app_limited = rs
        c.delivered += size
        c.delivered_t = t
        self.rtts[c.direction].append(t - sent_t)
        c.first_tx_t = sent_t
        if c.app_limited_until and c.delivered > c.app_limited_until:
            c.app_limited_until = 0.0
        if not self.P.pacing:
            return
        if delivered_at_send >= c.next_round_delivered:
            c.round += 1
            c.next_round_delivered = c.delivered
            if not self.P.cycle_per_ack:
                c.cycle += 1
        if self.P.cycle_per_ack:
            c.cycle += 1
        interval = max(sent_t - first_tx_at_send, t - delivered_t_at_send)
        if interval <= 0:
            return
        rate = (c.delivered - delivered_at_send) / interval
        if app_limited and rate < c.bw:
            return
        c.samples.append((c.round, rate))
        while c.samples and c.samples[0][0] <= c.round - self.P.bbr_rounds:
            c.samples.popleft()
        c.bw = max(r for _, r in c.samples) if c.samples else rate

    def deliver(self, msg: _Msg, t: float) -> None:
        w, k = msg.worker, msg.step
        st = self.st[w]
        if st is None or st["k"] != k:
            return
        if self.trace:
            self.msg_rows.append({"worker": w, "step": k, "kind": msg.kind, "op": msg.op, "first_t": msg.first_t,
                                  "last_t": t, "enq_t": msg.enq_t, "bytes": msg.payload})
        if msg.kind == "rg_req":
            self.at(t + self.d(self.P.ps_start_delay_s), "ps_start", w, k)
        elif msg.kind == "req":
            st["req_arrived"].add(msg.op)
            if msg.op in st["tx_ready"]:
                self.send_tensor(w, k, msg.op, t)
        elif msg.kind == "rg_resp":
            st["rg_resp"] = True
            self.maybe_end(w, k, t)
        else:  # a tensor arrived: the transfer op is done
            self.op_done(w, k, msg.op, t)

    # -- run ------------------------------------------------------------------------------------
    def run(self):
        for w in range(self.W):
            self.at(self.offsets[w], "start", w, 0)
        while self.heap:
            t, _, kind, data = heapq.heappop(self.heap)
            if kind == "start":
                self.start_step(data[0], data[1], t)
            elif kind == "op_done":
                w, k, op, res = data
                self.op_done(w, k, op, t)
                self.run_next(w, res, t)
            elif kind == "send":
                w, k, conn, d, msg = data
                self.enqueue(w, conn, d, msg, t)
            elif kind == "pump":
                w, conn, d = data
                c = self.conns[w][conn][d]
                if c.pump_at is not None and abs(c.pump_at - t) < 1e-12:
                    c.pump_at = None
                self.pump(w, conn, d, t)
            elif kind == "ps_start":
                self.ps_start(data[0], data[1], t)
            elif kind == "depart":
                self.depart(data[0], data[1], data[2], data[3], t)
        return self

    # -- results --------------------------------------------------------------------------------
    def throughput_eps(self) -> float:
        b = self.g.batch_size
        total = 0.0
        for w in range(self.W):
            ends = self.step_end[w]
            total += b * (self.N - self.warmup) / (ends[-1] - ends[self.warmup - 1])
        return total

    def backlog_stats(self) -> dict:
        """Time-weighted backlog (wire bytes) per direction over the measured window, and RTT medians."""
        t0, t1 = self.window()
        out = {}
        for d, name in ((DOWN, "down"), (UP, "up")):
            tr = np.array(self.links[d].backlog_trace)
            grid = np.arange(t0, t1, 0.001)
            k = np.searchsorted(tr[:, 0], grid, side="right") - 1
            q = np.where(k >= 0, tr[np.maximum(k, 0), 1], 0.0)
            out[name] = {"mean": float(q.mean()), "p50": float(np.median(q)), "p90": float(np.percentile(q, 90)),
                         "nonzero": float((q > 0).mean()), "rtt_p50_ms": float(np.median(self.rtts[d]) * 1e3)}
        return out

    def window(self) -> tuple[float, float]:
        return float(np.max(self.step_end[:, self.warmup - 1])), float(np.min(self.step_end[:, -1]))

    def utilisation(self) -> dict:
        t0, t1 = self.window()
        out = {}
        for d, name in ((DOWN, "down"), (UP, "up")):
            dep = np.array(self.links[d].departures)
            m = (dep[:, 0] >= t0) & (dep[:, 0] < t1)
            rate = self.links[d].p.rate_Bps
            out[name] = float(dep[m, 1].sum() / (t1 - t0) / rate)
            from tfsim.lab.timeline import union_busy

            busy, _ = union_busy(dep[m, 0], dep[m, 0] + dep[m, 1] / rate, t0, t1)
            out[name + "_busy"] = busy / (t1 - t0)
        return out


def lab_link(rate_bit: float) -> LinkParams:
    """The lab's tbf (tfsim/lab/netns.py _tbf): rate, burst = max(96 KiB, rate/8/250), peakrate 1.02 x
    rate with a 96 KiB bucket."""
    rate = rate_bit / 8
    return LinkParams(rate_Bps=rate, burst_bytes=max(96 * 1024, rate_bit // 8 // 250),
                      peak_Bps=1.02 * rate, peak_bucket_bytes=96 * 1024)


def simulate(graph, params: ProtoParams, workers: int, steps: int = 300, warmup: int = 50, seed: int = 0,
             start_offsets_s=None) -> FifoProto:
    return FifoProto(graph, params, workers, steps, warmup, seed, start_offsets_s).run()
