"""TCP reassembly, one byte stream per direction of each connection.

Packets are taken in file order, which on loopback is not strictly time order. For each
direction, :class:`DirectionReassembler` turns segments into in-order byte deliveries:

- a segment at the next expected offset is delivered at once, followed by any buffered
  out-of-order segments it makes contiguous;
- a segment beyond the next offset (out of order) is buffered;
- bytes already delivered (retransmissions, keep-alives, overlapping repacketised
  segments) are dropped and counted in :attr:`TcpDirectionStats.duplicate_bytes`;
- a hole that never fills is a *gap* (:class:`TcpGap`, with its byte count): at the end
  of the capture, or as soon as more than ``max_buffered_bytes`` wait behind it, so that
  memory stays bounded when a capture dropped a packet for good. Delivery then resumes
  after the gap, and the consumer is told (its framing is lost).

Each delivery carries the number and time of the packet being processed, i.e. the packet
that completed those bytes: this is the map from byte offset to capture time, and it is
how every HTTP/2 frame gets the time of the packet that completed it (as Wireshark does).

Capture times need not grow along a direction: on namespace/veth captures a packet later in
the file (and in sequence) was seen stamped up to 7 ms earlier than the one before it.
Times are kept as captured; :attr:`TcpDirectionStats.time_reversals` counts such packets.

Offsets count payload bytes from the first byte after the SYN (or, with no SYN in the
capture, from the first segment seen), unwrapped past 2**32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from netcapture.layers import TcpSegment

DEFAULT_MAX_BUFFERED_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class Endpoint:
    ip: str
    port: int

    def __str__(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"


@dataclasses.dataclass(frozen=True, order=True)
class ConnectionId:
    """A TCP connection by its 4-tuple, with the HTTP/2 client (the side that connected) first."""

    client_ip: str
    client_port: int
    server_ip: str
    server_port: int

    @property
    def client(self) -> Endpoint:
        return Endpoint(self.client_ip, self.client_port)

    @property
    def server(self) -> Endpoint:
        return Endpoint(self.server_ip, self.server_port)

    def __str__(self) -> str:
        return f"{self.client} -> {self.server}"


@dataclasses.dataclass(frozen=True)
class TcpGap:
    """Bytes of one direction that the capture never saw.

    ``offset`` is where the gap starts in the direction's byte stream, ``missing_bytes``
    its length; ``packet_number`` the packet at which reassembly gave up waiting.
    """

    src: Endpoint
    dst: Endpoint
    offset: int
    missing_bytes: int
    packet_number: int


@dataclasses.dataclass(frozen=True)
class TcpDirectionStats:
    """What reassembly saw in one direction."""

    src: Endpoint
    dst: Endpoint
    segments: int
    delivered_bytes: int
    duplicate_bytes: int
    out_of_order_segments: int
    gaps: tuple[TcpGap, ...]
    syn_seen: bool
    fin_seen: bool
    time_reversals: int = 0  # packets timestamped earlier than a previous one of this direction
    max_time_reversal_ns: int = 0


# deliver(data, offset, packet_number, time_ns); gap(offset, missing_bytes, packet_number)
Deliver = Callable[[bytes, int, int, int], None]
OnGap = Callable[[int, int, int], None]


class DirectionReassembler:
    """Reassemble one direction's byte stream; see the module docstring."""

    def __init__(self, src: Endpoint, dst: Endpoint, deliver: Deliver, on_gap: OnGap | None = None,
                 max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES):
        self.src, self.dst = src, dst
        self._deliver = deliver
        self._on_gap = on_gap
        self._max_buffered = max_buffered_bytes
        self._base: int | None = None  # sequence number of offset 0
        self._next = 0  # offset of the next byte to deliver
        self._pending: dict[int, bytes] = {}  # offset -> payload, beyond a hole
        self._pending_bytes = 0
        self.segments = 0
        self.duplicate_bytes = 0
        self.out_of_order_segments = 0
        self.gaps: list[TcpGap] = []
        self.syn_seen = False
        self.fin_seen = False
        self._latest_ns = 0
        self.time_reversals = 0
        self.max_time_reversal_ns = 0

    @property
    def delivered_bytes(self) -> int:
        """How far the direction has been passed on in order: bytes delivered plus gaps skipped."""
        return self._next

    def add(self, segment: TcpSegment, packet_number: int, time_ns: int) -> None:
        """Take one segment of this direction, delivering whatever it makes contiguous."""
        self.segments += 1
        if time_ns < self._latest_ns:
            self.time_reversals += 1
            self.max_time_reversal_ns = max(self.max_time_reversal_ns, self._latest_ns - time_ns)
        else:
            self._latest_ns = time_ns
        if segment.syn:
            self.syn_seen = True
            if self._base is None:
                self._base = (segment.seq + 1) & 0xFFFFFFFF
            seq = (segment.seq + 1) & 0xFFFFFFFF  # data on a SYN follows its sequence number
        else:
            seq = segment.seq
        if segment.fin:
            self.fin_seen = True
        payload = segment.payload
        if not payload:
            return
        if self._base is None:
            self._base = seq
        offset = self._offset(seq)
        end = offset + len(payload)
        if end <= self._next:
            self.duplicate_bytes += len(payload)
            return
        if offset < self._next:
            self.duplicate_bytes += self._next - offset
            payload, offset = payload[self._next - offset:], self._next
        if offset > self._next:
            self._buffer(offset, payload, packet_number, time_ns)
            return
        self._emit(payload, packet_number, time_ns)
        self._drain(packet_number, time_ns)

    def finish(self, packet_number: int, time_ns: int) -> None:
        """End of capture: whatever still waits behind a hole becomes a gap, then is delivered."""
        while self._pending:
            self._skip_gap(packet_number)
            self._drain(packet_number, time_ns)

    def stats(self) -> TcpDirectionStats:
        """What reassembly saw in this direction: segments, bytes, duplicates, gaps, flags."""
        return TcpDirectionStats(self.src, self.dst, self.segments, self._next, self.duplicate_bytes,
                                 self.out_of_order_segments, tuple(self.gaps), self.syn_seen, self.fin_seen,
                                 self.time_reversals, self.max_time_reversal_ns)

    def _offset(self, seq: int) -> int:
        # The offset nearest to the next expected one: handles wrap-around and old segments.
        delta = (seq - self._base - self._next) & 0xFFFFFFFF
        if delta >= 1 << 31:
            delta -= 1 << 32
        return self._next + delta

    def _buffer(self, offset: int, payload: bytes, packet_number: int, time_ns: int) -> None:
        self.out_of_order_segments += 1
        previous = self._pending.get(offset)
        if previous is not None:
            if len(previous) >= len(payload):
                self.duplicate_bytes += len(payload)
                return
            self.duplicate_bytes += len(previous)
            self._pending_bytes -= len(previous)
        self._pending[offset] = payload
        self._pending_bytes += len(payload)
        while self._pending_bytes > self._max_buffered:
            # The hole will not fill: skip it rather than buffer without bound.
            self._skip_gap(packet_number)
            self._drain(packet_number, time_ns)

    def _emit(self, payload: bytes, packet_number: int, time_ns: int) -> None:
        offset = self._next
        self._next += len(payload)
        self._deliver(payload, offset, packet_number, time_ns)

    def _drain(self, packet_number: int, time_ns: int) -> None:
        while self._pending:
            ready = [o for o in self._pending if o <= self._next]
            if not ready:
                return
            for offset in sorted(ready):
                payload = self._pending.pop(offset)
                self._pending_bytes -= len(payload)
                if offset + len(payload) <= self._next:
                    self.duplicate_bytes += len(payload)
                    continue
                if offset < self._next:
                    self.duplicate_bytes += self._next - offset
                    payload = payload[self._next - offset:]
                self._emit(payload, packet_number, time_ns)

    def _skip_gap(self, packet_number: int) -> None:
        start = min(self._pending)
        gap = TcpGap(self.src, self.dst, self._next, start - self._next, packet_number)
        self.gaps.append(gap)
        if self._on_gap is not None:
            self._on_gap(self._next, start - self._next, packet_number)
        self._next = start
