"""Read ``iperf3 -J`` results: link bandwidth and RTT, alone or over repeated runs.

One file (:func:`read_iperf`): the receiver's rate ``end.sum_received.bits_per_second``
(what the link delivered; the bandwidth to calibrate with), the sender's
``end.sum_sent.bits_per_second`` and retransmits, each stream's ``end.streams[i].sender``
RTT (iperf3 reports microseconds), and the TCP MSS (``start.tcp_mss_default``). A result whose JSON has an
``error`` field (server busy, connection refused, interrupted test) raises
:class:`~netcapture.errors.IperfError` naming the file and quoting iperf3's message.

Several files of the same measurement (:func:`summarise_iperf`): the median, minimum and
maximum of each rate and the relative spread ``(max - min) / median``; the median is what a
calibration should use, the spread says how much to trust it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Iterable
from pathlib import Path

from netcapture.errors import IperfError


@dataclasses.dataclass(frozen=True)
class IperfStream:
    """One TCP stream of a test, as its sender saw it (RTTs in microseconds)."""

    mean_rtt_us: int | None
    min_rtt_us: int | None
    max_rtt_us: int | None
    retransmits: int | None
    max_snd_cwnd_bytes: int | None = None  # the sender's largest congestion window (0 or absent: not reported)


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
    mss_bytes: int | None = None  # start.tcp_mss (set with -M) or start.tcp_mss_default

    @property
    def received_bytes_per_s(self) -> float:
        return self.received_bits_per_s / 8

    @property
    def mean_rtt_us(self) -> float | None:
        rtts = [s.mean_rtt_us for s in self.streams if s.mean_rtt_us is not None]
        return statistics.fmean(rtts) if rtts else None

    @property
    def max_snd_cwnd_bytes(self) -> int | None:
        """The largest congestion window a stream's sender reported (the client's streams only:
        with ``-R`` the sender is the server, which reports none)."""
        windows = [s.max_snd_cwnd_bytes for s in self.streams if s.max_snd_cwnd_bytes]
        return max(windows) if windows else None


@dataclasses.dataclass(frozen=True)
class RateSummary:
    """Median, minimum, maximum and relative spread of one rate over repeated runs (bit/s)."""

    median: float
    minimum: float
    maximum: float

    @property
    def spread(self) -> float:
        """(max - min) / median of the runs: 0 for a steady link."""
        return (self.maximum - self.minimum) / self.median if self.median else 0.0

    @classmethod
    def of(cls, values: list[float]) -> RateSummary:
        """Median, minimum and maximum of some runs' rates."""
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
        raise IperfError(path, f"{what} is not a number: {value!r:.60}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the range of a float
        number = math.inf
    if not math.isfinite(number):
        raise IperfError(path, f"{what} is not a finite number: {value!r:.60}")
    return number


def _optional_number(value, path: Path, what: str) -> float | int | None:
    """``value`` if it is a number or absent (``None``); :class:`IperfError` otherwise."""
    if value is not None:
        _number(value, path, what)
    return value


def _object(value, path: Path, what: str) -> dict:
    """``value`` if it is a JSON object, ``{}`` if absent; :class:`IperfError` otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise IperfError(path, f"{what} is not an object: {value!r:.60}")
    return value


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
    except RecursionError:
        raise IperfError(path, "not an iperf3 -J result (JSON nested too deeply)") from None
    if not isinstance(data, dict):
        raise IperfError(path, "not an iperf3 -J result (the JSON is not an object)")
    if data.get("error"):
        raise IperfError(path, f"iperf3 reported an error: {data['error']!s:.200}")
    received = _number(_get(data, path, "end", "sum_received", "bits_per_second"), path,
                       "end.sum_received.bits_per_second")
    sent = _number(_get(data, path, "end", "sum_sent", "bits_per_second"), path, "end.sum_sent.bits_per_second")
    end, sum_sent = data["end"], data["end"]["sum_sent"]
    streams = end.get("streams") or []
    if not isinstance(streams, list):
        raise IperfError(path, f"end.streams is not a list: {streams!r:.60}")
    parsed = []
    for number, stream in enumerate(streams):
        sender = _object(_object(stream, path, f"end.streams[{number}]").get("sender"), path,
                         f"end.streams[{number}].sender")
        parsed.append(IperfStream(*(_optional_number(sender.get(key), path, f"end.streams[{number}].sender.{key}")
                                    for key in ("mean_rtt", "min_rtt", "max_rtt", "retransmits",
                                                "max_snd_cwnd"))))
    start = _object(data.get("start"), path, "start")
    test_start = _object(start.get("test_start"), path, "start.test_start")
    mss = start.get("tcp_mss") or start.get("tcp_mss_default")
    congestion = end.get("sender_tcp_congestion")
    return IperfResult(
        path=str(path), received_bits_per_s=received, sent_bits_per_s=sent,
        duration_s=float(_optional_number(sum_sent.get("seconds"), path, "end.sum_sent.seconds") or 0.0),
        retransmits=_optional_number(sum_sent.get("retransmits"), path, "end.sum_sent.retransmits"),
        reverse=bool(test_start.get("reverse")), congestion_control=congestion if isinstance(congestion, str) else None,
        streams=tuple(parsed), mss_bytes=max(0, int(_optional_number(mss, path, "start.tcp_mss_default") or 0)) or None,
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
