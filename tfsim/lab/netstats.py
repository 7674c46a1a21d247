"""What the emulated links and TCP did during a lab run: the shapers' drop counters and each
host's TCP loss-recovery counters.

A run's throughput alone does not say why W workers get less than the link carries. The
counters here do: a tbf that dropped packets, and a TCP sender that waited for a
retransmission timeout (RTO, at least 200 ms on Linux) leave a step that took several times
its median. They are read once, at the end of a run, from namespaces created for that run, so
they count that run alone (docs/formats.md §10).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Mapping

# /proc/net/snmp and /proc/net/netstat counters kept, by (table, field) -> our name. Timeouts
# are RTOs; loss probes are tail-loss probes (a probe sent instead of waiting for an RTO).
TCP_FIELDS = {
    ("Tcp", "RetransSegs"): "retrans_segs",
    ("TcpExt", "TCPTimeouts"): "rto_timeouts",
    ("TcpExt", "TCPLossProbes"): "loss_probes",
    ("TcpExt", "TCPFastRetrans"): "fast_retrans",
    ("TcpExt", "TCPSpuriousRTOs"): "spurious_rtos",
}

_QDISC_SENT = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+) requeues (\d+)\)")


@dataclasses.dataclass(frozen=True)
class QdiscCounters:
    """A shaper's counters: bytes and packets it sent, packets it dropped, and how often a packet
    had to wait for tokens (overlimits)."""

    sent_bytes: int = 0
    sent_packets: int = 0
    dropped: int = 0
    overlimits: int = 0


@dataclasses.dataclass(frozen=True)
class TcpCounters:
    """A host's TCP loss recovery over the run (all its connections)."""

    retrans_segs: int = 0
    rto_timeouts: int = 0
    loss_probes: int = 0
    fast_retrans: int = 0
    spurious_rtos: int = 0


@dataclasses.dataclass(frozen=True)
class HostLinkCounters:
    """One emulated host: its egress shaper (``egress``: what it sends), the bridge port's shaper
    towards it (``ingress``: what it receives), and its TCP counters."""

    egress: QdiscCounters
    ingress: QdiscCounters
    tcp: TcpCounters

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def parse_qdisc_stats(text: str) -> QdiscCounters:
    """Sum the counters of every qdisc in ``tc -s qdisc show dev DEV``'s output.

    Examples
    --------
    >>> out = ("qdisc tbf 8001: root refcnt 2 rate 100Mbit burst 96Kb lat 5ms\\n"
    ...        " Sent 5120 bytes 12 pkt (dropped 3, overlimits 7 requeues 0)\\n")
    >>> parse_qdisc_stats(out)
    QdiscCounters(sent_bytes=5120, sent_packets=12, dropped=3, overlimits=7)
    """
    totals = [0, 0, 0, 0]
    for match in _QDISC_SENT.finditer(text):
        for i, value in enumerate(match.groups()[:4]):
            totals[i] += int(value)
    return QdiscCounters(*totals)


def parse_proc_net(text: str) -> dict[tuple[str, str], int]:
    """The counters of ``/proc/net/snmp`` or ``/proc/net/netstat``: pairs of lines, a header of
    field names and a line of values, each starting with the table's name.

    Examples
    --------
    >>> parse_proc_net("Tcp: RtoMin RetransSegs\\nTcp: 200 17\\n")[("Tcp", "RetransSegs")]
    17
    """
    counters: dict[tuple[str, str], int] = {}
    lines = text.splitlines()
    for header, values in zip(lines[::2], lines[1::2]):
        table, _, names = header.partition(":")
        table_v, _, numbers = values.partition(":")
        if table != table_v:
            continue
        for name, number in zip(names.split(), numbers.split()):
            try:
                counters[(table, name)] = int(number)
            except ValueError:
                continue
    return counters


def tcp_counters(tables: Mapping[tuple[str, str], int]) -> TcpCounters:
    """Keep the loss-recovery counters of :data:`TCP_FIELDS` (0 where the kernel lacks one)."""
    return TcpCounters(**{ours: int(tables.get(key, 0)) for key, ours in TCP_FIELDS.items()})


def _run_in(namespace: str, *argv: str) -> str:
    # A counter that cannot be read is left at 0 rather than failing a measured run: the
    # counters explain a run, they are not the measurement.
    result = subprocess.run(["ip", "netns", "exec", namespace, *argv], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else ""


def read_host_counters(namespace: str, bridge_namespace: str, port: str) -> HostLinkCounters:
    """Read a host's counters: ``eth0``'s shaper in ``namespace``, the bridge ``port``'s shaper
    in ``bridge_namespace``, and TCP's counters as the host's namespace sees them."""
    tables = parse_proc_net(_run_in(namespace, "cat", "/proc/net/snmp"))
    tables.update(parse_proc_net(_run_in(namespace, "cat", "/proc/net/netstat")))
    return HostLinkCounters(
        egress=parse_qdisc_stats(_run_in(namespace, "tc", "-s", "qdisc", "show", "dev", "eth0")),
        ingress=parse_qdisc_stats(_run_in(bridge_namespace, "tc", "-s", "qdisc", "show", "dev", port)),
        tcp=tcp_counters(tables))
