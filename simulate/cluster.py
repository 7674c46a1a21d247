"""The cluster a prediction is for: link bandwidths, the HTTP/2 window, parsing overhead.

A :class:`ClusterModel` is plain numbers. ``calibration`` fits one from captures and writes
it as ``CLUSTER.json``; where no calibration exists, :meth:`ClusterModel.from_bandwidth`
gives one from a bandwidth alone (no overhead, unlimited window).
"""

from __future__ import annotations

import dataclasses
import enum
import math

from tfbase.errors import UsageError

# A host's model cores: at least 1 (a task's ops were profiled at its host's speed, one at a
# time on a host of a core or less) and at most this many (the engine's unlimited host).
MAX_HOST_CORES = 100_000.0


def _number(value, option: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(option, f"{value!r} is not a number") from None


def check_rate(value, option: str) -> float:
    """``value`` as a positive, finite bandwidth, or a UsageError naming ``option``."""
    value = _number(value, option)
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(option, f"bandwidth must be positive and finite, not {value}")
    return value


def check_non_negative(value, option: str) -> float:
    """``value`` as a finite, non-negative number, or a UsageError naming ``option``."""
    value = _number(value, option)
    if not (math.isfinite(value) and value >= 0):
        raise UsageError(option, f"must be finite and non-negative, not {value}")
    return value


MAX_LATENCY_S = 10.0  # a one-way latency beyond this is not a network any more (and not a what-if)


def overflow_onset_workers(queue_window_bytes: float, buffer_bytes: float) -> int | None:
    """The fewest workers whose connections, each keeping ``queue_window_bytes`` queued at the
    parameter server's port (docs/model.md §4.5), hold more than its ``buffer_bytes``: from
    there the workers' uploads overflow it and lose packets, which the model's lossless links
    leave out (docs/model.md §10). None without a queue window or without a bounded buffer.

    Examples
    --------
    >>> overflow_onset_workers(65_160, 160_804)  # two windows fit, three do not
    3
    >>> overflow_onset_workers(0.0, 160_804) is None
    True
    """
    if not (queue_window_bytes > 0 and math.isfinite(buffer_bytes)):
        return None
    return int(buffer_bytes // queue_window_bytes) + 1


def check_latency(value, option: str) -> float:
    """``value`` as a one-way latency in seconds, 0 to :data:`MAX_LATENCY_S`, or a UsageError
    naming ``option``."""
    value = _number(value, option)
    if not (math.isfinite(value) and 0 <= value <= MAX_LATENCY_S):
        raise UsageError(option, f"a latency must be between 0 and {MAX_LATENCY_S:g} s, not {value:g} s")
    return value


def parse_latency(text: str, parameter: str = "latency_s") -> tuple[float, float]:
    """A what-if link latency as written on a command line: ``"5ms"`` (both directions) or
    ``"down=5ms,up=1ms"`` (a direction left out has none); (downlink, uplink) in seconds.

    Examples
    --------
    >>> parse_latency("2ms")
    (0.002, 0.002)
    >>> parse_latency("up=1ms")
    (0.0, 0.001)
    """
    from tfbase.units import parse_duration

    text = str(text).strip()
    if "=" not in text:
        both = check_latency(parse_duration(text, parameter), parameter)
        return both, both
    values = {"down": 0.0, "up": 0.0}
    seen = set()
    for part in text.split(","):
        key, _, value = part.partition("=")
        key = key.strip().lower()
        if key not in values or key in seen:
            raise UsageError(parameter, f"{text!r}: give TIME, or down=TIME,up=TIME (each direction once)")
        seen.add(key)
        values[key] = check_latency(parse_duration(value, parameter), parameter)
    return values["down"], values["up"]


@dataclasses.dataclass(frozen=True)
class Overhead:
    """Parsing overhead of a received tensor: ``alpha_s_per_byte * size + beta_s`` (ICPE §3.2.1)."""

    alpha_s_per_byte: float = 0.0
    beta_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("alpha_s_per_byte", "beta_s"):
            check_non_negative(getattr(self, name), name)

    def seconds(self, size_bytes):
        return self.alpha_s_per_byte * size_bytes + self.beta_s


@dataclasses.dataclass(frozen=True)
class FlowControl:
    """HTTP/2 flow control of one direction, as today's gRPC runs it (docs/model.md §3.4).

    Attributes:
        window_timeline: ``(time_s, window_bytes)`` pairs, times ascending from the start of
            the run, windows non-decreasing (BDP probing only raises them). The first value
            holds from time 0. It is both every stream's window and the connection's.
        update_delay_s: from the moment a chunk ends to the receiver's WINDOW_UPDATE that
            returns its bytes, as the sender sees it.

    The default is no flow control: an unlimited window.
    """

    window_timeline: tuple[tuple[float, float], ...] = ((0.0, math.inf),)
    update_delay_s: float = 0.0

    def __post_init__(self) -> None:
        timeline = tuple((float(t), float(v)) for t, v in self.window_timeline)
        if not timeline:
            raise UsageError("window_timeline", "needs at least one (time_s, window_bytes) entry")
        for (t0, v0), (t1, v1) in zip(timeline, timeline[1:]):
            if not (t1 >= t0 and v1 >= v0):
                raise UsageError("window_timeline", "times must ascend and windows must not shrink")
        for t, v in timeline:
            if not (math.isfinite(t) and v > 0):
                raise UsageError("window_timeline", f"({t}, {v}) needs a finite time and a positive window")
        object.__setattr__(self, "window_timeline", timeline)
        object.__setattr__(self, "update_delay_s", check_non_negative(self.update_delay_s, "update_delay_s"))

    def window_at(self, time_s: float) -> float:
        """The window in force at ``time_s`` (the last timeline entry not after it; the first
        entry before the timeline starts)."""
        value = self.window_timeline[0][1]
        for when, window in self.window_timeline[1:]:
            if when > time_s:
                break
            value = window
        return value

    @property
    def steady_window_bytes(self) -> float:
        """The window the timeline settles at."""
        return self.window_timeline[-1][1]


@dataclasses.dataclass(frozen=True)
class TokenBucket:
    """A link that sends at its peak rate while it has tokens, and at its sustained rate once
    they run out (docs/model.md §4.4).

    A shaper (the lab's tbf), a NIC or a switch port with a burst allowance lets a transfer
    that starts on an idle link go faster than the link can sustain: tokens accrue at the
    sustained rate up to ``bucket_bytes`` and pay for every byte sent above it. The peak rate
    is the :class:`ClusterModel`'s bandwidth of that direction.

    Attributes:
        sustained_Bps: what a backlogged link delivers, bytes/s (not above the peak).
        bucket_bytes: bytes above the sustained rate a link with a full bucket can send at
            its peak.
    """

    sustained_Bps: float
    bucket_bytes: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "sustained_Bps", check_rate(self.sustained_Bps, "sustained_Bps"))
        object.__setattr__(self, "bucket_bytes", check_non_negative(self.bucket_bytes, "bucket_bytes"))


@dataclasses.dataclass(frozen=True)
class RpcChain:
    """The messages of a step that are not tensors (docs/model.md §2.9), as latencies.

    A step of a TF1 parameter-server job starts with the worker's RunGraph request to each
    PS, which starts the PS's part of the step; each side requests the tensors it receives
    (RecvTensor requests: the worker its parameters, the PS its gradients) when its part
    starts; the PS's RunGraph response ends the step. Each is a latency from the event that
    sends it to the one it allows, as the one-worker run measured it; on a link with a queue
    window it also waits behind the bytes queued at that link (docs/model.md §4.5).

    Attributes:
        rungraph_s: the step's start to the PS's first op.
        worker_requests_s: the step's start to the worker's parameter requests at the PS.
        ps_requests_s: the PS's first op to its gradient requests at the worker.
        response_s: the PS's last op to the RunGraph response at the worker.
    """

    rungraph_s: float = 0.0
    worker_requests_s: float = 0.0
    ps_requests_s: float = 0.0
    response_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("rungraph_s", "worker_requests_s", "ps_requests_s", "response_s"):
            object.__setattr__(self, name, check_non_negative(getattr(self, name), name))


@dataclasses.dataclass(frozen=True)
class LinkShaper:
    """A link's shaper as it was configured (the lab's tbf), in wire bytes: ``rate_Bps`` filling
    a bucket of ``burst_bytes``, spent at most at ``peak_rate_Bps`` out of a second bucket of
    ``peak_burst_bytes``. Only a packet-level replay uses it (docs/model.md §12), in place of
    the calibrated token bucket, which is its fluid summary.

    Examples
    --------
    >>> LinkShaper(12.5e6, 98304, 12.75e6, 98304).rate_Bps
    12500000.0
    """

    rate_Bps: float
    burst_bytes: float
    peak_rate_Bps: float
    peak_burst_bytes: float

    def __post_init__(self) -> None:
        check_rate(self.rate_Bps, "shaper.rate_Bps")
        check_rate(self.peak_rate_Bps, "shaper.peak_rate_Bps")
        if self.peak_rate_Bps < self.rate_Bps:
            raise UsageError("shaper.peak_rate_Bps", f"must be at least the rate ({self.rate_Bps:g}), "
                                                     f"not {self.peak_rate_Bps:g}")
        for name in ("burst_bytes", "peak_burst_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= 1 << 30:
                raise UsageError(f"shaper.{name}", f"must be between 1 byte and 1 GiB, not {value!r}")


@dataclasses.dataclass(frozen=True)
class BusyPsCpu:
    """The parameter servers' CPU per worker-step as a run with several workers measured it
    (docs/model.md §4.7): a busy PS serves more than one request per wake-up, so a step costs
    it less than a lone worker's did (the lab's deep_narrow: 27.0 ms with one worker, 21.5 ms
    with two, 20-21 ms with three to six).

    Attributes:
        workers: the workers the run had (at least 2).
        cpu_s_per_step: every PS task's CPU together per step of any worker.
    """

    workers: int
    cpu_s_per_step: float

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 2:
            raise UsageError("busy.workers", f"a busy-PS run has at least 2 workers, not {self.workers!r}")
        value = _number(self.cpu_s_per_step, "busy.cpu_s_per_step")
        if not (value > 0 and math.isfinite(value)):
            raise UsageError("busy.cpu_s_per_step", f"must be positive and finite, not {value}")
        object.__setattr__(self, "cpu_s_per_step", value)


@dataclasses.dataclass(frozen=True)
class PsCpu:
    """The parameter servers' CPU, as the one-worker run measured it, and as runs with several
    workers measured it where there were such runs (docs/model.md §4.7).

    Attributes:
        cpu_s_per_step: the CPU time every PS task together spent per measured step of the one
            worker: its ops, and the gRPC, serialisation and copying that no trace shows.
        cores: the CPU a PS task may use (its affinity, bounded by its cgroup's quota).
        servers: the PS tasks the run had.
        busy: the CPU per worker-step that runs with more workers measured
            (:class:`BusyPsCpu`, at most one per worker count); empty: the one worker's
            CPU per step holds for every W.
    """

    cpu_s_per_step: float
    cores: float
    servers: int = 1
    busy: tuple[BusyPsCpu, ...] = ()

    def __post_init__(self) -> None:
        for name in ("cpu_s_per_step", "cores"):
            value = _number(getattr(self, name), name)
            if not (value > 0 and math.isfinite(value)):
                raise UsageError(name, f"must be positive and finite, not {value}")
            object.__setattr__(self, name, value)
        if isinstance(self.servers, bool) or not isinstance(self.servers, int) or self.servers < 1:
            raise UsageError("servers", f"the PS tasks must be a whole number from 1, not {self.servers!r}")
        busy = tuple(self.busy)
        if not all(isinstance(x, BusyPsCpu) for x in busy):
            raise UsageError("busy", "must hold BusyPsCpu records")
        counts = [x.workers for x in busy]
        if len(set(counts)) != len(counts):
            raise UsageError("busy", f"holds one record per worker count, not {sorted(counts)}")
        object.__setattr__(self, "busy", tuple(sorted(busy, key=lambda x: x.workers)))

    def cpu_s_per_step_at(self, workers: int) -> float:
        """The PS CPU per worker-step with ``workers`` workers, read as ``a + b / W``: a part
        every worker-step costs, and a part per PS wake-up that the workers whose requests one
        wake-up serves share. Between two measured W (W = 1 and the busy-PS runs' counts) the
        line through them, so a measured W gets its measured value; past the most workers
        measured, the line through the last two, unless its fixed part ``a`` would be
        negative (measurements the form does not fit): then the last measured value. Without
        busy-PS runs, the one worker's value for every W.

        Examples
        --------
        >>> cpu = PsCpu(0.027, 0.25, busy=(BusyPsCpu(4, 0.021),))
        >>> [round(cpu.cpu_s_per_step_at(w) * 1e3, 2) for w in (1, 2, 4, 8)]
        [27.0, 23.0, 21.0, 20.0]
        >>> PsCpu(0.027, 0.25, busy=(BusyPsCpu(2, 0.010),)).cpu_s_per_step_at(8)  # a = -0.007: flat
        0.01
        >>> PsCpu(0.027, 0.25).cpu_s_per_step_at(8)
        0.027
        """
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise UsageError("workers", f"must be a whole number from 1, not {workers!r}")
        points = [(1, self.cpu_s_per_step), *((x.workers, x.cpu_s_per_step) for x in self.busy)]
        if len(points) == 1:
            return self.cpu_s_per_step
        (w0, c0), (w1, c1) = next((pair for pair in zip(points, points[1:]) if workers <= pair[1][0]),
                                  (points[-2], points[-1]))
        slope = (c0 - c1) / (1 / w0 - 1 / w1)  # b of a + b / W
        fixed = c1 - slope / w1
        if workers > w1 and fixed < 0:
            return c1
        return fixed + slope / workers

    def ceiling_steps_per_s(self, servers: int, compute_scale: float = 1.0, workers: int = 1) -> float:
        """The most worker-steps per second ``servers`` PS hosts of these ``cores`` can serve
        ``workers`` workers, each step's CPU (:meth:`cpu_s_per_step_at`) spread evenly over
        them and scaled by ``compute_scale`` (a what-if on the PS's speed, docs/model.md §11.1).

        Examples
        --------
        >>> PsCpu(cpu_s_per_step=0.008, cores=0.25).ceiling_steps_per_s(servers=1)
        31.25
        >>> PsCpu(cpu_s_per_step=0.008, cores=0.25).ceiling_steps_per_s(servers=2, compute_scale=0.5)
        125.0
        >>> PsCpu(0.008, 0.25, busy=(BusyPsCpu(2, 0.005),)).ceiling_steps_per_s(servers=1, workers=3)
        62.5
        """
        return servers * self.cores / (self.cpu_s_per_step_at(workers) * compute_scale)


class OverheadPlacement(enum.Enum):
    """Where the parsing overhead of a received tensor runs.

    ``COMPUTE`` (ICPE §3.4, docs/model.md §2.1): a computation op on the receiver's compute resource, in
    line with its other ops. ``LANE``: on a parse lane of its own per receiving task (one
    parse at a time, beside the computation), as TF 2.x deserialises received tensors on
    gRPC's threads rather than the executor's. ``DELAY``: a pure latency between the
    transfer and its dependents, overlapping everything else (the measured overhead of small
    tensors is mostly waiting, not work).
    """

    COMPUTE = "compute"
    LANE = "lane"
    DELAY = "delay"


@dataclasses.dataclass(frozen=True)
class ClusterModel:
    """Link and transfer parameters of a cluster, per direction.

    Attributes:
        downlink_Bps, uplink_Bps: bandwidth B of each PS link, bytes/s (PS->worker, worker->PS).
        win_bytes: HTTP/2 flow-control window WIN of ICPE's multiplexing model (inf: no split).
        overhead_downlink, overhead_uplink: parsing overhead on the receiver of each direction.
        overhead_placement: where parsing runs (:class:`OverheadPlacement`).
        flow_downlink, flow_uplink: HTTP/2 flow control of each direction for the ``grpc``
            transfer model (:class:`FlowControl`; unlimited windows when not calibrated).
        bucket_downlink, bucket_uplink: the link's sustained rate and burst allowance
            (:class:`TokenBucket`); ``None``: the bandwidth is sustained at any load.
        queue_window_downlink_bytes, queue_window_uplink_bytes: the bytes a busy connection
            keeps queued at the link (its TCP congestion window), which a chunk that starts
            while other connections are busy waits behind (docs/model.md §4.5); 0: no wait,
            every chunk shares the link from its first byte.
        buffer_downlink_bytes, buffer_uplink_bytes: the most bytes the link's FIFO holds (the
            switch port's or shaper's buffer): the bytes queued there, which messages wait
            behind and acknowledgements drain through, are at most this (docs/model.md §4.5);
            inf: unbounded.
        connection_cap_downlink_Bps, connection_cap_uplink_Bps: the most one worker's connection
            moves in each direction however much of the link is free, bytes/s: where the
            one-worker run's transfers moved well below what the link carries, the connection's
            end (its host's CPU) is the limit, which every worker has once (docs/model.md §4.8);
            inf: none.
        shaper: how the links were shaped, when they were (the lab's tbf, :class:`LinkShaper`):
            a packet-level replay shapes its links so (docs/model.md §12); None: from the
            calibrated bandwidth and token bucket.
        rpc: the step's RunGraph and request messages (:class:`RpcChain`); ``None``: a step
            is its traced ops only.
        ps_cpu: the parameter servers' CPU per step and cores (:class:`PsCpu`), which bound the
            throughput any number of workers reach (docs/model.md §4.7); ``None``: not measured,
            no bound.
        ps_host_cores, worker_host_cores: the model cores of the hosts the one-worker run's
            tasks had (docs/model.md §4.3, calibration.md §4.10): a prediction given no hosts
            puts every task on such a host; ``None``: not known, no limit.
        latency_downlink_s, latency_uplink_s: a what-if one-way latency of each direction,
            added to what the calibration measured (docs/model.md §11.2): every transfer's
            bytes, and every message, reach the other end that much later; the link is not
            held for it. 0: as calibrated.
        default_transfer: the transfer model predictions use unless told otherwise
            (``grpc`` for clusters calibrated from TF 2.x captures, else ``http2``).
        calibrated: False when built from a bandwidth alone.
        source: where the numbers come from (a CLUSTER.json path, or "bandwidth only").
    """

    downlink_Bps: float
    uplink_Bps: float
    win_bytes: float = math.inf
    overhead_downlink: Overhead = Overhead()
    overhead_uplink: Overhead = Overhead()
    overhead_placement: OverheadPlacement = OverheadPlacement.COMPUTE
    flow_downlink: FlowControl = FlowControl()
    flow_uplink: FlowControl = FlowControl()
    bucket_downlink: TokenBucket | None = None
    bucket_uplink: TokenBucket | None = None
    queue_window_downlink_bytes: float = 0.0
    queue_window_uplink_bytes: float = 0.0
    buffer_downlink_bytes: float = math.inf
    buffer_uplink_bytes: float = math.inf
    connection_cap_downlink_Bps: float = math.inf
    connection_cap_uplink_Bps: float = math.inf
    shaper: LinkShaper | None = None
    rpc: RpcChain | None = None
    ps_cpu: PsCpu | None = None
    ps_host_cores: float | None = None
    worker_host_cores: float | None = None
    latency_downlink_s: float = 0.0
    latency_uplink_s: float = 0.0
    default_transfer: str = "http2"
    calibrated: bool = True
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "downlink_Bps", check_rate(self.downlink_Bps, "downlink_Bps"))
        object.__setattr__(self, "uplink_Bps", check_rate(self.uplink_Bps, "uplink_Bps"))
        if not (self.win_bytes > 0):
            raise UsageError("win_bytes", f"the HTTP/2 window must be positive, not {self.win_bytes}")
        for name in ("queue_window_downlink_bytes", "queue_window_uplink_bytes"):
            object.__setattr__(self, name, check_non_negative(getattr(self, name), name))
        if (self.ps_host_cores is None) != (self.worker_host_cores is None):
            raise UsageError("ps_host_cores", "give the cores of both the PS and the worker hosts, or neither")
        for name in ("ps_host_cores", "worker_host_cores"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                          and 1.0 <= value <= MAX_HOST_CORES):
                raise UsageError(name, f"a host's model cores must be from 1 to {MAX_HOST_CORES:,.0f}, not {value!r}")
        for name in ("buffer_downlink_bytes", "buffer_uplink_bytes"):
            value = _number(getattr(self, name), name)
            if not value > 0:
                raise UsageError(name, f"a link's buffer must be positive bytes (inf: unbounded), not {value}")
            object.__setattr__(self, name, value)
        for name in ("connection_cap_downlink_Bps", "connection_cap_uplink_Bps"):
            value = _number(getattr(self, name), name)
            if value != math.inf:
                value = check_rate(value, name)
            object.__setattr__(self, name, value)
        for name in ("latency_downlink_s", "latency_uplink_s"):
            object.__setattr__(self, name, check_latency(getattr(self, name), name))
        for name, bucket, peak in (("bucket_downlink", self.bucket_downlink, self.downlink_Bps),
                                   ("bucket_uplink", self.bucket_uplink, self.uplink_Bps)):
            if bucket is not None and bucket.sustained_Bps > peak:
                raise UsageError(name, f"a sustained rate of {bucket.sustained_Bps:.6g} B/s is above the link's "
                                       f"peak of {peak:.6g} B/s")

    @classmethod
    def from_bandwidth(cls, bandwidth_Bps: float, uplink_Bps: float | None = None) -> ClusterModel:
        """An uncalibrated cluster: α = β = 0 and an unlimited window (docs/model.md §5.7; callers warn that the
        cluster is uncalibrated)."""
        return cls(bandwidth_Bps, bandwidth_Bps if uplink_Bps is None else uplink_Bps,
                   calibrated=False, source="bandwidth only")

    def with_latency(self, downlink_s: float, uplink_s: float | None = None) -> ClusterModel:
        """The same cluster with a one-way latency of ``downlink_s`` (PS -> worker) and
        ``uplink_s`` (worker -> PS; default: as the downlink) added to its links: a what-if
        that keeps the calibration, the DAG and every transfer's size (docs/model.md §11.2).

        Examples
        --------
        >>> far = ClusterModel.from_bandwidth(125e6).with_latency(0.005)
        >>> far.latency_downlink_s, far.latency_uplink_s
        (0.005, 0.005)
        """
        downlink_s = check_latency(downlink_s, "latency_s")
        uplink_s = downlink_s if uplink_s is None else check_latency(uplink_s, "latency_s")
        return dataclasses.replace(self, latency_downlink_s=downlink_s, latency_uplink_s=uplink_s)

    def with_buffer(self, buffer_bytes: float) -> ClusterModel:
        """The same cluster with a link buffer of ``buffer_bytes`` each way (a switch port's),
        in place of the calibrated one: the queue the model builds at a link holds no more
        (docs/model.md §4.5).

        Examples
        --------
        >>> ClusterModel.from_bandwidth(125e6).with_buffer(256_000).buffer_uplink_bytes
        256000.0
        """
        return dataclasses.replace(self, buffer_downlink_bytes=buffer_bytes, buffer_uplink_bytes=buffer_bytes)

    @property
    def connection_caps_Bps(self) -> dict[str, float]:
        """The directions whose connections have a cap (docs/model.md §4.8), and the cap.

        Examples
        --------
        >>> ClusterModel(125e6, 125e6, connection_cap_uplink_Bps=32e6).connection_caps_Bps
        {'uplink': 32000000.0}
        """
        caps = {"downlink": self.connection_cap_downlink_Bps, "uplink": self.connection_cap_uplink_Bps}
        return {direction: cap for direction, cap in caps.items() if math.isfinite(cap)}

    @property
    def window_round_trip_s(self) -> float:
        """What the what-if latency adds to a grpc window update's delay: the data reaches the
        receiver one way later and its WINDOW_UPDATE comes back the other way."""
        return self.latency_downlink_s + self.latency_uplink_s

    def with_bandwidth(self, downlink_Bps: float, uplink_Bps: float | None = None) -> ClusterModel:
        """The same cluster at another bandwidth (a what-if: everything else stays calibrated;
        a link's sustained rate scales with its peak, its burst allowance stays)."""
        uplink_Bps = downlink_Bps if uplink_Bps is None else uplink_Bps

        def scaled(bucket, old, new):
            return None if bucket is None else TokenBucket(bucket.sustained_Bps * (new / old), bucket.bucket_bytes)

        return dataclasses.replace(self, downlink_Bps=downlink_Bps, uplink_Bps=uplink_Bps,
                                   bucket_downlink=scaled(self.bucket_downlink, self.downlink_Bps, downlink_Bps),
                                   bucket_uplink=scaled(self.bucket_uplink, self.uplink_Bps, uplink_Bps))
