"""What one simulation run is asked to do: validated, immutable settings (docs/model.md §2)."""

from __future__ import annotations

import dataclasses
import enum
import math

from tfbase.errors import UsageError

# Limits, checked before any simulation starts (README "Limits"; docs/model.md §2):
MAX_WORKERS = 1024  # beyond this, per-worker state (W x ops) stops fitting comfortably in memory
MAX_STEPS = 1_000_000
MAX_SERVERS = 256
MAX_WORKER_STEPS = 20_000_000  # W x N of one simulation: its (W, N) arrays take 24 bytes per entry (480 MB)
MAX_SEED = 2**32 - 1
MAX_REPLICAS = 100  # independent replications of one configuration; a t interval is tight long before
MAX_CORES = 100_000.0
MIN_SPEED, MAX_SPEED = 0.001, 1000.0  # a worker's computation speed relative to the profiled host
MAX_SPEED_SIGMA = 3.0  # a lognormal wider than this puts workers 1000x apart: not stragglers any more
SPEED_STREAM = 0x5EED  # the seed stream of sampled speeds, apart from the step samples' (same seed)
MIN_CORES = 0.01
MAX_STAGGER = 1000.0  # in profiled steps
MAX_PACKET_WORKERS = 64  # a packet-level replay costs seconds per worker: it is for clusters the lab can check
MAX_TRACE_CHUNKS = 1_000_000  # chunks a traced run records (a Chrome trace of about 200 MB)
# A sweep's estimated events (W x N x the chunks of a step, summed over its configurations): at
# 2 to 5 M events/s on one core (bench/results/engine.json) this is 11 to 28 hours of one core.
# TFSIM_MAX_OP_EVENTS lowers (or raises) it, e.g. for a service that must answer in a minute.
MAX_SWEEP_OP_EVENTS = 200_000_000_000


def max_sweep_op_events() -> int:
    """:data:`MAX_SWEEP_OP_EVENTS`, or the positive whole number in ``TFSIM_MAX_OP_EVENTS``."""
    import os

    text = os.environ.get("TFSIM_MAX_OP_EVENTS", "").strip()
    if not text:
        return MAX_SWEEP_OP_EVENTS
    try:
        value = int(float(text))
    except (ValueError, OverflowError):
        raise UsageError("TFSIM_MAX_OP_EVENTS", f"must be a positive whole number, not {text[:40]!r}") from None
    if value < 1:
        raise UsageError("TFSIM_MAX_OP_EVENTS", f"must be a positive whole number, not {text[:40]!r}")
    return value


class Mode(enum.Enum):
    """How workers synchronise (TPDS §3)."""

    ASYNC = "async"          # each worker starts its next step when its own step is done
    SYNC = "sync"            # all workers start together after every worker's step (barrier)
    ALLREDUCE = "allreduce"  # sync; downlinks take 0, uplinks become ring all-reduces (TPDS §3.2.2)


class Sharing(enum.Enum):
    """How the workers active on one link share its bandwidth (docs/model.md §4.1-4.2)."""

    PS = "ps"              # processor sharing: 1/n of B each
    FCFS = "fcfs"          # the first active worker gets all of B
    HYBRID = "hybrid"      # the average of the PS and FCFS throughputs (TPDS §3.2.1)
    FLOW_CAP = "flow_cap"  # PS, but no single flow above a cap (TPDS §4.4)


class Transfer(enum.Enum):
    """How one worker's streams on one link are served (ICPE §3.2.2, §3.3; docs/model.md §3)."""

    HTTP2 = "http2"        # ICPE's model of gRPC's HTTP/2 multiplexing: at most one preemption per stream
    FIFO = "fifo"          # flow control off: whole streams in the order they became ready
    PRIORITY = "priority"  # flow control off, order enforced: lowest priority number first
    GRPC = "grpc"          # today's gRPC: whole streams in send-ready order, pausing where a window runs out
    PACKET = "packet"      # whole streams in send-ready order over TCP simulated packet by packet (ns-3)
    AUTO = "auto"          # per W: packet from the W whose uploads overflow the buffer, else the default flow model


class Enforcement(enum.Enum):
    """How the ``priority`` scheduler enforces its order (docs/model.md §3.3; TicTac §3.1, §5.1)."""

    WORK_CONSERVING = "work-conserving"  # the lowest number among the transfers waiting; none waits for one not ready
    STRICT = "strict"  # a transfer starts only after every lower-numbered one of its worker and link has started


class TieOrder(enum.Enum):
    """The order in which ops that become ready at one instant on one slot take their turns under
    the ``fifo``, ``http2`` and ``grpc`` schedulers (docs/model.md §2.4)."""

    RECORDED = "recorded"  # the profiled run's order: ops leading to an earlier-recorded parameter transfer first
    INDEX = "index"        # ascending op index: the engine's own order, as before there was a choice


class Placement(enum.Enum):
    """How variables are placed over M parameter servers when a profile is re-partitioned
    (docs/model.md §2.2): TensorFlow's two strategies for ``replica_device_setter``."""

    ROUND_ROBIN = "round_robin"  # variable i (creation order) on server i mod M: TensorFlow's default
    GREEDY = "greedy"            # each variable on the server holding the fewest bytes so far


def parse_enum(kind: type[enum.Enum], text: str, parameter: str) -> enum.Enum:
    """The member of ``kind`` (``Mode``, ``Sharing``, ``Transfer``, ``Enforcement``, ``TieOrder``,
    ``Placement``) named by ``text``, or a one-line UsageError naming ``parameter``."""
    for member in kind:
        if member.value == text:
            return member
    choices = ", ".join(m.value for m in kind)
    raise UsageError(parameter, f"unknown {kind.__name__.lower()} {text!r}; choose from {choices}")


def as_member(kind: type[enum.Enum], value, parameter: str) -> enum.Enum:
    """``value`` as a member of ``kind`` (itself, or its value), or a UsageError naming ``parameter``.

    Examples
    --------
    >>> as_member(Placement, "greedy", "placement")
    <Placement.GREEDY: 'greedy'>
    """
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        return parse_enum(kind, value, parameter)
    raise UsageError(parameter, f"must be {' or '.join(repr(m.value) for m in kind)}, not {value!r}")


def model_cores(quota_cores: float) -> float:
    """The model cores of a host whose task ran under a CPU quota of ``quota_cores`` when it was
    profiled (docs/model.md §4.3): the profile's op times already carry that host's speed, so a
    quota of a core or less runs one op at a time at the profiled speed (1 model core) and a
    larger quota q runs q.

    Examples
    --------
    >>> model_cores(0.29), model_cores(4.0)
    (1.0, 4.0)
    """
    return max(1.0, float(quota_cores))


@dataclasses.dataclass(frozen=True)
class Colocation:
    """Tasks that share a host's cores (docs/model.md §4.3): computation there is processor-shared.

    ``worker_host[w]`` and ``server_host[m]`` name each task's host; ``cores[h]`` is host h's
    core count. Each busy computation op on host h runs at ``min(1, cores[h] / n_h)`` with
    ``n_h`` the busy computation ops on h (all workers' and servers' alike).
    """

    worker_host: tuple[int, ...]
    server_host: tuple[int, ...]
    cores: tuple[float, ...]

    def __post_init__(self) -> None:
        hosts = len(self.cores)
        if hosts < 1 or any(not (MIN_CORES <= c <= MAX_CORES) for c in self.cores):
            raise UsageError("cores", f"every host needs between {MIN_CORES:g} and {MAX_CORES:,.0f} cores, not "
                                      f"{', '.join(f'{c:g}' for c in self.cores)}")
        if any(not 0 <= h < hosts for h in (*self.worker_host, *self.server_host)):
            raise UsageError("cores", "a task is placed on a host that does not exist")

    @classmethod
    def single_host(cls, workers: int, servers: int, cores: float) -> Colocation:
        """Every task on one host with ``cores`` cores (the lab's small machine)."""
        return cls((0,) * workers, (0,) * servers, (float(cores),))


@dataclasses.dataclass(frozen=True)
class TaskHosts:
    """Every task on a host of its own (docs/model.md §4.3): each worker with ``worker_cores``,
    each parameter server with ``ps_cores`` (None: as many as its busy ops need).

    Callable with (workers, servers), so that one value fits every W and M of a sweep; pass
    it as ``colocation``. A PS host is shared by the PS ops of every worker, which is what
    limits a parameter server's computation as W grows.

    Examples
    --------
    >>> TaskHosts(worker_cores=1, ps_cores=2)(2, 1)
    Colocation(worker_host=(0, 1), server_host=(2,), cores=(1.0, 1.0, 2.0))
    """

    worker_cores: float | None = None
    ps_cores: float | None = None

    def __post_init__(self) -> None:
        for name in ("worker_cores", "ps_cores"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_CORES <= value <= MAX_CORES:
                raise UsageError(name, f"must be between {MIN_CORES:g} and {MAX_CORES:,.0f} cores, not {value!r}")
        if self.worker_cores is None and self.ps_cores is None:
            raise UsageError("ps_cores", "give the cores of a PS host, of a worker host, or both")

    def __call__(self, workers: int, servers: int) -> Colocation:
        # A host without a limit gets as many cores as it could ever keep busy: one per op lane.
        unlimited = MAX_CORES
        worker = float(self.worker_cores) if self.worker_cores is not None else unlimited
        server = float(self.ps_cores) if self.ps_cores is not None else unlimited
        return Colocation(tuple(range(workers)), tuple(range(workers, workers + servers)),
                          (worker,) * workers + (server,) * servers)


@dataclasses.dataclass(frozen=True)
class SharedHost:
    """Every task on one host with ``cores`` cores; callable so that it fits any W and M
    (what ``cores`` means in :func:`simulate.predict`)."""

    cores: float

    def __call__(self, workers: int, servers: int) -> Colocation:
        return Colocation.single_host(workers, servers, self.cores)

    def __post_init__(self) -> None:
        cores = self.cores
        if isinstance(cores, bool) or not isinstance(cores, (int, float)) or not math.isfinite(cores):
            raise UsageError("cores", f"must be a number, not {cores!r}")
        Colocation.single_host(1, 1, float(cores))  # the range check


def host_model(colocation=None, cores: float | None = None, cluster=None):
    """The hosts a sweep simulates: ``colocation`` (a Colocation, or a callable of (workers,
    servers) such as :class:`~simulate.config.TaskHosts`), or every task on one host with
    ``cores`` cores; given neither, a host per task with the cores of the calibration run's
    hosts where ``cluster`` (a :class:`~simulate.cluster.ClusterModel`) knows them
    (``ps_host_cores``, ``worker_host_cores``), else None (no limit). Both at once is a usage
    error."""
    if colocation is not None and cores is not None:
        raise UsageError("cores", "give either one shared host's cores or the tasks' hosts (colocation), not both")
    if cores is not None:
        return SharedHost(cores)
    if colocation is None and cluster is not None and getattr(cluster, "ps_host_cores", None) is not None:
        return TaskHosts(worker_cores=cluster.worker_host_cores, ps_cores=cluster.ps_host_cores)
    if colocation is not None and not (isinstance(colocation, Colocation) or callable(colocation)):
        raise UsageError("colocation", f"must be a Colocation or TaskHosts, not {type(colocation).__name__}")
    return colocation


@dataclasses.dataclass(frozen=True)
class WorkerSpeeds:
    """How fast each worker's host computes, relative to the profiled one (docs/model.md §4.6).

    ``factors`` gives worker 0, 1, ... their speeds (workers beyond the list run at 1); with
    ``sigma``, every worker's speed is drawn from a lognormal of median 1 and that σ instead,
    seeded by ``seed``, worker by worker, so that a worker keeps its speed at every W.
    Callable with the worker count, so that one value fits a sweep.

    Examples
    --------
    >>> WorkerSpeeds(factors=(1.0, 0.5))(3)
    (1.0, 0.5, 1.0)
    >>> len(set(WorkerSpeeds(sigma=0.3, seed=1)(4)))
    4
    """

    factors: tuple[float, ...] = ()
    sigma: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        factors = tuple(float(x) for x in self.factors)
        if any(not (MIN_SPEED <= x <= MAX_SPEED) for x in factors):
            raise UsageError("worker_speed", f"speed factors must be between {MIN_SPEED:g} and {MAX_SPEED:g}, not "
                                             f"{', '.join(f'{x:g}' for x in factors)}")
        object.__setattr__(self, "factors", factors)
        if self.sigma is not None and not (math.isfinite(self.sigma) and 0 < self.sigma <= MAX_SPEED_SIGMA):
            raise UsageError("worker_speed", f"a lognormal sigma must be above 0 and at most {MAX_SPEED_SIGMA:g}, "
                                             f"not {self.sigma}")
        if factors and self.sigma is not None:
            raise UsageError("worker_speed", "give speed factors or a lognormal sigma, not both")

    @classmethod
    def parse(cls, text: str, seed: int = 0) -> WorkerSpeeds:
        """Speeds written as ``"1,1,1,0.5"`` (per-worker factors) or ``"lognormal:SIGMA"``
        (drawn with ``seed``); a UsageError naming ``worker_speed`` for anything else.

        Examples
        --------
        >>> WorkerSpeeds.parse("1,0.5")
        WorkerSpeeds(factors=(1.0, 0.5), sigma=None, seed=0)
        >>> WorkerSpeeds.parse("lognormal:0.2", seed=3).sigma
        0.2
        """
        text = str(text).strip()
        prefix = "lognormal:"
        if text.startswith(prefix):
            try:
                sigma = float(text[len(prefix):])
            except ValueError:
                raise UsageError("worker_speed", f"{text!r}: lognormal:SIGMA needs a number") from None
            return cls(sigma=sigma, seed=seed)
        try:
            factors = tuple(float(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise UsageError("worker_speed", f"{text!r} is not a list of speed factors (1,1,0.5) or "
                                             "lognormal:SIGMA") from None
        if not factors:
            raise UsageError("worker_speed", "give speed factors (1,1,0.5) or lognormal:SIGMA")
        return cls(factors=factors)

    def __call__(self, workers: int) -> tuple[float, ...]:
        if self.sigma is not None:
            import numpy as np

            draws = np.random.default_rng([self.seed, SPEED_STREAM]).lognormal(0.0, self.sigma, size=workers)
            return tuple(float(min(MAX_SPEED, max(MIN_SPEED, x))) for x in draws)
        return tuple(self.factors[w] if w < len(self.factors) else 1.0 for w in range(workers))


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Settings of one simulation run.

    ``steps`` per worker are simulated, of which the first ``warmup`` are dropped from the
    throughput (ICPE §4.1: 1000 and 50). ``flow_cap_Bps`` is required with
    ``Sharing.FLOW_CAP``. ``trace_steps`` > 0 records every chunk of each worker's first
    ``trace_steps`` steps, for timelines. ``start_offsets_s`` (one per worker; None: all 0)
    is when each worker starts its first step: real workers never start at one instant, and
    workers started together stay in lock step in a deterministic model (see
    :func:`simulate.sweep.staggered_starts`). ``worker_speed`` (one factor per worker; None:
    all 1) is how fast each worker's host computes relative to the profiled one: a straggler
    at 0.5 takes twice as long for its computation and its parsing (docs/model.md §4.6).
    ``enforcement`` is how the ``priority`` scheduler enforces its order (docs/model.md
    §3.3); the other schedulers have no order to enforce and ignore it. ``tie_order`` is how
    ``fifo``, ``http2`` and ``grpc`` queue the ops that become ready at one instant on one slot
    (docs/model.md §2.4): in the profiled run's recorded order (the default; a profile that
    records none keeps op-index order) or by op index; ``priority`` ignores it.
    """

    workers: int
    mode: Mode = Mode.ASYNC
    sharing: Sharing = Sharing.PS
    transfer: Transfer = Transfer.HTTP2
    steps: int = 1000
    warmup: int = 50
    seed: int = 0
    flow_cap_Bps: float | None = None
    colocation: Colocation | None = None
    trace_steps: int = 0
    start_offsets_s: tuple[float, ...] | None = None
    worker_speed: tuple[float, ...] | None = None
    enforcement: Enforcement = Enforcement.WORK_CONSERVING
    tie_order: TieOrder = TieOrder.INDEX

    def __post_init__(self) -> None:
        if not isinstance(self.enforcement, Enforcement):
            raise UsageError("enforcement", f"must be an Enforcement, not {self.enforcement!r}")
        if not isinstance(self.tie_order, TieOrder):
            raise UsageError("tie_order", f"must be a TieOrder, not {self.tie_order!r}")
        if not isinstance(self.workers, int) or not 1 <= self.workers <= MAX_WORKERS:
            raise UsageError("workers", f"must be between 1 and {MAX_WORKERS}, not {self.workers}")
        if not isinstance(self.steps, int) or not 1 <= self.steps <= MAX_STEPS:
            raise UsageError("steps", f"must be between 1 and {MAX_STEPS:,}, not {self.steps}")
        if self.workers * self.steps > MAX_WORKER_STEPS:
            raise UsageError("steps", f"{self.workers} workers x {self.steps:,} steps is more than one simulation "
                                      f"holds ({MAX_WORKER_STEPS:,} worker-steps)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise UsageError("seed", f"must be a whole number from 0 to {MAX_SEED}, not {self.seed}")
        if self.start_offsets_s is not None:
            offsets = tuple(float(x) for x in self.start_offsets_s)
            if len(offsets) != self.workers or not all(math.isfinite(x) and x >= 0 for x in offsets):
                raise UsageError("start_offsets_s", f"needs {self.workers} finite, non-negative start times")
            object.__setattr__(self, "start_offsets_s", offsets)
        if self.worker_speed is not None:
            speeds = tuple(float(x) for x in self.worker_speed)
            if len(speeds) != self.workers or not all(MIN_SPEED <= x <= MAX_SPEED for x in speeds):
                raise UsageError("worker_speed", f"needs {self.workers} speed factors between {MIN_SPEED:g} and "
                                                 f"{MAX_SPEED:g}")
            object.__setattr__(self, "worker_speed", speeds)
        if not isinstance(self.warmup, int) or not 0 <= self.warmup < self.steps:
            raise UsageError("warmup", f"must be at least 0 and below steps ({self.steps}), not {self.warmup}")
        if self.sharing is Sharing.FLOW_CAP:
            if self.flow_cap_Bps is None or not (self.flow_cap_Bps > 0 and math.isfinite(self.flow_cap_Bps)):
                raise UsageError("flow_cap_Bps", "flow_cap sharing needs a positive, finite per-flow cap")
        if self.sharing is Sharing.HYBRID:
            raise UsageError("sharing", "hybrid is the average of two runs (ps and fcfs); run those and average")
        if self.colocation is not None and len(self.colocation.worker_host) != self.workers:
            raise UsageError("colocation", f"colocation places {len(self.colocation.worker_host)} workers, "
                                        f"not {self.workers}")
        if self.trace_steps < 0:
            raise UsageError("trace_steps", "must not be negative")
        if self.trace_steps > self.steps:
            raise UsageError("trace_steps", f"must not exceed steps ({self.steps}), not {self.trace_steps}")


class CongestionControl(enum.Enum):
    """The TCP congestion control of every host of a packet-level replay (ns-3's implementation)."""

    RENO = "ns3::TcpNewReno"
    CUBIC = "ns3::TcpCubic"
    BBR = "ns3::TcpBbr"


class WindowLimit(enum.Enum):
    """What bounds the bytes a packet-level replay's TCP connection keeps in flight."""

    CONGESTION = "congestion"  # its congestion window alone, under socket buffers of send_buffer_bytes
    QUEUE_WINDOW = "queue_window"  # also the cluster's calibrated queue window, as a receive window


@dataclasses.dataclass(frozen=True)
class PacketNetwork:
    """The transport a packet-level replay simulates (docs/model.md §12); the defaults are Linux's.

    Attributes:
        congestion_control: every host's. NewReno by default: judged against the lab's Linux
            senders, a loss-based sender limited by its congestion window is what they do on
            these links, and ns-3's BBR is not (docs/model.md §12).
        window: what else bounds a connection's bytes in flight. ``CONGESTION`` (default):
            nothing but socket buffers of ``send_buffer_bytes``, so senders fill the links'
            buffers and lose packets as the lab's did from two workers on; ``QUEUE_WINDOW``: the
            cluster's calibrated queue window too (what each busy connection kept queued in the
            one-worker capture; the default before 2026-11-27, docs/model.md §12).
        segment_bytes: TCP's maximum segment (payload) size.
        min_rto_s: the least retransmission timeout (Linux: 200 ms).
        one_way_delay_s: each link's propagation delay (a host to the switch).
        send_buffer_bytes: each socket's send buffer.
        receive_window_bytes: each socket's receive buffer, the most a connection has in flight,
            given explicitly; None: as ``window`` says.
        initial_cwnd_segments: TCP's initial congestion window.

    Examples
    --------
    >>> PacketNetwork(congestion_control=CongestionControl.CUBIC).min_rto_s
    0.2
    """

    congestion_control: CongestionControl = CongestionControl.RENO
    window: WindowLimit = WindowLimit.CONGESTION
    segment_bytes: int = 1448
    min_rto_s: float = 0.2
    one_way_delay_s: float = 25e-6
    send_buffer_bytes: int = 4 << 20
    receive_window_bytes: int | None = None
    initial_cwnd_segments: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.congestion_control, CongestionControl):
            raise UsageError("congestion_control", f"must be a CongestionControl, not {self.congestion_control!r}")
        if not isinstance(self.window, WindowLimit):
            raise UsageError("window", f"must be a WindowLimit, not {self.window!r}")
        if isinstance(self.segment_bytes, bool) or not isinstance(self.segment_bytes, int) or not (
                536 <= self.segment_bytes <= 65_000):
            raise UsageError("segment_bytes", f"must be between 536 and 65,000 bytes, not {self.segment_bytes!r}")
        for name in ("min_rto_s", "one_way_delay_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and 0 <= value <= 10):
                raise UsageError(name, f"must be between 0 and 10 s, not {value!r}")
        for name in ("send_buffer_bytes", "receive_window_bytes"):
            value = getattr(self, name)
            if value is None and name == "receive_window_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 2 * self.segment_bytes <= value <= 1 << 30:
                raise UsageError(name, f"must hold two segments and at most 1 GiB, not {value!r}")
        if isinstance(self.initial_cwnd_segments, bool) or not isinstance(self.initial_cwnd_segments, int) or not (
                1 <= self.initial_cwnd_segments <= 1000):
            raise UsageError("initial_cwnd_segments", f"must be between 1 and 1000, not {self.initial_cwnd_segments!r}")
