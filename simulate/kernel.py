"""The compiled event loop of the trace-generation simulation (ICPE Alg. 3.1, TPDS Alg. 1).

The semantics are those of SPEC §3 ("precise semantics"); the data layout is chosen for
speed:

- One **chunk slot** per (worker, resource): ``g = w * n_slots + slot``, with slots ordered
  DOWNLINK_0..M-1, WORKER, UPLINK_0..M-1, PS_0..M-1, so that ``g`` orders ties exactly as
  SPEC's (time, worker, resource) rule. A slot runs at most one chunk.
- An **indexed binary heap** over the busy slots, keyed by (finish time, g): O(log G) per
  event, at most one entry per slot, no stale entries.
- A chunk keeps its remaining work, its rate and the time both were last set. Rates
  change only when a link's or a host's set of busy workers changes; then only the chunks
  sharing that link (with several servers: that direction) or host are brought up to date
  and re-keyed. Everything else is untouched.
- Ready ops wait in a ring buffer per slot (FIFO, and HTTP/2's round of streams), or, for
  an enforced transfer order, in a binary heap keyed by (priority, sequence number).
- ``grpc`` links (SPEC §3) keep per-connection flow control: the bytes in flight that the
  receiver has not yet returned by WINDOW_UPDATE, per connection and per stream. A chunk
  is as much of the head stream as both windows allow. Its bytes come back one
  window-update delay after it ends, through a ring buffer per link slot (returns are
  created in time order and the delay is constant, so the buffer stays sorted), served by
  a **timer entry** ``G + g`` in the same heap: at equal times chunk ends (``g < G``) come
  before window returns, which come in slot order.

Work is in bytes for transfers and in seconds for computation; a rate is bytes/s or
seconds of work per second.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simulate.codes import Action, Scheduler, Share




@njit(cache=True, inline="always", error_model="numpy")
def _before(ev_t, a, b):
    ta = ev_t[a]
    tb = ev_t[b]
    return ta < tb or (ta == tb and a < b)


@njit(cache=True, inline="always", error_model="numpy")
def _sift_up(heap, hpos, ev_t, i):
    g = heap[i]
    while i > 0:
        p = (i - 1) >> 1
        q = heap[p]
        if _before(ev_t, g, q):
            heap[i] = q
            hpos[q] = i
            i = p
        else:
            break
    heap[i] = g
    hpos[g] = i


@njit(cache=True, inline="always", error_model="numpy")
def _sift_down(heap, hpos, ev_t, i, n):
    g = heap[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _before(ev_t, heap[c + 1], heap[c]):
            c += 1
        q = heap[c]
        if _before(ev_t, q, g):
            heap[i] = q
            hpos[q] = i
            i = c
        else:
            break
    heap[i] = g
    hpos[g] = i


@njit(cache=True, inline="always", error_model="numpy")
def _heap_set(heap, hpos, ev_t, heap_size, g, t):
    """Insert slot ``g`` with finish time ``t``, or move it if present."""
    i = hpos[g]
    if i < 0:
        n = heap_size[0]
        heap[n] = g
        hpos[g] = n
        heap_size[0] = n + 1
        ev_t[g] = t
        _sift_up(heap, hpos, ev_t, n)
    else:
        old = ev_t[g]
        ev_t[g] = t
        if t < old:
            _sift_up(heap, hpos, ev_t, i)
        else:
            _sift_down(heap, hpos, ev_t, i, heap_size[0])


@njit(cache=True, inline="always", error_model="numpy")
def _heap_remove(heap, hpos, ev_t, heap_size, g):
    """Take slot ``g`` out of the heap."""
    i = hpos[g]
    n = heap_size[0] - 1
    heap_size[0] = n
    hpos[g] = -1
    if i < n:
        moved = heap[n]
        heap[i] = moved
        hpos[moved] = i
        _sift_down(heap, hpos, ev_t, i, n)
        _sift_up(heap, hpos, ev_t, hpos[moved])


@njit(cache=True, inline="always", error_model="numpy")
def _q_before(qp, qs, a, b):
    return qp[a] < qp[b] or (qp[a] == qp[b] and qs[a] < qs[b])


@njit(cache=True, inline="always", error_model="numpy")
def _q_push(qp, qs, qo, qlen, qbase, g, prio, seq, op):
    base = qbase[g]
    i = qlen[g]
    qlen[g] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if qp[base + p] < prio or (qp[base + p] == prio and qs[base + p] < seq):
            break
        qp[base + i] = qp[base + p]
        qs[base + i] = qs[base + p]
        qo[base + i] = qo[base + p]
        i = p
    qp[base + i] = prio
    qs[base + i] = seq
    qo[base + i] = op


@njit(cache=True, inline="always", error_model="numpy")
def _q_pop(qp, qs, qo, qlen, qbase, g):
    base = qbase[g]
    top = qo[base]
    n = qlen[g] - 1
    qlen[g] = n
    if n > 0:
        lp, ls, lo = qp[base + n], qs[base + n], qo[base + n]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and _q_before(qp, qs, base + c + 1, base + c):
                c += 1
            if qp[base + c] < lp or (qp[base + c] == lp and qs[base + c] < ls):
                qp[base + i] = qp[base + c]
                qs[base + i] = qs[base + c]
                qo[base + i] = qo[base + c]
                i = c
            else:
                break
        qp[base + i] = lp
        qs[base + i] = ls
        qo[base + i] = lo
    return top


@njit(cache=True, inline="always", error_model="numpy")
def _link_share(w, link, link_n, link_list, member, sharing, n_servers, link_dir, taken):
    """Fraction of ``link``'s bandwidth that worker ``w`` gets (SPEC §3 Share)."""
    if sharing == Share.NONE:
        return 1.0
    if sharing == Share.FCFS:
        return 1.0 if link_list[link, 0] == w else 0.0
    if n_servers == 1:
        return 1.0 / link_n[link]
    # Several servers (ICPE §5, generalised): the worker's shares across the servers of one
    # direction add up to at most 1. Its most contended links take their equal share first.
    d = link_dir[link]
    left = 1.0
    taken[:] = False
    while True:
        best = -1
        best_n = -1
        for m in range(n_servers):
            other = d * n_servers + m
            if member[other, w] and not taken[m]:
                if link_n[other] > best_n:
                    best_n = link_n[other]
                    best = m
        if best < 0:
            return 0.0
        taken[best] = True
        share = 1.0 / best_n
        if share > left:
            share = left
        if d * n_servers + best == link:
            return share
        left -= share


@njit(cache=True, inline="always", error_model="numpy")
def _act(act_kind, act_w, act_x, n_act, kind, w, x):
    """Append an action (an :class:`~simulate.codes.Action` on op or slot ``x``) for worker ``w``;
    return the new count."""
    act_kind[n_act] = kind
    act_w[n_act] = w
    act_x[n_act] = x
    return n_act + 1


@njit(cache=True, inline="always", error_model="numpy")
def _ring_append(qo, qbase, qhead, qlen, cap, g, op):
    """Put ``op`` at the back of slot ``g``'s FIFO ring buffer (capacity ``cap``)."""
    tail = qhead[g] + qlen[g]
    if tail >= cap:
        tail -= cap
    qo[qbase[g] + tail] = op
    qlen[g] += 1


@njit(cache=True, inline="always", error_model="numpy")
def _window(win_t, win_v, win_n, d, now):
    """The receiver's window in direction ``d`` at time ``now`` (its calibrated timeline)."""
    value = win_v[d, 0]
    for j in range(1, win_n[d]):
        if win_t[d, j] > now:
            break
        value = win_v[d, j]
    return value


@njit(cache=True, inline="always", error_model="numpy")
def _grpc_blocked(slot_sched, slot, conn_used, g, win_t, win_v, win_n, d, now):
    """True when ``g`` is a grpc link whose connection window is used up."""
    return slot_sched[slot] == Scheduler.GRPC and conn_used[g] >= _window(win_t, win_v, win_n, d, now)


@njit(cache=True, error_model="numpy")
def run_kernel(inp, out):
    """Simulate every worker's steps; return (op_events, trace_count).

    ``inp`` is a :class:`simulate.engine.KernelInputs`; the step times and the trace (chunks
    of each worker's first ``inp.trace_steps`` steps) go to ``out``, a
    :class:`simulate.engine.KernelOutputs`. Only ``grpc`` links use the window timelines.
    Worker ``w`` starts its first step at ``inp.start_at_s[w]`` (a timer entry ``2G + w``;
    at one instant chunk ends come first, then window returns, then starts).

    Each event runs three phases. (1) The finished chunk's op releases its dependents
    (in successor order) and its own slot takes its next chunk, as actions on a list that
    the step logic may extend with the next step's roots. (2) Every action either queues
    an op or starts a chunk; links and hosts whose set of busy workers changed are marked.
    (3) The chunks on marked links and hosts, and the new chunks, get their rates and
    finish times. Only phase (3) touches the event heap.
    """
    succ_ptr, succ_idx, in_degree, op_slot = inp.succ_ptr, inp.succ_idx, inp.in_degree, inp.op_slot
    work, priority, samples, n_slots = inp.work, inp.priority, inp.samples, inp.n_slots
    slot_link, slot_sched, slot_cap, slot_host = inp.slot_link, inp.slot_scheduler, inp.slot_queue_cap, inp.slot_host
    link_capacity, link_dir, n_servers, sharing = inp.link_capacity_Bps, inp.link_direction, inp.n_servers, inp.share
    flow_cap, win_bytes, sync, host_cores = inp.flow_cap_Bps, inp.win_bytes, inp.sync, inp.host_cores
    win_t, win_v, win_n = inp.flow_window_t_s, inp.flow_window_bytes, inp.flow_window_n
    update_delay, start_at, trace_steps = inp.flow_update_delay_s, inp.start_at_s, inp.trace_steps
    step_start, step_end = out.step_start_s, out.step_end_s
    trace_w, trace_op, trace_t = out.trace_worker_step_slot, out.trace_op, out.trace_span_s
    n_ops = in_degree.shape[0]
    n_workers, n_steps = samples.shape
    n_links = link_capacity.shape[0]
    n_hosts = host_cores.shape[0]
    G = n_workers * n_slots
    roots = np.flatnonzero(in_degree == 0)

    cur_op = np.full(G, -1, dtype=np.int64)
    cur_last = np.zeros(G, dtype=np.bool_)
    cur_rem = np.zeros(G)
    cur_rate = np.zeros(G)
    cur_t = np.zeros(G)
    cur_t0 = np.zeros(G)
    stamp = np.full(G, -1, dtype=np.int64)
    # Heap entries 0..G-1 are chunk slots, G..2G-1 the window-return timers of grpc links,
    # 2G..2G+W-1 the workers' delayed starts.
    heap = np.empty(2 * G + n_workers, dtype=np.int64)
    hpos = np.full(2 * G + n_workers, -1, dtype=np.int64)
    ev_t = np.full(2 * G + n_workers, np.inf)
    slot_off = np.zeros(n_slots + 1, dtype=np.int64)
    for s in range(n_slots):
        slot_off[s + 1] = slot_off[s] + slot_cap[s]
    qbase = np.empty(G, dtype=np.int64)
    for w in range(n_workers):
        for s in range(n_slots):
            qbase[w * n_slots + s] = w * slot_off[n_slots] + slot_off[s]
    qtotal = n_workers * slot_off[n_slots]
    qp = np.empty(qtotal)
    qs = np.empty(qtotal, dtype=np.int64)
    qo = np.empty(qtotal, dtype=np.int64)
    qlen = np.zeros(G, dtype=np.int64)
    qhead = np.zeros(G, dtype=np.int64)
    srem = np.zeros(n_workers * n_ops)
    sserved = np.zeros(n_workers * n_ops, dtype=np.bool_)
    # grpc flow control: bytes not yet returned per stream and per connection, the paused
    # streams, and each link slot's pending returns (time, bytes, stream op or -1).
    ssent = np.zeros(n_workers * n_ops)
    spaused = np.zeros(n_workers * n_ops, dtype=np.bool_)
    conn_used = np.zeros(G)
    cur_size = np.zeros(G)
    ret_cap = np.zeros(n_slots, dtype=np.int64)
    for s in range(n_slots):
        if slot_sched[s] == Scheduler.GRPC:
            ret_cap[s] = 2 * slot_cap[s] + 8
    ret_off = np.zeros(n_slots + 1, dtype=np.int64)
    for s in range(n_slots):
        ret_off[s + 1] = ret_off[s] + ret_cap[s]
    ret_total = max(n_workers * ret_off[n_slots], 1)
    ret_t = np.empty(ret_total)
    ret_b = np.empty(ret_total)
    ret_o = np.empty(ret_total, dtype=np.int64)
    ret_head = np.zeros(G, dtype=np.int64)
    ret_len = np.zeros(G, dtype=np.int64)
    waiting = np.empty(n_workers * n_ops, dtype=np.int64)
    ops_left = np.zeros(n_workers, dtype=np.int64)
    step_k = np.zeros(n_workers, dtype=np.int64)
    L = max(n_links, 1)
    link_list = np.zeros((L, n_workers), dtype=np.int64)
    link_n = np.zeros(L, dtype=np.int64)
    member = np.zeros((L, n_workers), dtype=np.bool_)
    link_mark = np.zeros(L, dtype=np.bool_)
    link_slot = np.zeros(L, dtype=np.int64)
    for s in range(n_slots):
        if slot_link[s] >= 0:
            link_slot[slot_link[s]] = s
    taken = np.zeros(max(n_servers, 1), dtype=np.bool_)
    H = max(n_hosts, 1)
    host_list = np.zeros((H, G), dtype=np.int64)
    host_n = np.zeros(H, dtype=np.int64)
    host_pos = np.full(G, -1, dtype=np.int64)
    host_mark = np.zeros(H, dtype=np.bool_)
    coupled = n_servers > 1 and (sharing == Share.PS or sharing == Share.FLOW_CAP)
    # Actions of one event (Action codes: an op ready, a slot free, a grpc stream resuming).
    cap_act = n_workers * (roots.shape[0] + 2) + n_ops + 2
    act_kind = np.zeros(cap_act, dtype=np.int64)
    act_w = np.zeros(cap_act, dtype=np.int64)
    act_x = np.zeros(cap_act, dtype=np.int64)
    pend = np.zeros(G, dtype=np.int64)
    heap_size = np.zeros(1, dtype=np.int64)  # an array: the inlined heap helpers update it in place
    trace_cap = trace_w.shape[0]
    seq = 0
    op_events = 0
    n_trace = 0
    done = 0
    event = 0

    now = 0.0
    n_act = 0
    for w in range(n_workers):
        waiting[w * n_ops:(w + 1) * n_ops] = in_degree
        ops_left[w] = n_ops
        if start_at[w] > 0.0:
            step_start[w, 0] = start_at[w]
            _heap_set(heap, hpos, ev_t, heap_size, 2 * G + w, start_at[w])
            continue
        for r in roots:
            n_act = _act(act_kind, act_w, act_x, n_act, Action.OP_READY, w, r)
    ev_w = -1  # the worker whose chunk just finished (-1: the initial pseudo-event)
    ev_g = -1
    ev_timer = False

    while True:
        # ---- phase 2: carry out the actions
        n_pend = 0
        i = 0
        step_checked = ev_w < 0 or ev_timer  # a window return ends no op, hence no step
        while True:
            while i < n_act:
                w = act_w[i]
                kind = act_kind[i]
                to_start = -1
                if kind != Action.SLOT_FREE:  # an op is ready, or a paused grpc stream got its window back
                    op = act_x[i]
                    slot = op_slot[op]
                    g = w * n_slots + slot
                    if kind == Action.OP_READY and slot_link[slot] >= 0:
                        srem[w * n_ops + op] = work[samples[w, step_k[w]], op]
                        sserved[w * n_ops + op] = False
                        ssent[w * n_ops + op] = 0.0
                    if cur_op[g] >= 0 or qlen[g] > 0 or _grpc_blocked(
                            slot_sched, slot, conn_used, g, win_t, win_v, win_n, link_dir[max(slot_link[slot], 0)],
                            now):
                        if slot_sched[slot] == Scheduler.PRIORITY:
                            _q_push(qp, qs, qo, qlen, qbase, g, priority[op], seq, op)
                            seq += 1
                        else:  # FIFO: a ring buffer
                            _ring_append(qo, qbase, qhead, qlen, slot_cap[slot], g, op)
                    else:
                        to_start = op
                else:
                    slot = act_x[i]
                    g = w * n_slots + slot
                    if cur_op[g] < 0:
                        if qlen[g] > 0 and not _grpc_blocked(slot_sched, slot, conn_used, g, win_t, win_v, win_n,
                                                             link_dir[max(slot_link[slot], 0)], now):
                            if slot_sched[slot] == Scheduler.PRIORITY:
                                to_start = _q_pop(qp, qs, qo, qlen, qbase, g)
                            else:
                                to_start = qo[qbase[g] + qhead[g]]
                                qhead[g] += 1
                                if qhead[g] == slot_cap[slot]:
                                    qhead[g] = 0
                                qlen[g] -= 1
                        else:
                            link = slot_link[slot]
                            if link >= 0:
                                if not member[link, w]:
                                    i += 1  # already off the link (a grpc connection waiting for its window)
                                    continue
                                # The worker leaves the link (nothing to send, or a grpc connection
                                # out of window); the others keep their order (FCFS).
                                n = link_n[link]
                                pos = 0
                                while link_list[link, pos] != w:
                                    pos += 1
                                for j in range(pos, n - 1):
                                    link_list[link, j] = link_list[link, j + 1]
                                link_n[link] = n - 1
                                member[link, w] = False
                                link_mark[link] = True
                            else:
                                h = slot_host[g]
                                if h >= 0:
                                    pos = host_pos[g]
                                    moved = host_list[h, host_n[h] - 1]
                                    host_list[h, pos] = moved
                                    host_pos[moved] = pos
                                    host_n[h] -= 1
                                    host_pos[g] = -1
                                    host_mark[h] = True
                if to_start >= 0:
                    op = to_start
                    link = slot_link[slot]
                    last = True
                    if link >= 0:
                        k = w * n_ops + op
                        rem = srem[k]
                        if slot_sched[slot] == Scheduler.HTTP2 and not sserved[k] and rem > win_bytes:
                            # ICPE Fig. 12: the first service sends one window; the stream goes to
                            # the back of the queue as this chunk is taken (SPEC §3), and its second
                            # service sends the rest.
                            chunk = win_bytes
                            sserved[k] = True
                            srem[k] = rem - win_bytes
                            last = False
                            _ring_append(qo, qbase, qhead, qlen, slot_cap[slot], g, op)
                        elif slot_sched[slot] == Scheduler.GRPC:
                            # As much of the head stream as the stream and connection windows allow.
                            win = _window(win_t, win_v, win_n, link_dir[link], now)
                            chunk = rem
                            if win - ssent[k] < chunk:
                                chunk = win - ssent[k]
                            if win - conn_used[g] < chunk:
                                chunk = win - conn_used[g]
                            ssent[k] += chunk
                            conn_used[g] += chunk
                            srem[k] = rem - chunk
                            last = srem[k] <= 0.0
                            cur_size[g] = chunk
                        else:
                            chunk = rem
                            srem[k] = 0.0
                        if not member[link, w]:
                            member[link, w] = True
                            link_list[link, link_n[link]] = w
                            link_n[link] += 1
                            link_mark[link] = True
                    else:
                        chunk = work[samples[w, step_k[w]], op]
                        h = slot_host[g]
                        if h >= 0 and host_pos[g] < 0:
                            host_pos[g] = host_n[h]
                            host_list[h, host_n[h]] = g
                            host_n[h] += 1
                            host_mark[h] = True
                    cur_op[g] = op
                    cur_last[g] = last
                    cur_rem[g] = chunk
                    cur_rate[g] = 0.0
                    cur_t[g] = now
                    cur_t0[g] = now
                    pend[n_pend] = g
                    n_pend += 1
                i += 1
            if step_checked:
                break
            step_checked = True
            w = ev_w
            if ops_left[w] == 0:
                k = step_k[w]
                step_end[w, k] = now
                step_k[w] = k + 1
                first, count = w, 0
                if not sync:
                    if k + 1 < n_steps:
                        count = 1
                else:
                    done += 1
                    if done == n_workers and k + 1 < n_steps:
                        done = 0
                        first, count = 0, n_workers
                for v in range(first, first + count):
                    waiting[v * n_ops:(v + 1) * n_ops] = in_degree
                    ops_left[v] = n_ops
                    step_start[v, step_k[v]] = now
                    for r in roots:
                        n_act = _act(act_kind, act_w, act_x, n_act, Action.OP_READY, v, r)

        if ev_w >= 0 and not ev_timer and cur_op[ev_g] < 0:
            _heap_remove(heap, hpos, ev_t, heap_size, ev_g)

        # ---- phase 3: settle rates where the set of busy workers changed, and for new chunks
        event += 1
        for j in range(n_pend):
            stamp[pend[j]] = event
        if coupled:
            for link in range(n_links):
                if link_mark[link]:
                    # Shares are coupled across the servers of one direction (ICPE §5).
                    d = link_dir[link]
                    for m in range(n_servers):
                        link_mark[d * n_servers + m] = True
        n_rr = n_pend
        for link in range(n_links):
            if link_mark[link]:
                link_mark[link] = False
                s = link_slot[link]
                for j in range(link_n[link]):
                    g = link_list[link, j] * n_slots + s
                    if stamp[g] != event:
                        stamp[g] = event
                        pend[n_rr] = g
                        n_rr += 1
        for h in range(n_hosts):
            if host_mark[h]:
                host_mark[h] = False
                for j in range(host_n[h]):
                    g = host_list[h, j]
                    if stamp[g] != event:
                        stamp[g] = event
                        pend[n_rr] = g
                        n_rr += 1
        for j in range(n_rr):
            g = pend[j]
            rem = cur_rem[g]
            elapsed = now - cur_t[g]
            if elapsed > 0.0:
                rem -= cur_rate[g] * elapsed
                if rem < 0.0:
                    rem = 0.0
            w = g // n_slots
            slot = g - w * n_slots
            link = slot_link[slot]
            if link >= 0:
                rate = link_capacity[link] * _link_share(w, link, link_n, link_list, member, sharing, n_servers,
                                                         link_dir, taken)
                if sharing == Share.FLOW_CAP and rate > flow_cap:
                    rate = flow_cap
            else:
                rate = 1.0
                h = slot_host[g]
                if h >= 0 and host_n[h] > host_cores[h]:
                    rate = host_cores[h] / host_n[h]
            cur_rem[g] = rem
            cur_rate[g] = rate
            cur_t[g] = now
            if rem <= 0.0:
                t = now
            elif rate > 0.0:
                t = now + rem / rate
            else:
                t = np.inf
            _heap_set(heap, hpos, ev_t, heap_size, g, t)

        # ---- phase 1: the next chunk to finish
        if heap_size[0] == 0:
            break
        g = heap[0]
        if ev_t[g] == np.inf:
            break  # nothing can progress (cannot happen with the sharing models here)
        # The finished slot stays in the heap: if it takes a new chunk, phase 3 re-keys it in
        # place (one sift instead of a pop and a push); if it goes idle, it is removed then.
        now = ev_t[g]
        if g >= 2 * G:
            # A worker's delayed start: its first step's roots.
            w = g - 2 * G
            _heap_remove(heap, hpos, ev_t, heap_size, g)
            n_act = 0
            for r in roots:
                n_act = _act(act_kind, act_w, act_x, n_act, Action.OP_READY, w, r)
            ev_w = w
            ev_g = g
            ev_timer = True
            continue
        if g >= G:
            # Window returns of grpc link slot g - G: connection bytes back, paused streams resume.
            gl = g - G
            w = gl // n_slots
            slot = gl - w * n_slots
            d = link_dir[slot_link[slot]]
            base = w * ret_off[n_slots] + ret_off[slot]
            n_act = 0
            while ret_len[gl] > 0 and ret_t[base + ret_head[gl]] <= now:
                j = base + ret_head[gl]
                conn_used[gl] -= ret_b[j]
                op = ret_o[j]
                if op >= 0:
                    kk = w * n_ops + op
                    ssent[kk] -= ret_b[j]
                    if spaused[kk] and ssent[kk] < _window(win_t, win_v, win_n, d, now):
                        spaused[kk] = False
                        n_act = _act(act_kind, act_w, act_x, n_act, Action.STREAM_RESUMES, w, op)
                ret_head[gl] += 1
                if ret_head[gl] == ret_cap[slot]:
                    ret_head[gl] = 0
                ret_len[gl] -= 1
            if ret_len[gl] > 0:
                _heap_set(heap, hpos, ev_t, heap_size, g, ret_t[base + ret_head[gl]])
            else:
                _heap_remove(heap, hpos, ev_t, heap_size, g)
            n_act = _act(act_kind, act_w, act_x, n_act, Action.SLOT_FREE, w, slot)
            ev_w = w
            ev_g = g
            ev_timer = True
            continue
        ev_timer = False
        w = g // n_slots
        slot = g - w * n_slots
        op = cur_op[g]
        k = step_k[w]
        if k < trace_steps and n_trace < trace_cap:
            trace_w[n_trace, 0] = w
            trace_w[n_trace, 1] = k
            trace_w[n_trace, 2] = slot
            trace_op[n_trace] = op
            trace_t[n_trace, 0] = cur_t0[g]
            trace_t[n_trace, 1] = now
            n_trace += 1
        cur_op[g] = -1
        n_act = 0
        if slot_sched[slot] == Scheduler.GRPC:
            # The receiver returns this chunk's bytes one update delay from now. A stream that
            # is not finished either waits for its own window (paused) or, held up only by the
            # connection window, stays at the head of the queue.
            d = link_dir[slot_link[slot]]
            kk = w * n_ops + op
            if ret_len[g] == ret_cap[slot]:
                raise ValueError("grpc window-return buffer overflow")
            base = w * ret_off[n_slots] + ret_off[slot]
            tail = ret_head[g] + ret_len[g]
            if tail >= ret_cap[slot]:
                tail -= ret_cap[slot]
            ret_t[base + tail] = now + update_delay[d]
            ret_b[base + tail] = cur_size[g]
            ret_o[base + tail] = -1 if cur_last[g] else op
            ret_len[g] += 1
            if ret_len[g] == 1:
                _heap_set(heap, hpos, ev_t, heap_size, G + g, now + update_delay[d])
            if not cur_last[g]:
                if ssent[kk] >= _window(win_t, win_v, win_n, d, now):
                    spaused[kk] = True
                else:
                    h = qhead[g] - 1
                    if h < 0:
                        h += slot_cap[slot]
                    qhead[g] = h
                    qo[qbase[g] + h] = op
                    qlen[g] += 1
        if cur_last[g]:
            ops_left[w] -= 1
            op_events += 1
            for e in range(succ_ptr[op], succ_ptr[op + 1]):
                d = succ_idx[e]
                j = w * n_ops + d
                waiting[j] -= 1
                if waiting[j] == 0:
                    n_act = _act(act_kind, act_w, act_x, n_act, Action.OP_READY, w, d)
        n_act = _act(act_kind, act_w, act_x, n_act, Action.SLOT_FREE, w, slot)
        ev_w = w
        ev_g = g
    return op_events, n_trace
