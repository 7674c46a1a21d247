"""Replay one link's captured streams through a transfer model (the ICPE Table 1 check).

Each function takes the streams of one direction of one step, as arrival times (when the
model puts a stream on the link's queue), sizes in bytes and the link rate, and returns
the modelled end time of every stream. One worker, the whole link: the same scheduler
semantics as :mod:`simulate.kernel` for a single worker (SPEC §3).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from tfsim.errors import UsageError


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
    service sends the rest (ICPE Fig. 12, SPEC §3)."""
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
    """|modelled − actual| / (actual − step start), per stream (FIELD-NOTES' definition)."""
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


def replay_grpc(ready_s, size_bytes, rate_Bps: float, stream_window_bytes, connection_window_bytes: float,
                update_delay_s: float) -> np.ndarray:
    """Today's gRPC (SPEC §3 ``grpc``): whole streams in send-ready order, each sending until its
    stream window or the connection window runs out, then pausing until the receiver's
    WINDOW_UPDATE arrives ``update_delay_s`` later; other ready streams use the link meanwhile.

    ``stream_window_bytes`` is one value or one per stream (the receiver's window when the
    stream starts). Every chunk's bytes return to the connection window ``update_delay_s``
    after the chunk ends; a stream that used up its own window gets it back then too, and
    rejoins the back of the queue.
    """
    ready, size = _check(ready_s, size_bytes, rate_Bps)
    n = size.size
    window = np.broadcast_to(np.asarray(stream_window_bytes, dtype=float), size.shape).copy()
    if (window <= 0).any() or not connection_window_bytes > 0 or update_delay_s < 0:
        raise UsageError("replay", "windows must be positive and the update delay non-negative")
    order = np.argsort(ready, kind="stable")
    end = np.full(n, np.nan)
    remaining = size.copy()
    credit = window.copy()
    conn = float(connection_window_bytes)
    queue: deque[int] = deque()
    returns: list[tuple[float, float, int]] = []  # (time, bytes back to the connection, stream to re-queue or -1)
    now, k = 0.0, 0
    while k < n or queue or returns:
        # Everything that has happened by now: arrivals, and window updates in time order.
        returns.sort()
        while returns and returns[0][0] <= now:
            _, back, stream = returns.pop(0)
            conn += back
            if stream >= 0:
                credit[stream] = window[stream]
                queue.append(stream)
        while k < n and ready[order[k]] <= now:
            stream = int(order[k])
            k += 1
            if remaining[stream] == 0:
                end[stream] = max(now, ready[stream])
            else:
                queue.append(stream)
        if not queue or conn <= 0:
            nexts = [t for t, _, _ in returns[:1]] + ([ready[order[k]]] if k < n else [])
            if not nexts:
                break
            now = max(now, min(nexts))
            continue
        stream = queue[0]
        chunk = min(remaining[stream], credit[stream], conn)
        now += chunk / rate_Bps
        remaining[stream] -= chunk
        credit[stream] -= chunk
        conn -= chunk
        if remaining[stream] <= 0:
            queue.popleft()
            end[stream] = now
            returns.append((now + update_delay_s, chunk, -1))
        elif credit[stream] <= 0:
            queue.popleft()
            returns.append((now + update_delay_s, chunk, stream))
        else:  # held up by the connection window: stays at the head
            returns.append((now + update_delay_s, chunk, -1))
    return end
