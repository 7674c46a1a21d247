"""The measured timeline of a W-worker run beside the simulated one.

A capture taken at the PS's interface (both directions, every worker's two connections),
the run directory (``step_times.csv``, ``run.json``'s addresses) and, optionally, the
samples of tc's queues and of ``ss -tin`` taken during the run become per-direction and
per-worker tables:

- **wire**: per direction, the link's **used fraction** (TCP payload moved in the window over
  what the link sustains, :func:`used_fraction`), its busy fraction (each packet occupies
  ``bytes / rate`` after it leaves the shaper, as the capture at the PS sees it), the idle
  gaps (sum of the gaps longer than 2 ms as a fraction of the window, median and p90 gap),
  bytes/s. The busy fraction reads low on a loaded link: a packet the sender's stack
  segments (GSO) is captured once with one set of headers, and packets the receiver's stack
  merges (GRO) are stamped when merged, so their intervals overlap and the union loses time
  that the shaper did spend. The used fraction has neither problem and is what a simulation
  reports the same way;
- **messages**: every gRPC stream of the job (RunGraph, RecvTensor, ...), with the worker
  it belongs to, the step (by time, from ``step_times.csv``), the direction of its request
  and response, the request HEADERS time, the response HEADERS, first and last DATA times,
  relative to the worker's step start;
- **hops**: the chain of a step as a list of named intervals between two message events
  (see :data:`RECOMMENDER_CHAIN`), per worker and step, with the shaper's backlog on the
  hop's direction at the hop's start when tc samples are given;
- **backlog**: tc's backlog per queue over time, and the TCP send queues per connection
  (from ``ss -tin``).

:func:`simulated_timeline` builds the same wire and tensor tables from a simulated run
(``simulate.engine.run`` with ``trace_steps``) so that :func:`compare` can put the two side
by side. The simulator has no RPC messages other than tensors (no RunGraph, no RecvTensor
requests): their hops appear only in the measured tables.

Directions are named from the PS's side: ``down`` (PS to worker) and ``up`` (worker to PS).
Times are seconds since the epoch (measured) or since the simulated run's start.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tfbase.errors import InputError
from tfsim.lab.measure import measured_window, read_step_spans

GAP_THRESHOLD_S = 0.002


# -- intervals --------------------------------------------------------------------------------

def merged_intervals(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The union of ``[start, end)`` intervals as sorted, disjoint ``(n, 2)`` rows.

    Examples
    --------
    >>> merged_intervals(np.array([0.0, 0.5, 0.6, 2.0]), np.array([1.0, 0.7, 1.5, 3.0])).tolist()
    [[0.0, 1.5], [2.0, 3.0]]
    """
    if starts.size == 0:
        return np.zeros((0, 2))
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new_run = np.concatenate([[True], s[1:] > e[:-1]])
    first = np.flatnonzero(new_run)
    last = np.concatenate([first[1:] - 1, [s.size - 1]])
    return np.column_stack([s[first], e[last]])


def union_busy(starts: np.ndarray, ends: np.ndarray, t0: float, t1: float) -> tuple[float, np.ndarray]:
    """Busy time of the union of [start, end) intervals inside [t0, t1], and the idle gaps (s)."""
    runs = merged_intervals(np.clip(starts, t0, t1), np.clip(ends, t0, t1))
    runs = runs[runs[:, 1] > runs[:, 0]]
    if runs.size == 0:
        return 0.0, np.array([t1 - t0])
    idle_from = np.concatenate([[t0], runs[:, 1]])  # t0, and each run's end ...
    idle_to = np.concatenate([runs[:, 0], [t1]])  # ... to the next run's start, and t1
    gaps = idle_to - idle_from
    return float((runs[:, 1] - runs[:, 0]).sum()), gaps[gaps > 0]


def wire_summary(starts: np.ndarray, ends: np.ndarray, nbytes: np.ndarray, t0: float, t1: float,
                 gap_threshold_s: float = GAP_THRESHOLD_S) -> dict:
    busy, gaps = union_busy(starts, ends, t0, t1)
    span = t1 - t0
    inside = (starts >= t0) & (starts < t1)
    long = gaps[gaps > gap_threshold_s]
    return {
        "window_s": span, "busy_fraction": busy / span if span > 0 else float("nan"),
        "gaps_over_2ms_fraction": float(long.sum() / span) if span > 0 else float("nan"),
        "gap_count_over_2ms": int(long.size),
        "gap_median_ms": float(np.median(long) * 1e3) if long.size else 0.0,
        "gap_p90_ms": float(np.percentile(long, 90) * 1e3) if long.size else 0.0,
        "bytes_per_s": float(nbytes[inside].sum() / span) if span > 0 else float("nan"),
    }


# -- run directory ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RunLayout:
    ps_ip: str
    ps_port: int
    worker_ips: tuple[str, ...]          # index = worker task index
    worker_ports: tuple[int, ...]
    steps: dict                          # worker -> array (n, 2) of [start, end] unix s, measured steps only
    batch_size: int

    def worker_of_ip(self, ip: str) -> int | None:
        try:
            return self.worker_ips.index(ip)
        except ValueError:
            return None


def _strip_v4(ip: str) -> str:
    return ip[7:] if ip.startswith("::ffff:") else ip


def read_layout(run_dir: str | Path, measured_only: bool = True) -> RunLayout:
    run_dir = Path(run_dir)
    run = json.loads((run_dir / "run.json").read_text())
    cluster = run["cluster"]
    if len(cluster["ps"]) != 1:
        raise InputError(run_dir / "run.json", f"has {len(cluster['ps'])} PS tasks: the timeline reads a run with one")
    ps_host, _, ps_port = cluster["ps"][0].rpartition(":")
    ips, ports = [], []
    for address in cluster["worker"]:
        host, _, port = address.rpartition(":")
        ips.append(host.strip("[]"))
        ports.append(int(port))
    steps, batch = read_step_spans(run_dir, measured_only)
    return RunLayout(ps_host.strip("[]"), int(ps_port), tuple(ips), tuple(ports), steps, batch)


# -- measured: wire ---------------------------------------------------------------------------

def read_wire(pcap: str | Path, layout: RunLayout) -> dict[str, np.ndarray]:
    """Every TCP packet at the PS's interface: time (s), wire bytes, direction (0 down, 1 up),
    worker index (-1: not a worker), TCP payload bytes."""
    from netcapture.layers import decode_tcp
    from netcapture.pcap import iter_packets

    times, sizes, dirs, workers, payload = [], [], [], [], []
    ps = layout.ps_ip
    for packet in iter_packets(pcap):
        seg = decode_tcp(packet.linktype, packet.data)
        if seg is None:
            continue
        src, dst = _strip_v4(seg.src_ip), _strip_v4(seg.dst_ip)
        if src == ps:
            d, other = 0, dst
        elif dst == ps:
            d, other = 1, src
        else:
            continue
        w = layout.worker_of_ip(other)
        times.append(packet.time_ns)
        sizes.append(packet.wire_bytes)
        dirs.append(d)
        workers.append(-1 if w is None else w)
        payload.append(len(seg.payload))
    return {"t": np.array(times, dtype=np.int64) / 1e9, "bytes": np.array(sizes, dtype=np.int64),
            "dir": np.array(dirs, dtype=np.int8), "worker": np.array(workers, dtype=np.int16),
            "payload": np.array(payload, dtype=np.int64)}


def used_fraction(payload_bytes_per_s: float, capacity_Bps: float | None) -> float:
    """The share of what a link sustains that a direction used: TCP payload per second over
    the link's sustained payload rate (its iperf3 rate, or a calibrated token bucket's).
    Measured and simulated runs count it the same way (tensor bytes; the few hundred bytes of
    framing and RPC messages per tensor aside), so it compares the two where the busy
    fraction cannot (module docstring). NaN without a capacity.

    Examples
    --------
    >>> used_fraction(24e6, 48e6)
    0.5
    """
    if capacity_Bps is None or not capacity_Bps > 0:
        return float("nan")
    return float(payload_bytes_per_s / capacity_Bps)


def wire_tables(wire: dict, rate_Bps: float, t0: float, t1: float,
                capacity_Bps: dict[str, float] | None = None) -> list[dict]:
    """Per direction (and per worker): used fraction, busy fraction, gaps, bytes/s on the wire.

    A packet seen at the PS leaves (down) or has left (up) the shaper at its capture time and
    occupies the link for ``bytes / rate_Bps`` from then: the link is busy where those
    intervals cover time. ``capacity_Bps`` (``{"down": .., "up": ..}``, payload bytes/s the
    link sustains) gives the used fraction (:func:`used_fraction`)."""
    rows = []
    span = t1 - t0
    for d, name in ((0, "down"), (1, "up")):
        m = wire["dir"] == d
        t, b = wire["t"][m], wire["bytes"][m]
        inside = (t >= t0) & (t < t1)
        payload_per_s = float(wire["payload"][m][inside].sum() / span) if span > 0 else float("nan")
        rows.append({"direction": name, "worker": "all", **wire_summary(t, t + b / rate_Bps, b, t0, t1),
                     "payload_bytes_per_s": payload_per_s,
                     "used_fraction": used_fraction(payload_per_s, (capacity_Bps or {}).get(name))})
        for w in sorted(set(wire["worker"][m].tolist())):
            mw = wire["worker"][m] == w
            s = wire_summary(t[mw], t[mw] + b[mw] / rate_Bps, b[mw], t0, t1)
            rows.append({"direction": name, "worker": int(w), "busy_fraction": s["busy_fraction"],
                         "bytes_per_s": s["bytes_per_s"]})
    return rows


# -- measured: first bytes ---------------------------------------------------------------------

def read_capture_with_first_bytes(pcap: str | Path, server_ports) -> tuple[object, dict]:
    """:func:`netcapture.read_capture` (scapy backend), plus the time of each frame's first
    payload byte: ``{id(frame): time_s}``. netcapture stamps a frame with the packet that
    completed it, so a stream's "first DATA" time is the end of its first frame, which for a
    large frame is long after its first byte left; the timeline needs both ends."""
    import bisect

    from netcapture import read_capture, scapy_backend
    from netcapture.http2 import FRAME_HEADER_BYTES

    chunks: dict[int, tuple[list, list]] = {}
    first_ns: dict[int, int] = {}
    original = scapy_backend._Decoder.frames_from

    def frames_from(self, direction, data, offset, packet_number, time_ns):
        offsets, times = chunks.setdefault(id(direction), ([], []))
        offsets.append(offset)
        times.append(time_ns)
        before = len(self.frames)
        original(self, direction, data, offset, packet_number, time_ns)
        for _, frame_offset, frame in self.frames[before:]:
            k = bisect.bisect_right(offsets, frame_offset + FRAME_HEADER_BYTES) - 1
            first_ns[id(frame)] = times[max(k, 0)]

    scapy_backend._Decoder.frames_from = frames_from
    try:
        capture = read_capture(pcap, server_ports=server_ports)
    finally:
        scapy_backend._Decoder.frames_from = original
    return capture, {k: v / 1e9 for k, v in first_ns.items()}


def stream_first_bytes(capture, first_s: dict) -> dict:
    """``{(connection, stream_id): time of the first byte of its first response DATA frame}``."""
    from netcapture.http2 import DATA

    out = {}
    for f in capture.frames:
        if f.type == DATA and not f.from_client and f.data_bytes:
            key = (f.connection, f.stream_id)
            t = first_s.get(id(f), f.time_s)
            if key not in out or t < out[key]:
                out[key] = t
    return out


# -- measured: messages ----------------------------------------------------------------------

def _rpc_name(path: str | None) -> str:
    return (path or "?").rsplit("/", 1)[-1]


def message_table(capture, layout: RunLayout, first_bytes: dict | None = None) -> list[dict]:
    """One row per gRPC stream between the PS and a worker, with its worker, its step (the
    worker's measured step whose span holds the request), and its events relative to that
    step's start. ``client`` is ``worker`` (the worker asked: request up, response down) or
    ``ps`` (the PS asked: request down, response up)."""
    rows = []
    ps = layout.ps_ip
    for s in capture.streams:
        cip, sip = _strip_v4(s.connection.client_ip), _strip_v4(s.connection.server_ip)
        if cip == ps:
            client, w = "ps", layout.worker_of_ip(sip)
        elif sip == ps:
            client, w = "worker", layout.worker_of_ip(cip)
        else:
            continue
        if w is None or s.request_headers_time_s is None:
            continue
        steps = layout.steps.get(w)
        step, start = -1, float("nan")
        if steps is not None and len(steps):
            k = int(np.searchsorted(steps[:, 0], s.request_headers_time_s, side="right")) - 1
            if k >= 0 and s.request_headers_time_s <= steps[k, 1]:
                step, start = k, float(steps[k, 0])
        rows.append({
            "worker": w, "step": step, "step_start": start, "rpc": _rpc_name(s.rpc_path), "client": client,
            "tensor": s.tensor_name or "", "step_id": s.step_id,
            "response_dir": "down" if client == "worker" else "up",
            "request_bytes": s.request_data_bytes, "response_bytes": s.response_data_bytes,
            "tensor_bytes": s.tensor_content_bytes,
            "request_t": s.request_headers_time_s, "request_end_t": s.request_end_time_s,
            "response_headers_t": s.response_headers_time_s,
            "first_data_t": (first_bytes or {}).get((s.connection, s.stream_id), s.response_first_data_time_s),
            "first_frame_end_t": s.response_first_data_time_s,
            "last_data_t": s.response_last_data_time_s, "response_end_t": s.response_end_time_s,
        })
    return rows


def short_tensor(name: str) -> str:
    """``edge_34_embed_user_items/lookup`` -> ``embed_user_items/lookup`` (edge numbers differ
    between graphs)."""
    return re.sub(r"^edge_\d+_", "", name or "")


# -- hops: the chain of a step -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Hop:
    """An interval of a step between two events. An event is ``(selector, field, agg)``:
    the messages of the step that ``selector`` (a function of a message row) picks, their
    ``field`` (``request_t``, ``first_data_t``, ...), aggregated with ``agg`` (min or max);
    the special selector ``"step_start"``/``"step_end"`` is the worker's step boundary.
    ``direction`` is the link direction the hop's message crosses (for the backlog)."""

    name: str
    start: tuple
    end: tuple
    direction: str | None


def _is(rpc=None, client=None, tensor_re=None):
    pattern = re.compile(tensor_re) if tensor_re else None

    def select(m: dict) -> bool:
        return ((rpc is None or m["rpc"] == rpc) and (client is None or m["client"] == client)
                and (pattern is None or bool(pattern.search(m["tensor"]))))
    return select


_RG = _is("RunGraph", "worker")
_IDS = _is("RecvTensor", "ps", r"/ids$")
_LOOKUP = _is("RecvTensor", "worker", r"/lookup$")
_DENSE = _is("RecvTensor", "worker", r"ReadVariableOp$")
_GRADS = _is("RecvTensor", "ps", r"^edge_\d+_gradients/.*(lookup_grad/Reshape|control_dependency_1)$")

# The step of the recommender (tfsim.lab.models.recommender), as the PS sees it.
RECOMMENDER_CHAIN: tuple[Hop, ...] = (
    Hop("rungraph_up", ("step_start", None, None), (_RG, "request_t", min), "up"),
    Hop("ids_request_down", (_RG, "request_end_t", min), (_IDS, "request_t", min), "down"),
    Hop("ids_up", (_IDS, "request_t", min), (_IDS, "first_data_t", min), "up"),
    Hop("ids_last", (_IDS, "request_t", min), (_IDS, "last_data_t", max), "up"),
    Hop("lookup_first_down", (_IDS, "last_data_t", max), (_LOOKUP, "first_data_t", min), "down"),
    Hop("lookup_transfer_down", (_LOOKUP, "first_data_t", min), (_LOOKUP, "last_data_t", max), "down"),
    Hop("dense_first_down", (_RG, "request_end_t", min), (_DENSE, "first_data_t", min), "down"),
    Hop("grads_first_up", (_LOOKUP, "last_data_t", max), (_GRADS, "first_data_t", min), "up"),
    Hop("grads_transfer_up", (_GRADS, "first_data_t", min), (_GRADS, "last_data_t", max), "up"),
    Hop("rungraph_response_down", (_GRADS, "last_data_t", max), (_RG, "response_headers_t", min), "down"),
    Hop("step_end", (_RG, "response_headers_t", min), ("step_end", None, None), None),
)


def _event(messages: list[dict], spec: tuple, step_bounds: tuple[float, float]) -> float:
    selector, field, agg = spec
    if selector == "step_start":
        return step_bounds[0]
    if selector == "step_end":
        return step_bounds[1]
    values = [m[field] for m in messages if selector(m) and m.get(field) is not None]
    return float(agg(values)) if values else float("nan")


def hop_table(messages: list[dict], layout: RunLayout, chain: Sequence[Hop] = RECOMMENDER_CHAIN,
              backlog: BacklogSeries | None = None, rate_Bps: float | None = None) -> list[dict]:
    """One row per (worker, step, hop): its start (relative to the step start), its length,
    and with ``backlog``: the shaper's backlog on the hop's direction when the hop began
    (bytes, and in seconds at ``rate_Bps``)."""
    by_step: dict[tuple[int, int], list[dict]] = {}
    for m in messages:
        if m["step"] >= 0:
            by_step.setdefault((m["worker"], m["step"]), []).append(m)
    rows = []
    for (w, k), ms in sorted(by_step.items()):
        bounds = (float(layout.steps[w][k, 0]), float(layout.steps[w][k, 1]))
        for hop in chain:
            a, b = _event(ms, hop.start, bounds), _event(ms, hop.end, bounds)
            row = {"worker": w, "step": k, "hop": hop.name, "direction": hop.direction, "start_t": a,
                   "offset_s": a - bounds[0], "length_s": b - a}
            if backlog is not None and hop.direction and np.isfinite(a):
                q = backlog.at(hop.direction, a)
                row["backlog_bytes"] = q
                row["backlog_s"] = q / rate_Bps if rate_Bps else float("nan")
            rows.append(row)
    return rows


# -- tc and ss samples -------------------------------------------------------------------------

@dataclasses.dataclass
class BacklogSeries:
    """tc backlog samples: ``queues[name] = (t, backlog_bytes, drops)``; ``down`` is the PS's
    eth0 egress, ``up`` the bridge port towards the PS; ``up_w<k>``/``down_w<k>`` each worker's
    own queues (its eth0 egress, the bridge port towards it)."""

    queues: dict

    def at(self, name: str, t: float) -> float:
        ts, qs, _ = self.queues[name]
        k = int(np.searchsorted(ts, t, side="right")) - 1
        return float(qs[k]) if k >= 0 else float("nan")

    def summary(self, t0: float, t1: float) -> list[dict]:
        rows = []
        for name, (ts, qs, drops) in sorted(self.queues.items()):
            m = (ts >= t0) & (ts <= t1)
            if not m.any():
                continue
            rows.append({"queue": name, "samples": int(m.sum()), "backlog_mean_bytes": float(qs[m].mean()),
                         "backlog_p50_bytes": float(np.median(qs[m])),
                         "backlog_p90_bytes": float(np.percentile(qs[m], 90)),
                         "backlog_max_bytes": float(qs[m].max()), "nonzero_fraction": float((qs[m] > 0).mean()),
                         "drops": int(drops[m][-1] - drops[m][0])})
        return rows


def read_tc_samples(path: str | Path, n_workers: int) -> BacklogSeries:
    """``tc.jsonl`` as written by scripts/research_w4/labrun.py (namespaces ``ps``, ``br``, ``w<k>``)."""
    series: dict[str, list] = {}
    for line in open(path):
        rec = json.loads(line)
        for q in rec["q"]:
            if q.get("kind") != "tbf":
                continue
            name = None
            if rec["ns"] == "ps" and q["dev"] == "eth0":
                name = "down"
            elif rec["ns"] == "br" and q["dev"] == "v1":
                name = "up"
            elif rec["ns"] == "br" and q["dev"].startswith("v"):
                name = f"down_w{int(q['dev'][1:]) - 2}"
            elif rec["ns"].startswith("w") and q["dev"] == "eth0":
                name = f"up_{rec['ns']}"
            if name:
                series.setdefault(name, []).append((rec["t"], q["backlog"], q["drops"]))
    return BacklogSeries({k: tuple(np.array(col) for col in zip(*v)) for k, v in series.items()})


_SS_HEAD = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)")


def read_ss_samples(path: str | Path, layout: RunLayout) -> list[dict]:
    """``ss -tinH`` samples (lines ``T <unix>`` between them) inside the PS's namespace: one row
    per connection and sample with its send queue (bytes not yet acknowledged or sent), RTT,
    cwnd, ``notsent`` and ``unacked`` (segments), and which peer and side it is."""
    rows, t, head = [], None, None
    for line in open(path):
        if line.startswith("T "):
            t = float(line.split()[1])
            continue
        m = _SS_HEAD.match(line)
        if m:
            head = m
            continue
        if head is None or t is None:
            continue
        local, peer = head.group(4), head.group(5)
        lport = int(local.rsplit(":", 1)[1])
        pip = _strip_v4(peer.rsplit(":", 1)[0].strip("[]"))
        w = layout.worker_of_ip(pip)
        info = dict(kv.split(":", 1) for kv in line.split() if ":" in kv and not kv.startswith("bbr:"))
        rtt = float(info["rtt"].split("/")[0]) if "rtt" in info else float("nan")
        rows.append({"t": t, "worker": w, "ps_is_server": lport == layout.ps_port,
                     "recv_q": int(head.group(2)), "send_q": int(head.group(3)), "rtt_ms": rtt,
                     "cwnd": int(info.get("cwnd", 0)), "notsent_bytes": int(info.get("notsent", 0)),
                     "unacked": int(info.get("unacked", 0))})
        head = None
    return rows


# -- simulated ---------------------------------------------------------------------------------

def simulated_timeline(sim, t0: float | None = None, t1: float | None = None,
                       capacity_Bps: dict[str, float] | None = None) -> dict:
    """Wire and tensor tables of a simulated run with a trace (``SimConfig.trace_steps``).

    Returns ``{"wire": rows, "tensors": rows, "window": (t0, t1), "link_busy": {direction:
    [[start, end], ...]}}``; a link is busy where any worker's transfer chunk on it is being
    served, at whatever rate. The bytes a direction moved in the window (its
    ``payload_bytes_per_s``, and with ``capacity_Bps`` its used fraction, as
    :func:`wire_tables` counts them) spread each transfer's bytes evenly over the time its
    chunks were in service: the trace keeps chunks' times, not their bytes."""
    from simulate.prepare import KIND_TRANSFER
    from tfprofile.dag import Resource

    g, tr = sim.graph, sim.trace
    if tr is None:
        raise ValueError("simulate with trace_steps to get a timeline")
    op = tr["op"]
    res = g.resource[op]
    is_tx = g.kind[op] == KIND_TRANSFER
    t0 = float(np.min(sim.step_start_s[:, sim.config.warmup])) if t0 is None else t0
    t1 = float(np.min(sim.step_end_s[:, -1])) if t1 is None else t1
    wire_rows, link_busy = [], {}
    for resource, name in ((Resource.DOWNLINK, "down"), (Resource.UPLINK, "up")):
        m = is_tx & (res == resource)
        s, e = tr["start_s"][m], tr["end_s"][m]
        link_busy[name] = merged_intervals(s, e).tolist()
        size = np.zeros(m.sum())
        payload_per_s = _bytes_in_window(tr, g, m, t0, t1) / (t1 - t0) if t1 > t0 else float("nan")
        wire_rows.append({"direction": name, "worker": "all", **wire_summary(s, e, size, t0, t1),
                          "payload_bytes_per_s": payload_per_s,
                          "used_fraction": used_fraction(payload_per_s, (capacity_Bps or {}).get(name))})
        for w in range(sim.config.workers):
            mw = tr["worker"][m] == w
            busy, _ = union_busy(s[mw], e[mw], t0, t1)
            wire_rows.append({"direction": name, "worker": w, "busy_fraction": busy / (t1 - t0)})
    tensors = []
    key = _op_instance_key(tr)
    for k in np.unique(key[is_tx]):
        m = key == k
        w, step, o = int(tr["worker"][m][0]), int(tr["step"][m][0]), int(op[m][0])
        start = float(sim.step_start_s[w, step])
        tensors.append({"worker": w, "step": step, "tensor": str(g.names[o]),
                        "response_dir": "down" if g.resource[o] == Resource.DOWNLINK else "up",
                        "step_start": start, "first_data_t": float(tr["start_s"][m].min()),
                        "last_data_t": float(tr["end_s"][m].max()), "tensor_bytes": float(g.work[0, o])})
    return {"wire": wire_rows, "tensors": tensors, "window": (t0, t1), "link_busy": link_busy}


def _op_instance_key(trace: dict) -> np.ndarray:
    """One integer per trace row naming the op instance (worker, step, op) it is a chunk of."""
    return trace["worker"].astype(np.int64) * 10**9 + trace["step"].astype(np.int64) * 10**4 + trace["op"]


def _bytes_in_window(trace: dict, graph, rows: np.ndarray, t0: float, t1: float) -> float:
    """Bytes the traced transfer chunks selected by ``rows`` moved within ``[t0, t1)``: each
    transfer's bytes (the same in every step) spread evenly over its chunks' service time."""
    op, s, e = trace["op"][rows], trace["start_s"][rows], trace["end_s"][rows]
    _, instance = np.unique(_op_instance_key(trace)[rows], return_inverse=True)
    service = np.bincount(instance, weights=e - s)
    inside = np.clip(np.minimum(e, t1) - np.maximum(s, t0), 0.0, None)
    share = np.divide(inside, service[instance], out=np.zeros_like(inside), where=service[instance] > 0)
    return float(np.sum(share * graph.work[0, op]))


# -- comparison --------------------------------------------------------------------------------

def tensor_offsets(rows: list[dict], min_bytes: int = 0, t0: float = -np.inf, t1: float = np.inf) -> dict:
    """Per short tensor name and direction: median offsets (ms) of first and last data from the
    step start, and the median transfer span, over steps that begin inside [t0, t1]."""
    out: dict[tuple, list] = {}
    for r in rows:
        if r.get("first_data_t") is None or not np.isfinite(r.get("step_start", np.nan)):
            continue
        if not (t0 <= r["step_start"] <= t1) or (r.get("tensor_bytes") or 0) < min_bytes:
            continue
        out.setdefault((short_tensor(r["tensor"]), r["response_dir"]), []).append(
            (r["first_data_t"] - r["step_start"], r["last_data_t"] - r["step_start"],
             r.get("request_t", np.nan) - r["step_start"] if r.get("request_t") else np.nan))
    table = {}
    for k, v in out.items():
        a = np.array(v, dtype=float)
        table[k] = {"n": len(v), "first_ms": float(np.median(a[:, 0]) * 1e3),
                    "last_ms": float(np.median(a[:, 1]) * 1e3),
                    "request_ms": float(np.nanmedian(a[:, 2]) * 1e3) if np.isfinite(a[:, 2]).any() else float("nan"),
                    "span_ms": float(np.median(a[:, 1] - a[:, 0]) * 1e3)}
    return table


@dataclasses.dataclass
class Timeline:
    """Everything :func:`measured_timeline` reads, and its tables."""

    layout: RunLayout
    window: tuple[float, float]
    rate_Bps: float
    wire: dict
    messages: list[dict]
    hops: list[dict]
    backlog: BacklogSeries | None
    ss: list[dict]

    def tables(self, capacity_Bps: dict[str, float] | None = None) -> dict:
        """The measured tables over the window; ``capacity_Bps`` as :func:`wire_tables`."""
        t0, t1 = self.window
        out = {"wire": wire_tables(self.wire, self.rate_Bps, t0, t1, capacity_Bps),
               "tensors": tensor_offsets([m for m in self.messages if m["rpc"] == "RecvTensor"], t0=t0, t1=t1),
               "hops": hop_summary([h for h in self.hops if t0 <= h["start_t"] <= t1])}
        if self.backlog is not None:
            out["backlog"] = self.backlog.summary(t0, t1)
        if self.ss:
            out["tcp"] = ss_summary([r for r in self.ss if t0 <= r["t"] <= t1])
        steps = []
        for w, arr in sorted(self.layout.steps.items()):
            m = (arr[:, 0] >= t0) & (arr[:, 1] <= t1)
            if m.any():
                median_ms = float(np.median(np.diff(arr[m], axis=1)) * 1e3)
                steps.append({"worker": w, "steps": int(m.sum()), "step_median_ms": median_ms})
        out["steps"] = steps
        return out


def hop_summary(hops: list[dict]) -> list[dict]:
    rows = []
    names = list(dict.fromkeys(h["hop"] for h in hops))
    for name in names:
        for w in sorted({h["worker"] for h in hops}) + ["all"]:
            hs = [h for h in hops if h["hop"] == name and (w == "all" or h["worker"] == w)
                  and np.isfinite(h["length_s"])]
            if not hs:
                continue
            lengths = np.array([h["length_s"] for h in hs])
            row = {"hop": name, "worker": w, "direction": hs[0]["direction"], "n": len(hs),
                   "median_ms": float(np.median(lengths) * 1e3), "p90_ms": float(np.percentile(lengths, 90) * 1e3),
                   "offset_median_ms": float(np.median([h["offset_s"] for h in hs]) * 1e3)}
            if "backlog_s" in hs[0]:
                b = np.array([h.get("backlog_s", np.nan) for h in hs])
                row["backlog_median_ms"] = float(np.nanmedian(b) * 1e3) if np.isfinite(b).any() else float("nan")
                ok = np.isfinite(b)
                enough = ok.sum() > 3 and b[ok].std() > 0
                row["corr_backlog"] = float(np.corrcoef(b[ok], lengths[ok])[0, 1]) if enough else float("nan")
            rows.append(row)
    return rows


def ss_summary(rows: list[dict]) -> list[dict]:
    out = []
    for side in (True, False):
        for w in sorted({r["worker"] for r in rows if r["worker"] is not None}):
            rs = [r for r in rows if r["worker"] == w and r["ps_is_server"] == side]
            if not rs:
                continue
            sq = np.array([r["send_q"] for r in rs])
            rtt = np.array([r["rtt_ms"] for r in rs])
            out.append({"worker": w, "connection": "worker->ps (ps serves)" if side else "ps->worker (ps asks)",
                        "samples": len(rs), "ps_send_q_median": float(np.median(sq)),
                        "ps_send_q_p90": float(np.percentile(sq, 90)), "rtt_median_ms": float(np.nanmedian(rtt)),
                        "rtt_p90_ms": float(np.nanpercentile(rtt, 90))})
    return out


def measured_timeline(pcap: str | Path, run_dir: str | Path, *, rate_Bps: float, samples_dir: str | Path | None = None,
                      chain: Sequence[Hop] = RECOMMENDER_CHAIN, window: tuple[float, float] | None = None,
                      capture=None) -> Timeline:
    """Decode ``pcap`` (taken at the PS) against ``run_dir``; with ``samples_dir`` also read its
    ``tc.jsonl`` and ``ss.txt``. ``rate_Bps`` is the shaper's rate in bytes/s on the wire
    (layer 2, as tbf counts). The window defaults to the lab's throughput window: the last
    half of the window in which every worker runs its measured steps
    (:func:`tfsim.lab.measure.measured_window`)."""
    from calibration.runmatch import run_server_ports
    layout = read_layout(run_dir)
    if window is None:
        window = measured_window(layout.steps)
    first_bytes = None
    if capture is None:
        capture, first_s = read_capture_with_first_bytes(pcap, run_server_ports(run_dir))
        first_bytes = stream_first_bytes(capture, first_s)
    wire = read_wire(pcap, layout)
    messages = message_table(capture, layout, first_bytes)
    backlog = ss = None
    if samples_dir is not None:
        samples_dir = Path(samples_dir)
        if (samples_dir / "tc.jsonl").exists():
            backlog = read_tc_samples(samples_dir / "tc.jsonl", len(layout.worker_ips))
        if (samples_dir / "ss.txt").exists():
            ss = read_ss_samples(samples_dir / "ss.txt", layout)
    hops = hop_table(messages, layout, chain, backlog, rate_Bps)
    return Timeline(layout, window, rate_Bps, wire, messages, hops, backlog, ss or [])


def compare(measured: Timeline, simulated: dict | None, capacity_Bps: dict[str, float] | None = None) -> dict:
    """Measured and simulated tables side by side: wire (used and busy fractions, gaps) per
    direction, and the tensors' first/last byte offsets from the step start. ``capacity_Bps``
    as :func:`wire_tables`: give the simulated side the same (:func:`simulated_timeline`)."""
    m = measured.tables(capacity_Bps)
    def keyed(t):
        return {f"{k[0]}|{k[1]}": v for k, v in t.items()}

    out = {"measured": {**m, "tensors": keyed(m["tensors"])}}
    if simulated is None:
        return out
    s_tensors = tensor_offsets(simulated["tensors"], t0=simulated["window"][0], t1=simulated["window"][1])
    out["simulated"] = {"wire": simulated["wire"], "tensors": keyed(s_tensors)}
    rows = []
    for key in sorted(set(m["tensors"]) | set(s_tensors)):
        a, b = m["tensors"].get(key), s_tensors.get(key)
        rows.append({"tensor": key[0], "direction": key[1],
                     "measured_first_ms": a["first_ms"] if a else None, "measured_last_ms": a["last_ms"] if a else None,
                     "measured_request_ms": a["request_ms"] if a else None,
                     "simulated_first_ms": b["first_ms"] if b else None,
                     "simulated_last_ms": b["last_ms"] if b else None})
    out["tensors_side_by_side"] = rows
    wire_rows = []
    for d in ("down", "up"):
        a = next(r for r in m["wire"] if r["direction"] == d and r["worker"] == "all")
        b = next(r for r in simulated["wire"] if r["direction"] == d and r["worker"] == "all")
        keys = ("used_fraction", "busy_fraction", "gaps_over_2ms_fraction", "gap_median_ms", "gap_p90_ms")
        wire_rows.append({"direction": d, **{f"measured_{k}": a[k] for k in keys},
                          **{f"simulated_{k}": b[k] for k in keys}})
    out["wire_side_by_side"] = wire_rows
    return out


__all__ = [
    "RECOMMENDER_CHAIN",
    "BacklogSeries",
    "Hop",
    "RunLayout",
    "Timeline",
    "compare",
    "hop_table",
    "measured_timeline",
    "merged_intervals",
    "message_table",
    "read_layout",
    "read_ss_samples",
    "read_tc_samples",
    "read_wire",
    "simulated_timeline",
    "union_busy",
    "used_fraction",
    "wire_summary",
    "wire_tables",
]
