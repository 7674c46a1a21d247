"""What a decoding backend hands over to :func:`netcapture.capture.assemble`: the HTTP/2 frames of
a capture, and what the backend noticed on the way. Both backends (:mod:`netcapture.scapy_backend`,
:mod:`netcapture.tshark_backend`) return one; the capture module builds the records from it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from netcapture.http2 import Http2Frame
from netcapture.tcp import ConnectionId, Endpoint, TcpDirectionStats, TcpGap


@dataclasses.dataclass(frozen=True)
class DirectionLoss:
    """What one direction of an HTTP/2 connection lost to a damaged capture.

    ``decoded_bytes`` were cut into intact frames; ``lost_bytes`` were never captured (TCP
    gaps); ``skipped_bytes`` were captured but could not be used: the rest of a frame the
    capture cut, bytes before the next frame boundary found. ``unfinished_bytes``: the frame
    in progress when the capture ended (not counted as lost). ``damaged_frames`` came out
    with their header only; ``resyncs`` counts the times decoding had to look for a frame
    boundary. ``mid_stream_start``: the capture began after the connection opened.
    """

    connection: ConnectionId
    from_client: bool
    src: Endpoint
    dst: Endpoint
    decoded_bytes: int
    lost_bytes: int
    skipped_bytes: int
    gaps: int = 0
    damaged_frames: int = 0
    resyncs: int = 0
    mid_stream_start: bool = False
    unfinished_bytes: int = 0  # the frame the capture ended inside: the capture's end, not a loss

    @property
    def total_bytes(self) -> int:
        return self.decoded_bytes + self.lost_bytes + self.skipped_bytes + self.unfinished_bytes

    @property
    def lost_fraction(self) -> float:
        """Bytes lost or skipped over all the direction's bytes (a frame the capture ended inside
        is not a loss: every capture of a running job ends somewhere)."""
        total = self.total_bytes
        return (self.lost_bytes + self.skipped_bytes) / total if total else 0.0

    def describe(self) -> str:
        """One line: where, how much was lost, and what decoding did about it."""
        parts = [f"{self.lost_bytes} bytes never captured in {self.gaps} TCP gap(s)"] if self.lost_bytes else []
        if self.skipped_bytes:
            parts.append(f"{self.skipped_bytes} captured bytes not decodable")
        return (f"{self.src} -> {self.dst}: {', '.join(parts) or 'no bytes lost'} "
                f"({100 * self.lost_fraction:.2f}% of {self.total_bytes} bytes); {self.damaged_frames} frame(s) "
                f"damaged, decoding resumed at a frame boundary {self.resyncs} time(s)")


@dataclasses.dataclass(frozen=True)
class BackendResult:
    """What a backend hands over: the frames, and what it noticed on the way."""

    path: Path
    backend: str
    packets: int
    file_format: str
    truncated: bool
    kernel_drops: int | None
    frames: tuple[Http2Frame, ...]
    tcp: tuple[TcpDirectionStats, ...] = ()
    gaps: tuple[TcpGap, ...] = ()
    losses: tuple[DirectionLoss, ...] = ()
    damaged_streams: frozenset[tuple[ConnectionId, int]] = frozenset()  # lost frames the records cannot show
    warnings: tuple[str, ...] = ()
    other_tcp_connections: int = 0
    non_tcp_packets: int = 0
