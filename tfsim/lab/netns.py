"""An emulated cluster on one machine: one network namespace per host, on a bridge, with
tc-shaped links (needs root).

Layout for a run with prefix ``P`` (unique per run: ``tfsimlab-<pid>-<random>``):

- namespace ``P-br`` holds the bridge ``br0``;
- each host ``h`` gets a namespace ``P-h`` with interface ``eth0`` (address ``10.231.0.N/24``),
  whose veth peer ``vN`` sits on the bridge;
- every host's link is shaped in both directions: its own egress (``eth0``: netem delay, then
  a tbf at the link rate) and its ingress (the bridge side ``vN``: a tbf at the link rate).
  With W workers and one PS, the PS's link is the shared bottleneck in each direction, as
  the NIC of a real parameter server is.

Only addresses inside these namespaces are used, and nothing outside them is touched.
:func:`cleanup` removes what a lab run left behind (namespaces whose creating process is
gone), and only that. External tools are called with argument lists, never a shell.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence

from tfbase.errors import TfsimError, UsageError
from tfbase.signals import stop_on_signals

PREFIX = "tfsimlab"
SUBNET = "10.231.0"
_NAME_RE = re.compile(rf"^{PREFIX}-(\d+)-[0-9a-f]+-")


class LabError(TfsimError):
    """Setting up or using the emulated cluster failed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise LabError(f"ip {' '.join(args)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def _in(ns: str, *argv: str) -> None:
    result = subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True)
    if result.returncode != 0:
        raise LabError(f"{' '.join(argv)} in {ns} failed: {result.stderr.strip() or result.stdout.strip()}")


def require_lab_tools() -> None:
    """The lab needs root, ``ip`` (iproute2) and ``tc``; say what is missing before acting."""
    if os.geteuid() != 0:
        raise UsageError("tfsim lab", "needs root to create network namespaces and shape links with tc")
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        raise UsageError("tfsim lab", f"needs {', '.join(missing)} (Debian: apt-get install iproute2)")


def list_namespaces() -> list[str]:
    result = _ip("netns", "list", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup(include_live: bool = False) -> list[str]:
    """Delete lab namespaces whose creating process is gone (all lab namespaces with
    ``include_live``); kill processes still running in them. Returns the names removed."""
    removed = []
    for ns in list_namespaces():
        match = _NAME_RE.match(ns)
        if not match:
            continue
        if not include_live and pid_alive(int(match.group(1))):
            continue
        _kill_namespace_processes(ns)
        _ip("netns", "delete", ns, check=False)
        removed.append(ns)
    return removed


def _kill_namespace_processes(ns: str) -> None:
    result = _ip("netns", "pids", ns, check=False)
    for pid in result.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


CONGESTION_CONTROLS = ("bbr", "cubic", "reno")
ALLOWED_CC = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
DEFAULT_QUEUE_MS = 5.0  # what a data-centre NIC or switch port holds: a few milliseconds of data


@dataclasses.dataclass(frozen=True)
class Transport:
    """How the emulated links queue and how TCP behaves on them (recorded with every result).

    ``queue_ms`` is the shaper's queue as time at the link rate (tbf ``latency``); the default
    is a few milliseconds, as a data-centre NIC or switch port holds, where a 50 ms queue
    would hold 2.5 MB at 400 Mbit/s. ``queue_bytes`` gives it in bytes instead (tbf
    ``limit``). ``congestion_control`` (bbr, cubic, reno; None: the host's default) and
    ``slow_start_after_idle`` (None: the host's default) are set in every namespace.
    """

    queue_ms: float | None = DEFAULT_QUEUE_MS
    queue_bytes: int | None = None
    congestion_control: str | None = None
    slow_start_after_idle: bool | None = None

    def __post_init__(self) -> None:
        if self.queue_bytes is not None:
            if not 1500 <= self.queue_bytes <= 1 << 30:
                raise UsageError("queue_bytes", f"must be between 1500 and 1 GiB, not {self.queue_bytes}")
            object.__setattr__(self, "queue_ms", None)
        elif self.queue_ms is None or not 0.1 <= self.queue_ms <= 10_000:
            raise UsageError("queue_ms", f"must be between 0.1 and 10,000 ms, not {self.queue_ms}")
        if self.congestion_control is not None and self.congestion_control not in CONGESTION_CONTROLS:
            raise UsageError("congestion_control", f"must be one of {', '.join(CONGESTION_CONTROLS)}, "
                                                   f"not {self.congestion_control!r}")

    def describe(self) -> str:
        queue = f"{self.queue_bytes} B" if self.queue_bytes is not None else f"{self.queue_ms:g} ms"
        return (f"queue {queue}, {self.congestion_control or 'default'} congestion control, slow start after idle "
                f"{'default' if self.slow_start_after_idle is None else 'on' if self.slow_start_after_idle else 'off'}")

    def buffer_bytes(self, rate_bit: int) -> int:
        """The bytes a shaped link holds before it drops: tbf's ``limit``, which ``latency``
        sets to the rate times the latency plus the bucket (``tc-tbf(8)``)."""
        burst = Shaper.of(rate_bit).burst_bytes
        if self.queue_bytes is not None:
            return max(self.queue_bytes, burst)
        return int(rate_bit / 8 * self.queue_ms / 1e3) + burst

    def sysctls(self) -> list[str]:
        out = []
        if self.congestion_control is not None:
            out.append(f"net.ipv4.tcp_congestion_control={self.congestion_control}")
        if self.slow_start_after_idle is not None:
            out.append(f"net.ipv4.tcp_slow_start_after_idle={int(self.slow_start_after_idle)}")
        return out


GSO_BUCKET_BYTES = 96 * 1024  # a GSO super-packet (64 KiB) with room
TBF_TICKS_PER_S = 250
PEAK_RATE_FACTOR = 1.02


@dataclasses.dataclass(frozen=True)
class Shaper:
    """One link's tbf: ``rate_bit`` with a bucket of ``burst_bytes``, and a second bucket of
    ``peak_burst_bytes`` at ``peak_rate_bit``."""

    rate_bit: int
    burst_bytes: int
    peak_rate_bit: int
    peak_burst_bytes: int

    @classmethod
    def of(cls, rate_bit: int) -> Shaper:
        # The bucket must hold a whole GSO super-packet (veth hands tbf up to 64 KiB at once) and
        # one timer tick of traffic. A bucket alone would let an idle link send that much at veth
        # speed, a burst no real NIC makes, so a second bucket (peakrate, one packet deep) paces
        # every packet at just above the link rate.
        return cls(rate_bit, max(GSO_BUCKET_BYTES, rate_bit // 8 // TBF_TICKS_PER_S), int(rate_bit * PEAK_RATE_FACTOR),
                   GSO_BUCKET_BYTES)

    def link_record(self, buffer_bytes: int | None = None) -> dict:
        """``run.json``'s ``link`` (docs/formats.md §2.1): what calibration holds rates to, and
        with ``buffer_bytes`` the bytes the link queues before it drops (the model's buffer)."""
        return {"rate_bit_s": self.rate_bit, "burst_bytes": self.burst_bytes, "peak_rate_bit_s": self.peak_rate_bit,
                "peak_burst_bytes": self.peak_burst_bytes,
                **({"buffer_bytes": buffer_bytes} if buffer_bytes is not None else {}), "source": "the lab's tbf"}


def _tbf(rate_bit: int, transport: Transport) -> list[str]:
    shaper = Shaper.of(rate_bit)
    queue = (["limit", str(max(transport.queue_bytes, shaper.burst_bytes))] if transport.queue_bytes is not None
             else ["latency", f"{transport.queue_ms:g}ms"])
    return ["tbf", "rate", f"{rate_bit}bit", "burst", str(shaper.burst_bytes), *queue,
            "peakrate", f"{shaper.peak_rate_bit}bit", "mtu", str(shaper.peak_burst_bytes)]


@contextlib.contextmanager
def allowed_congestion_control(name: str | None) -> Iterator[None]:
    """Let namespaces use ``name``: a namespace may only pick what the host's
    ``tcp_allowed_congestion_control`` lists, so add it for the run and restore the list after."""
    if name is None:
        yield
        return
    try:
        with open(ALLOWED_CC) as handle:
            before = handle.read().split()
    except OSError as err:
        raise LabError(f"cannot read {ALLOWED_CC}: {err.strerror or err}") from None
    changed = name not in before
    if changed:
        try:
            with open(ALLOWED_CC, "w") as handle:
                handle.write(" ".join([*before, name]))
        except OSError as err:
            raise LabError(f"cannot allow {name} congestion control ({ALLOWED_CC}): {err.strerror or err}; is its "
                           "kernel module there (tcp_available_congestion_control)?") from None
    try:
        yield
    finally:
        if changed:
            with open(ALLOWED_CC, "w") as handle:
                handle.write(" ".join(before))


@dataclasses.dataclass(frozen=True)
class Host:
    name: str       # e.g. "ps0", "w1"
    namespace: str
    address: str

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]


@dataclasses.dataclass
class EmulatedCluster:
    """Namespaces on a bridge with shaped links; use as a context manager (always torn down)."""

    host_names: Sequence[str]
    rate_bit: int
    delay_ms: float = 0.0
    transport: Transport = Transport()
    prefix: str = ""
    hosts: dict[str, Host] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.host_names or len(set(self.host_names)) != len(self.host_names):
            raise UsageError("hosts", "need distinct host names")
        if not (self.rate_bit > 0):
            raise UsageError("rate_bit", f"link rate must be positive, not {self.rate_bit}")
        if not (0 <= self.delay_ms < 10_000):
            raise UsageError("delay_ms", f"latency must be between 0 and 10 s, not {self.delay_ms} ms")
        self.prefix = self.prefix or f"{PREFIX}-{os.getpid()}-{secrets.token_hex(2)}"

    @property
    def bridge_namespace(self) -> str:
        return f"{self.prefix}-br"

    def port_of(self, name: str) -> str:
        """The bridge port of host ``name`` (its shaper is the host's ingress)."""
        return f"v{list(self.host_names).index(name) + 1}"

    def namespaces(self) -> list[str]:
        return [self.bridge_namespace] + [f"{self.prefix}-{h}" for h in self.host_names]

    def up(self) -> EmulatedCluster:
        require_lab_tools()
        try:
            br = self.bridge_namespace
            _ip("netns", "add", br)
            _in(br, "ip", "link", "set", "lo", "up")
            _in(br, "ip", "link", "add", "br0", "type", "bridge")
            _in(br, "ip", "link", "set", "br0", "up")
            for n, name in enumerate(self.host_names, start=1):
                ns = f"{self.prefix}-{name}"
                _ip("netns", "add", ns)
                # Create the pair in the host's namespace, then move the bridge end over.
                _in(ns, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", f"v{n}")
                _in(ns, "ip", "link", "set", f"v{n}", "netns", br)
                _in(ns, "ip", "addr", "add", f"{SUBNET}.{n}/24", "dev", "eth0")
                _in(ns, "ip", "link", "set", "eth0", "up")
                _in(ns, "ip", "link", "set", "lo", "up")
                _in(br, "ip", "link", "set", f"v{n}", "master", "br0")
                _in(br, "ip", "link", "set", f"v{n}", "up")
                if self.delay_ms > 0:
                    try:
                        _in(ns, "tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "netem", "delay",
                            f"{self.delay_ms}ms", "limit", "100000")
                    except LabError as err:
                        raise LabError(f"cannot add latency: {err} (this kernel may lack the netem qdisc; "
                                       "use a latency of 0)") from None
                    _in(ns, "tc", "qdisc", "add", "dev", "eth0", "parent", "1:", "handle", "2:",
                        *_tbf(self.rate_bit, self.transport))
                else:
                    _in(ns, "tc", "qdisc", "add", "dev", "eth0", "root", *_tbf(self.rate_bit, self.transport))
                _in(br, "tc", "qdisc", "add", "dev", f"v{n}", "root", *_tbf(self.rate_bit, self.transport))
                for setting in self.transport.sysctls():
                    _in(ns, "sysctl", "-q", "-w", setting)
                self.hosts[name] = Host(name, ns, f"{SUBNET}.{n}")
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Remove every namespace of this cluster (and whatever still runs in them)."""
        for ns in reversed(self.namespaces()):
            if ns in list_namespaces():
                _kill_namespace_processes(ns)
                _ip("netns", "delete", ns, check=False)

    def __enter__(self) -> EmulatedCluster:
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()


@contextlib.contextmanager
def terminate_on_signals() -> Iterator[None]:
    """Stop on SIGINT, SIGTERM and SIGHUP while the lab runs (KeyboardInterrupt or
    :class:`~tfbase.errors.Terminated`), so that every ``with`` block unwinds and the
    namespaces are torn down, also when the lab is used outside the command line."""
    with stop_on_signals():
        yield
