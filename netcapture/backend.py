"""What a decoding backend hands over to :func:`netcapture.capture.assemble`: the HTTP/2 frames of
a capture, and what the backend noticed on the way. Both backends (:mod:`netcapture.scapy_backend`,
:mod:`netcapture.tshark_backend`) return one; the capture module builds the records from it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from netcapture.http2 import Http2Frame
from netcapture.tcp import TcpDirectionStats, TcpGap


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
    warnings: tuple[str, ...] = ()
    other_tcp_connections: int = 0
    non_tcp_packets: int = 0
