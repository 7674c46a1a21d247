"""Write a simulated run as Chrome trace JSON (Perfetto, chrome://tracing).

Layout: one process per node, one lane (thread) per resource.

- ``worker w``: lanes ``WORKER`` (computation, and the parsing of received tensors when it
  runs there), ``PARSE`` (parsing on a lane of its own, with the ``lane`` overhead placement)
  and one ``DOWNLINK``/``UPLINK`` lane per server (the worker's streams on that link);
- ``ps m``: two lanes per worker, ``updates from worker w`` (the PS computation of that
  worker's steps) and ``parsing from worker w`` (its gradients' parsing, with the ``lane``
  placement).

Every chunk is a complete event (``ph: X``) named after its op, with the step and the
op's kind in ``args``; an HTTP/2 stream cut in two shows as two events. Dependencies whose
ends are both in the trace are flow arrows (``ph: s``/``f``) from the end of the producer
to the start of the consumer.
"""

from __future__ import annotations

import json

from simulate.engine import SimRun, slot_names
from simulate.prepare import KIND_LATENCY, KIND_OVERHEAD, KIND_TRANSFER
from tfbase.fileio import write_text
from tfprofile.dag import Resource


def chrome_trace(run: SimRun) -> dict:
    """The Chrome trace object of ``run`` (which must have been run with ``trace_steps`` > 0)."""
    if run.trace is None:
        raise ValueError("the run recorded no trace: simulate with trace_steps > 0")
    graph = run.graph
    M = graph.n_servers
    names = slot_names(M)
    W = run.config.workers
    events: list[dict] = []
    for w in range(W):
        events.append({"ph": "M", "name": "process_name", "pid": w, "args": {"name": f"worker {w}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": w, "args": {"sort_index": w}})
        for slot in list(range(2 * M + 1)) + [3 * M + 1]:
            events.append({"ph": "M", "name": "thread_name", "pid": w, "tid": slot, "args": {"name": names[slot]}})
    for m in range(M):
        pid = W + m
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"ps {m}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
        for w in range(W):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": w,
                           "args": {"name": f"updates from worker {w}"}})
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": W + w,
                           "args": {"name": f"parsing from worker {w}"}})

    t = run.trace
    kinds = {KIND_TRANSFER: "transfer", KIND_OVERHEAD: "parse", KIND_LATENCY: "latency"}
    ps_slot0 = 2 * M + 1
    # Where each (worker, step, op) finished and started, for the flow arrows.
    last_end: dict[tuple[int, int, int], tuple[float, int, int]] = {}
    first_start: dict[tuple[int, int, int], tuple[float, int, int]] = {}
    for i in range(len(t["op"])):
        w, step, slot, op = int(t["worker"][i]), int(t["step"][i]), int(t["slot"][i]), int(t["op"][i])
        start_us, end_us = float(t["start_s"][i]) * 1e6, float(t["end_s"][i]) * 1e6
        if ps_slot0 <= slot < ps_slot0 + M:  # a server's computation for worker w
            pid, tid = W + slot - ps_slot0, w
        elif 3 * M + 2 <= slot < 4 * M + 2:  # a server's parse lane for worker w
            pid, tid = W + slot - (3 * M + 2), W + w
        elif slot >= 4 * M + 2:  # parse delays: on the receiving side's parse lane row
            if graph.resource[op] == Resource.WORKER:
                pid, tid = w, 3 * M + 1
            else:
                pid, tid = W + max(int(graph.server[op]), 0), W + w
        else:
            pid, tid = w, slot
        args = {"step": step, "kind": kinds.get(int(graph.kind[op]), "compute")}
        if graph.resource[op] in (Resource.DOWNLINK, Resource.UPLINK):
            args["bytes"] = float(graph.work[0, op])
        events.append({"ph": "X", "name": str(graph.names[op]), "cat": args["kind"], "pid": pid, "tid": tid,
                       "ts": start_us, "dur": end_us - start_us, "args": args})
        key = (w, step, op)
        last_end[key] = (end_us, pid, tid)
        first_start.setdefault(key, (start_us, pid, tid))
    flow_id = 0
    for (w, step, op), (end_us, pid, tid) in sorted(last_end.items()):
        for succ in graph.succ_idx[graph.succ_ptr[op]:graph.succ_ptr[op + 1]]:
            target = first_start.get((w, step, int(succ)))
            if target is None:
                continue
            events.append({"ph": "s", "id": flow_id, "name": "dep", "cat": "dep", "pid": pid, "tid": tid,
                           "ts": end_us})
            events.append({"ph": "f", "bp": "e", "id": flow_id, "name": "dep", "cat": "dep", "pid": target[1],
                           "tid": target[2], "ts": target[0]})
            flow_id += 1
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "tfsim", "workers": W, "servers": M, "steps_traced": run.config.trace_steps}}


def chrome_trace_text(run: SimRun, batch: int = 20_000) -> str:
    """``json.dumps(chrome_trace(run), separators=(",", ":"))``, encoded a batch of events at a
    time, so that a large trace never holds the process in one long call of the C encoder
    (where a signal waits)."""
    trace = chrome_trace(run)
    events = trace["traceEvents"]
    parts = [json.dumps(events[i:i + batch], separators=(",", ":"))[1:-1] for i in range(0, len(events), batch)]
    rest = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"}, separators=(",", ":"))
    return '{"traceEvents":[' + ",".join(parts) + "]" + ("," + rest[1:] if rest != "{}" else "}")


def write_chrome_trace(run: SimRun, path) -> None:
    """Write ``run``'s trace to ``path`` (a path or a planned :class:`~tfbase.fileio.Output`) atomically."""
    write_text(path, chrome_trace_text(run))

