"""The compiled event loop of the trace-generation simulation (ICPE Alg. 3.1, TPDS Alg. 1).

The semantics are those of docs/model.md §2.5 ("precise semantics"); the data layout is chosen for
speed:

- One **chunk slot** per (worker, resource): ``g = w * n_slots + slot``, with slots ordered
  DOWNLINK_0..M-1, WORKER, UPLINK_0..M-1, PS_0..M-1, so that ``g`` orders ties exactly as
  the (time, worker, resource) rule of docs/model.md §2.4. A slot runs at most one chunk.
- An **indexed binary heap** over the busy slots, keyed by (finish time, g): O(log G) per
  event, at most one entry per slot, no stale entries.
- A chunk keeps its remaining work, its rate and the time both were last set. Rates
  change only when a link's or a host's set of busy workers changes; then only the chunks
  sharing that link (with several servers: that direction) or host are brought up to date
  and re-keyed. Everything else is untouched.
- A link whose chunks all run at one rate (processor sharing without shares coupled across
  servers, or no sharing; not FCFS) keeps a **virtual clock** instead: the bytes each of its
  chunks has received, advanced at the per-chunk rate. A chunk ends when the clock reaches
  its start plus its bytes, so a change of rate touches the clock and not the chunks: the
  link's chunks wait in a heap of its own keyed by (clock at their end, slot), and only the
  first of them is in the event heap. A change of a link's busy workers costs O(log W)
  instead of O(W) (the scale benchmark: W = 1024 workers, about 500 chunks per link).
- Ops that become ready at one event are examined in the order of ``succ_idx`` (an op's
  successors) and ``roots`` (a step's start), which :func:`simulate.engine.kernel_inputs` lays
  out: ascending op index, or per slot the recorded tie order (docs/model.md §2.4).
- Ready ops wait in a ring buffer per slot (FIFO, and HTTP/2's round of streams), or, for
  an enforced transfer order, in a binary heap keyed by (priority, sequence number). Under
  strict enforcement (docs/model.md §3.3) the heap's first op starts only once as many
  transfers of its slot have started in the worker's step as have a lower number
  (``need``): a slot may then stay idle with ops queued.
- ``grpc`` links (docs/model.md §3.4) keep per-connection flow control: the bytes in flight that the
  receiver has not yet returned by WINDOW_UPDATE, per connection and per stream. A chunk
  is as much of the head stream as both windows allow. Its bytes come back one
  window-update delay after it ends, through a ring buffer per link slot (returns are
  created in time order and the delay is constant, so the buffer stays sorted), served by
  a **timer entry** ``G + g`` in the same heap: at equal times chunk ends (``g < G``) come
  before window returns, which come in slot order.
- A link with a **token bucket** (docs/model.md §4.4) runs at its peak rate while it has
  tokens and at its sustained rate after. Tokens are integrated lazily, at the served rate
  of the interval, whenever the link's chunks change; the moment they run out is a timer
  entry ``2G + W + link``, at which the link's chunks are re-rated at the sustained rate.
  Whether a link runs at its peak is decided only when its set of busy workers changes or
  its tokens run out, so that all its chunks always share one capacity.
- A link with a **queue window** (docs/model.md §4.5) is a FIFO of window-limited
  connections, each keeping its window (or what is left of its chunk) queued there. A
  message that crosses the link (docs/model.md §2.9) waits behind those bytes. The
  connections' acknowledgements cross the reverse direction's FIFO: a link whose busy
  workers' windows weigh less (relative to its rate) than the reverse link's gives each of
  them at most its window per reverse queueing delay, so a change of either direction's
  busy workers re-rates both.

Work is in bytes for transfers and in seconds for computation; a rate is bytes/s or
seconds of work per second.

The code reads top-down: :func:`run_kernel` and its event loop, then the helpers of each
phase, then the heap, queue, link and host operations: small functions that numba inlines,
so that the loop compiles into one function without calls. The inputs and outputs are
:class:`simulate.kernel_io.KernelInputs` and :class:`simulate.kernel_io.KernelOutputs`; the
loop's own state is a :class:`State` of the small named tuples defined here, allocated by
:func:`new_state`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numba import njit
from numba.core.cpu import CPUTargetOptions

from simulate.codes import Action, Scheduler, Share

if TYPE_CHECKING:
    from simulate.kernel_io import KernelInputs, KernelOutputs

# A helper is inlined into the loop's IR, and compiled with the loop's options (_event_loop).
_inline = njit(inline="always")

NO_OP = -1  # a slot without a chunk; a window return that resumes no stream
LINK_RESIDUE_BYTES = 1e-6  # a transfer with less left than this (far below a bit) is done
# A virtual clock beyond this many bytes is moved back to 0 (float spacing there: 1.2e-7 bytes).
CLOCK_REBASE_BYTES = 2.0 ** 30
RETURN_HEADROOM = 8  # window returns a grpc slot has room for beyond two per queued op


class Heap(NamedTuple):
    """An indexed binary min-heap of event entries, keyed by (time, entry).

    Entries ``0..G-1`` are chunk slots (the chunk's finish time), ``G..2G-1`` the
    window-return timers of grpc link slots, ``2G..2G+W-1`` the workers' delayed starts,
    ``2G+W..2G+W+L-1`` the moments the links' token buckets run dry.
    """

    entry: np.ndarray  # the entries, in heap order
    pos: np.ndarray    # each entry's index in ``entry``; -1 when it is not in the heap
    t_s: np.ndarray    # each entry's key time
    size: np.ndarray   # one element (an array, so that a helper can change it): the entries in the heap


class Chunks(NamedTuple):
    """The chunk each slot runs, and the slots whose rates the current event settles."""

    op: np.ndarray          # the chunk's op, NO_OP when the slot is idle
    last: np.ndarray        # True when the chunk ends its op (a cut or paused stream has more)
    rem: np.ndarray         # work left (bytes or seconds) as of ``set_s``
    rate: np.ndarray        # work per second since ``set_s``
    set_s: np.ndarray       # when ``rem`` and ``rate`` were last set
    start_s: np.ndarray     # when the chunk started (for the trace)
    size_bytes: np.ndarray  # a grpc chunk's bytes, returned to the windows after it ends
    stamp: np.ndarray       # the last event that put the slot on ``dirty``
    dirty: np.ndarray       # the slots whose rates the current event settles
    vfin: np.ndarray        # a link chunk on a virtual clock: its link's clock when it ends
    lh_pos: np.ndarray      # its index in its link's heap, -1 when it is in none


class Queues(NamedTuple):
    """Each slot's ready ops, in one flat buffer from ``base[g]``: a FIFO ring buffer, or for
    ``Scheduler.PRIORITY`` a binary heap keyed by (priority, sequence number)."""

    prio: np.ndarray  # heap only: the op's priority
    seq: np.ndarray   # heap only: the order ops were queued in, to break priority ties
    op: np.ndarray
    n: np.ndarray     # per slot: ops queued
    head: np.ndarray  # per slot: the ring buffer's first op
    base: np.ndarray  # per slot: where its part of the buffer begins


class Streams(NamedTuple):
    """Per (worker, op) of a link: the stream that carries the op's bytes."""

    rem_bytes: np.ndarray   # bytes not yet taken into a chunk
    served: np.ndarray      # HTTP/2: the first service (one window) is done
    sent_bytes: np.ndarray  # grpc: bytes the receiver has not yet returned to the stream's window
    paused: np.ndarray      # grpc: waiting for its own window to come back


class Flow(NamedTuple):
    """grpc flow control per link slot: the connection's bytes in flight, and its pending
    window returns (a ring buffer per slot, from ``ret_off[slot]`` in each worker's part)."""

    conn_bytes: np.ndarray  # per slot g: bytes the receiver has not yet returned to the connection
    ret_t_s: np.ndarray     # when the receiver's WINDOW_UPDATE gives the bytes back
    ret_bytes: np.ndarray
    ret_op: np.ndarray      # the stream to credit too, NO_OP once its op is done
    ret_head: np.ndarray    # per slot g
    ret_n: np.ndarray       # per slot g
    ret_cap: np.ndarray     # per slot of the layout (0 for slots that are not grpc links)
    ret_off: np.ndarray     # per slot of the layout, and the total at ``n_slots``


class Links(NamedTuple):
    """The workers busy on each link, in the order they became busy (FCFS needs it), and each
    link's token bucket."""

    workers: np.ndarray  # (L, W): the first ``n[link]`` entries
    n: np.ndarray
    member: np.ndarray   # (L, W)
    mark: np.ndarray     # the link's set of busy workers changed during this event
    slot: np.ndarray     # the link's slot in a worker's layout
    taken: np.ndarray    # scratch of _link_share: the servers already given a share
    capacity_Bps: np.ndarray  # the rate the link's chunks share now: its peak, or its sustained rate
    tokens: np.ndarray        # bytes of burst left, as of ``tokens_s``
    tokens_s: np.ndarray      # when ``tokens`` was last integrated
    served_Bps: np.ndarray    # the link's chunks' total rate since then
    stamp: np.ndarray         # the last event that put the link on ``touched``
    touched: np.ndarray       # the bucketed links whose chunks the current event changed
    # The virtual clock (processor sharing without coupled servers or FCFS: every chunk on a
    # link has the same rate): the bytes each chunk has received as of ``vt_s``, at ``vrate``
    # per chunk since; the link's chunks in a heap keyed by (clock at their end, slot), whose
    # first is the link's one entry in the event heap (``top``).
    vt: np.ndarray            # bytes per chunk, as of ``vt_s``
    vt_s: np.ndarray
    vrate: np.ndarray         # bytes/s per chunk since ``vt_s``
    lh_entry: np.ndarray      # (L, W): the link heap's chunk slots, the first ``lh_n[link]``
    lh_n: np.ndarray
    top: np.ndarray           # the chunk slot standing for the link in the event heap, -1: none
    rerate: np.ndarray        # the link's rate must be computed again in phase 3
    rekey: np.ndarray         # the link's first chunk must be (re)placed in the event heap in phase 3


class Hosts(NamedTuple):
    """The busy computation slots on each host, when tasks share hosts (docs/model.md §4.3)."""

    slots: np.ndarray  # (H, G): the first ``n[h]`` entries, in no particular order
    n: np.ndarray
    pos: np.ndarray    # per slot g: its index in ``slots``, -1 when not busy
    mark: np.ndarray   # the host's set of busy slots changed during this event


class Steps(NamedTuple):
    """Each worker's progress through its current step."""

    waiting: np.ndarray   # per (worker, op): predecessors not yet done
    ops_left: np.ndarray  # per worker
    k: np.ndarray         # per worker: the step it is in
    roots: np.ndarray     # the ops without predecessors, in the order a step queues them
    started: np.ndarray   # per slot g: strict enforcement's count of the transfers started in this step


class Actions(NamedTuple):
    """The actions of one event (``kind``: an :class:`~simulate.codes.Action`), in order."""

    kind: np.ndarray
    w: np.ndarray
    x: np.ndarray  # the op, or for Action.SLOT_FREE the slot


class State(NamedTuple):
    """Everything the event loop keeps between events, apart from a few scalars."""

    heap: Heap
    chunks: Chunks
    queues: Queues
    streams: Streams
    flow: Flow
    links: Links
    hosts: Hosts
    steps: Steps
    actions: Actions


# ---- the loop

def run_kernel(inp: KernelInputs, out: KernelOutputs) -> tuple[int, int]:
    """Simulate every worker's steps; return (op-events, trace rows written).

    ``inp`` is a :class:`simulate.kernel_io.KernelInputs`; the step times and the trace go to
    ``out``, a :class:`simulate.kernel_io.KernelOutputs`.
    """
    return _event_loop(inp, new_state(inp), out)


# error_model="numpy": a division by zero gives inf or nan as in NumPy, with no check on
# every division of the hot loop. cache=True: compiling the loop takes seconds, loading it
# from numba's on-disk cache a fraction of one.
# _nrt=False turns numba's reference counting off. With it on, each time a named tuple of
# arrays is handed to an inlined helper, numba increments and later decrements the count of
# each of its arrays (atomic operations that its pruning pass cannot remove across the
# helpers' loops): the loop ran at 0.15 M op-events/s instead of 20 M. With it off, the
# loop must not allocate or return an array, and has no need to: every array is the
# caller's, alive for the whole call. The option is numba's own but private (numba 0.60 to
# 0.68 have it): a numba without it still compiles the loop, only slower, and
# tests/test_engine.py says which one ran.
NRT_OFF = {"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {}


@njit(cache=True, error_model="numpy", **NRT_OFF)
def _event_loop(inp, st, out):
    """The event loop of :func:`run_kernel`, from the state ``st`` of :func:`new_state`.

    Each event runs three phases. (1) The event itself: a chunk ends (its op releases its
    dependents, in successor order, and its slot is free for its next chunk), a grpc
    link's window comes back, or a worker starts its first step; each yields actions.
    (2) Every action either queues an op or starts a chunk; links and hosts whose set of
    busy workers changed are marked, and a step that ended starts the next one's roots as
    further actions. (3) The chunks on marked links and hosts, and the new chunks, get their
    rates and finish times; only phase (3) moves chunks in the event heap.

    The loop begins at phase (2), with the roots of the workers that start at time 0 as
    actions; a worker that starts later does so through its heap entry ``2G + w`` (at one
    instant, chunk ends come first, then window returns, then starts).
    """
    n_workers = inp.samples.shape[0]
    G = n_workers * inp.n_slots
    coupled = inp.n_servers > 1 and (inp.share == Share.PS or inp.share == Share.FLOW_CAP)
    # Every chunk on a link has the same rate unless shares are coupled across servers or go to
    # the first worker (FCFS): then a link keeps one clock for all its chunks (docs/model.md §7.4).
    virtual = not coupled and inp.share != Share.FCFS
    n_act = 0
    for w in range(n_workers):
        if inp.start_at_s[w] > 0.0:
            _heap_set(st.heap, 2 * G + w, inp.start_at_s[w])
        else:
            n_act = _start_step(inp, out, st, n_act, w, 0.0)
    now = 0.0
    ended_w = -1  # the worker whose chunk ended at this event; -1 after a timer, and at first
    ended_g = -1
    seq = 0
    done = 0
    event = 0
    op_events = 0
    n_trace = 0

    while True:
        # (2)
        n_new, seq, done = _carry_out_actions(inp, out, st, n_act, ended_w, now, seq, done, virtual)
        if ended_w >= 0 and st.chunks.op[ended_g] < 0 and st.heap.pos[ended_g] >= 0:
            _heap_remove(st.heap, ended_g)  # it took no new chunk (see _finish_chunk)
        # (3)
        event += 1
        _settle_rates(inp, st, n_new, event, coupled, virtual, now)
        # (1)
        if st.heap.size[0] == 0:
            break
        g = st.heap.entry[0]
        if st.heap.t_s[g] == np.inf:
            break  # nothing can progress (cannot happen with the sharing models here)
        now = st.heap.t_s[g]
        ended_w = -1
        if g >= 2 * G + n_workers:
            _heap_remove(st.heap, g)
            _tokens_run_out(inp, st, g - 2 * G - n_workers, now)
            n_act = 0
        elif g >= 2 * G:
            _heap_remove(st.heap, g)
            n_act = _start_step(inp, out, st, 0, g - 2 * G, now)
        elif g >= G:
            n_act = _return_windows(inp, st, g - G, g, now)
        else:
            n_act, ended_w, n_trace, op_done = _finish_chunk(inp, out, st, g, n_trace, virtual, now)
            op_events += op_done
            ended_g = g
    return op_events, n_trace


# ---- phase 1: the next event

@_inline
def _record_trace(inp, out, st, w, slot, g, n_trace, now):
    """Record chunk ``g`` of worker ``w``, ending now, if its step is traced; return the count."""
    k = st.steps.k[w]
    if k < inp.trace_steps and n_trace < out.trace_op.shape[0]:
        out.trace_worker_step_slot[n_trace, 0] = w
        out.trace_worker_step_slot[n_trace, 1] = k
        out.trace_worker_step_slot[n_trace, 2] = slot
        out.trace_op[n_trace] = st.chunks.op[g]
        out.trace_span_s[n_trace, 0] = st.chunks.start_s[g]
        out.trace_span_s[n_trace, 1] = now
        n_trace += 1
    return n_trace


@_inline
def _return_window_later(inp, st, w, slot, g, op, timer, now):
    """A grpc chunk ended: the receiver returns its bytes one update delay from now (through
    the heap entry ``timer``). A stream that is not finished either waits for its own window
    (paused) or, held up only by the connection window, stays at the head of the queue."""
    flow = st.flow
    d = inp.link_direction[inp.slot_link[slot]]
    last = st.chunks.last[g]
    if last and st.chunks.size_bytes[g] == 0.0:
        # Nothing to give back and no stream to resume: a return would only take a place in
        # the buffer, and steps of nothing but empty chunks (all-reduce downlinks) would fill it.
        return
    cap = flow.ret_cap[slot]
    if flow.ret_n[g] == cap:
        raise ValueError("grpc window-return buffer overflow")
    base = w * flow.ret_off[inp.n_slots] + flow.ret_off[slot]
    tail = flow.ret_head[g] + flow.ret_n[g]
    if tail >= cap:
        tail -= cap
    flow.ret_t_s[base + tail] = now + inp.flow_update_delay_s[d]
    flow.ret_bytes[base + tail] = st.chunks.size_bytes[g]
    flow.ret_op[base + tail] = NO_OP if last else op
    flow.ret_n[g] += 1
    if flow.ret_n[g] == 1:
        _heap_set(st.heap, timer, now + inp.flow_update_delay_s[d])
    if not last:
        k = w * inp.in_degree.shape[0] + op
        if st.streams.sent_bytes[k] >= _window(inp, d, now):
            st.streams.paused[k] = True
        else:
            _ring_push_front(st.queues, inp.slot_queue_cap[slot], g, op)


@_inline
def _release_successors(inp, st, w, op, n_act):
    """Op ``op`` of worker ``w`` is done: its successors whose predecessors are all done
    become ready, in successor order."""
    n_ops = inp.in_degree.shape[0]
    for e in range(inp.succ_ptr[op], inp.succ_ptr[op + 1]):
        d = inp.succ_idx[e]
        j = w * n_ops + d
        st.steps.waiting[j] -= 1
        if st.steps.waiting[j] == 0:
            n_act = _act(st.actions, n_act, Action.OP_READY, w, d)
    return n_act


@_inline
def _finish_chunk(inp, out, st, g, n_trace, virtual, now):
    """Phase 1 for the chunk on slot ``g``, ending at ``now``. Returns (n_act, its worker,
    n_trace, 1 if it ended its op else 0).

    The slot stays in the heap: if it takes a new chunk, phase 3 re-keys it in place (one
    sift instead of a pop and a push); if it goes idle, the loop removes it after phase 2.
    A chunk on a link's virtual clock leaves its link's heap: phase 3 puts the link's first
    chunk in the event heap, in the slot's place.
    """
    n_slots = inp.n_slots
    w = g // n_slots
    slot = g - w * n_slots
    op = st.chunks.op[g]
    n_trace = _record_trace(inp, out, st, w, slot, g, n_trace, now)
    link = inp.slot_link[slot]
    if link >= 0 and inp.link_bucket_bytes[link] > 0.0:
        _tokens_to_now(inp, st.links, link, now)  # at the rate served until this chunk ended
    if link >= 0 and virtual:
        # It leaves its link's heap; in the event heap it stays, for phase 3 to re-key in place
        # if it is still the link's first chunk, or to take out.
        _lh_remove(st.links, st.chunks, link, g)
        st.links.rekey[link] = True
    st.chunks.op[g] = NO_OP
    n_act = 0
    if inp.slot_scheduler[slot] == Scheduler.GRPC:
        _return_window_later(inp, st, w, slot, g, op, inp.samples.shape[0] * n_slots + g, now)
    op_done = 0
    if st.chunks.last[g]:
        st.steps.ops_left[w] -= 1
        op_done = 1
        n_act = _release_successors(inp, st, w, op, n_act)
    n_act = _act(st.actions, n_act, Action.SLOT_FREE, w, slot)
    return n_act, w, n_trace, op_done


@_inline
def _return_windows(inp, st, gl, timer, now):
    """Phase 1 for grpc link slot ``gl``'s window-return timer: the returns due by ``now``
    give their bytes back to the connection and their streams; a paused stream back within
    its window resumes. Returns n_act."""
    flow = st.flow
    n_slots = inp.n_slots
    w = gl // n_slots
    slot = gl - w * n_slots
    d = inp.link_direction[inp.slot_link[slot]]
    base = w * flow.ret_off[n_slots] + flow.ret_off[slot]
    n_act = 0
    while flow.ret_n[gl] > 0 and flow.ret_t_s[base + flow.ret_head[gl]] <= now:
        j = base + flow.ret_head[gl]
        flow.conn_bytes[gl] -= flow.ret_bytes[j]
        op = flow.ret_op[j]
        if op >= 0:
            k = w * inp.in_degree.shape[0] + op
            st.streams.sent_bytes[k] -= flow.ret_bytes[j]
            if st.streams.paused[k] and st.streams.sent_bytes[k] < _window(inp, d, now):
                st.streams.paused[k] = False
                n_act = _act(st.actions, n_act, Action.STREAM_RESUMES, w, op)
        flow.ret_head[gl] += 1
        if flow.ret_head[gl] == flow.ret_cap[slot]:
            flow.ret_head[gl] = 0
        flow.ret_n[gl] -= 1
    if flow.ret_n[gl] > 0:
        _heap_set(st.heap, timer, flow.ret_t_s[base + flow.ret_head[gl]])
    else:
        _heap_remove(st.heap, timer)
    # The connection may have window again for the head of the queue.
    n_act = _act(st.actions, n_act, Action.SLOT_FREE, w, slot)
    return n_act


# ---- phase 2: carry out the actions

@_inline
def _queue_unless_idle(inp, st, kind, w, op, slot, now, seq):
    """An op became ready (or a paused stream resumed): queue it behind its slot's chunk and
    queue, or return it to start now; returns (op to start or NO_OP, next sequence number)."""
    g = w * inp.n_slots + slot
    if kind == Action.OP_READY and inp.slot_link[slot] >= 0:
        k = w * inp.in_degree.shape[0] + op
        st.streams.rem_bytes[k] = inp.work[inp.samples[w, st.steps.k[w]], op]
        st.streams.served[k] = False
        st.streams.sent_bytes[k] = 0.0
    if inp.strict and inp.slot_scheduler[slot] == Scheduler.PRIORITY:
        # The slot may be idle with ops queued that wait for their turn: this op may be the one
        # they wait for, so the heap's first op starts if its turn has come.
        _q_push(st.queues, g, inp.priority[op], seq, op)
        seq += 1
        if st.chunks.op[g] < 0 and _strict_turn(inp, st, g):
            return _q_pop(st.queues, g), seq
        return NO_OP, seq
    if st.chunks.op[g] >= 0 or st.queues.n[g] > 0 or _grpc_blocked(inp, st.flow, slot, g, now):
        if inp.slot_scheduler[slot] == Scheduler.PRIORITY:
            _q_push(st.queues, g, inp.priority[op], seq, op)
            seq += 1
        else:
            _ring_append(st.queues, inp.slot_queue_cap[slot], g, op)
        return NO_OP, seq
    return op, seq


@_inline
def _strict_turn(inp, st, g):
    """Strict enforcement: True when the first op of slot ``g``'s heap may start, i.e. as many
    transfers of the slot have started in this step as have a lower number than it. The
    started ones are then exactly those (a transfer never starts before a lower number), and
    if the first op may not start, no queued op may (each has a number at least as high)."""
    return st.steps.started[g] >= inp.need[st.queues.op[st.queues.base[g]]]


@_inline
def _next_queued_op(inp, st, w, slot, now):
    """Slot ``slot`` of worker ``w`` has no chunk: return its next op, or NO_OP after taking
    the worker off the slot's link or host (nothing to send, or a grpc connection out of
    window)."""
    g = w * inp.n_slots + slot
    if st.chunks.op[g] >= 0:  # an op that became ready during this event took it already
        return NO_OP
    if st.queues.n[g] > 0 and not _grpc_blocked(inp, st.flow, slot, g, now):
        if inp.slot_scheduler[slot] == Scheduler.PRIORITY:
            if not inp.strict or _strict_turn(inp, st, g):
                return _q_pop(st.queues, g)
        else:
            return _ring_pop(st.queues, inp.slot_queue_cap[slot], g)
    link = inp.slot_link[slot]
    if link >= 0:
        if st.links.member[link, w]:  # else already off (a grpc connection waiting for its window)
            _leave_link(st.links, link, w)
    else:
        h = inp.slot_host[g]
        if h >= 0:
            _leave_host(st.hosts, h, g)
    return NO_OP


@_inline
def _link_chunk(inp, st, w, slot, g, op, now):
    """How much of stream ``op`` the next chunk on link slot ``g`` carries; returns
    (bytes, whether the chunk ends the op)."""
    k = w * inp.in_degree.shape[0] + op
    rem = st.streams.rem_bytes[k]
    sched = inp.slot_scheduler[slot]
    if sched == Scheduler.HTTP2 and not st.streams.served[k] and rem > inp.win_bytes:
        # ICPE Fig. 12: the first service sends one window; the stream goes to the back of
        # the queue as this chunk is taken (docs/model.md §3.2), and its second service sends the rest.
        st.streams.served[k] = True
        st.streams.rem_bytes[k] = rem - inp.win_bytes
        _ring_append(st.queues, inp.slot_queue_cap[slot], g, op)
        return inp.win_bytes, False
    if sched == Scheduler.GRPC:
        # As much of the head stream as the stream and connection windows allow.
        win = _window(inp, inp.link_direction[inp.slot_link[slot]], now)
        chunk = rem
        if win - st.streams.sent_bytes[k] < chunk:
            chunk = win - st.streams.sent_bytes[k]
        if win - st.flow.conn_bytes[g] < chunk:
            chunk = win - st.flow.conn_bytes[g]
        st.streams.sent_bytes[k] += chunk
        st.flow.conn_bytes[g] += chunk
        st.streams.rem_bytes[k] = rem - chunk
        st.chunks.size_bytes[g] = chunk
        return chunk, st.streams.rem_bytes[k] <= 0.0
    st.streams.rem_bytes[k] = 0.0
    return rem, True


@_inline
def _start_chunk(inp, st, w, slot, op, virtual, now):
    """Start op ``op``'s next chunk on slot ``slot`` of worker ``w``, joining the slot's link or
    host; return the chunk slot ``g``. Its rate is settled in phase 3; on a link's virtual
    clock it joins the link's heap now, so that a message starting later in this event finds
    its bytes queued (as its remaining work)."""
    g = w * inp.n_slots + slot
    link = inp.slot_link[slot]
    if link >= 0:
        st.steps.started[g] += 1  # a priority slot's op is one chunk: a chunk started is a transfer started
        chunk, last = _link_chunk(inp, st, w, slot, g, op, now)
        if not st.links.member[link, w]:
            _join_link(st.links, link, w)
    else:
        chunk = inp.work[inp.samples[w, st.steps.k[w]], op] * inp.slot_work_scale[g]
        last = True
        link = inp.op_fifo_link[op]
        if link >= 0 and inp.link_queue_window_bytes[link] > 0.0:
            # A message crossing a link waits behind every byte queued there, its own worker's too
            # (its data goes on another connection).
            ahead = _queue_ahead(inp, st, link, inp.link_queue_window_bytes[link], virtual, now)
            chunk += ahead / st.links.capacity_Bps[link]
        h = inp.slot_host[g]
        if h >= 0 and st.hosts.pos[g] < 0:
            _join_host(st.hosts, h, g)
    st.chunks.op[g] = op
    st.chunks.last[g] = last
    st.chunks.rem[g] = chunk
    st.chunks.rate[g] = 0.0
    st.chunks.set_s[g] = now
    st.chunks.start_s[g] = now
    link = inp.slot_link[slot]
    if link >= 0 and virtual:
        _advance_clock(st.links, link, now)
        st.chunks.vfin[g] = st.links.vt[link] + chunk
        _lh_push(st.links, st.chunks, link, g)
        st.links.rekey[link] = True
    return g


@_inline
def _start_step(inp, out, st, n_act, w, now):
    """Worker ``w`` starts its next step at ``now``: its roots become ready actions."""
    n_ops = inp.in_degree.shape[0]
    base = w * n_ops
    for op in range(n_ops):  # not a slice assignment: numba compiles that with a copy's allocation
        st.steps.waiting[base + op] = inp.in_degree[op]
    st.steps.ops_left[w] = n_ops
    for s in range(w * inp.n_slots, (w + 1) * inp.n_slots):
        st.steps.started[s] = 0
    out.step_start_s[w, st.steps.k[w]] = now
    for r in st.steps.roots:
        n_act = _act(st.actions, n_act, Action.OP_READY, w, r)
    return n_act


@_inline
def _end_step(inp, out, st, n_act, w, done, now):
    """If worker ``w`` has no op left, its step ends at ``now`` and the next one starts: its
    own (async), or every worker's once all are done (sync, a barrier). Returns (n_act, the
    workers done at the barrier)."""
    if st.steps.ops_left[w] > 0:
        return n_act, done
    n_workers, n_steps = inp.samples.shape
    k = st.steps.k[w]
    out.step_end_s[w, k] = now
    st.steps.k[w] = k + 1
    first, count = w, 0
    if not inp.sync:
        if k + 1 < n_steps:
            count = 1
    else:
        done += 1
        if done == n_workers and k + 1 < n_steps:
            done = 0
            first, count = 0, n_workers
    for v in range(first, first + count):
        n_act = _start_step(inp, out, st, n_act, v, now)
    return n_act, done


@_inline
def _carry_out_actions(inp, out, st, n_act, ended_w, now, seq, done, virtual):
    """Phase 2: carry out the event's actions in order: each queues an op or starts a chunk.

    ``ended_w`` is the worker whose chunk ended (-1 after a timer or at the start). Its
    step can end only once the ended op's dependents are queued; the next step's roots are
    then further actions. Returns (new chunks, next sequence number, workers done at the
    barrier); the new chunk slots are ``st.chunks.dirty[:new chunks]``.
    """
    n_new = 0
    i = 0
    step_checked = ended_w < 0
    while True:
        while i < n_act:
            w = st.actions.w[i]
            kind = st.actions.kind[i]
            if kind == Action.SLOT_FREE:
                slot = st.actions.x[i]
                op = _next_queued_op(inp, st, w, slot, now)
            else:
                slot = inp.op_slot[st.actions.x[i]]
                op, seq = _queue_unless_idle(inp, st, kind, w, st.actions.x[i], slot, now, seq)
            if op >= 0:
                st.chunks.dirty[n_new] = _start_chunk(inp, st, w, slot, op, virtual, now)
                n_new += 1
            i += 1
        if step_checked:
            break
        step_checked = True
        n_act, done = _end_step(inp, out, st, n_act, ended_w, done, now)
    return n_new, seq, done


# ---- phase 3: settle rates

@_inline
def _add_sharers(inp, st, n_dirty, event, coupled, virtual, now):
    """Append to ``st.chunks.dirty`` the chunks on every marked link and host, once each, and
    to ``st.links.touched`` the marked links with a token bucket; return both counts. A
    marked link on a virtual clock is brought up to ``now`` at its old rate and flagged for
    a new one instead: its chunks keep their place on its clock."""
    n_touched = 0
    n_slots = inp.n_slots
    chunks, links, hosts = st.chunks, st.links, st.hosts
    n_links = inp.link_capacity_Bps.shape[0]
    if coupled:
        for link in range(n_links):
            if links.mark[link]:
                # Shares are coupled across the servers of one direction (ICPE §5).
                d = inp.link_direction[link]
                for m in range(inp.n_servers):
                    links.mark[d * inp.n_servers + m] = True
    for link in range(n_links):
        if links.mark[link] and inp.link_queue_window_bytes[link] > 0.0:
            # The reverse link's rates depend on this one's busy workers (acknowledgements).
            links.mark[inp.link_reverse[link]] = True
    for link in range(n_links):
        if links.mark[link]:
            links.mark[link] = False
            if virtual:
                _advance_clock(links, link, now)  # before its capacity changes below
            if inp.link_bucket_bytes[link] > 0.0:
                # The set of busy workers changed: the link's chunks, re-rated below, run at
                # the peak while tokens last.
                _tokens_to_now(inp, links, link, now)
                links.capacity_Bps[link] = inp.link_capacity_Bps[link] if links.tokens[link] > 0.0 \
                    else inp.link_sustained_Bps[link]
                n_touched = _touch(links, link, event, n_touched)
            if virtual:
                links.rerate[link] = True
                continue
            s = links.slot[link]
            for j in range(links.n[link]):
                g = links.workers[link, j] * n_slots + s
                if chunks.stamp[g] != event:
                    chunks.stamp[g] = event
                    chunks.dirty[n_dirty] = g
                    n_dirty += 1
    for h in range(inp.host_cores.shape[0]):
        if hosts.mark[h]:
            hosts.mark[h] = False
            for j in range(hosts.n[h]):
                g = hosts.slots[h, j]
                if chunks.stamp[g] != event:
                    chunks.stamp[g] = event
                    chunks.dirty[n_dirty] = g
                    n_dirty += 1
    return n_dirty, n_touched


@_inline
def _rerate(inp, st, g, now):
    """Bring chunk ``g``'s remaining work up to ``now``, give it its current rate, and re-key
    it in the heap at its finish time."""
    chunks = st.chunks
    rem = chunks.rem[g]
    elapsed = now - chunks.set_s[g]
    if elapsed > 0.0:
        rem -= chunks.rate[g] * elapsed
        if rem < 0.0:
            rem = 0.0
    w = g // inp.n_slots
    slot = g - w * inp.n_slots
    link = inp.slot_link[slot]
    if link >= 0 and rem < LINK_RESIDUE_BYTES:
        # Float residue of a transfer that ends now in exact arithmetic: it must not wait for a
        # share that just fell to 0 (a coupled link's), as the reference's exact times show.
        rem = 0.0
    if link >= 0:
        rate = _link_rate(inp, st.links, w, link)
    else:
        rate = 1.0  # a second of work per second, unless the host's cores are oversubscribed
        h = inp.slot_host[g]
        if h >= 0 and st.hosts.n[h] > inp.host_cores[h]:
            rate = inp.host_cores[h] / st.hosts.n[h]
    chunks.rem[g] = rem
    chunks.rate[g] = rate
    chunks.set_s[g] = now
    if rem <= 0.0:
        t = now
    elif rate > 0.0:
        t = now + rem / rate
    else:
        t = np.inf
    _heap_set(st.heap, g, t)


@_inline
def _link_rate(inp, links, w, link):
    """The rate worker ``w``'s chunk on ``link`` gets now: its share of the link's capacity,
    within the flow cap, the connection's cap and its acknowledgements' pace."""
    rate = links.capacity_Bps[link] * _link_share(inp, links, w, link)
    if inp.share == Share.FLOW_CAP and rate > inp.flow_cap_Bps:
        rate = inp.flow_cap_Bps
    if rate > inp.link_connection_cap_Bps[link]:
        # The connection's end moves no faster, however much of the link is free (docs/model.md §4.8).
        rate = inp.link_connection_cap_Bps[link]
    if inp.link_queue_window_bytes[link] > 0.0:
        acked = _window_per_ack_delay(inp, links, link)
        if rate > acked:
            rate = acked
    return rate


@_inline
def _settle_rates(inp, st, n_new, event, coupled, virtual, now):
    """Phase 3: new rates and finish times for the new chunks and the chunks that share a
    link or host whose set of busy workers changed. The only phase that moves chunks in
    the heap."""
    links = st.links
    for j in range(n_new):
        st.chunks.stamp[st.chunks.dirty[j]] = event
    n_dirty, n_touched = _add_sharers(inp, st, n_new, event, coupled, virtual, now)
    for j in range(n_dirty):
        g = st.chunks.dirty[j]
        link = inp.slot_link[g % inp.n_slots]
        if not (virtual and link >= 0):
            _rerate(inp, st, g, now)
        if link >= 0 and inp.link_bucket_bytes[link] > 0.0:
            n_touched = _touch(links, link, event, n_touched)
    if virtual:
        n_links = inp.link_capacity_Bps.shape[0]
        # Rates first, every capacity being set: a link's pace depends on its reverse's.
        for link in range(n_links):
            if links.rerate[link]:
                links.rerate[link] = False
                links.vrate[link] = _link_rate(inp, links, links.workers[link, 0], link) if links.n[link] > 0 else 0.0
                links.rekey[link] = True
        for link in range(n_links):
            if links.rekey[link]:
                links.rekey[link] = False
                _place_link(st, link, now)
    for j in range(n_touched):
        _settle_tokens(inp, st, links.touched[j], virtual, now)


@_inline
def _place_link(st, link, now):
    """Put ``link``'s first chunk in the event heap at the time its clock reaches the chunk's
    end (now if less than LINK_RESIDUE_BYTES is left: see _rerate), in place of the chunk
    that stood for the link before."""
    links, chunks, heap = st.links, st.chunks, st.heap
    _advance_clock(links, link, now)
    first = links.lh_entry[link, 0] if links.lh_n[link] > 0 else NO_OP
    old = links.top[link]
    if old != first and old >= 0 and heap.pos[old] >= 0:
        _heap_remove(heap, old)
    links.top[link] = first
    if first < 0:
        links.vt[link] = 0.0  # idle: the clock starts again, so that it never grows large
        return
    if links.vt[link] > CLOCK_REBASE_BYTES:
        # Keep the clock small, where float spacing is far below LINK_RESIDUE_BYTES: the
        # differences, all that matters, are the same.
        base = links.vt[link]
        for j in range(links.lh_n[link]):
            chunks.vfin[links.lh_entry[link, j]] -= base
        links.vt[link] = 0.0
    left = chunks.vfin[first] - links.vt[link]
    if left < LINK_RESIDUE_BYTES:
        t = now
    elif links.vrate[link] > 0.0:
        t = now + left / links.vrate[link]
    else:
        t = np.inf
    _heap_set(heap, first, t)


@_inline
def _advance_clock(links, link, now):
    """Bring ``link``'s virtual clock up to ``now`` at the rate it has had since it was last set."""
    dt = now - links.vt_s[link]
    if dt > 0.0:
        links.vt[link] += links.vrate[link] * dt
    links.vt_s[link] = now


# ---- the event heap

@_inline
def _before(t_s, a, b):
    ta = t_s[a]
    tb = t_s[b]
    return ta < tb or (ta == tb and a < b)


@_inline
def _sift_up(heap, i):
    entry, pos, t_s = heap.entry, heap.pos, heap.t_s
    g = entry[i]
    while i > 0:
        p = (i - 1) >> 1
        q = entry[p]
        if _before(t_s, g, q):
            entry[i] = q
            pos[q] = i
            i = p
        else:
            break
    entry[i] = g
    pos[g] = i


@_inline
def _sift_down(heap, i, n):
    entry, pos, t_s = heap.entry, heap.pos, heap.t_s
    g = entry[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _before(t_s, entry[c + 1], entry[c]):
            c += 1
        q = entry[c]
        if _before(t_s, q, g):
            entry[i] = q
            pos[q] = i
            i = c
        else:
            break
    entry[i] = g
    pos[g] = i


@_inline
def _heap_set(heap, g, t):
    """Insert entry ``g`` with time ``t``, or move it if present."""
    i = heap.pos[g]
    if i < 0:
        n = heap.size[0]
        heap.entry[n] = g
        heap.pos[g] = n
        heap.size[0] = n + 1
        heap.t_s[g] = t
        _sift_up(heap, n)
    else:
        old = heap.t_s[g]
        heap.t_s[g] = t
        if t < old:
            _sift_up(heap, i)
        else:
            _sift_down(heap, i, heap.size[0])


@_inline
def _heap_remove(heap, g):
    """Take entry ``g`` out of the heap."""
    i = heap.pos[g]
    n = heap.size[0] - 1
    heap.size[0] = n
    heap.pos[g] = -1
    if i < n:
        moved = heap.entry[n]
        heap.entry[i] = moved
        heap.pos[moved] = i
        _sift_down(heap, i, n)
        _sift_up(heap, heap.pos[moved])


# ---- the link heaps (virtual clocks): a link's chunks keyed by (clock at their end, slot)
# They keep a sift pair of their own, like the event heap's: one pair shared by both kinds of
# heap (a flat array and a base per heap) made the scale sweep 27% slower (bench/results/scale.md).

@_inline
def _lh_before(vfin, a, b):
    return vfin[a] < vfin[b] or (vfin[a] == vfin[b] and a < b)


@_inline
def _lh_sift_up(links, chunks, link, i):
    entry, pos, vfin = links.lh_entry, chunks.lh_pos, chunks.vfin
    g = entry[link, i]
    while i > 0:
        p = (i - 1) >> 1
        q = entry[link, p]
        if _lh_before(vfin, g, q):
            entry[link, i] = q
            pos[q] = i
            i = p
        else:
            break
    entry[link, i] = g
    pos[g] = i


@_inline
def _lh_sift_down(links, chunks, link, i, n):
    entry, pos, vfin = links.lh_entry, chunks.lh_pos, chunks.vfin
    g = entry[link, i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _lh_before(vfin, entry[link, c + 1], entry[link, c]):
            c += 1
        q = entry[link, c]
        if _lh_before(vfin, q, g):
            entry[link, i] = q
            pos[q] = i
            i = c
        else:
            break
    entry[link, i] = g
    pos[g] = i


@_inline
def _lh_push(links, chunks, link, g):
    """Put chunk slot ``g`` (its ``vfin`` set) in ``link``'s heap."""
    n = links.lh_n[link]
    links.lh_entry[link, n] = g
    chunks.lh_pos[g] = n
    links.lh_n[link] = n + 1
    _lh_sift_up(links, chunks, link, n)


@_inline
def _lh_remove(links, chunks, link, g):
    """Take chunk slot ``g`` out of ``link``'s heap."""
    i = chunks.lh_pos[g]
    n = links.lh_n[link] - 1
    links.lh_n[link] = n
    chunks.lh_pos[g] = -1
    if i < n:
        moved = links.lh_entry[link, n]
        links.lh_entry[link, i] = moved
        chunks.lh_pos[moved] = i
        _lh_sift_down(links, chunks, link, i, n)
        _lh_sift_up(links, chunks, link, chunks.lh_pos[moved])


# ---- the ready queues

@_inline
def _q_before(qp, qs, a, b):
    return qp[a] < qp[b] or (qp[a] == qp[b] and qs[a] < qs[b])


@_inline
def _q_push(queues, g, prio, seq, op):
    """Put ``op`` in slot ``g``'s priority heap."""
    qp, qs, qo = queues.prio, queues.seq, queues.op
    base = queues.base[g]
    i = queues.n[g]
    queues.n[g] = i + 1
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


@_inline
def _q_pop(queues, g):
    """Take the first op out of slot ``g``'s priority heap."""
    qp, qs, qo = queues.prio, queues.seq, queues.op
    base = queues.base[g]
    top = qo[base]
    n = queues.n[g] - 1
    queues.n[g] = n
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


@_inline
def _ring_append(queues, cap, g, op):
    """Put ``op`` at the back of slot ``g``'s FIFO ring buffer (capacity ``cap``)."""
    tail = queues.head[g] + queues.n[g]
    if tail >= cap:
        tail -= cap
    queues.op[queues.base[g] + tail] = op
    queues.n[g] += 1


@_inline
def _ring_pop(queues, cap, g):
    """Take the op at the front of slot ``g``'s FIFO ring buffer."""
    op = queues.op[queues.base[g] + queues.head[g]]
    queues.head[g] += 1
    if queues.head[g] == cap:
        queues.head[g] = 0
    queues.n[g] -= 1
    return op


@_inline
def _ring_push_front(queues, cap, g, op):
    """Put ``op`` back at the front of slot ``g``'s FIFO ring buffer."""
    h = queues.head[g] - 1
    if h < 0:
        h += cap
    queues.head[g] = h
    queues.op[queues.base[g] + h] = op
    queues.n[g] += 1


@_inline
def _act(actions, n_act, kind, w, x):
    """Append an action (an :class:`~simulate.codes.Action` on op or slot ``x``) for worker ``w``;
    return the new count."""
    actions.kind[n_act] = kind
    actions.w[n_act] = w
    actions.x[n_act] = x
    return n_act + 1


# ---- links, hosts and windows

@_inline
def _link_share(inp, links, w, link):
    """Fraction of ``link``'s bandwidth that worker ``w`` gets (docs/model.md §4)."""
    if inp.share == Share.NONE:
        return 1.0
    if inp.share == Share.FCFS:
        return 1.0 if links.workers[link, 0] == w else 0.0
    n_servers = inp.n_servers
    if n_servers == 1:
        return 1.0 / links.n[link]
    # Several servers (ICPE §5, generalised): the worker's shares across the servers of one
    # direction add up to at most 1. Its most contended links take their equal share first.
    d = inp.link_direction[link]
    taken = links.taken
    left = 1.0
    taken[:] = False
    while True:
        best = -1
        best_n = -1
        for m in range(n_servers):
            other = d * n_servers + m
            if links.member[other, w] and not taken[m]:
                if links.n[other] > best_n:
                    best_n = links.n[other]
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


@_inline
def _queue_ahead(inp, st, link, window, virtual, now):
    """Bytes queued on ``link`` now: what each connection busy on it keeps queued (its
    window, or what is left of its chunk)."""
    links, chunks = st.links, st.chunks
    ahead = 0.0
    if virtual:
        clock = links.vt[link] + links.vrate[link] * (now - links.vt_s[link])
        for j in range(links.lh_n[link]):
            ahead += min(window, max(chunks.vfin[links.lh_entry[link, j]] - clock, 0.0))
    else:
        s = links.slot[link]
        for j in range(links.n[link]):
            g = links.workers[link, j] * inp.n_slots + s
            if chunks.op[g] >= 0:
                left = chunks.rem[g] - chunks.rate[g] * (now - chunks.set_s[g])
                ahead += min(window, max(left, 0.0))
    # The link's buffer holds no more: what the windows would queue beyond it is dropped and
    # waits at its sender instead (docs/model.md §4.5).
    return min(ahead, inp.link_buffer_bytes[link])


@_inline
def _window_per_ack_delay(inp, links, link):
    """The most a connection on ``link`` can send: its window per round trip, where its
    acknowledgements wait behind the reverse link's FIFO. Each direction's busy connections
    keep a window each; the direction whose windows take longer to drain (at its rate) holds
    the queue, and a connection of the other direction sends at most ``window`` per that
    queue's delay. Infinite when this direction holds the queue (it runs at its share)."""
    rev = inp.link_reverse[link]
    n_rev = links.n[rev]
    if n_rev == 0:
        return np.inf
    drain_rev = min(n_rev * inp.link_queue_window_bytes[rev], inp.link_buffer_bytes[rev]) / links.capacity_Bps[rev]
    drain = min(links.n[link] * inp.link_queue_window_bytes[link], inp.link_buffer_bytes[link]) \
        / links.capacity_Bps[link]
    if drain >= drain_rev:
        return np.inf
    return inp.link_queue_window_bytes[link] / drain_rev


@_inline
def _tokens_to_now(inp, links, link, now):
    """Integrate ``link``'s tokens up to ``now``: they accrue at the sustained rate and pay for
    what the link served, within [0, bucket]."""
    dt = now - links.tokens_s[link]
    if dt > 0.0:
        tokens = links.tokens[link] + (inp.link_sustained_Bps[link] - links.served_Bps[link]) * dt
        if tokens > inp.link_bucket_bytes[link]:
            tokens = inp.link_bucket_bytes[link]
        if tokens < 0.0:
            tokens = 0.0
        links.tokens[link] = tokens
        links.tokens_s[link] = now


@_inline
def _touch(links, link, event, n_touched):
    """Put ``link`` on the event's list of touched links, once; return the count."""
    if links.stamp[link] != event:
        links.stamp[link] = event
        links.touched[n_touched] = link
        n_touched += 1
    return n_touched


@_inline
def _settle_tokens(inp, st, link, virtual, now):
    """After phase 3: ``link``'s served rate is its chunks' rates, and while it serves above its
    sustained rate at its peak, its tokens run out at a timer."""
    links = st.links
    _tokens_to_now(inp, links, link, now)
    served = 0.0
    if virtual:
        served = links.vrate[link] * links.lh_n[link]
    else:
        s = links.slot[link]
        for j in range(links.n[link]):
            g = links.workers[link, j] * inp.n_slots + s
            if st.chunks.op[g] >= 0:
                served += st.chunks.rate[g]
    links.served_Bps[link] = served
    timer = st.heap.pos.shape[0] - links.tokens.shape[0] + link
    excess = served - inp.link_sustained_Bps[link]
    if links.capacity_Bps[link] > inp.link_sustained_Bps[link] and excess > 0.0:
        _heap_set(st.heap, timer, now + links.tokens[link] / excess)
    elif st.heap.pos[timer] >= 0:
        _heap_remove(st.heap, timer)


@_inline
def _tokens_run_out(inp, st, link, now):
    """Phase 1 for ``link``'s token timer: no burst left, its chunks fall to the sustained rate
    (re-rated in phase 3 as if its set of busy workers had changed)."""
    links = st.links
    _tokens_to_now(inp, links, link, now)
    links.tokens[link] = 0.0
    links.capacity_Bps[link] = inp.link_sustained_Bps[link]
    links.mark[link] = True


@_inline
def _join_link(links, link, w):
    links.member[link, w] = True
    links.workers[link, links.n[link]] = w
    links.n[link] += 1
    links.mark[link] = True


@_inline
def _leave_link(links, link, w):
    # The others keep their order: FCFS serves the first of them next.
    n = links.n[link]
    pos = 0
    while links.workers[link, pos] != w:
        pos += 1
    for j in range(pos, n - 1):
        links.workers[link, j] = links.workers[link, j + 1]
    links.n[link] = n - 1
    links.member[link, w] = False
    links.mark[link] = True


@_inline
def _join_host(hosts, h, g):
    hosts.pos[g] = hosts.n[h]
    hosts.slots[h, hosts.n[h]] = g
    hosts.n[h] += 1
    hosts.mark[h] = True


@_inline
def _leave_host(hosts, h, g):
    # Processor sharing needs no order: the last busy slot fills the gap.
    pos = hosts.pos[g]
    moved = hosts.slots[h, hosts.n[h] - 1]
    hosts.slots[h, pos] = moved
    hosts.pos[moved] = pos
    hosts.n[h] -= 1
    hosts.pos[g] = -1
    hosts.mark[h] = True


@_inline
def _window(inp, d, now):
    """The receiver's window in direction ``d`` at time ``now`` (its calibrated timeline)."""
    value = inp.flow_window_bytes[d, 0]
    for j in range(1, inp.flow_window_n[d]):
        if inp.flow_window_t_s[d, j] > now:
            break
        value = inp.flow_window_bytes[d, j]
    return value


@_inline
def _grpc_blocked(inp, flow, slot, g, now):
    """True when ``g`` is a grpc link whose connection window is used up."""
    return inp.slot_scheduler[slot] == Scheduler.GRPC and flow.conn_bytes[g] >= _window(
        inp, inp.link_direction[max(inp.slot_link[slot], 0)], now)


# ---- the state

def new_state(inp: KernelInputs) -> State:
    """The loop's state before the first event: every slot idle, every queue empty.

    Plain NumPy, so that the compiled loop allocates nothing (see :func:`_event_loop`).
    """
    n_ops = inp.in_degree.shape[0]
    n_slots = inp.n_slots
    n_workers = inp.samples.shape[0]
    n_links = inp.link_capacity_Bps.shape[0]
    n_hosts = inp.host_cores.shape[0]
    G = n_workers * n_slots
    roots = inp.roots

    L = max(n_links, 1)
    n_entries = 2 * G + n_workers + L  # the last L: token timers (see Heap)
    heap = Heap(np.empty(n_entries, dtype=np.int64), np.full(n_entries, -1, dtype=np.int64),
                np.full(n_entries, np.inf), np.zeros(1, dtype=np.int64))
    chunks = Chunks(np.full(G, NO_OP, dtype=np.int64), np.zeros(G, dtype=np.bool_), np.zeros(G), np.zeros(G),
                    np.zeros(G), np.zeros(G), np.zeros(G), np.full(G, -1, dtype=np.int64),
                    np.zeros(G, dtype=np.int64), np.zeros(G), np.full(G, -1, dtype=np.int64))

    # Each worker's queues side by side, slot after slot, each as long as its capacity.
    slot_off = np.concatenate([[0], np.cumsum(inp.slot_queue_cap)]).astype(np.int64)
    qbase = (np.arange(n_workers, dtype=np.int64)[:, None] * slot_off[n_slots] + slot_off[None, :n_slots]).ravel()
    q_total = n_workers * slot_off[n_slots]
    queues = Queues(np.empty(q_total), np.empty(q_total, dtype=np.int64), np.empty(q_total, dtype=np.int64),
                    np.zeros(G, dtype=np.int64), np.zeros(G, dtype=np.int64), qbase)

    n_streams = n_workers * n_ops
    streams = Streams(np.zeros(n_streams), np.zeros(n_streams, dtype=np.bool_), np.zeros(n_streams),
                      np.zeros(n_streams, dtype=np.bool_))

    # Room for the window returns pending on a grpc slot (one per chunk ended within the last
    # update delay): a bound chosen, not proven, so an overflow raises rather than overwrite.
    ret_cap = np.where(inp.slot_scheduler == Scheduler.GRPC, 2 * inp.slot_queue_cap + RETURN_HEADROOM,
                       0).astype(np.int64)
    ret_off = np.concatenate([[0], np.cumsum(ret_cap)]).astype(np.int64)
    ret_total = max(n_workers * ret_off[n_slots], 1)
    flow = Flow(np.zeros(G), np.empty(ret_total), np.empty(ret_total), np.empty(ret_total, dtype=np.int64),
                np.zeros(G, dtype=np.int64), np.zeros(G, dtype=np.int64), ret_cap, ret_off)

    link_slot = np.zeros(L, dtype=np.int64)
    on_link = np.flatnonzero(inp.slot_link >= 0)
    link_slot[inp.slot_link[on_link]] = on_link
    capacity = np.zeros(L)
    capacity[:n_links] = inp.link_capacity_Bps
    tokens = np.zeros(L)
    tokens[:n_links] = inp.link_bucket_bytes  # a link starts idle, its bucket full
    links = Links(np.zeros((L, n_workers), dtype=np.int64), np.zeros(L, dtype=np.int64),
                  np.zeros((L, n_workers), dtype=np.bool_), np.zeros(L, dtype=np.bool_), link_slot,
                  np.zeros(max(inp.n_servers, 1), dtype=np.bool_), capacity, tokens, np.zeros(L), np.zeros(L),
                  np.full(L, -1, dtype=np.int64), np.zeros(L, dtype=np.int64),
                  np.zeros(L), np.zeros(L), np.zeros(L), np.zeros((L, n_workers), dtype=np.int64),
                  np.zeros(L, dtype=np.int64), np.full(L, -1, dtype=np.int64), np.zeros(L, dtype=np.bool_),
                  np.zeros(L, dtype=np.bool_))
    H = max(n_hosts, 1)
    hosts = Hosts(np.zeros((H, G), dtype=np.int64), np.zeros(H, dtype=np.int64), np.full(G, -1, dtype=np.int64),
                  np.zeros(H, dtype=np.bool_))
    steps = Steps(np.empty(n_streams, dtype=np.int32), np.zeros(n_workers, dtype=np.int64),
                  np.zeros(n_workers, dtype=np.int64), roots, np.zeros(G, dtype=np.int64))
    # At most: every worker's roots (a barrier starts them all) and its ended slot, and every
    # op released or resumed by one event.
    cap_act = n_workers * (roots.shape[0] + 2) + n_ops + 2
    actions = Actions(np.zeros(cap_act, dtype=np.int64), np.zeros(cap_act, dtype=np.int64),
                      np.zeros(cap_act, dtype=np.int64))
    return State(heap, chunks, queues, streams, flow, links, hosts, steps, actions)
