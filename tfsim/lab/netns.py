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


def _pid_alive(pid: int) -> bool:
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
        if not include_live and _pid_alive(int(match.group(1))):
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


def _tbf(rate_bit: int) -> list[str]:
    # The bucket must hold a whole GSO super-packet (veth hands tbf up to 64 KiB at once) and one
    # timer tick of traffic. A bucket alone would let an idle link send that much at veth speed,
    # a burst no real NIC makes, so a second bucket (peakrate, one packet deep) paces every
    # packet at just above the link rate.
    burst = max(96 * 1024, rate_bit // 8 // 250)
    return ["tbf", "rate", f"{rate_bit}bit", "burst", str(burst), "latency", "50ms",
            "peakrate", f"{int(rate_bit * 1.02)}bit", "mtu", str(96 * 1024)]


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
                    _in(ns, "tc", "qdisc", "add", "dev", "eth0", "parent", "1:", "handle", "2:", *_tbf(self.rate_bit))
                else:
                    _in(ns, "tc", "qdisc", "add", "dev", "eth0", "root", *_tbf(self.rate_bit))
                _in(br, "tc", "qdisc", "add", "dev", f"v{n}", "root", *_tbf(self.rate_bit))
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
