"""The physical ceiling of a calibrated rate: what TCP payload can carry on the run's link.

A rate estimate above it is a bug of the estimate (an incomplete stream's bytes over a cut
span, a step whose bytes did not all cross the link in the span), not a fast link, so
calibration refuses it unless the caller accepts it (docs/calibration.md §4.6).

The link is what the run records (``run.json`` ``link``: the lab writes its shaper there) or
what the caller gives. Each full-size segment carries ``mss`` bytes of payload and costs
``mss + TCP_IP_HEADER_BYTES + L2_HEADER_BYTES`` bytes of the link's rate; a shaper with a
bucket lets its first bytes go faster than its rate, so the fastest a step of N payload
bytes can cross is what the buckets and rates allow for N's wire bytes.
"""

from __future__ import annotations

import dataclasses
import math
import os

from tfbase.errors import InputError
from tfbase.units import MAX_RATE_BPS, MIN_RATE_BPS, format_rate

# IPv4 (20) + TCP (20) + the timestamps option (12) Linux sends on every segment. IPv6, or
# more options, cost more: a smaller payload fraction, so this overhead gives the higher ceiling.
TCP_IP_HEADER_BYTES = 52
# The Ethernet header, as a qdisc (tbf) counts a packet; the wire adds preamble, FCS and the
# inter-frame gap (24 bytes more), which only lowers the ceiling.
L2_HEADER_BYTES = 14
MAX_BUCKET_BYTES = 1 << 40
# A rate is flagged when above its ceiling by more than this: the stamps that time it (a
# capture's, iperf3's test start and end) are not exact, and a step on a shaped link can come
# within a percent of what the bucket allows (the lab's tiny model at 100 Mbit/s: 0.7% below).
CEILING_TOLERANCE = 0.01
# ... and when the time it implies is shorter than the fastest possible by more than this. A
# capture's stamps are taken in the kernel's receive path, which a loaded host runs late by a
# millisecond or more: on the lab's tiny model (a 38 ms step of 548 kB at 100 Mbit/s, at the
# bucket's limit) that alone moves the busy rate by a few percent, where a cut or incomplete
# stream (the estimates this check is for) moves it by far more than 2 ms.
STAMP_ERROR_S = 0.002


class RateAboveCeilingError(InputError):
    """A calibrated rate above what TCP payload can carry on the run's link.

    ``direction``, ``what`` (``busy rate``, ``iperf3 rate``), ``rate_Bps`` and ``ceiling_Bps``
    say which; ``finding`` says it in words, naming both rates and the link; the message adds
    the capture file and how to accept it.
    """

    def __init__(self, source: str | os.PathLike | None, problem: str, direction: str = "", what: str = "",
                 rate_Bps: float = 0.0, ceiling_Bps: float = 0.0, finding: str = ""):
        super().__init__(source, problem)
        self.direction, self.what, self.rate_Bps, self.ceiling_Bps = direction, what, rate_Bps, ceiling_Bps
        self.finding = finding or problem

    def __reduce__(self):
        return (type(self), (self.source, self.problem, self.direction, self.what, self.rate_Bps, self.ceiling_Bps,
                             self.finding))


@dataclasses.dataclass(frozen=True)
class Link:
    """A link's rate in bytes/s on the wire; with a shaper, its bucket (``burst_bytes`` beyond
    the rate) and its peak rate with that rate's own bucket (tbf's ``peakrate`` and ``mtu``)."""

    rate_Bps: float
    source: str
    burst_bytes: int = 0
    peak_rate_Bps: float | None = None
    peak_burst_bytes: int = 0
    buffer_bytes: int | None = None  # what its queue holds before it drops (None: not known)

    def fastest_s(self, wire_bytes: float) -> float:
        """The least time ``wire_bytes`` take, starting with full buckets (0: the buckets hold them)."""
        times = [(wire_bytes - self.burst_bytes) / self.rate_Bps]
        if self.peak_rate_Bps is not None:
            times.append((wire_bytes - self.peak_burst_bytes) / self.peak_rate_Bps)
        return max(0.0, *times)

    def to_json(self) -> dict:
        return {"rate_Bps": self.rate_Bps, "burst_bytes": self.burst_bytes, "peak_rate_Bps": self.peak_rate_Bps,
                "peak_burst_bytes": self.peak_burst_bytes,
                **({"buffer_bytes": self.buffer_bytes} if self.buffer_bytes is not None else {}), "source": self.source}


def payload_fraction(mss_bytes: int | None) -> float:
    """The share of the link's bytes a full-size segment's payload is (1 when the MSS is unknown)."""
    if not mss_bytes:
        return 1.0
    return mss_bytes / (mss_bytes + TCP_IP_HEADER_BYTES + L2_HEADER_BYTES)


def ceiling_Bps(link: Link, mss_bytes: int | None, payload_bytes: float) -> float:
    """The highest average rate ``payload_bytes`` of TCP payload can cross ``link`` at
    (``inf`` when the buckets hold them all)."""
    seconds = link.fastest_s(payload_bytes / payload_fraction(mss_bytes))
    return payload_bytes / seconds if seconds > 0 else math.inf


def link_from_run(run: dict, path: str | os.PathLike) -> Link | None:
    """``run.json``'s ``link`` record (docs/formats.md §2.1), or ``None`` when it has none."""
    record = run.get("link")
    if record is None:
        return None
    if not isinstance(record, dict):
        raise InputError(path, f"link must be an object, not {record!r:.60}")

    def rate(key: str, required: bool) -> float | None:
        value = record.get(key)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not MIN_RATE_BPS <= value / 8 <= MAX_RATE_BPS:
            raise InputError(path, f"link.{key} must be a rate in bit/s from 1 kbit/s to 100 Tbit/s, not {value!r}")
        return value / 8

    def size(key: str) -> int:
        value = record.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BUCKET_BYTES:
            raise InputError(path, f"link.{key} must be a whole number of bytes from 0 to 2^40, not {value!r}")
        return value

    source = record.get("source", "run.json")
    buffer = record.get("buffer_bytes")
    if buffer is not None and (isinstance(buffer, bool) or not isinstance(buffer, int)
                               or not 1 <= buffer <= MAX_BUCKET_BYTES):
        raise InputError(path, f"link.buffer_bytes must be a whole number of bytes from 1 to 2^40, not {buffer!r}")
    return Link(rate("rate_bit_s", True), str(source), size("burst_bytes"), rate("peak_rate_bit_s", False),
                size("peak_burst_bytes"), buffer)


def check_ceiling(link: Link, mss_bytes: int | None, rates: list[tuple[str, str, float, float]],
                  capture: str | os.PathLike, allow: bool) -> dict:
    """Hold each ``(direction, what, rate in bytes/s, payload bytes it averaged over)`` to its
    ceiling on ``link``. Returns the record CLUSTER.json keeps (``link_ceiling``); raises
    :class:`RateAboveCeilingError` for the rate furthest above its ceiling unless ``allow``."""
    checks, worst = [], None
    for direction, what, rate, payload_bytes in rates:
        ceiling = ceiling_Bps(link, mss_bytes, payload_bytes)
        above = rate > ceiling * (1 + CEILING_TOLERANCE) and \
            payload_bytes / ceiling - payload_bytes / rate > STAMP_ERROR_S
        checks.append({"direction": direction, "rate": what, "rate_Bps": rate, "payload_bytes": payload_bytes,
                       "ceiling_Bps": ceiling if math.isfinite(ceiling) else None, "above": above})
        if above and (worst is None or rate / ceiling > worst[2] / worst[3]):
            worst = (direction, what, rate, ceiling)
    if worst is not None and not allow:
        direction, what, rate, ceiling = worst
        finding = (f"the {direction} {what}, {format_rate(rate)}, is above {format_rate(ceiling)}, what TCP payload "
                   f"can carry on the run's {format_rate(link.rate_Bps)} link ({link.source}; MSS "
                   f"{mss_bytes or 'unknown'})")
        raise RateAboveCeilingError(capture, f"{finding}; allow_above_ceiling accepts it", direction, what, rate,
                                    ceiling, finding)
    return {"link": link.to_json(), "mss_bytes": mss_bytes, "payload_fraction": payload_fraction(mss_bytes),
            "tolerance": CEILING_TOLERANCE, "checks": checks, "above": worst is not None, "allowed": allow}
