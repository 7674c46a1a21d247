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
capture, from the lowest sequence number among the direction's first segments), unwrapped
past 2**32. Until a SYN is seen, the first ``START_HOLD_SEGMENTS`` data segments of a
direction are held back: a capture that reorders packets may show the SYN, or earlier data,
after later data, and delivering first would fix offset 0 at the wrong byte. Held segments
are replayed with their own packet numbers and times, so a clean capture decodes the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from netcapture.layers import TcpSegment

DEFAULT_MAX_BUFFERED_BYTES = 64 << 20
# Reordering seen in real captures spans a few packets; a SYN later than this many data
# segments of its own direction is not the start of the stream they belong to.
START_HOLD_SEGMENTS = 32
_NO_FILLER = -1  # the time of "no packet": buffered segments drained after a gap keep their own stamps


@dataclasses.dataclass(frozen=True)
class Endpoint:
    ip: str
    port: int

    def __str__(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"


@dataclasses.dataclass(frozen=True, order=True)
class ConnectionId:
    """A TCP connection by its 4-tuple, with the HTTP/2 client (the side that connected) first.

    ``instance`` tells apart connections that reused one 4-tuple within a capture (0 for the
    first, then 1, 2, ...).
    """

    client_ip: str
    client_port: int
    server_ip: str
    server_port: int
    instance: int = 0

    @property
    def client(self) -> Endpoint:
        return Endpoint(self.client_ip, self.client_port)

    @property
    def server(self) -> Endpoint:
        return Endpoint(self.server_ip, self.server_port)

    def __str__(self) -> str:
        return f"{self.client} -> {self.server}" + (f" (#{self.instance + 1} on this 4-tuple)" if self.instance else "")


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
        # offset -> (payload, packet number, time), beyond a hole
        self._pending: dict[int, tuple[bytes, int, int]] = {}
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
        self._held: list[tuple[TcpSegment, int, int]] | None = []  # until the stream's start is known

    @property
    def delivered_bytes(self) -> int:
        """How far the direction has been passed on in order: bytes delivered plus gaps skipped."""
        return self._next

    @property
    def latest_time_ns(self) -> int:
        """The latest capture time among the segments taken so far (0 before any)."""
        return self._latest_ns

    @property
    def started(self) -> bool:
        """Whether offset 0 of this direction is known (a SYN, or the held segments replayed)."""
        return self._base is not None

    def offset_of(self, seq: int) -> int | None:
        """The stream offset of sequence number ``seq`` (nearest to the next expected byte), or
        ``None`` before the stream's start is known."""
        return None if self._base is None else self._offset(seq)

    def add(self, segment: TcpSegment, packet_number: int, time_ns: int) -> None:
        """Take one segment of this direction, delivering whatever it makes contiguous."""
        if self._held is not None:
            if segment.syn:
                self._release(segment, packet_number, time_ns)
                return
            if segment.payload:
                self._held.append((segment, packet_number, time_ns))
                if len(self._held) >= START_HOLD_SEGMENTS:
                    self._release(None, packet_number, time_ns)
                return
        self._add(segment, packet_number, time_ns)  # no data to place: flags only

    def _release(self, syn: TcpSegment | None, packet_number: int, time_ns: int) -> None:
        """The start is known: from ``syn``, or else the lowest held sequence number; replay."""
        held, self._held = self._held, None
        if syn is not None:
            self._add(syn, packet_number, time_ns)
        elif held:
            first = held[0][0].seq
            # The lowest sequence number, wrap-aware: the one the others are all ahead of.
            self._base = min((s.seq for s, _, _ in held), key=lambda seq: (seq - first + (1 << 31)) & 0xFFFFFFFF)
        for segment, number, stamp in held:
            self._add(segment, number, stamp)

    def _add(self, segment: TcpSegment, packet_number: int, time_ns: int) -> None:
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
        if self._held is not None:
            self._release(None, packet_number, time_ns)
        while self._pending:
            self._skip_gap(packet_number)
            self._drain(0, _NO_FILLER)

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
            if len(previous[0]) >= len(payload):
                self.duplicate_bytes += len(payload)
                return
            self.duplicate_bytes += len(previous[0])
            self._pending_bytes -= len(previous[0])
        self._pending[offset] = (payload, packet_number, time_ns)
        self._pending_bytes += len(payload)
        while self._pending_bytes > self._max_buffered:
            # The hole will not fill: skip it rather than buffer without bound.
            self._skip_gap(packet_number)
            self._drain(0, _NO_FILLER)

    def _emit(self, payload: bytes, packet_number: int, time_ns: int) -> None:
        offset = self._next
        self._next += len(payload)
        self._deliver(payload, offset, packet_number, time_ns)

    def _drain(self, packet_number: int, time_ns: int) -> None:
        """Deliver buffered segments made contiguous by the packet ``(packet_number, time_ns)``.

        Each takes the filler's packet number (its place in the file) and the later of its own
        time and the filler's: the bytes were there from their own arrival, usable from the
        filler's. In a capture whose file order is time order that is the filler's time; where
        the file order was shuffled, the times stay those of the ordered capture. After a gap
        (no filler) each keeps its own packet number and time.
        """
        while self._pending:
            ready = [o for o in self._pending if o <= self._next]
            if not ready:
                return
            for offset in sorted(ready):
                payload, own_number, own_ns = self._pending.pop(offset)
                self._pending_bytes -= len(payload)
                if offset + len(payload) <= self._next:
                    self.duplicate_bytes += len(payload)
                    continue
                if offset < self._next:
                    self.duplicate_bytes += self._next - offset
                    payload = payload[self._next - offset:]
                if time_ns == _NO_FILLER:
                    self._emit(payload, own_number, own_ns)
                else:
                    self._emit(payload, packet_number, max(own_ns, time_ns))

    def _skip_gap(self, packet_number: int) -> None:
        start = min(self._pending)
        gap = TcpGap(self.src, self.dst, self._next, start - self._next, packet_number)
        self.gaps.append(gap)
        if self._on_gap is not None:
            self._on_gap(self._next, start - self._next, packet_number)
        self._next = start
