"""Read ``iperf3 -J`` results: link bandwidth and RTT, alone or over repeated runs.

One file (:func:`read_iperf`): the receiver's rate ``end.sum_received.bits_per_second``
(what the link delivered; the bandwidth to calibrate with), the sender's
``end.sum_sent.bits_per_second`` and retransmits, and each stream's
``end.streams[i].sender`` RTT (iperf3 reports microseconds). A result whose JSON has an
``error`` field (server busy, connection refused, interrupted test) raises
:class:`~netcapture.errors.IperfError` naming the file and quoting iperf3's message.

Several files of the same measurement (:func:`summarise_iperf`): the median, minimum and
maximum of each rate and the relative spread ``(max - min) / median``; the median is what a
calibration should use, the spread says how much to trust it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from pathlib import Path
from typing import Iterable

from netcapture.errors import IperfError


@dataclasses.dataclass(frozen=True)
class IperfStream:
    """One TCP stream of a test, as its sender saw it (RTTs in microseconds)."""

    mean_rtt_us: int | None
    min_rtt_us: int | None
    max_rtt_us: int | None
    retransmits: int | None


@dataclasses.dataclass(frozen=True)
class IperfResult:
    """One ``iperf3 -J`` test (TCP)."""

    path: str
    received_bits_per_s: float
    sent_bits_per_s: float
    duration_s: float
    retransmits: int | None
    reverse: bool
    congestion_control: str | None
    streams: tuple[IperfStream, ...]

    @property
    def received_bytes_per_s(self) -> float:
        return self.received_bits_per_s / 8

    @property
    def mean_rtt_us(self) -> float | None:
        rtts = [s.mean_rtt_us for s in self.streams if s.mean_rtt_us is not None]
        return statistics.fmean(rtts) if rtts else None


@dataclasses.dataclass(frozen=True)
class RateSummary:
    """Median, minimum, maximum and relative spread of one rate over repeated runs (bit/s)."""

    median: float
    minimum: float
    maximum: float

    @property
    def spread(self) -> float:
        return (self.maximum - self.minimum) / self.median if self.median else 0.0

    @classmethod
    def of(cls, values: list[float]) -> "RateSummary":
        return cls(statistics.median(values), min(values), max(values))


@dataclasses.dataclass(frozen=True)
class IperfSummary:
    runs: tuple[IperfResult, ...]
    received_bits_per_s: RateSummary
    sent_bits_per_s: RateSummary
    median_rtt_us: float | None

    @property
    def received_bytes_per_s(self) -> float:
        """The median received rate in bytes/s: the bandwidth B of the link."""
        return self.received_bits_per_s.median / 8


def _get(data: dict, path: Path, *keys: str):
    node = data
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            raise IperfError(path, f"no {'.'.join(keys)} in the iperf3 JSON (a TCP test run with iperf3 -J?)")
        node = node[key]
    return node


def _number(value, path: Path, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise IperfError(path, f"{what} is not a number: {value!r}")
    return float(value)


def read_iperf(path: str | os.PathLike) -> IperfResult:
    """Read one ``iperf3 -J`` output file; see the module docstring."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise IperfError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IperfError(path, f"not JSON ({exc.msg} at line {exc.lineno}): was iperf3 run with -J?") from None
    if not isinstance(data, dict):
        raise IperfError(path, "not an iperf3 -J result (the JSON is not an object)")
    if data.get("error"):
        raise IperfError(path, f"iperf3 reported an error: {data['error']}")
    received = _number(_get(data, path, "end", "sum_received", "bits_per_second"), path,
                       "end.sum_received.bits_per_second")
    sent = _number(_get(data, path, "end", "sum_sent", "bits_per_second"), path, "end.sum_sent.bits_per_second")
    sum_sent = data["end"]["sum_sent"]
    streams = []
    for stream in data["end"].get("streams") or ():
        sender = stream.get("sender") or {}
        streams.append(IperfStream(sender.get("mean_rtt"), sender.get("min_rtt"), sender.get("max_rtt"),
                                   sender.get("retransmits")))
    test_start = (data.get("start") or {}).get("test_start") or {}
    return IperfResult(
        path=str(path), received_bits_per_s=received, sent_bits_per_s=sent,
        duration_s=float(sum_sent.get("seconds") or 0.0), retransmits=sum_sent.get("retransmits"),
        reverse=bool(test_start.get("reverse")), congestion_control=data["end"].get("sender_tcp_congestion"),
        streams=tuple(streams),
    )


def summarise_iperf(paths: Iterable[str | os.PathLike]) -> IperfSummary:
    """Median and spread over repeated ``iperf3 -J`` runs; every file must be readable."""
    runs = tuple(read_iperf(p) for p in paths)
    if not runs:
        raise IperfError(None, "no iperf3 result given")
    rtts = [r.mean_rtt_us for r in runs if r.mean_rtt_us is not None]
    return IperfSummary(runs, RateSummary.of([r.received_bits_per_s for r in runs]),
                        RateSummary.of([r.sent_bits_per_s for r in runs]),
                        statistics.median(rtts) if rtts else None)
