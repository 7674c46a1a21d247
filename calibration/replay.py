"""Replay one link's captured streams through a transfer model (the ICPE Table 1 check).

Each function takes the streams of one direction of one step, as arrival times (when the
model puts a stream on the link's queue), sizes in bytes and the link rate, and returns
the modelled end time of every stream. One worker, the whole link: the same scheduler
semantics as :mod:`simulate.kernel` for a single worker (docs/model.md §3; docs/calibration.md §8.2).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from tfbase.errors import UsageError


def _check(arrival_s, size_bytes, rate_Bps):
    arrival = np.asarray(arrival_s, dtype=float)
    size = np.asarray(size_bytes, dtype=float)
    if arrival.shape != size.shape or arrival.ndim != 1:
        raise UsageError("replay", "arrival times and sizes must be 1-D arrays of one length")
    if not (rate_Bps > 0 and math.isfinite(rate_Bps)):
        raise UsageError("replay", f"link rate must be positive, not {rate_Bps}")
    if (size < 0).any() or not np.isfinite(arrival).all():
        raise UsageError("replay", "sizes must be non-negative and arrival times finite")
    return arrival, size


def replay_http2(arrival_s, size_bytes, rate_Bps: float, win_bytes: float) -> np.ndarray:
    """ICPE's HTTP/2 model: FIFO of streams; a stream's first service sends at most WIN bytes
    and, if bytes remain, puts it at the back of the queue as that chunk is taken; its second
    service sends the rest (ICPE Fig. 12, docs/model.md §3.2)."""
    arrival, size = _check(arrival_s, size_bytes, rate_Bps)
    order = np.argsort(arrival, kind="stable")
    end = np.full(size.shape, np.nan)
    remaining = size.copy()
    served = np.zeros(size.shape, dtype=bool)
    queue: deque[int] = deque()
    now, k = 0.0, 0
    while k < len(order) or queue:
        if not queue:
            now = max(now, arrival[order[k]])
        while k < len(order) and arrival[order[k]] <= now:
            queue.append(int(order[k]))
            k += 1
        stream = queue.popleft()
        if not served[stream] and remaining[stream] > win_bytes:
            chunk = win_bytes
            served[stream] = True
            remaining[stream] -= win_bytes
            queue.append(stream)
        else:
            chunk = remaining[stream]
            remaining[stream] = 0.0
        now += chunk / rate_Bps
        if remaining[stream] == 0.0:
            end[stream] = now
    return end


def replay_fifo(arrival_s, size_bytes, rate_Bps: float) -> np.ndarray:
    """Flow control off: whole streams, one at a time, in arrival order."""
    return replay_http2(arrival_s, size_bytes, rate_Bps, math.inf)


def relative_errors(modelled_end_s, actual_end_s, step_start_s: float) -> np.ndarray:
    """|modelled − actual| / (actual − step start), per stream (docs/calibration.md §8.1)."""
    modelled = np.asarray(modelled_end_s, dtype=float)
    actual = np.asarray(actual_end_s, dtype=float)
    span = actual - step_start_s
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(span > 0, np.abs(modelled - actual) / span, np.nan)


def error_summary(errors) -> dict:
    """Mean, median, p95 and max of the finite errors, and their count."""
    errors = np.asarray(errors, dtype=float)
    errors = errors[np.isfinite(errors)]
    if errors.size == 0:
        return {"mean": None, "median": None, "p95": None, "max": None, "n": 0}
    return {"mean": float(errors.mean()), "median": float(np.median(errors)),
            "p95": float(np.percentile(errors, 95)), "max": float(errors.max()), "n": int(errors.size)}


def replay_grpc(ready_s, size_bytes, rate_Bps: float, flow, time_offset_s: float = 0.0) -> np.ndarray:
    """Today's gRPC (docs/model.md §3.4), with the semantics of :mod:`simulate.kernel`'s ``grpc``
    links: whole streams in send-ready order; each chunk is as much of the head stream as
    its stream window and the connection window allow; a chunk's bytes come back to both
    windows ``flow.update_delay_s`` after it ends. A stream out of its own window pauses and
    rejoins the back of the queue when its bytes come back; a stream held up only by the
    connection window stays at the head. Windows follow ``flow.window_timeline``
    (:class:`simulate.cluster.FlowControl`), read at ``time_offset_s + t``.
    """
    ready, size = _check(ready_s, size_bytes, rate_Bps)

    def window(t):
        return flow.window_at(t + time_offset_s)

    n = size.size
    order = np.argsort(ready, kind="stable")
    end = np.full(n, np.nan)
    remaining = size.copy()
    sent = np.zeros(n)
    paused = np.zeros(n, dtype=bool)
    conn_used = 0.0
    queue: deque[int] = deque()
    returns: deque[tuple[float, float, int]] = deque()  # in time order: the delay is constant
    now, k = 0.0, 0
    while True:
        while returns and returns[0][0] <= now:
            _, back, stream = returns.popleft()
            conn_used -= back
            if stream >= 0:
                sent[stream] -= back
                if paused[stream] and sent[stream] < window(now):
                    paused[stream] = False
                    queue.append(stream)
        while k < n and ready[order[k]] <= now:
            stream = int(order[k])
            k += 1
            if remaining[stream] == 0:
                end[stream] = max(now, ready[stream])
            else:
                queue.append(stream)
        win = window(now)
        if queue and conn_used < win:
            stream = queue[0]
            chunk = min(remaining[stream], win - sent[stream], win - conn_used)
            now += chunk / rate_Bps
            remaining[stream] -= chunk
            sent[stream] += chunk
            conn_used += chunk
            done = remaining[stream] <= 0
            returns.append((now + flow.update_delay_s, chunk, -1 if done else stream))
            if done:
                queue.popleft()
                end[stream] = now
            elif sent[stream] >= window(now):
                queue.popleft()
                paused[stream] = True
            continue
        upcoming = ([returns[0][0]] if returns else []) + ([ready[order[k]]] if k < n else [])
        if not upcoming:
            return end
        now = max(now, min(upcoming))
