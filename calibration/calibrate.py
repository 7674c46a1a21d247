"""``tfsim calibrate``: fit a cluster's B, WIN and α/β from a captured 1-PS/1-worker run (docs/calibration.md).

Inputs, all in one run directory written by ``tfsim collect --capture``: ``iperf3/*.json``,
``capture.pcap.gz`` and the traced steps. What is fitted, and from what:

- **Bandwidth B** per direction, two measurements: the median ``end.sum_received`` rate of
  the repeated ``iperf3 -J`` runs (downlink = ``-R`` runs, PS to worker), with their
  spread; and the capture's busy rate, the rate the job's tensors moved at while the link
  was backlogged (:func:`_busy_rate`). The model uses the one that, with the rest of the
  calibration, reproduces the calibration run's own step time at W = 1 (``bandwidth_source``;
  both are kept in CLUSTER.json). A busy rate well below iperf3's is the job's connection's,
  not the link's: B is then iperf3's and the busy rate caps each worker's connection
  (:func:`connection_bound`, ``connection_cap_Bps``). Where the link's rate is known (``run.json`` ``link``, or
  ``link_rate_Bps``), both are held to what TCP payload can carry on it
  (:mod:`calibration.ceiling`, docs/calibration.md §4.6).
- **Window WIN** per direction: the receiver's HTTP/2 stream window (INITIAL_WINDOW_SIZE as
  the receiver advertised it, BDP-probe raises included) in force when each tensor stream
  started sending; the single value the ``http2`` model uses is the byte-weighted median
  over the traced steps, i.e. the window most of the bytes were sent under. Its timeline
  (initial value and every raise, relative to the capture start) is stored too.
- **Overhead** ``alpha * size + beta`` per direction (ICPE §3.2.1): the delay from the last
  DATA frame of a tensor's stream on the wire to the end of its RecvTensor record, against
  the tensor's size, fitted with Theil-Sen (robust to late records; slope and intercept
  kept non-negative), with R², n and the residuals. The uplink's record ends on the PS's clock
  and the capture runs on the worker's
  host: the same clock in the lab, synchronised clocks (NTP) on a real cluster.
- **Flow control for the ``grpc`` model** per direction: the window timeline above (made
  non-decreasing: BDP probing only raises windows) and the window-update delay, the median
  time from a DATA frame that leaves the stream's or the connection's window below one
  frame (16 KiB: a stall) to the receiver's WINDOW_UPDATE that raises it again. Where the
  windows never ran out, no stall is seen and the delay is recorded as 0 with
  ``stalls: 0`` (the model then never pauses either, at the same windows). The delay the
  model uses is fitted between 0 and that measured time (:func:`_fit_update_delay`).
- **Send-ready time** of a tensor, for the ``grpc`` model: when the sender hands it to
  gRPC, the later of the receiver's request and the end of the op producing it. TF 2.21
  records no node stats for ``_Send``; the receiver's RecvTensor record starts when its
  request has met the sender's tensor, so its start is the send-ready time (checked on
  the bundled captures: for a gradient it starts within 0.1 ms of the producing op's end;
  where the sender's single executor thread runs ``_Send`` later, it starts later, and so
  does the stream on the wire).
- **Overhead placement**: where the overhead runs (on the receiver's compute resource as in
  ICPE, on a parse lane, or as a pure delay) is chosen so that the model reproduces the
  calibration run's own traced step time at W = 1 (:func:`choose_placement`).
- **Model check** (ICPE Table 1): each traced step's streams of each direction are replayed
  through the ``http2`` and ``fifo`` models (arrivals at the captured request times, as
  ICPE) and the ``grpc`` model (arrivals at the send-ready times, windows and update delay
  as calibrated), sizes from the trace (equal to the captured messages), B and WIN as fitted;
  the relative error of every stream's end time is
  ``|modelled − captured| / (captured − t0)`` with t0 the step's first request in that
  direction, over streams of at least ``min_stream_bytes`` (100 KB: a stream that ends a few
  ms after the step starts would make the relative error explode, docs/calibration.md §8.1).
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

from calibration.capture_loss import MAX_LOSS_FRACTION, check_loss, link_losses
from calibration.ceiling import Link, check_ceiling, link_from_run
from calibration.fit import LineFit, nonnegative_line
from calibration.hosts import hosts_record
from calibration.pscpu import PS_PREFIX, WORKER_PREFIX, ps_cpu_record, tracing_cpu_ratio
from calibration.replay import error_summary, relative_errors, replay_fifo, replay_grpc, replay_http2
from calibration.runmatch import match_run, run_server_ports, run_tasks
from netcapture import IperfSummary, read_capture, summarise_iperf
from netcapture.inflight import bytes_in_flight
from simulate.cluster import OverheadPlacement, RpcChain
from simulate.cluster_file import CLUSTER_FORMAT, cluster_from_dict, flow_control_from_json
from simulate.config import Transfer
from simulate.untrace import one_worker_step_s
from tfbase.errors import InputError, RunDirError, TraceWarning, UsageError
from tfbase.units import MAX_RATE_BPS, MIN_RATE_BPS
from tfprofile.rundir import TF2_PSS_API, open_run_dir, profile_from_run_dir, run_api, traced_steps

DIRECTIONS = ("downlink", "uplink")
MIN_STREAM_BYTES = 100_000
# A step's direction estimates the busy rate when it moves at least this much: enough to span
# many round trips and more than a shaper's burst (tbf's bucket, a NIC's burst allowance),
# so that the rate is the link's and not the first burst's. A small model's whole step (a
# few hundred KB) qualifies; its burst is what the token bucket then carries.
MIN_BUSY_BYTES = 4 * MIN_STREAM_BYTES
MAX_IPERF_BYTES = 64 * 2**20
MIN_BUFFER_BYTES = 1500  # one full-size packet: a queue that cannot hold one drops everything
FLIGHT_PERCENTILES = (50, 90, 99)  # of the busiest connection's bytes in flight, kept in CLUSTER.json
# A busy rate below this fraction of iperf3's is not the link's: iperf3's bulk flow showed the
# link carry more, so the job's connection (its end's CPU, its windows) held it back, and every
# worker's connection will be so held (docs/calibration.md §4.9). A connection that the link
# held comes within 10% of iperf3's (0.93 to 1.25 over the lab's saved calibrations); a cap at
# such a rate would hold a faster link's what-if to this one's.
CONNECTION_BOUND_FRACTION = 0.9


@dataclasses.dataclass(frozen=True)
class StreamSample:
    """One tensor transfer seen both in the trace and on the wire."""

    direction: str
    step_file: str
    tensor_name: str
    size_bytes: int
    request_s: float          # the receiver's request (HEADERS) on the wire
    send_ready_s: float       # the RecvTensor record's start: the later of request and sender ready
    first_data_s: float
    last_data_s: float
    record_end_s: float       # the RecvTensor record's end (data parsed and available)
    window_bytes: int         # the receiver's stream window when the stream started sending

    @property
    def overhead_s(self) -> float:
        return self.record_end_s - self.last_data_s


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Everything ``tfsim calibrate`` finds; :meth:`to_cluster_json` is the CLUSTER.json object."""

    run_dir: str
    bandwidth_Bps: dict
    bandwidth_spread_Bps: dict
    busy_rate_Bps: dict
    window_bytes: dict
    window_timeline: dict
    overhead: dict[str, LineFit]
    overhead_pooled: LineFit
    model_error: dict
    samples: tuple[StreamSample, ...]
    tensorflow: str | None
    capture_notes: tuple[str, ...]
    placement: str = "compute"
    placement_check: dict = dataclasses.field(default_factory=dict)
    flow_control: dict = dataclasses.field(default_factory=dict)
    bandwidth_source: str = "iperf3"
    iperf3_bandwidth_Bps: dict = dataclasses.field(default_factory=dict)
    token_bucket: dict = dataclasses.field(default_factory=dict)
    queue_window_bytes: dict = dataclasses.field(default_factory=dict)
    bytes_in_flight: dict = dataclasses.field(default_factory=dict)  # the queue window's distribution (§4.5)
    rpc: dict = dataclasses.field(default_factory=dict)
    capture_loss: dict = dataclasses.field(default_factory=dict)
    kernel_drops: int | None = None
    allowed_loss: bool = False
    link_ceiling: dict = dataclasses.field(default_factory=dict)  # when the link's rate is known (§4.6)
    buffer_bytes: dict = dataclasses.field(default_factory=dict)  # when the link's buffer is known (§4.7)
    ps_cpu: dict = dataclasses.field(default_factory=dict)  # when collect sampled the tasks' CPU (§4.8)
    hosts: dict = dataclasses.field(default_factory=dict)  # when every task had a quota of its own (§4.10)
    connection_cap_Bps: dict = dataclasses.field(default_factory=dict)  # a connection-bound direction's (§4.9)
    connection_cap_traced: dict = dataclasses.field(default_factory=dict)  # the caps as traced, and the speed-up (§4.9)

    @property
    def default_transfer(self) -> str:
        """``grpc`` for captures of TF 2.x, whose gRPC ICPE's ``http2`` model no longer fits."""
        major = (self.tensorflow or "").split(".")[0]
        return "grpc" if major.isdigit() and int(major) >= 2 else "http2"

    def to_cluster_json(self, default_transfer: str | None = None) -> dict:
        default_transfer = default_transfer or self.default_transfer
        error = self.model_error.get(default_transfer, {}).get("all", {})
        return {
            "format": CLUSTER_FORMAT,
            "bandwidth_Bps": self.bandwidth_Bps,
            "bandwidth_source": self.bandwidth_source,
            "iperf3_bandwidth_Bps": self.iperf3_bandwidth_Bps or self.bandwidth_Bps,
            "bandwidth_spread_Bps": self.bandwidth_spread_Bps,
            "busy_rate_Bps": self.busy_rate_Bps,
            "win_bytes": self.window_bytes["downlink"],
            "win_bytes_by_direction": self.window_bytes,
            "window_timeline": self.window_timeline,
            "alpha_s_per_byte": self.overhead_pooled.slope,
            "beta_s": self.overhead_pooled.intercept,
            "overhead": {d: {"alpha_s_per_byte": f.slope, "beta_s": f.intercept, "r2": f.r2, "n": f.n,
                             "residual_median_abs_s": f.residual_median_abs, "residual_p95_abs_s": f.residual_p95_abs,
                             "method": f.method} for d, f in self.overhead.items()},
            "overhead_placement": self.placement,
            "flow_control": self.flow_control,
            "token_bucket": self.token_bucket,
            "queue_window_bytes": self.queue_window_bytes,
            **({"bytes_in_flight": self.bytes_in_flight} if self.bytes_in_flight else {}),
            **({"rpc": self.rpc} if self.rpc else {}),
            **({"link_ceiling": self.link_ceiling} if self.link_ceiling else {}),
            **({"buffer_bytes": self.buffer_bytes} if self.buffer_bytes else {}),
            **({"ps_cpu": self.ps_cpu} if self.ps_cpu else {}),
            **({"hosts": self.hosts} if self.hosts else {}),
            **({"connection_cap_Bps": self.connection_cap_Bps} if self.connection_cap_Bps else {}),
            **({"connection_cap_traced": self.connection_cap_traced} if self.connection_cap_traced else {}),
            "overhead_placement_check": self.placement_check,
            "default_transfer": default_transfer,
            "http2_model_error": {k: error.get(k) for k in ("mean", "median", "p95", "max")},
            "transfer_model_error": self.model_error,
            "capture_loss": {"by_direction": self.capture_loss, "kernel_drops": self.kernel_drops,
                             "max_loss_fraction": MAX_LOSS_FRACTION, "allowed": self.allowed_loss},
            "provenance": {"run_dir": self.run_dir, "tensorflow": self.tensorflow,
                           "capture_notes": list(self.capture_notes),
                           "streams_matched": len(self.samples),
                           "error_definition": f"|modelled - captured| / (captured - first request of the step in "
                                               f"that direction), streams >= {MIN_STREAM_BYTES} bytes"},
        }


def _bandwidth(run_dir: Path) -> tuple[dict, dict, dict[str, IperfSummary]]:
    """Per direction: the iperf3 median rate, its spread, and the runs."""
    rates, spread, summaries = {}, {}, {}
    for direction in DIRECTIONS:
        files = sorted((run_dir / "iperf3").glob(f"{direction}_*.json"))
        if not files:
            raise RunDirError(run_dir / "iperf3", f"has no {direction}_*.json: collect with --capture")
        for path in files:  # read whole by netcapture's reader: bounded here
            if path.stat().st_size > MAX_IPERF_BYTES:
                raise InputError(path, f"is larger than an iperf3 -J result can be ({MAX_IPERF_BYTES // 2**20} MiB)")
        summary = summarise_iperf(files)
        for result in summary.runs:
            rate = result.received_bits_per_s / 8
            if not MIN_RATE_BPS <= rate <= MAX_RATE_BPS:
                raise InputError(result.path, f"end.sum_received.bits_per_second is {result.received_bits_per_s:g}: "
                                              "a link's rate must be between 1 kbit/s and 100 Tbit/s")
        rates[direction] = summary.received_bits_per_s.median / 8
        spread[direction] = {"min": summary.received_bits_per_s.minimum / 8,
                             "max": summary.received_bits_per_s.maximum / 8, "runs": len(files)}
        summaries[direction] = summary
    return rates, spread, summaries


def _link_ceiling(link: Link, iperf: dict[str, IperfSummary], busy: dict,
                  busy_steps: dict[str, list[tuple[int, float]]], capture: Path, allow: bool) -> dict:
    """Hold the rates calibration measured to what TCP payload can carry on ``link``
    (docs/calibration.md §4.6): per direction the busy rate, over the fewest bytes of a step it
    counts (a step's ceiling is highest for the fewest bytes, which a shaper's bucket speeds most),
    and iperf3's median, over its bytes in the shortest run."""
    rates = []
    for direction in DIRECTIONS:
        if busy[direction] is not None:
            rates.append((direction, "busy rate", busy[direction], min(total for total, _ in busy_steps[direction])))
        summary = iperf[direction]
        seconds = min((r.duration_s for r in summary.runs if r.duration_s > 0), default=0.0)
        if seconds:
            rates.append((direction, "iperf3 rate", summary.received_bytes_per_s,
                          summary.received_bytes_per_s * seconds))
    sizes = [r.mss_bytes for summary in iperf.values() for r in summary.runs if r.mss_bytes]
    return check_ceiling(link, max(sizes, default=None), rates, capture, allow)


def _queue_window(capture_path: Path, run) -> tuple[dict, dict]:
    """The bytes a busy connection keeps queued in the network (docs/model.md §4.5), per
    direction: the median bytes in flight of the worker's busiest sending connection (its
    gradients), seen at the worker's interface (:mod:`netcapture.inflight`). The downlink's
    sender, the PS, is not where the capture is; both directions take the uplink's (one TCP
    stack and one congestion control on both hosts). Empty when the worker sent nothing.

    Also the distribution of that connection's bytes in flight (``bytes_in_flight`` in
    CLUSTER.json, docs/calibration.md §4.5): a buffer overflows on the peaks, not on the median."""
    workers = [endpoint.ip for endpoint, task in run_tasks(run).items() if task == "worker0"]
    if not workers:
        return {}, {}
    flights = [f for f in bytes_in_flight(capture_path, workers[0]) if len(f.samples_bytes)]
    if not flights:
        return {}, {}
    busiest = max(flights, key=lambda f: f.payload_bytes)
    percentiles = {f"p{q}": float(np.percentile(busiest.samples_bytes, q)) for q in FLIGHT_PERCENTILES}
    distribution = {"samples": len(busiest.samples_bytes), "percentiles_bytes": percentiles,
                    "max_bytes": float(busiest.samples_bytes.max())}
    return dict.fromkeys(DIRECTIONS, busiest.median_bytes), distribution


RUNGRAPH_PATH = "/tensorflow.WorkerService/RunGraph"
# TF2's eager runtime runs the PS's partition of a step function with this RPC instead (docs/model.md §1.5).
RUN_COMPONENT_FUNCTION_PATH = "/tensorflow.eager.EagerService/RunComponentFunction"
STEP_RPC_PATHS = frozenset({RUNGRAPH_PATH, RUN_COMPONENT_FUNCTION_PATH})
NS_PER_S = 10**9


def rpc_lags(run, capture, match) -> dict[str, list[float]]:
    """Each traced step's RPC lags (docs/calibration.md §7.1), in seconds: from the worker's
    RunGraph request on the wire to the PS's first op (``rungraph_s``) and to the worker's first
    parameter request (``worker_requests_s``); from the PS's first op to its first gradient
    request (``ps_requests_s``); from the PS's last op to the RunGraph response's first frame
    (``response_s``). The trace's times and the capture's are on one clock (one host in the lab;
    NTP-synchronised hosts on a real cluster). A key is missing where no step had that lag."""
    rungraphs = sorted((s.request_headers_time_s, s) for s in capture.streams
                       if s.rpc_path in STEP_RPC_PATHS and s.request_headers_time_s is not None)
    first_request: dict[tuple[str, str], float] = {}
    for m in match.matches:
        key = (m.transfer.step_file, m.transfer.direction)
        t = m.stream.request_headers_time_s
        if t is not None:
            first_request[key] = min(t, first_request.get(key, t))
    lags: dict[str, list[float]] = defaultdict(list)
    for label, records in traced_steps(run).items():
        ps = [(start, start + duration) for (device, _), (start, duration)
              in records.ops.items() if "/job:ps" in device]
        if not ps or not rungraphs:
            continue
        ps_first = min(s for s, _ in ps) / NS_PER_S
        ps_last = max(e for _, e in ps) / NS_PER_S
        before = [s for t, s in rungraphs if t <= ps_first]
        if not before:
            continue
        rungraph = before[-1]
        sent = rungraph.request_headers_time_s
        lags["rungraph_s"].append(ps_first - sent)
        if (label, "downlink") in first_request:
            lags["worker_requests_s"].append(first_request[(label, "downlink")] - sent)
        if (label, "uplink") in first_request:
            lags["ps_requests_s"].append(first_request[(label, "uplink")] - ps_first)
        if rungraph.response_headers_time_s is not None:
            lags["response_s"].append(rungraph.response_headers_time_s - ps_last)
    return dict(lags)


def chain_latencies(lags: dict[str, list[float]], statistic=min) -> dict:
    """The RPC chain's latencies from each traced step's lags (:func:`rpc_lags`): for each, the
    ``statistic`` over the steps (never below 0), and the number of steps; empty without a
    ``rungraph_s`` lag.

    A lag is the hosts' own latency (executor start, gRPC threads, the wire) plus whatever
    waiting its step met: a task under a CPU quota that spends its quota early in a period waits
    out the rest of it, and a traced step spends more CPU than the job does (a tf2-pss worker at
    a third of a core: a median ``worker_requests_s`` of 66 ms over 5 traced steps, two thirds of
    the 100 ms period, where another run of the same job had 0.08 ms). The calibration's check
    replays the traced steps with the median (what they met, ``statistic=numpy.median``); the
    cluster gets the least (the default), the latency, and the one-worker correction carries
    the step's CPU-bound time (docs/model.md §6).

    Examples
    --------
    >>> import numpy as np
    >>> lags = {"rungraph_s": [0.0012, 0.0009, 0.0011], "worker_requests_s": [0.066, 0.0004, 0.067]}
    >>> chain_latencies(lags)
    {'rungraph_s': 0.0009, 'worker_requests_s': 0.0004, 'ps_requests_s': 0.0, 'response_s': 0.0, 'steps': 3}
    >>> chain_latencies(lags, statistic=np.median)["worker_requests_s"]
    0.066
    >>> chain_latencies({})
    {}
    """
    if not lags.get("rungraph_s"):
        return {}
    # The model's messages (simulate.cluster.RpcChain) in its order; a lag no step had is 0.
    return {**{field.name: max(0.0, float(statistic(lags[field.name]))) if lags.get(field.name) else 0.0
               for field in dataclasses.fields(RpcChain)},
            "steps": len(lags["rungraph_s"])}


def connection_bound(busy: dict, iperf3: dict, fraction: float = CONNECTION_BOUND_FRACTION) -> tuple[dict, dict]:
    """The capture's bandwidth per direction, and the connection cap of the directions whose
    busy rate is the connection's rather than the link's (docs/calibration.md §4.9).

    Where the job's busy rate is below ``fraction`` of iperf3's, the link carried more than the
    job's one connection moved: B is iperf3's and the busy rate caps each worker's connection.
    Elsewhere B is the busy rate (a token bucket's peak where it beats iperf3's), with no cap.

    Parameters
    ----------
    busy : dict
        The capture's busy rate per direction, bytes/s.
    iperf3 : dict
        iperf3's rate per direction, bytes/s.
    fraction : float
        A busy rate below this fraction of iperf3's is the connection's.

    Returns
    -------
    (dict, dict)
        B per direction; the cap per connection-bound direction (empty when none is).

    Examples
    --------
    >>> connection_bound({"downlink": 124e6, "uplink": 32e6}, {"downlink": 120e6, "uplink": 120e6})
    ({'downlink': 124000000.0, 'uplink': 120000000.0}, {'uplink': 32000000.0})
    """
    rates, caps = {}, {}
    for direction, rate in busy.items():
        if rate < fraction * iperf3[direction]:
            rates[direction], caps[direction] = iperf3[direction], rate
        else:
            rates[direction] = rate
    return rates, caps


def untraced_caps(caps: dict, speedup: float, iperf3: dict, fraction: float = CONNECTION_BOUND_FRACTION) -> dict:
    """The connection caps of the job as it runs untraced (docs/calibration.md §4.9).

    A cap is read from the traced steps, where recording the trace costs the connection's ends
    CPU; the ends' CPU per step is ``speedup`` times lower untraced, and a connection held back
    by its ends' CPU moves that much faster. A cap that comes within ``fraction`` of iperf3's
    rate so is no cap: the link holds that direction.

    Examples
    --------
    >>> untraced_caps({"downlink": 31e6, "uplink": 10e6}, 1.4, {"downlink": 47e6, "uplink": 47e6})
    {'uplink': 14000000.0}
    >>> untraced_caps({"uplink": 28e6}, 1.0, {"downlink": 120e6, "uplink": 120e6})
    {'uplink': 28000000.0}
    """
    return {d: cap * speedup for d, cap in caps.items() if cap * speedup < fraction * iperf3[d]}


def _cap_speedup(ratios: dict[str, float]) -> float:
    """How much faster a connection's ends run untraced: the least of the tasks' traced over
    untraced CPU per step (either end may be the one that held the connection back, §4.9), and
    never below 1 (a trace costs CPU; a lower ratio is the reading's noise)."""
    return max(1.0, min(ratios.values())) if ratios else 1.0


def _token_bucket(samples: list[StreamSample], peak: dict, sustained: dict) -> dict:
    """Per direction where the job's busy rate (``peak``) beats iperf3's (``sustained``): the
    bucket that lets a one-worker step's bytes go at the peak, ``N (1 - R / P)`` with N the
    median bytes of a traced step in that direction (docs/calibration.md §4.4). A link whose
    busy rate is not above its sustained rate has no bucket."""
    out = {}
    for direction in DIRECTIONS:
        if not (peak.get(direction) and peak[direction] > sustained[direction]):
            continue
        per_step: dict[str, int] = defaultdict(int)
        for s in samples:
            if s.direction == direction:
                per_step[s.step_file] += s.size_bytes
        if per_step:
            bytes_per_step = float(np.median(list(per_step.values())))
            out[direction] = {"sustained_Bps": sustained[direction],
                              "bucket_bytes": bytes_per_step * (1.0 - sustained[direction] / peak[direction])}
    return out


def _samples(capture, match) -> tuple[list[StreamSample], set[tuple[str, str]]]:
    """The matched streams usable for fits, and the ``(direction, step file)`` pairs that lost
    one: a stream that lost frames, or whose response the capture does not hold to its end
    (its last DATA frame is not the tensor's last byte: with the trace's size, its rate would
    come out too high)."""
    out, incomplete = [], set()
    for m in match.matches:
        t, s = m.transfer, m.stream
        if t.direction not in DIRECTIONS:
            continue
        if s.damaged or s.response_end_time_s is None or s.response_last_data_time_s is None:
            incomplete.add((t.direction, t.step_file))
            continue
        first = s.response_first_data_time_s
        window = capture.flow_control_of(s).initial_window_at(first if first is not None else s.request_headers_time_s)
        out.append(StreamSample(t.direction, t.step_file, t.tensor_name, int(t.requested_bytes),
                                float(s.request_headers_time_s), float(t.start_s),
                                float(first if first is not None else s.response_last_data_time_s),
                                float(s.response_last_data_time_s), float(t.end_s), int(window)))
    for t in match.unmatched_transfers:
        if t.direction in DIRECTIONS:
            incomplete.add((t.direction, t.step_file))
    return out, incomplete


def _busy_rate(steps: dict[str, list[tuple[int, float]]]) -> dict:
    """Per direction: the rate tensors moved at while the link had data to send, or None;
    ``steps`` from :func:`_busy_steps`.

    For each traced step, the bytes the direction's streams moved after the first large
    stream's send-ready time (:func:`_bytes_after`), over the time from then to the last DATA
    frame (of a stream with payload, in a tf2-pss run; the link is backlogged in between:
    streams queue behind each other); the median over the steps. Unlike iperf3's
    bulk flow, it includes what a training job's traffic pays on this link: TCP restarting
    from a small window after each idle phase, losses at the shaper, the sender's pauses.
    Steps in ``incomplete`` (a stream of theirs unusable) are left out: with a stream missing
    the link was not backlogged throughout, and the bytes over the span mean nothing.
    """
    return {direction: float(np.median([total / span for total, span in counted])) if counted else None
            for direction, counted in steps.items()}


def _busy_steps(samples: list[StreamSample], incomplete: set[tuple[str, str]], *,
                empty_ends_span: bool = True) -> dict[str, list[tuple[int, float]]]:
    """Per direction, the ``(bytes, span in s)`` of each step the busy rate counts (:func:`_busy_rate`).

    ``empty_ends_span=False`` (a tf2-pss run): a stream without payload does not end the span."""
    out = {}
    for direction in DIRECTIONS:
        steps: dict[str, list[StreamSample]] = defaultdict(list)
        for s in samples:
            if s.direction == direction and (direction, s.step_file) not in incomplete:
                steps[s.step_file].append(s)
        out[direction] = []
        for streams in steps.values():
            big = [s.send_ready_s for s in streams if s.size_bytes >= MIN_STREAM_BYTES]
            if not big:
                continue
            start = min(big)
            # Only the bytes that crossed after the span's start: a step whose one large stream
            # comes last (the first layer's gradient, on the uplink) would otherwise put all its
            # bytes over that stream's span alone (docs/calibration.md §4.2).
            total = sum(_bytes_after(s, start) for s in streams)
            if total >= MIN_BUSY_BYTES:
                # A tf2-pss step's last downlink stream is a control edge's empty tensor, sent after the
                # uplink's updates: it would stretch the span over the whole step (docs/calibration.md
                # §2.9). TF1 runs keep the span they were calibrated with (§4).
                ends = [s.last_data_s for s in streams if empty_ends_span or s.size_bytes > 0]
                span = max(ends) - start
                if span > 0:
                    out[direction].append((total, span))
    return out


def _bytes_after(sample: StreamSample, start_s: float) -> float:
    """The bytes of ``sample`` that crossed the wire after ``start_s``: all of them when its
    first DATA frame is not earlier, none when its last is not later, else the share of its
    wire time after ``start_s`` (the frames between are not kept; the stream is taken at an
    even rate)."""
    if sample.first_data_s >= start_s:
        return float(sample.size_bytes)
    if sample.last_data_s <= start_s:
        return 0.0
    return sample.size_bytes * (sample.last_data_s - start_s) / (sample.last_data_s - sample.first_data_s)


def _window(samples: list[StreamSample], capture) -> tuple[dict, dict]:
    windows, timelines = {}, {}
    start = min((s.request_s for s in samples), default=0.0)
    for direction in DIRECTIONS:
        mine = [s for s in samples if s.direction == direction]
        if not mine:
            windows[direction] = None
            continue
        order = np.argsort([s.window_bytes for s in mine])
        values = np.array([mine[i].window_bytes for i in order], dtype=float)
        weights = np.cumsum([max(mine[i].size_bytes, 1) for i in order], dtype=float)
        windows[direction] = int(values[np.searchsorted(weights, weights[-1] / 2)])
    for timeline in capture.flow_control:
        if timeline.data_from_client:
            continue  # requests: not tensor data
        direction = _direction_of_timeline(timeline, samples, capture)
        if direction and direction not in timelines:
            timelines[direction] = [{"t_s": round(t - start, 6), "window_bytes": v}
                                    for t, v in timeline.initial_window_timeline]
    return windows, timelines


STALL_WINDOW_BYTES = 16_384  # less than one DATA frame of the default size: the sender must wait


def _update_delays(timeline) -> list[float]:
    """Seconds from each stall (a DATA frame leaving a window below one frame) of one
    flow-control timeline to the WINDOW_UPDATE that raised that window again."""
    delays = []
    for samples in (timeline.connection_window, timeline.stream_windows):
        stalled_at: dict[int, float] = {}
        for sample in samples:
            if sample.cause == "data" and sample.window_bytes < STALL_WINDOW_BYTES:
                stalled_at[sample.stream_id] = sample.time_s
            elif sample.cause == "window_update" and sample.stream_id in stalled_at:
                # Not below 0: in a capture whose file order is not time order, the update
                # that follows the stall in the file may be stamped a little before it.
                delays.append(max(0.0, sample.time_s - stalled_at.pop(sample.stream_id)))
    return delays


def _flow_control(samples: list[StreamSample], capture, timelines: dict) -> dict:
    """Per direction: the ``grpc`` model's window timeline and window-update delay."""
    out = {}
    for direction in DIRECTIONS:
        delays = []
        for timeline in capture.flow_control:
            if not timeline.data_from_client and _direction_of_timeline(timeline, samples, capture) == direction:
                delays.extend(_update_delays(timeline))
        points, highest = [], 0
        for point in timelines.get(direction) or []:
            highest = max(highest, int(point["window_bytes"]))
            points.append({"t_s": max(float(point["t_s"]), 0.0), "window_bytes": highest})
        if not points:
            continue
        out[direction] = {"window_timeline": points,
                          "update_delay_s": float(np.median(delays)) if delays else 0.0,
                          "stalls": len(delays)}
    return out


def _direction_of_timeline(timeline, samples, capture) -> str | None:
    direction_of = {s.tensor_name: s.direction for s in samples}
    for stream in capture.recv_tensor_streams():
        if stream.connection == timeline.connection and stream.tensor_name in direction_of:
            return direction_of[stream.tensor_name]
    return None


def _overhead(samples: list[StreamSample]) -> tuple[dict, LineFit]:
    fits = {}
    for direction in DIRECTIONS:
        mine = [s for s in samples if s.direction == direction]
        if len(mine) >= 2:
            fits[direction] = nonnegative_line([s.size_bytes for s in mine], [s.overhead_s for s in mine],
                                               source=f"{direction} overhead samples")
    if not fits:
        raise InputError(None, "too few matched streams to fit the parsing overhead")
    pooled = nonnegative_line([s.size_bytes for s in samples], [s.overhead_s for s in samples])
    return fits, pooled


def _fit_update_delay(samples, bandwidth: dict, windows: dict, flow_control: dict) -> dict:
    """Choose each direction's update delay, between 0 and the measured stall-to-update time,
    as the one whose ``grpc`` replay best reproduces the captured end times (median error).

    The model returns a chunk's bytes all at once, one delay after the chunk ends; gRPC's
    receiver returns them frame by frame as it reads them, so a window-limited stream moves
    faster than "send a window, wait a delay" would. The stall-to-update time over-states
    the delay the model needs; it is kept as ``update_delay_measured_s``.
    """
    out = {}
    for direction, entry in flow_control.items():
        measured = entry["update_delay_s"]
        candidates = sorted({0.0, measured} | {measured * f for f in (0.125, 0.25, 0.5)})
        mine = [s for s in samples if s.direction == direction]

        def median_error(delay, direction=direction, entry=entry, mine=mine):
            trial = {direction: {**entry, "update_delay_s": delay}}
            check = model_check(mine, bandwidth, windows, trial)
            return check["grpc"].get(direction, {}).get("median") or math.inf

        best = min(candidates, key=lambda d: (median_error(d), d))
        out[direction] = {**entry, "update_delay_s": best, "update_delay_measured_s": measured}
    return out


def model_check(samples: list[StreamSample], bandwidth: dict, windows: dict, flow_control: dict | None = None,
                min_stream_bytes: int = MIN_STREAM_BYTES) -> dict:
    """Relative end-time errors of each transfer model, per direction and over both (ICPE Table 1)."""
    errors: dict[str, dict[str, list]] = {m: defaultdict(list) for m in ("http2", "grpc", "fifo")}
    flows = {d: flow_control_from_json((flow_control or {}).get(d) or None, "calibration", d)
             for d in DIRECTIONS}
    start = min((s.request_s for s in samples), default=0.0)
    by_step: dict[tuple[str, str], list[StreamSample]] = defaultdict(list)
    for s in samples:
        by_step[(s.step_file, s.direction)].append(s)
    for (_step, direction), streams in sorted(by_step.items()):
        arrival = np.array([s.request_s for s in streams])
        size = np.array([s.size_bytes for s in streams], dtype=float)
        actual = np.array([s.last_data_s for s in streams])
        t0 = arrival.min()
        big = size >= min_stream_bytes
        win = windows.get(direction) or math.inf
        ready = np.array([s.send_ready_s for s in streams])
        grpc_ends = replay_grpc(ready - t0, size, bandwidth[direction], flows[direction], time_offset_s=t0 - start)
        for model, ends in (("http2", replay_http2(arrival - t0, size, bandwidth[direction], win)),
                            ("grpc", grpc_ends),
                            ("fifo", replay_fifo(arrival - t0, size, bandwidth[direction]))):
            errs = relative_errors(ends + t0, actual, t0)[big]
            errors[model][direction].extend(errs.tolist())
            errors[model]["all"].extend(errs.tolist())
    return {model: {key: error_summary(values) for key, values in per.items()} for model, per in errors.items()}


def choose_placement(profile, cluster_document: dict, steps: int = 200) -> tuple[str, dict]:
    """Where the parsing overhead best explains the calibration run itself.

    The run was 1 PS and 1 worker on this very cluster, so a model with the fitted B, WIN
    and α/β must reproduce its traced step time at W = 1 (docs/model.md §7.3; docs/calibration.md §6.3). Each
    placement (``compute``, ``lane``, ``delay``; :class:`simulate.cluster.OverheadPlacement`)
    is simulated at W = 1 with the cluster's default transfer model; the one whose median step
    time is closest to the traced makespan is chosen, and every placement's relative error is
    kept in CLUSTER.json.
    """
    target = float(np.median(profile.step_makespan_s))
    errors = {}
    for placement in OverheadPlacement:
        cluster = cluster_from_dict({**cluster_document, "overhead_placement": placement.value}, "calibration")
        step_s = one_worker_step_s(profile, cluster, Transfer(cluster.default_transfer), steps=steps,
                                   warmup=min(20, steps // 5))
        errors[placement.value] = float(step_s / target - 1.0)
    best = min(errors, key=lambda k: abs(errors[k]))
    return best, {"traced_makespan_median_s": target, "relative_error_of_one_worker_step": errors}


def _tensorflow_version(run: dict) -> str | None:
    """``versions.tensorflow`` of run.json when it is there and a string (it decides the default model)."""
    versions = run.get("versions")
    version = versions.get("tensorflow") if isinstance(versions, dict) else None
    return version[:40] if isinstance(version, str) else None


def _kernel_drops(run: dict, capture) -> int | None:
    """Packets the capturing kernel dropped: tcpdump's count in run.json, or the capture's own."""
    recorded = run.get("capture") if isinstance(run.get("capture"), dict) else {}
    dropped = recorded.get("dropped_by_kernel")
    if isinstance(dropped, int) and not isinstance(dropped, bool):
        return dropped
    return capture.kernel_drops


def calibrate_run(run_dir: str | os.PathLike, *, backend: str = "scapy", allow_loss: bool = False,
                  link_rate_Bps: float | None = None, allow_above_ceiling: bool = False,
                  buffer_bytes: float | None = None) -> Calibration:
    """Fit a cluster from a run directory made by ``tfsim collect --capture`` (docs/calibration.md).

    Parameters
    ----------
    run_dir : path
        A complete run directory with ``capture.pcap(.gz)``, ``iperf3/*.json`` and traces of a
        1-PS/1-worker run.
    backend : {"scapy", "tshark"}
        The capture decoder (:func:`netcapture.read_capture`).
    allow_loss : bool
        Calibrate from a capture although a direction lost more than
        :data:`calibration.capture_loss.MAX_LOSS_FRACTION` of its bytes (streams that lost
        frames are left out either way; CLUSTER.json records the loss).
    link_rate_Bps : float, optional
        The link's rate on the wire, in bytes/s (e.g. the NIC's speed), in place of the one
        ``run.json`` records (``link``: the lab records its shaper). With either, every rate
        calibration measures is held to what TCP payload can carry on that link
        (docs/calibration.md §4.6).
    allow_above_ceiling : bool
        Calibrate although a measured rate is above that ceiling (CLUSTER.json records it).
    buffer_bytes : float, optional
        The bytes the link's queue holds before it drops (a switch port's or NIC's buffer), in
        place of the one ``run.json``'s ``link`` records (the lab records its shaper's). A
        one-worker run cannot show it; CLUSTER.json's ``buffer_bytes`` bounds the queue the
        model builds at the link (docs/calibration.md §4.7). Unknown: unbounded.

    Returns
    -------
    Calibration
        B per direction (and where it comes from), the HTTP/2 windows and their timeline, the
        window-update delay, the parsing overhead α·size + β per direction with its fit, the
        overhead placement, and each transfer model's stream end-time error;
        :meth:`Calibration.to_cluster_json` is the ``tfsim.cluster/1`` document.

    Raises
    ------
    tfbase.errors.InputError
        A missing or incomplete run directory, an unreadable capture, or a capture that does
        not match the run's traces; the error names the file.
    calibration.capture_loss.CaptureLossError
        A direction lost more than ``MAX_LOSS_FRACTION`` of its bytes and ``allow_loss`` is
        false.
    calibration.ceiling.RateAboveCeilingError
        A rate measured from the capture or by iperf3 is above what TCP payload can carry on
        the link, and ``allow_above_ceiling`` is false.

    Examples
    --------
    >>> from calibration import calibrate_run
    >>> calibration = calibrate_run("data/captures/wide_1gbit")
    >>> calibration.default_transfer, calibration.bandwidth_source
    ('grpc', 'capture')
    >>> round(calibration.bandwidth_Bps["downlink"] * 8 / 1e6)  # peak Mbit/s on a 1 Gbit/s tbf link
    884
    >>> round(calibration.token_bucket["downlink"]["sustained_Bps"] * 8 / 1e6)  # what it sustains (iperf3)
    833
    >>> calibration.to_cluster_json()["format"]
    'tfsim.cluster/1'
    """
    run_dir = Path(run_dir)
    run = open_run_dir(run_dir)
    captures = sorted(run_dir.glob("capture.pcap*"))
    if not captures:
        raise RunDirError(run_dir, "has no capture.pcap(.gz): collect with --capture")
    if link_rate_Bps is not None and not MIN_RATE_BPS <= link_rate_Bps <= MAX_RATE_BPS:
        raise UsageError("link_rate_Bps", f"must be a rate from 1 kbit/s to 100 Tbit/s, not {link_rate_Bps!r} bytes/s")
    if buffer_bytes is not None and not (math.isfinite(buffer_bytes) and buffer_bytes >= MIN_BUFFER_BYTES):
        raise UsageError("buffer_bytes",
                         f"must be at least one packet ({MIN_BUFFER_BYTES} bytes), not {buffer_bytes!r}")
    bandwidth, spread, iperf = _bandwidth(run_dir)
    # A capture collect stopped as the traced steps ended cuts the frames then in flight.
    capture_record = run.run.get("capture")
    stopped_mid_run = isinstance(capture_record, dict) and capture_record.get("stopped_at_step") is not None
    capture = read_capture(captures[0], backend=backend, server_ports=run_server_ports(run),
                           stopped_mid_run=stopped_mid_run)
    losses = link_losses(capture, {endpoint.port: role for endpoint, role in run_tasks(run).items()})
    check_loss(losses, captures[0], allow_loss)
    match = match_run(capture, run)
    samples, incomplete = _samples(capture, match)
    if not samples:
        raise InputError(captures[0], "no RecvTensor stream matched the run's traces")
    windows, timelines = _window(samples, capture)
    lags = rpc_lags(run, capture, match)
    rpc_traced, rpc = chain_latencies(lags, statistic=np.median), chain_latencies(lags)
    queue_window, flight = _queue_window(captures[0], run)
    fits, pooled = _overhead(samples)
    busy_steps = _busy_steps(samples, incomplete, empty_ends_span=run_api(run.run) != TF2_PSS_API)
    busy = _busy_rate(busy_steps)
    link = Link(link_rate_Bps, "as given") if link_rate_Bps is not None else \
        link_from_run(run.run, run_dir / "run.json")
    ceiling = {} if link is None else _link_ceiling(link, iperf, busy, busy_steps, captures[0], allow_above_ceiling)
    if buffer_bytes is None and link is not None:
        buffer_bytes = link.buffer_bytes
    buffers = {} if buffer_bytes is None else {"downlink": float(buffer_bytes), "uplink": float(buffer_bytes)}
    ps_cpu = ps_cpu_record(run_dir, run.run) or {}
    cap_speedup = _cap_speedup({task: ratio for task, ratio in tracing_cpu_ratio(run_dir, run.run).items()
                                if task.startswith((PS_PREFIX, WORKER_PREFIX))})
    hosts = hosts_record(run.run) or {}
    with warnings.catch_warnings():
        # A skipped step is reported when the profile itself is built; here it would say it twice.
        warnings.filterwarnings("ignore", category=TraceWarning)
        profile = profile_from_run_dir(run_dir)
    candidates = {"iperf3": (bandwidth, {})}
    if all(busy.values()):
        candidates["capture"] = connection_bound(busy, bandwidth)
    notes = list(capture.warnings)
    for direction, rate in busy.items():
        if rate is None and any(d == direction for d, _ in incomplete):
            notes.append(f"no busy rate for the {direction}: no traced step has all its streams whole in the capture "
                         "(lost frames, or a capture that ends or starts inside the step); B comes from iperf3 alone")
    measured_flow = _flow_control(samples, capture, timelines)
    best = None
    for source, (rates, caps) in candidates.items():
        # One connection moves at its link's rate or its cap, whichever is lower.
        one_connection = {d: min(rate, caps.get(d, rate)) for d, rate in rates.items()}
        flow_control = _fit_update_delay(samples, one_connection, windows, measured_flow)
        # The job's busy rate above iperf3's is a burst: the link sustains iperf3's rate.
        bucket = _token_bucket(samples, rates, bandwidth) if source == "capture" else {}
        calibration = Calibration(
            run_dir=str(run_dir), bandwidth_Bps=rates, bandwidth_spread_Bps=spread, busy_rate_Bps=busy,
            window_bytes=windows, window_timeline=timelines, overhead=fits, overhead_pooled=pooled,
            model_error=model_check(samples, one_connection, windows, flow_control), samples=tuple(samples),
            flow_control=flow_control, bandwidth_source=source, iperf3_bandwidth_Bps=bandwidth,
            tensorflow=_tensorflow_version(run.run), capture_notes=tuple(notes),
            capture_loss={d: loss.to_json() for d, loss in losses.items()},
            kernel_drops=_kernel_drops(run.run, capture), allowed_loss=allow_loss,
            token_bucket=bucket, queue_window_bytes=queue_window, bytes_in_flight=flight, rpc=rpc_traced,
            link_ceiling=ceiling,
            buffer_bytes=buffers, ps_cpu=ps_cpu, hosts=hosts, connection_cap_Bps=caps,
        )
        # The check replays the traced run, so with the caps and RPC lags it had; the cluster gets
        # the untraced job's caps and the lags' least (chain_latencies).
        placement, check = choose_placement(profile, calibration.to_cluster_json())
        error = abs(check["relative_error_of_one_worker_step"][placement])
        if best is None or error < best[0]:
            untraced = untraced_caps(caps, cap_speedup, bandwidth)
            best = (error, dataclasses.replace(
                calibration, placement=placement, placement_check=check, connection_cap_Bps=untraced, rpc=rpc,
                connection_cap_traced={"traced_Bps": caps, "untraced_cpu_speedup": cap_speedup} if caps else {}))
    return best[1]
