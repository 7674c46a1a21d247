"""``CLUSTER.json``: a calibrated cluster, format ``tfsim.cluster/1`` (every key: docs/formats.md §4).

The reader (:func:`load_cluster`, :func:`cluster_from_dict`) and the writer (:func:`save_cluster`,
which checks a document by reading it back) live here, beside :class:`~simulate.cluster.ClusterModel`,
so that predicting needs nothing of the calibration. What the model uses: ``bandwidth_Bps``
(``downlink``, ``uplink``: bytes/s), ``win_bytes`` (the window of ICPE's ``http2`` model;
``null`` or absent: unlimited), ``alpha_s_per_byte`` and ``beta_s`` (parsing overhead, with
per-direction values under ``overhead``), ``overhead_placement`` (``compute``, ``lane`` or
``delay``), ``flow_control`` (per direction: ``window_timeline`` and ``update_delay_s`` of the
``grpc`` model) and ``default_transfer`` (``grpc``, ``http2`` or ``fifo``). Everything else
``tfsim calibrate`` writes records how the numbers were found.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

from simulate.cluster import (
    MAX_HOST_CORES,
    BusyPsCpu,
    ClusterModel,
    FlowControl,
    LinkShaper,
    Overhead,
    OverheadPlacement,
    PsCpu,
    RpcChain,
    TokenBucket,
)
from simulate.config import model_cores
from tfbase.errors import InputError, TfsimWarning, UsageError
from tfbase.fileio import write_json
from tfbase.units import MAX_RATE_BPS, MIN_RATE_BPS

CLUSTER_FORMAT = "tfsim.cluster/1"

# What a cluster file may hold (docs/formats.md §4). A window below one HTTP/2 frame makes
# every stream crawl through one-byte chunks; no gRPC stack runs one: it is raised to a frame.
MIN_WINDOW_BYTES = 16_384  # HTTP/2's minimum SETTINGS_MAX_FRAME_SIZE
MAX_ALPHA_S_PER_BYTE = 1.0
MAX_DELAY_S = 1e6  # beta_s, update_delay_s
MAX_TIMELINE_POINTS = 100_000
MAX_FILE_BYTES = 64 * 2**20


class ClusterFormatError(InputError):
    """A CLUSTER.json that is not a tfsim cluster file of a supported version."""


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond the range of a float
        return False


def _number(path, data: dict, key: str, *, allow_none: bool = False, low: float = -math.inf,
            high: float = math.inf, where: str = "") -> float:
    value = data.get(key)
    if value is None and allow_none:
        return math.inf
    name = f"{where}.{key}" if where else key
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
        raise ClusterFormatError(path, f"{name} must be a finite number, not {value!r:.40}")
    if not low <= value <= high:
        if value <= 0 < low:
            bound = "positive" if math.isinf(high) else f"positive, between {low:g} and {high:g}"
        elif value < 0 <= low:
            bound = "not negative" if math.isinf(high) else f"between {low:g} and {high:g}"
        else:
            bound = f"at least {low:g}" if math.isinf(high) else f"between {low:g} and {high:g}"
        raise ClusterFormatError(path, f"{name} must be {bound}, not {value!r:.40}")
    return float(value)


def _window(path, value: float, name: str) -> float:
    """A window in bytes, raised to one HTTP/2 frame (with a warning) when it is below."""
    if value < MIN_WINDOW_BYTES:
        warnings.warn(TfsimWarning(path, f"{name} {value:g} is below one HTTP/2 frame ({MIN_WINDOW_BYTES} bytes): "
                                         f"raised to {MIN_WINDOW_BYTES}"), stacklevel=4)
        return float(MIN_WINDOW_BYTES)
    return value


def cluster_from_dict(data: dict, source: str = "CLUSTER.json") -> ClusterModel:
    """Build a :class:`ClusterModel` from the parsed JSON object."""
    if not isinstance(data, dict):
        raise ClusterFormatError(source, "must hold a JSON object")
    fmt = data.get("format")
    if fmt != CLUSTER_FORMAT:
        raise ClusterFormatError(source, f"format {fmt!r} is not supported; this tfsim reads {CLUSTER_FORMAT!r}")
    bandwidth = data.get("bandwidth_Bps")
    if not isinstance(bandwidth, dict):
        raise ClusterFormatError(source, "bandwidth_Bps must be an object with downlink and uplink")
    rate = {"low": MIN_RATE_BPS, "high": MAX_RATE_BPS, "where": "bandwidth_Bps"}
    down, up = _number(source, bandwidth, "downlink", **rate), _number(source, bandwidth, "uplink", **rate)
    if "win_bytes" not in data:
        raise ClusterFormatError(source, "win_bytes is missing (give the HTTP/2 window in bytes, or null for an "
                                         "unlimited one)")
    win = _number(source, data, "win_bytes", allow_none=True, low=1)
    if not math.isinf(win):
        win = _window(source, win, "win_bytes")
    alpha = _number(source, data, "alpha_s_per_byte", low=0, high=MAX_ALPHA_S_PER_BYTE)
    beta = _number(source, data, "beta_s", low=0, high=MAX_DELAY_S)
    per_direction = data.get("overhead") or {}
    if not isinstance(per_direction, dict):
        raise ClusterFormatError(source, "overhead must map downlink/uplink to objects")
    try:
        overheads = {}
        for direction in ("downlink", "uplink"):
            entry = per_direction.get(direction) or {}
            if not isinstance(entry, dict):
                raise ClusterFormatError(source, f"overhead.{direction} must be an object")
            where = f"overhead.{direction}"
            overheads[direction] = Overhead(
                _number(source, entry, "alpha_s_per_byte", low=0, high=MAX_ALPHA_S_PER_BYTE, where=where)
                if "alpha_s_per_byte" in entry else alpha,
                _number(source, entry, "beta_s", low=0, high=MAX_DELAY_S, where=where) if "beta_s" in entry else beta)
        placement_name = data.get("overhead_placement", OverheadPlacement.COMPUTE.value)
        placements = {p.value: p for p in OverheadPlacement}
        if not isinstance(placement_name, str) or placement_name not in placements:
            raise ClusterFormatError(source, f"overhead_placement must be one of {', '.join(placements)}, "
                                             f"not {placement_name!r}")
        flows = _flow_control(source, data.get("flow_control"))
        default_transfer = data.get("default_transfer", "http2")
        if default_transfer not in ("http2", "grpc", "fifo"):
            raise ClusterFormatError(source, f"default_transfer must be http2, grpc or fifo, not {default_transfer!r}")
        buckets = _token_buckets(source, data.get("token_bucket"))
        queue = _per_direction_numbers(source, data, "queue_window_bytes")
        buffer = _buffers(source, data.get("buffer_bytes"))
        connection_cap = _connection_caps(source, data.get("connection_cap_Bps"))
        rpc = _rpc(source, data.get("rpc"))
        ps_cpu = _ps_cpu(source, data.get("ps_cpu"))
        ps_host_cores, worker_host_cores = _hosts(source, data.get("hosts")) or (None, None)
        shaper = _shaper(source, data.get("link_ceiling"))
        return ClusterModel(down, up, win_bytes=win, overhead_downlink=overheads["downlink"],
                            overhead_uplink=overheads["uplink"], overhead_placement=placements[placement_name],
                            flow_downlink=flows["downlink"], flow_uplink=flows["uplink"],
                            bucket_downlink=buckets["downlink"], bucket_uplink=buckets["uplink"],
                            queue_window_downlink_bytes=queue["downlink"], queue_window_uplink_bytes=queue["uplink"],
                            buffer_downlink_bytes=buffer["downlink"], buffer_uplink_bytes=buffer["uplink"],
                            connection_cap_downlink_Bps=connection_cap["downlink"],
                            connection_cap_uplink_Bps=connection_cap["uplink"],
                            shaper=shaper, rpc=rpc, ps_cpu=ps_cpu,
                            ps_host_cores=ps_host_cores, worker_host_cores=worker_host_cores,
                            default_transfer=default_transfer, calibrated=True, source=str(source))
    except UsageError as err:
        raise ClusterFormatError(source, f"{err.source}: {err.problem}" if err.source else err.problem) from None
    except AttributeError:
        raise ClusterFormatError(source, "overhead must map downlink/uplink to objects") from None


def flow_control_from_json(entry, source: str = "CLUSTER.json", direction: str = "") -> FlowControl:
    """One direction of ``flow_control`` (``window_timeline`` points and ``update_delay_s``) as a
    :class:`FlowControl`; ``None`` means no flow control (unlimited windows)."""
    if entry is None:
        return FlowControl()
    where = f"flow_control.{direction}" if direction else "flow_control"
    points = entry.get("window_timeline") if isinstance(entry, dict) else None
    if not isinstance(points, list) or not points or not all(isinstance(p, dict) for p in points):
        raise ClusterFormatError(source, f"{where}.window_timeline must be a non-empty list of {{t_s, window_bytes}} "
                                         f"objects")
    if len(points) > MAX_TIMELINE_POINTS:
        raise ClusterFormatError(source, f"{where}.window_timeline has {len(points):,} points (at most "
                                         f"{MAX_TIMELINE_POINTS:,})")
    timeline_where = f"{where}.window_timeline"
    timeline = tuple((_number(source, p, "t_s", where=timeline_where),
                      _number(source, p, "window_bytes", low=1, where=timeline_where)) for p in points)
    delay = (_number(source, entry, "update_delay_s", low=0, high=MAX_DELAY_S, where=where)
             if "update_delay_s" in entry else 0.0)
    try:
        flow = FlowControl(timeline, delay)
    except UsageError as err:
        raise ClusterFormatError(source, f"{where}: {err.problem}") from None
    if any(v < MIN_WINDOW_BYTES for _, v in timeline):
        low = min(v for _, v in timeline)
        flow = FlowControl(tuple((t, _window(source, v, f"{timeline_where} window_bytes") if v == low
                                  else max(v, float(MIN_WINDOW_BYTES))) for t, v in timeline), delay)
    return flow


def _token_buckets(source, data) -> dict[str, TokenBucket | None]:
    """``token_bucket`` of CLUSTER.json: per direction ``sustained_Bps`` and ``bucket_bytes``
    (docs/model.md §4.4); absent: the bandwidth is sustained."""
    if data is None:
        return {"downlink": None, "uplink": None}
    if not isinstance(data, dict) or not all(isinstance(data.get(d, {}), dict) for d in ("downlink", "uplink")):
        raise ClusterFormatError(source, "token_bucket must map downlink/uplink to {sustained_Bps, bucket_bytes}")
    out = {}
    for direction in ("downlink", "uplink"):
        entry = data.get(direction)
        out[direction] = None if entry is None else TokenBucket(
            _number(source, entry, "sustained_Bps"), _number(source, entry, "bucket_bytes"))
    return out


def _rpc(source, data) -> RpcChain | None:
    """``rpc`` of CLUSTER.json: the step's RPC latencies (docs/model.md §2.9); absent: none."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ClusterFormatError(source, "rpc must be an object of latencies in seconds")
    return RpcChain(*(_number(source, data, key) if key in data else 0.0
                      for key in ("rungraph_s", "worker_requests_s", "ps_requests_s", "response_s")))


def _ps_cpu(source, data) -> PsCpu | None:
    """``ps_cpu`` of CLUSTER.json (docs/model.md §4.7); absent or null: not measured."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ClusterFormatError(source, "ps_cpu must be an object with cpu_s_per_step and cores")
    servers = data.get("servers", 1)
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise ClusterFormatError(source, f"ps_cpu.servers must be a whole number from 1, not {servers!r:.40}")
    return PsCpu(_number(source, data, "cpu_s_per_step", low=1e-9, high=MAX_DELAY_S, where="ps_cpu"),
                 _number(source, data, "cores", low=1e-3, high=1e6, where="ps_cpu"), servers,
                 _busy_ps_cpu(source, data.get("busy", [])))


def _busy_ps_cpu(source, data) -> tuple[BusyPsCpu, ...]:
    """``ps_cpu.busy`` of CLUSTER.json (docs/formats.md §4): the CPU per worker-step of runs
    with several workers; absent: none."""
    if not isinstance(data, list):
        raise ClusterFormatError(source, "ps_cpu.busy must be a list of objects with workers and cpu_s_per_step")
    records = []
    for entry in data:
        workers = entry.get("workers") if isinstance(entry, dict) else None
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 2:
            raise ClusterFormatError(source, "every ps_cpu.busy entry needs workers, a whole number from 2, "
                                             f"not {workers!r:.40}")
        records.append(BusyPsCpu(workers, _number(source, entry, "cpu_s_per_step", low=1e-9, high=MAX_DELAY_S,
                                                    where="ps_cpu.busy")))
    if len({r.workers for r in records}) != len(records):
        raise ClusterFormatError(source, "ps_cpu.busy has two entries for one worker count")
    return tuple(records)


def _hosts(source, data) -> tuple[float, float] | None:
    """``hosts`` of CLUSTER.json (calibration.md §4.10): the model cores of the PS and of the worker
    hosts (:func:`~simulate.config.model_cores` of each recorded quota); absent or null: not known."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ClusterFormatError(source, "hosts must be an object with ps_cores and worker_cores")
    return tuple(model_cores(_number(source, data, key, low=1e-3, high=MAX_HOST_CORES, where="hosts"))
                 for key in ("ps_cores", "worker_cores"))


def _per_direction_numbers(source, data: dict, key: str) -> dict[str, float]:
    """An optional ``{downlink: x, uplink: y}`` object of numbers; 0 where absent."""
    entry = data.get(key)
    if entry is None:
        return {"downlink": 0.0, "uplink": 0.0}
    if not isinstance(entry, dict):
        raise ClusterFormatError(source, f"{key} must map downlink/uplink to numbers")
    return {d: _number(source, entry, d) if d in entry else 0.0 for d in ("downlink", "uplink")}


def _buffers(source, entry) -> dict[str, float]:
    """``buffer_bytes``: an optional ``{downlink: bytes, uplink: bytes}``; unbounded (inf) where
    absent or null."""
    if entry is None:
        return {"downlink": math.inf, "uplink": math.inf}
    if not isinstance(entry, dict):
        raise ClusterFormatError(source, "buffer_bytes must map downlink/uplink to numbers of bytes")
    return {d: _number(source, entry, d, allow_none=True, low=1, where="buffer_bytes") for d in ("downlink", "uplink")}


def _connection_caps(source, entry) -> dict[str, float]:
    """``connection_cap_Bps``: an optional ``{downlink: bytes/s, uplink: bytes/s}``; no cap (inf)
    where absent or null (docs/model.md §4.8)."""
    if entry is None:
        return {"downlink": math.inf, "uplink": math.inf}
    if not isinstance(entry, dict):
        raise ClusterFormatError(source, "connection_cap_Bps must map downlink/uplink to rates in bytes/s")
    return {d: _number(source, entry, d, allow_none=True, low=MIN_RATE_BPS, high=MAX_RATE_BPS,
                       where="connection_cap_Bps") for d in ("downlink", "uplink")}


def _shaper(source, ceiling) -> LinkShaper | None:
    """``link_ceiling.link`` (docs/formats.md §4): the link's configured shaper, when it records
    both of its buckets (the lab's tbf); None for a rate alone (``--link-rate``: no buckets, no
    peak rate), and for a file without it."""
    if ceiling is None:
        return None
    if not isinstance(ceiling, dict) or not isinstance(ceiling.get("link", {}), dict):
        raise ClusterFormatError(source, "link_ceiling must be an object whose link is an object")
    link = ceiling.get("link") or {}
    names = ("rate_Bps", "burst_bytes", "peak_rate_Bps", "peak_burst_bytes")
    if not all(link.get(name) for name in names):
        return None
    where = "link_ceiling.link"
    return LinkShaper(*(_number(source, link, name, low=1, where=where) for name in names))


def _flow_control(source, data) -> dict[str, FlowControl]:
    """``flow_control`` of CLUSTER.json as one :class:`FlowControl` per direction (unlimited where absent)."""
    if data is None:
        return {"downlink": FlowControl(), "uplink": FlowControl()}
    if not isinstance(data, dict):
        raise ClusterFormatError(source, "flow_control must map downlink/uplink to objects")
    return {d: flow_control_from_json(data.get(d), source, d) for d in ("downlink", "uplink")}


def load_cluster(path: str | os.PathLike) -> ClusterModel:
    """Read a CLUSTER.json; :class:`ClusterFormatError` if it is not one."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ClusterFormatError(path, f"is larger than a cluster file can be ({MAX_FILE_BYTES // 2**20} MiB)")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ClusterFormatError(path, "no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ClusterFormatError(path, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise ClusterFormatError(path, "not a cluster file (JSON nested too deeply)") from None
    return cluster_from_dict(data, str(path))


def save_cluster(data: dict, path: str | os.PathLike) -> None:
    """Check ``data`` describes a valid cluster, then write it atomically."""
    cluster_from_dict(data, str(path))
    write_json(path, data)


def resolve_cluster(cluster: ClusterModel | str | os.PathLike | None = None,
                    bandwidth_Bps: float | None = None) -> ClusterModel:
    """The cluster a prediction is for.

    ``cluster`` is a :class:`ClusterModel` or the path of a CLUSTER.json. With
    ``bandwidth_Bps`` it is rescaled to that downlink bandwidth, the uplink in proportion (a
    what-if: everything else stays calibrated). Without a cluster, ``bandwidth_Bps`` alone
    gives an uncalibrated one (no parsing overhead, unlimited windows), with a
    :class:`~tfbase.errors.TfsimWarning` saying so.
    """
    if cluster is None:
        if bandwidth_Bps is None:
            raise UsageError("cluster", "give a calibrated cluster (CLUSTER.json) or a bandwidth")
        warnings.warn(TfsimWarning(None, "no calibration: parsing overhead 0 and an unlimited HTTP/2 window assumed"),
                      stacklevel=3)
        return ClusterModel.from_bandwidth(bandwidth_Bps)
    if not isinstance(cluster, ClusterModel):
        cluster = load_cluster(cluster)
    if bandwidth_Bps is not None:
        cluster = cluster.with_bandwidth(bandwidth_Bps, cluster.uplink_Bps * bandwidth_Bps / cluster.downlink_Bps)
    return cluster
