"""A literal, slow transcription of ICPE Alg. 3.1 / TPDS Alg. 1, kept as the oracle.

It follows the pseudo-code line by line, with the precise semantics of docs/model.md §2.5 where the
pseudo-code is ambiguous, and nothing clever: every iteration recomputes every chunk's
share, takes the chunk with the smallest ``remaining / rate`` (ties by worker, then
resource), and advances every other chunk by that time. It shares no code with the
compiled engine apart from the prepared graph it replays.

``numeric`` may be ``float`` or ``fractions.Fraction`` (exact arithmetic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simulate.cluster import ClusterModel
from simulate.codes import ParseLane
from simulate.config import Enforcement, Mode, Sharing, SimConfig, TieOrder, Transfer
from tfprofile.dag import Resource


@dataclass
class Chunk:
    worker: int
    resource: tuple  # (order, name, server) so that sorting tuples gives the tie order of docs/model.md §2.4
    op: int
    remaining: object
    is_last: bool
    size: object = 0  # bytes of a grpc chunk, returned to the windows after the update delay


@dataclass
class Scheduler:
    """Ops of one worker waiting for one resource: (key, seq, op) entries."""

    items: list = field(default_factory=list)

    def __bool__(self):
        return bool(self.items)


def _resource_key(resource: int, server: int) -> tuple:
    order = {Resource.DOWNLINK: 0, Resource.WORKER: 1, Resource.UPLINK: 2, Resource.PS: 3}[Resource(resource)]
    return (order, max(server, 0) if resource != Resource.WORKER else 0)


def reference_run(graph, cluster: ClusterModel, config: SimConfig, numeric=float):
    """Return (step_start, step_end) as lists of lists, one row per worker."""
    W, N = config.workers, config.steps
    M = graph.n_servers
    rng = np.random.default_rng(config.seed)
    samples = rng.integers(0, graph.n_steps, size=(W, N))
    succ = [list(graph.succ_idx[graph.succ_ptr[i]:graph.succ_ptr[i + 1]]) for i in range(graph.n_ops)]
    n_preds = [int(x) for x in graph.in_degree]
    res_of = [_resource_key(int(graph.resource[i]), int(graph.server[i])) for i in range(graph.n_ops)]
    # Parse lanes come after every other resource, the worker's first, then each server's; a
    # delay op is a resource of its own, after them all, in op order.
    lane = graph.parse_lane
    delay_rank = {op: k for k, op in enumerate(i for i in range(graph.n_ops) if lane[i] == ParseLane.DELAY)}
    res_of = [(6, delay_rank[i]) if lane[i] == ParseLane.DELAY else
              (4, 0) if lane[i] == ParseLane.LANE and r[0] == 1 else
              (5, r[1]) if lane[i] == ParseLane.LANE else r for i, r in enumerate(res_of)]
    is_link = [int(graph.resource[i]) in (Resource.DOWNLINK, Resource.UPLINK) for i in range(graph.n_ops)]
    roots = [i for i in range(graph.n_ops) if n_preds[i] == 0]
    capacity = {(0, m): numeric(cluster.downlink_Bps) for m in range(M)}
    capacity.update({(2, m): numeric(cluster.uplink_Bps) for m in range(M)})
    # docs/model.md §4.4: a token bucket per link (peak while tokens last, then sustained).
    peak = dict(capacity)
    buckets = {0: cluster.bucket_downlink, 2: cluster.bucket_uplink}
    sustained = {k: numeric(buckets[k[0]].sustained_Bps) if buckets[k[0]] is not None else peak[k] for k in peak}
    bucket = {k: numeric(buckets[k[0]].bucket_bytes) if buckets[k[0]] is not None and sustained[k] < peak[k]
              else numeric(0) for k in peak}
    tokens = dict(bucket)
    marked = set()  # links whose busy workers changed during the current event
    # docs/model.md §4.5: the FIFO's queue window per direction.
    queue_window = {0: numeric(cluster.queue_window_downlink_bytes), 2: numeric(cluster.queue_window_uplink_bytes)}
    buffer = {0: numeric(cluster.buffer_downlink_bytes) if math.isfinite(cluster.buffer_downlink_bytes) else math.inf,
              2: numeric(cluster.buffer_uplink_bytes) if math.isfinite(cluster.buffer_uplink_bytes) else math.inf}
    # docs/model.md §4.8: the most one worker's connection moves in each direction.
    connection_cap = {0: cluster.connection_cap_downlink_Bps, 2: cluster.connection_cap_uplink_Bps}
    connection_cap = {k: numeric(v) if math.isfinite(v) else None for k, v in connection_cap.items()}
    win = cluster.win_bytes
    flow_cap = numeric(config.flow_cap_Bps) if config.flow_cap_Bps else None
    sharing = None if config.mode is Mode.ALLREDUCE else config.sharing
    hosts = config.colocation
    grpc = config.transfer is Transfer.GRPC
    flows = {0: cluster.flow_downlink, 2: cluster.flow_uplink}
    conn_used = {}   # (w, link) -> bytes not yet returned by the receiver
    stream_sent = {}  # (w, op) -> bytes not yet returned
    paused = set()
    returns = []     # (time, w, link, bytes, op or -1), in creation order

    def window(order):
        """docs/model.md §3.4: the window of the direction's calibrated timeline in force now."""
        value = flows[order].window_at(now)
        return numeric(value) if value != math.inf else math.inf

    def blocked(w, r):
        return grpc and r[0] in (0, 2) and conn_used.get((w, r), 0) >= window(r[0])

    # docs/model.md §3.3, strict enforcement: a prioritised transfer starts only once every
    # transfer of its worker and link with a strictly lower number has started in the step.
    strict = config.transfer is Transfer.PRIORITY and config.enforcement is Enforcement.STRICT
    started = {}  # (w, link) -> the transfers started in the worker's current step

    def lower_numbered_started(w, r, op):
        if not (strict and is_link[op]):
            return True
        lower = [o for o in range(graph.n_ops) if is_link[o] and res_of[o] == r
                 and graph.priority[o] < graph.priority[op]]
        return all((w, o) in started.get((w, r), set()) for o in lower)

    def head_may_start(w, r):
        items = scheduler[(w, r)].items
        return lower_numbered_started(w, r, min(items)[2])

    scheduler = {(w, r): Scheduler() for w in range(W) for r in set(res_of)}
    stream_left = {}
    served_once = set()
    waiting = {}
    ops_left = [0] * W
    step = [0] * W
    step_start = [[None] * N for _ in range(W)]
    step_end = [[None] * N for _ in range(W)]
    active = {key: [] for key in capacity}  # workers using each link, in activation order
    Q: list[Chunk] = []
    seq = [0]
    now = numeric(0)
    done = [0]

    speed = config.worker_speed or (1.0,) * W

    def work_of(w, op):
        work = numeric(float(graph.work[samples[w][step[w]], op]))
        if res_of[op] in ((1, 0), (4, 0)):  # the worker's computation or its parse lane
            return work / numeric(speed[w])
        return work

    def share(chunk):
        """Fraction of the resource this chunk gets (TPDS Alg. 1 SHARE, docs/model.md §4.1-4.3)."""
        order, m = chunk.resource
        if order in (0, 2):
            if sharing is None:
                return numeric(1)
            members = active[(order, m)]
            if sharing is Sharing.FCFS:
                return numeric(1) if members[0] == chunk.worker else numeric(0)
            if M == 1:
                return numeric(1) / len(members)
            # ICPE §5, generalised: most contended first, the worker's total at most 1.
            mine = sorted(((len(active[(order, k)]), -k) for k in range(M) if chunk.worker in active[(order, k)]),
                          reverse=True)
            left = numeric(1)
            for n, negk in mine:
                s = min(numeric(1) / n, left)
                if -negk == m:
                    return s
                left -= s
            raise AssertionError("worker not active on its own link")
        if hosts is None or order == 6:  # a pure delay uses no core
            return numeric(1)

        def host_of(worker, key):
            return hosts.worker_host[worker] if key[0] in (1, 4) else hosts.server_host[key[1]]

        host = host_of(chunk.worker, chunk.resource)
        busy = sum(1 for x in Q if x.resource[0] in (1, 3, 4, 5) and host_of(x.worker, x.resource) == host)
        cores = numeric(hosts.cores[host])
        return min(numeric(1), cores / busy)

    def rate(chunk):
        order, m = chunk.resource
        s = share(chunk)
        if order in (0, 2):
            r = capacity[(order, m)] * s
            if flow_cap is not None and sharing is Sharing.FLOW_CAP:
                r = min(r, flow_cap)
            if connection_cap[order] is not None:
                r = min(r, connection_cap[order])
            qwin, rev = queue_window[order], (2 - order, m)
            if qwin > 0 and active[rev]:
                # docs/model.md §4.5: acknowledgements wait behind the reverse direction's queue
                # ... and a link's queue holds no more than its buffer
                drain_rev = min(len(active[rev]) * queue_window[rev[0]], buffer[rev[0]]) / capacity[rev]
                drain = min(len(active[(order, m)]) * qwin, buffer[order]) / capacity[(order, m)]
                if drain < drain_rev:
                    r = min(r, qwin / drain_rev)
            return r
        return s

    def using(w, r):
        """docs/model.md §2.5: scheduler[w, r] 'not empty' = a chunk in service or ops queued."""
        return bool(scheduler[(w, r)]) or any(x.worker == w and x.resource == r for x in Q)

    def remove_chunk(w, r):
        """Take the next chunk of the scheduler (and put a split stream back at once)."""
        items = scheduler[(w, r)].items
        items.sort()
        _, _, op = items.pop(0)
        started.setdefault((w, r), set()).add((w, op))
        if not is_link[op]:
            work = work_of(w, op)
            link = int(graph.fifo_link[op])
            if link >= 0:  # a message: its delay, and its wait behind every byte queued on its link
                key = (0, link) if link < M else (2, link - M)
                qwin = queue_window[key[0]]
                if qwin > 0:
                    ahead = sum((min(qwin, max(x.remaining, numeric(0))) for x in Q if x.resource == key),
                                numeric(0))
                    work += min(ahead, buffer[key[0]]) / capacity[key]
            return Chunk(w, r, op, work, True)
        left = stream_left[(w, op)]
        if grpc:
            gwin = window(r[0])
            chunk = min(left, gwin - stream_sent[(w, op)], gwin - conn_used.get((w, r), 0))
            stream_sent[(w, op)] += chunk
            conn_used[(w, r)] = conn_used.get((w, r), 0) + chunk
            stream_left[(w, op)] = left - chunk
            return Chunk(w, r, op, chunk, stream_left[(w, op)] <= 0, chunk)
        if (config.transfer is Transfer.HTTP2 and (w, op) not in served_once and win != math.inf
                and left > numeric(win)):
            served_once.add((w, op))
            stream_left[(w, op)] = left - numeric(win)
            items.append((0, seq[0], op))
            seq[0] += 1
            return Chunk(w, r, op, numeric(win), False)
        return Chunk(w, r, op, left, True)

    def enqueue_chunk(w, r):
        """The next chunk of (w, r) starts; the worker is on the link while it has one."""
        chunk = remove_chunk(w, r)
        if r[0] in (0, 2) and w not in active[r]:
            active[r].append(w)
            marked.add(r)
        Q.append(chunk)

    def add(w, op):
        r = res_of[op]
        key = float(graph.priority[op]) if (config.transfer is Transfer.PRIORITY and is_link[op]) else 0
        scheduler[(w, r)].items.append((key, seq[0], op))
        seq[0] += 1

    def start(w, op, resume=False):
        r = res_of[op]
        if is_link[op] and not resume:
            stream_left[(w, op)] = work_of(w, op)
            stream_sent[(w, op)] = numeric(0)
            served_once.discard((w, op))
        if strict and is_link[op]:
            # The link may be idle with transfers waiting for their turn, this one's included.
            add(w, op)
            if not any(x.worker == w and x.resource == r for x in Q) and head_may_start(w, r):
                enqueue_chunk(w, r)
        elif using(w, r) or blocked(w, r):
            add(w, op)  # just queue it
        else:
            add(w, op)
            enqueue_chunk(w, r)  # w becomes active

    # docs/model.md §2.4: ops that become ready at one instant are examined in ascending op index;
    # under the recorded tie order (not for the priority scheduler) the ops of one resource
    # among them take those places in ascending (tie key, op index) order.
    tied = config.tie_order is TieOrder.RECORDED and config.transfer is not Transfer.PRIORITY

    def release(w, ops):
        ops = sorted(ops)
        if tied:
            turns = {}
            for op in sorted(ops, key=lambda o: (float(graph.tie_key[o]), o)):
                turns.setdefault(res_of[op], []).append(op)
            ops = [turns[res_of[op]].pop(0) for op in ops]
        for op in ops:
            start(w, op)

    def start_step(w):
        step_start[w][step[w]] = now
        for key in list(started):
            if key[0] == w:
                del started[key]
        for op in range(graph.n_ops):
            waiting[(w, op)] = n_preds[op]
        ops_left[w] = graph.n_ops
        release(w, roots)

    offsets = config.start_offsets_s or (0.0,) * W
    starts = sorted((numeric(offsets[w]), w) for w in range(W) if offsets[w] > 0)
    for w in range(W):
        if offsets[w] > 0:  # a delayed first step: set when it happens
            for op in range(graph.n_ops):
                waiting[(w, op)] = n_preds[op]
            ops_left[w] = graph.n_ops
        else:
            start_step(w)

    def take_next(w, r):
        """The resource is free: its next chunk, or the worker leaves the link."""
        if scheduler[(w, r)] and not blocked(w, r) and (not strict or head_may_start(w, r)):
            enqueue_chunk(w, r)  # back on the link after waiting for its window, if it was off
        elif r[0] in (0, 2) and w in active[r]:
            active[r].remove(w)
            marked.add(r)

    def served(k):
        return sum((rate(x) for x in Q if x.resource == k), numeric(0))

    def advance(dt):
        """Move every chunk and every token bucket ``dt`` on from ``now`` at the current rates."""
        rates_now = {id(x): rate(x) for x in Q}
        serving = {k: served(k) for k in peak}
        for x in Q:
            x.remaining -= dt * rates_now[id(x)]
        for k in peak:
            if bucket[k] > 0:
                tokens[k] = min(bucket[k], max(numeric(0), tokens[k] + (sustained[k] - serving[k]) * dt))

    def settle_capacities():
        """End of an event: a link whose busy workers changed runs at its peak while it has tokens."""
        if M > 1 and sharing in (Sharing.PS, Sharing.FLOW_CAP):
            # the direction's shares are coupled across its servers (ICPE §5): all are re-decided
            marked.update({(k[0], m) for k in list(marked) for m in range(M)})
        for k in list(marked):
            if queue_window[k[0]] > 0:
                marked.add((2 - k[0], k[1]))  # its reverse link is re-rated too (acknowledgements)
        for k in sorted(marked):
            if bucket[k] > 0:
                capacity[k] = peak[k] if tokens[k] > 0 else sustained[k]
        marked.clear()

    def eta_of(x):
        r = rate(x)
        return x.remaining / r if x.remaining > 0 and r > 0 else (numeric(0) if x.remaining <= 0 else math.inf)

    def token_event():
        """The next moment a link at its peak runs out of tokens: (time, link) or None."""
        best = None
        for k in sorted(peak):
            excess = served(k) - sustained[k]
            if bucket[k] > 0 and capacity[k] > sustained[k] and excess > 0:
                t = now + tokens[k] / excess
                if best is None or t < best[0]:
                    best = (t, k)
        return best

    settle_capacities()
    while Q or returns or starts:
        next_end = min(eta_of(x) for x in Q) if Q else math.inf
        dry = token_event()
        if dry is not None and dry[0] < now + next_end and (not returns or dry[0] < min(returns)[0]) \
                and (not starts or dry[0] < starts[0][0]):
            # A link's tokens run out (after chunk ends, window returns and starts at one instant).
            t, k = dry
            advance(t - now)
            now = t
            tokens[k] = numeric(0)
            capacity[k] = sustained[k]
            marked.add(k)  # re-rated as if its busy workers had changed, its reverse link too
            settle_capacities()
            continue
        if starts and starts[0][0] < now + next_end and (not returns or starts[0][0] < min(returns)[0]):
            # A worker's delayed first step; at one instant, after chunk ends and window returns.
            t, w = starts.pop(0)
            advance(t - now)
            now = t
            start_step(w)
            settle_capacities()
            continue
        if returns and min(returns)[0] < now + next_end:
            # Window returns strictly before the next chunk end (at a tie the chunk ends first);
            # at one time, link slots in (worker, resource) order.
            t = min(returns)[0]
            advance(t - now)
            now = t
            due = sorted({(w, r) for (tt, w, r, _, _) in returns if tt <= now}, key=lambda k: (k[0], k[1]))
            w, r = due[0]
            mine = [e for e in returns if e[1] == w and e[2] == r and e[0] <= now]
            for e in mine:
                returns.remove(e)
                _, _, _, size, op = e
                conn_used[(w, r)] -= size
                if op >= 0:
                    stream_sent[(w, op)] -= size
                    if (w, op) in paused and stream_sent[(w, op)] < window(r[0]):
                        paused.discard((w, op))
                        start(w, op, resume=True)
            if not any(x.worker == w and x.resource == r for x in Q):
                take_next(w, r)
            settle_capacities()
            continue
        etas = [(eta_of(x), x.worker, x.resource, x) for x in Q]
        etas.sort(key=lambda e: (e[0], e[1], e[2]))
        eta, w, r, nxt = etas[0]
        advance(eta)
        now = now + eta
        Q.remove(nxt)
        if grpc and is_link[nxt.op] and not (nxt.is_last and nxt.size == 0):  # an empty last chunk returns nothing
            flow = flows[r[0]]
            # docs/model.md §11.2: the update leaves when the bytes arrive, and crosses back
            delay = flow.update_delay_s + (cluster.latency_downlink_s + cluster.latency_uplink_s)
            returns.append((now + numeric(delay), w, r, nxt.size, -1 if nxt.is_last else nxt.op))
            if not nxt.is_last:
                if stream_sent[(w, nxt.op)] >= window(r[0]):
                    paused.add((w, nxt.op))
                else:  # held up by the connection window only: stays at the head
                    scheduler[(w, r)].items.append((-math.inf, -seq[0], nxt.op))
                    seq[0] += 1
        if nxt.is_last:
            ops_left[w] -= 1
            ready = []
            for d in succ[nxt.op]:
                waiting[(w, d)] -= 1
                if waiting[(w, d)] == 0:
                    ready.append(d)
            release(w, ready)
        if not any(x.worker == w and x.resource == r for x in Q):
            take_next(w, r)
        if ops_left[w] == 0:
            step_end[w][step[w]] = now
            step[w] += 1
            if config.mode is Mode.ASYNC:
                if step[w] < N:
                    start_step(w)
            else:
                done[0] += 1
                if done[0] == W and step[w] < N:
                    done[0] = 0
                    for v in range(W):
                        start_step(v)
        settle_capacities()
    return step_start, step_end
