"""The default backend: decode a capture in this process.

Two paths read the packets, with the same result (``bench/decode_check.py``,
``tests/test_netcapture_fastpath.py``):

- the fast path (:mod:`netcapture.fastpath`), for a pcap or pcapng file, plain or gzip, of
  the common link types: compiled kernels index records and headers in place
  (:mod:`netcapture.pcapindex`, :mod:`netcapture.pcapbatch`), acknowledgements and
  in-sequence data of HTTP/2 connections go straight into reassembly, every other packet
  into :meth:`_Decoder.segment`;
- the reference path (``decode(fast=False)``, and whatever the fast path does not take:
  other link types, the tail after a cut or corrupt record, a damaged gzip or pcapng file):
  packets from :mod:`netcapture.pcap` (scapy's raw pcap/pcapng readers), headers from
  :mod:`netcapture.layers` (a ``struct`` decoder for the common link types, scapy's
  dissectors for the rest), one at a time into :meth:`_Decoder.segment`.

TCP is reassembled by :mod:`netcapture.tcp`, HTTP/2 framed and HPACK-decoded by
:mod:`netcapture.http2` (a large DATA frame's payload kept only where the gRPC layer reads
it, :meth:`_Decoder.body_needs`), gRPC messages split by :mod:`netcapture.grpc`.

Which connections are HTTP/2: those whose client (the side that sent the SYN, or else the
side whose byte stream starts so) opens with the 24-byte connection preface; and, in a
capture that began after the connection opened (no SYN, no preface), those whose bytes
hold a chain of plausible HTTP/2 frame headers (:func:`netcapture.http2.plausible_header`).
The client of such a connection is the side not on one of ``server_ports`` (without them:
the side on the higher port, the ephemeral one). Its header blocks refer to a dynamic
table the capture never showed, so its headers are decoded only as far as they can be.
With ``server_ports``, only connections to those ports are considered.

Bytes the server sends before the client's preface has been seen are held back (up to
``MAX_HELD_BYTES``) and decoded once the connection is known to be HTTP/2, with the
packet stamps they arrived with.

A TCP gap (bytes never captured) costs the frames it touches, no more
(:meth:`netcapture.http2.FrameSplitter.lose`): a frame whose header was captured comes out
damaged, and decoding goes on at the next frame boundary. A gRPC message cut by a gap is
not decoded, nor is the rest of its stream. :class:`netcapture.backend.DirectionLoss`
counts, per direction, the bytes decoded, lost, and skipped.

A 4-tuple used again (a SYN whose sequence number does not start the stream already seen,
or that comes after the stream's data; without a SYN, data far from the expected sequence
number after ``REUSE_IDLE_S`` of silence) starts a new connection, told apart by
:attr:`ConnectionId.instance`.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import os
import struct
from collections.abc import Iterable
from pathlib import Path

from netcapture.backend import BackendResult, DirectionLoss
from netcapture.errors import CorruptTail, MalformedFrame, TruncatedCapture
from netcapture.grpc import (
    MAX_KEEP_BYTES,
    MAX_KEPT_REQUEST_BYTES,
    RECV_TENSOR_PATH,
    GrpcDeframer,
    NeedCursor,
    describe_message,
    keep_bytes_for,
    looks_like_recv_tensor_request,
)
from netcapture.http2 import (
    CONTINUATION,
    DATA,
    FLAG_ACK,
    FLAG_END_STREAM,
    FLAG_PADDED,
    HEADERS,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    DirectionDecoder,
    FrameSplitter,
    Http2Frame,
    RawFrame,
    split_padding,
)
from netcapture.layers import ACK, SYN, TcpSegment, decode_tcp
from netcapture.pcap import PcapReader, check_snaplen
from netcapture.records import positional_maker
from netcapture.tcp import ConnectionId, DirectionReassembler, Endpoint, TcpDirectionStats, TcpGap

MAX_HELD_BYTES = 4 << 20
# The frames _Decoder._frame decodes itself when intact, and their fixed sizes (RFC 9113 §6).
_QUICK_TYPES = frozenset({DATA, HEADERS, CONTINUATION, WINDOW_UPDATE, PING, SETTINGS})
WINDOW_UPDATE_BYTES, PING_BYTES, SETTING_BYTES = 4, 8, 6
MAX_WINDOW_INCREMENT = (1 << 31) - 1
_SETTING = struct.Struct("!HI")  # identifier, value
_make_frame = positional_maker(Http2Frame)
# A capture that began mid-connection: the held bytes of either direction must show a chain of
# frame headers within this much, or the connection is not HTTP/2.
MID_STREAM_PROBE_BYTES = 256 << 10
# A 4-tuple is taken as reused without a SYN when data this far from the expected sequence
# number arrives after this much silence: no window is that large, no retransmission so late.
REUSE_SEQUENCE_JUMP_BYTES = 64 << 20
REUSE_IDLE_S = 1.0
EPHEMERAL_PORT_FLOOR = 32768  # Linux's default ip_local_port_range starts here


class _Direction:
    """One direction of a connection: reassembly, then (once HTTP/2) framing and decoding."""

    def __init__(self, connection: _Connection, src: Endpoint, dst: Endpoint):
        self.connection = connection
        self.src, self.dst = src, dst
        self.reassembler = DirectionReassembler(src, dst, self._on_bytes, self._on_gap)
        self.held_bytes = 0
        self.head = bytearray()  # the first bytes, to look for the preface
        self.splitter: FrameSplitter | None = None
        self.decoder: DirectionDecoder | None = None
        self.from_client = False
        self.broken = False  # a malformed frame: nothing after it can be trusted
        self.undecoded_bytes = 0
        self.gaps = 0
        self.deframers: dict[int, GrpcDeframer | None] = {}
        self.grpc_streams: set[int] = set()
        self.header_frames: set[int] = set()  # streams whose (intact) HEADERS this direction sent
        self.decoded_headers: set[int] = set()  # ... and whose header block could be decoded
        self.open_streams: set[int] = set()  # streams this direction has not ended
        self.header_facts: dict[int, tuple] = {}  # id(headers) -> (headers, path, has path, gRPC): _on_headers

    def _on_bytes(self, data: bytes, offset: int, packet_number: int, time_ns: int) -> None:
        self.connection.on_bytes(self, data, offset, packet_number, time_ns)

    def _on_gap(self, offset: int, missing_bytes: int, packet_number: int) -> None:
        self.gaps += 1
        self.connection.on_gap(self, missing_bytes, packet_number)

    def loss(self) -> DirectionLoss:
        splitter = self.splitter
        delivered = self.reassembler.delivered_bytes
        lost = sum(g.missing_bytes for g in self.reassembler.gaps)
        skipped = splitter.skipped_bytes if splitter else 0
        buffered = splitter.buffered_bytes if splitter else 0
        # Bytes waiting at the end: the frame the capture ended inside, when framing was on track.
        unfinished = buffered if splitter and splitter.synchronised and not self.broken else 0
        skipped += buffered - unfinished + self.undecoded_bytes
        return DirectionLoss(
            connection=self.connection.id, from_client=self.from_client, src=self.src, dst=self.dst,
            decoded_bytes=max(0, delivered - lost - skipped - unfinished), lost_bytes=lost,
            skipped_bytes=skipped, gaps=self.gaps,
            damaged_frames=splitter.damaged_frames if splitter else 0, resyncs=splitter.resyncs if splitter else 0,
            mid_stream_start=self.connection.mid_stream, unfinished_bytes=unfinished)


class _Connection:
    """Both directions of one TCP connection and whether it carries HTTP/2."""

    def __init__(self, backend: _Decoder, a: Endpoint, b: Endpoint, instance: int = 0):
        self.backend = backend
        self.instance = instance
        self.directions = {(a, b): _Direction(self, a, b), (b, a): _Direction(self, b, a)}
        self.client: Endpoint | None = None  # from the SYN, when captured
        self.state = "undecided"  # then "http2" or "other"
        self.mid_stream = False
        self.id: ConnectionId | None = None
        self.paths: dict[int, str] = {}
        self.grpc_requests: set[int] = set()  # streams whose request declared gRPC
        # held chunks and gaps, in arrival order: (direction, data or None, offset or missing, number, time)
        self.order: list[tuple[_Direction, bytes | None, int, int, int]] = []
        self.last_time_ns = 0
        self._next_probe_bytes = 4096  # held bytes at which to look for mid-stream frames next

    def add(self, segment: TcpSegment, packet_number: int, time_ns: int) -> None:
        if segment.flags & (SYN | ACK) == SYN and self.client is None:
            self.client = Endpoint(segment.src_ip, segment.src_port)
        self.last_time_ns = max(self.last_time_ns, time_ns)
        src, dst = Endpoint(segment.src_ip, segment.src_port), Endpoint(segment.dst_ip, segment.dst_port)
        self.directions[(src, dst)].reassembler.add(segment, packet_number, time_ns)

    def on_bytes(self, direction: _Direction, data: bytes, offset: int, packet_number: int, time_ns: int) -> None:
        if self.state == "http2":
            self.backend.frames_from(direction, data, offset, packet_number, time_ns)
            return
        if self.state == "other":
            return
        self.order.append((direction, data, offset, packet_number, time_ns))
        direction.held_bytes += len(data)
        if len(direction.head) < len(PREFACE) and offset == len(direction.head):
            direction.head += data[: len(PREFACE) - len(direction.head)]
        self._decide()

    def on_gap(self, direction: _Direction, missing_bytes: int, packet_number: int) -> None:
        if self.state == "http2":
            self.backend.gap_in(direction, missing_bytes, packet_number)
        elif self.state == "undecided":
            self.order.append((direction, None, missing_bytes, packet_number, 0))

    def _decide(self) -> None:
        directions = list(self.directions.values())
        for direction in directions:
            if direction.head == PREFACE and (self.client is None or direction.src == self.client):
                self._start_http2(direction)
                return
        decided = [d for d in directions if len(d.head) >= len(PREFACE)]
        if self.client is not None:
            not_http2 = any(d.src == self.client for d in decided)
        else:
            not_http2 = len(decided) == len(directions)
        if not_http2 and self._syn_seen():
            self._give_up()
            return
        held = sum(d.held_bytes for d in directions)
        if decided and not self._syn_seen() and held >= self._next_probe_bytes:
            # Probing joins the held bytes: do it at doubling sizes, not on every packet.
            self._next_probe_bytes = 2 * held
            verdict = self._mid_stream_frames()
            if verdict:
                self._start_http2(self._mid_stream_client(), mid_stream=True)
                return
            if verdict is False:
                self._give_up()
                return
        if held > MAX_HELD_BYTES:
            self._give_up()

    def _syn_seen(self) -> bool:
        return self.client is not None or any(d.reassembler.syn_seen for d in self.directions.values())

    def _give_up(self) -> None:
        self.state = "other"
        self.order.clear()

    def _mid_stream_frames(self) -> bool | None:
        """Whether a direction's held bytes hold a chain of frame headers (``None``: not yet known)."""
        undecided = False
        for direction in self.directions.values():
            held = b"".join(data for d, data, _, _, _ in self.order if d is direction and data is not None)
            probe = FrameSplitter(expect_preface=False, synchronised=False)
            probe.feed(held[:MID_STREAM_PROBE_BYTES])
            if probe.synchronised:
                return True
            undecided |= len(held) < MID_STREAM_PROBE_BYTES
        return None if undecided else False

    def _mid_stream_client(self) -> _Direction:
        """The client's direction of a connection whose SYN was not captured; see the module docstring."""
        a, b = self.directions.values()
        ports = self.backend.server_ports
        if ports is not None and (a.dst.port in ports) != (b.dst.port in ports):
            return a if a.dst.port in ports else b
        if (a.src.port >= EPHEMERAL_PORT_FLOOR) != (b.src.port >= EPHEMERAL_PORT_FLOOR):
            return a if a.src.port >= EPHEMERAL_PORT_FLOOR else b
        return a if a.src.port > b.src.port else b

    def _start_http2(self, client: _Direction, mid_stream: bool = False) -> None:
        self.state = "http2"
        self.mid_stream = mid_stream
        server = next(d for d in self.directions.values() if d is not client)
        self.id = ConnectionId(client.src.ip, client.src.port, client.dst.ip, client.dst.port, self.instance)
        for direction, from_client in ((client, True), (server, False)):
            direction.from_client = from_client
            direction.splitter = FrameSplitter(expect_preface=from_client, synchronised=not mid_stream)
            direction.splitter.body_needs = functools.partial(self.backend.body_needs, direction)
            direction.decoder = DirectionDecoder()
            if mid_stream:
                direction.decoder.lose_header_blocks()
        held, self.order = self.order, []
        for direction, data, offset, packet_number, time_ns in held:
            if data is None:
                self.backend.gap_in(direction, offset, packet_number)
            else:
                self.backend.frames_from(direction, data, offset, packet_number, time_ns)

    def finish(self, packet_number: int, time_ns: int) -> None:
        for direction in self.directions.values():
            direction.reassembler.finish(packet_number, time_ns)
        if self.state == "undecided" and self.order and not self._syn_seen() and self._mid_stream_frames():
            self._start_http2(self._mid_stream_client(), mid_stream=True)
        # A frame the capture ends inside is each direction's ``unfinished_bytes`` (its loss
        # record), which :func:`netcapture.capture.assemble` words as a warning for either backend.


class _Decoder:
    def __init__(self, path: Path, server_ports: frozenset[int] | None):
        self.path = path
        self.server_ports = server_ports
        self.connections: dict[frozenset, _Connection] = {}
        self.instances: dict[frozenset, int] = {}
        self.retired: list[_Connection] = []
        self.frames: list[tuple[int, int, Http2Frame]] = []
        self.damaged_streams: set[tuple[ConnectionId, int]] = set()
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def segment(self, segment: TcpSegment, packet_number: int, time_ns: int) -> None:
        if self.server_ports is not None and not (segment.dst_port in self.server_ports
                                                  or segment.src_port in self.server_ports):
            return
        if (segment.src_ip, segment.src_port) == (segment.dst_ip, segment.dst_port):
            return  # a socket talking to itself has no client and server to decode
        key = frozenset(((segment.src_ip, segment.src_port), (segment.dst_ip, segment.dst_port)))
        connection = self.connections.get(key)
        if connection is not None and self._reused(connection, segment, time_ns):
            connection.finish(packet_number, time_ns)
            self.retired.append(connection)
            connection = None
        if connection is None:
            instance = self.instances[key] = self.instances.get(key, -1) + 1
            connection = self.connections[key] = _Connection(
                self, Endpoint(segment.src_ip, segment.src_port), Endpoint(segment.dst_ip, segment.dst_port), instance)
        connection.add(segment, packet_number, time_ns)

    @staticmethod
    def _reused(connection: _Connection, segment: TcpSegment, time_ns: int) -> bool:
        """Whether ``segment`` belongs to a new connection on the same 4-tuple (module docstring)."""
        reassembler = connection.directions[(Endpoint(segment.src_ip, segment.src_port),
                                             Endpoint(segment.dst_ip, segment.dst_port))].reassembler
        idle_s = abs(time_ns - connection.last_time_ns) / 1e9  # a later capture may be stamped earlier
        if segment.flags & (SYN | ACK) == SYN:
            if reassembler.fin_seen:
                return True
            offset = reassembler.offset_of((segment.seq + 1) & 0xFFFFFFFF)
            if offset is None:
                return False
            # A late or repeated copy of this stream's own SYN starts at (or just before) offset
            # 0 and comes before its data (a late one is caught by the reassembler's start hold).
            own_start = -REUSE_SEQUENCE_JUMP_BYTES <= offset <= 0
            return not own_start or reassembler.delivered_bytes > 0
        if not segment.payload or segment.flags & SYN or not reassembler.started:
            return False
        offset = reassembler.offset_of(segment.seq)
        return idle_s >= REUSE_IDLE_S and abs(offset - reassembler.delivered_bytes) > REUSE_SEQUENCE_JUMP_BYTES

    def gap_in(self, direction: _Direction, missing_bytes: int, packet_number: int) -> None:
        if direction.broken:
            direction.undecoded_bytes += missing_bytes
            return
        splitter = direction.splitter
        was_synchronised = splitter.synchronised
        for raw in splitter.lose(missing_bytes):
            self.frames.append((packet_number, raw.offset, self._frame(direction, raw, packet_number,
                                                                        direction.reassembler.latest_time_ns)))
        if was_synchronised and not splitter.synchronised:
            # Whole frames went missing, header blocks and gRPC message starts among them: the
            # streams in progress lost frames, and any of them may have ended unseen.
            direction.decoder.lose_header_blocks()
            direction.deframers = dict.fromkeys(direction.deframers)
            self.damaged_streams.update((direction.connection.id, s) for s in direction.open_streams)
            direction.open_streams.clear()

    def body_needs(self, direction: _Direction, stream_id: int) -> NeedCursor | None:
        """Which of ``stream_id``'s next DATA bytes in ``direction`` :meth:`_grpc` will read, for the
        frame splitter (:attr:`netcapture.http2.FrameSplitter.body_needs`); ``None`` if none.

        Asked when a large DATA frame's header has been cut and every frame before it decoded.
        Until that frame is decoded, only this direction's frames could change what is looked
        at here (and a loss makes the frame damaged, its payload unread), so the answer holds:
        the stream's deframer, or none when :meth:`_grpc` would return before making one (the
        stream's HEADERS were not seen here; its headers were read and are not gRPC). What the
        other direction may still change (the request's path and gRPC declaration) only
        decides how much a new deframer keeps, so a new one is taken to keep the most any does.
        """
        deframer = direction.deframers.get(stream_id, ...)
        if deframer is None:
            return None
        if deframer is not ...:
            return deframer.cursor()
        if stream_id not in direction.header_frames:
            return None
        if stream_id not in direction.grpc_streams and not (direction.decoder.table_uncertain
                                                            and stream_id not in direction.decoded_headers):
            return None
        return NeedCursor(MAX_KEEP_BYTES)

    def frames_from(self, direction: _Direction, data: bytes, offset: int, packet_number: int, time_ns: int) -> None:
        """Frame ``data``, the direction's bytes from stream ``offset`` on (the lab's timeline
        wraps this to learn when each frame's first byte came)."""
        if direction.broken:
            direction.undecoded_bytes += len(data)
            return
        splitter = direction.splitter
        was_synchronised = splitter.synchronised
        try:
            raws = splitter.cut(data)  # each frame decoded before the next is cut (FrameSplitter.body_needs)
        except MalformedFrame as exc:
            self.warn(f"{direction.src} -> {direction.dst}: {exc.problem}; the rest of this direction is not decoded")
            direction.broken = True
            return
        if not was_synchronised and splitter.synchronised:
            direction.decoder.lose_header_blocks()
        for raw in raws:
            self.frames.append((packet_number, raw.offset, self._frame(direction, raw, packet_number, time_ns)))

    def _frame(self, direction: _Direction, raw: RawFrame, packet_number: int, time_ns: int) -> Http2Frame:
        """The record of ``raw``, after its effects on the direction's state (decoding, gRPC).

        The frames gRPC sends by the thousand (intact DATA, HEADERS, CONTINUATION,
        WINDOW_UPDATE, PING and SETTINGS without a defect) are decoded here directly, with the
        same result as :meth:`_any_frame`, which decodes every frame (and says what is wrong with
        a broken one).
        """
        kind, payload = raw.type, raw.payload
        if raw.declared_length is not None or kind not in _QUICK_TYPES:
            return self._any_frame(direction, raw, packet_number, time_ns)
        flags, stream_id, length = raw.flags, raw.stream_id, len(payload)
        data_bytes, headers, settings, increment, opaque, messages = 0, None, None, None, None, ()
        if kind == DATA:
            if not stream_id or (flags & FLAG_PADDED and (not length or payload[0] >= length)):
                return self._any_frame(direction, raw, packet_number, time_ns)  # DirectionDecoder.decode warns
            data_bytes = length - payload[0] - 1 if flags & FLAG_PADDED else length
            direction.open_streams.add(stream_id)
            if data_bytes:
                messages = self._grpc(direction, raw, packet_number)
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload, "big") if length == WINDOW_UPDATE_BYTES else 0
            if not 0 < increment <= MAX_WINDOW_INCREMENT:
                return self._any_frame(direction, raw, packet_number, time_ns)
        elif kind == PING:
            if stream_id or length != PING_BYTES:
                return self._any_frame(direction, raw, packet_number, time_ns)
            opaque = bytes(payload).hex()
        elif kind == SETTINGS:
            if stream_id or length % SETTING_BYTES or (flags & FLAG_ACK and length):
                return self._any_frame(direction, raw, packet_number, time_ns)
            settings = tuple(_SETTING.iter_unpack(payload))
        else:  # HEADERS, CONTINUATION
            try:
                headers = direction.decoder.header_block(raw)
            except MalformedFrame as exc:
                return self._any_frame(direction, raw, packet_number, time_ns, exc)
            if kind == HEADERS:
                direction.header_frames.add(stream_id)
            if stream_id and kind == HEADERS:
                direction.open_streams.add(stream_id)
            if headers:
                self._on_headers(direction, stream_id, headers)
        if kind in (DATA, HEADERS) and flags & FLAG_END_STREAM:
            direction.deframers.pop(stream_id, None)
            direction.grpc_streams.discard(stream_id)
            direction.open_streams.discard(stream_id)
        return _make_frame(packet_number, time_ns, direction.connection.id, direction.from_client, kind, flags,
                           stream_id, length, data_bytes, headers, settings, increment, opaque, None, None, messages,
                           False)

    def _on_headers(self, direction: _Direction, stream_id: int, headers) -> None:
        """What a decoded header block tells: the request's path, whether the stream is gRPC."""
        connection = direction.connection
        direction.decoded_headers.add(stream_id)
        # A block sent again decodes to the same tuple (DirectionDecoder keeps it): read it once.
        facts = direction.header_facts.get(id(headers))
        if facts is None or facts[0] is not headers:
            fields = dict(headers)
            # Only a direction that declared gRPC is split into gRPC messages.
            facts = direction.header_facts[id(headers)] = (
                headers, fields.get(":path"), ":path" in fields,
                fields.get("content-type", "").startswith("application/grpc"))
        _, path, has_path, grpc = facts
        if direction.from_client and has_path:
            connection.paths.setdefault(stream_id, path)
        if grpc:
            direction.grpc_streams.add(stream_id)
            if direction.from_client:
                connection.grpc_requests.add(stream_id)

    def _any_frame(self, direction: _Direction, raw: RawFrame, packet_number: int, time_ns: int,
                   failure: MalformedFrame | None = None) -> Http2Frame:
        """:meth:`_frame` for every frame (``failure``: what decoding its header block raised, when
        :meth:`_frame` did that already)."""
        connection = direction.connection
        if raw.damaged:
            details = direction.decoder.lose_frame(raw)
            if raw.type == DATA:
                direction.deframers[raw.stream_id] = None  # its gRPC message boundaries are lost
        else:
            try:
                if failure is not None:
                    raise failure
                details = direction.decoder.decode(raw)
            except MalformedFrame as exc:
                self.warn(f"{direction.src} -> {direction.dst}, packet {packet_number}: {exc.problem}")
                details = None
        messages = ()
        if raw.type == HEADERS and not raw.damaged:
            direction.header_frames.add(raw.stream_id)
        if raw.stream_id and raw.type in (HEADERS, DATA):
            direction.open_streams.add(raw.stream_id)
        if details is not None and not raw.damaged:
            if details.headers:
                self._on_headers(direction, raw.stream_id, details.headers)
            if raw.type == DATA and details.data_bytes:
                messages = self._grpc(direction, raw, packet_number)
        if (raw.type in (HEADERS, DATA) and raw.flags & FLAG_END_STREAM) or raw.type == RST_STREAM:
            # this direction of the stream is over (gRPC ends it with trailers)
            direction.deframers.pop(raw.stream_id, None)
            direction.grpc_streams.discard(raw.stream_id)
            direction.open_streams.discard(raw.stream_id)
        if details is None:
            return Http2Frame(packet_number, time_ns, connection.id, direction.from_client, raw.type, raw.flags,
                              raw.stream_id, raw.length, grpc_messages=messages, damaged=raw.damaged)
        return Http2Frame(packet_number, time_ns, connection.id, direction.from_client, raw.type, raw.flags,
                          raw.stream_id, raw.length, details.data_bytes, details.headers, details.settings,
                          details.window_increment, details.ping_opaque, details.error_code, details.last_stream_id,
                          messages, raw.damaged)

    def _grpc(self, direction: _Direction, raw: RawFrame, packet_number: int) -> tuple:
        stream, connection = raw.stream_id, direction.connection
        guessing = False
        if stream not in direction.grpc_streams:
            # Headers that could not be decoded (header blocks lost before them): a response is
            # gRPC when its request was; a request is read as a RecvTensorRequest if it parses
            # as one. Either must have sent its HEADERS here, or its DATA may start mid-message.
            unreadable = direction.decoder.table_uncertain and stream in direction.header_frames \
                and stream not in direction.decoded_headers
            if not unreadable or not (direction.from_client or stream in connection.grpc_requests):
                return ()
            guessing = direction.from_client and stream not in connection.paths
        path = RECV_TENSOR_PATH if guessing else connection.paths.get(stream)
        deframer = direction.deframers.get(stream, ...)
        if deframer is ...:
            if stream not in direction.header_frames:
                return ()  # its start was in bytes the capture lost
            keep = MAX_KEPT_REQUEST_BYTES if guessing else keep_bytes_for(path, direction.from_client)
            deframer = direction.deframers[stream] = GrpcDeframer(keep)
        if deframer is None:
            return ()
        start, end = split_padding(raw.flags, raw.payload)
        try:
            done = deframer.feed(raw.payload[start:end])
            if guessing and done:
                if not looks_like_recv_tensor_request(done[0][2]):
                    direction.deframers[stream] = None
                    return ()
                connection.paths[stream] = RECV_TENSOR_PATH
                connection.grpc_requests.add(stream)
            messages = tuple([describe_message(path, direction.from_client, *m) for m in done])
        except MalformedFrame as exc:
            direction.deframers[stream] = None
            if not guessing:
                self.warn(f"{direction.src} -> {direction.dst}, stream {stream}, packet {packet_number}: "
                          f"{exc.problem}; gRPC decoding of this stream stops")
            return ()
        if raw.flags & FLAG_END_STREAM:
            direction.deframers.pop(stream, None)
        return messages

    def all_connections(self) -> list[_Connection]:
        return self.retired + list(self.connections.values())


# The decoder's own frames_from: while another is in its place (the lab's timeline wraps it to
# see every delivery), the fast path skips none (netcapture.fastpath).
OWN_FRAMES_FROM = _Decoder.frames_from


class _PacketLoop:
    """The reference path's reading: one :class:`~netcapture.pcap.RawPacket` at a time through
    :func:`~netcapture.layers.decode_tcp`; and what reading leaves for the end of decoding."""

    def __init__(self, decoder: _Decoder, path: Path):
        self.decoder = decoder
        self.path = path
        self.reader = PcapReader(path)
        self.last_number, self.last_time = 0, 0
        self.non_tcp = 0

    def packet(self, packet) -> None:
        reader = self.reader
        check_snaplen(self.path, packet, reader.interfaces[-1].snaplen_bytes if reader.interfaces else None)
        self.last_number, self.last_time = packet.number, packet.time_ns
        segment = decode_tcp(packet.linktype, packet.data)
        if segment is None:
            self.non_tcp += 1
            return
        self.decoder.segment(segment, packet.number, packet.time_ns)

    def read(self, fast: bool) -> None:
        if fast:
            from netcapture import fastpath  # imports numpy; numba only when a kernel first runs

            # Deliveries may be skipped only when frames_from is the decoder's own.
            fastpath.read_packets(self.decoder, self.path, self,
                                  may_skip=type(self.decoder).frames_from is OWN_FRAMES_FROM)
            return
        for packet in self.reader:
            self.packet(packet)



def _client_spoke(connection, server_ports) -> bool:
    """Whether the client side of a connection to one of ``server_ports`` sent any bytes. A
    connection whose client never spoke is a reachability probe (a task checking that a
    server listens: the gRPC server greets it with its SETTINGS, the client closes), not
    traffic the capture missed the start of."""
    return any(direction.reassembler.delivered_bytes for (_, destination), direction in connection.directions.items()
               if destination.port in server_ports)

def decode(path: str | os.PathLike, server_ports: frozenset[int] | None = None, strict: bool = False,
           fast: bool = True) -> BackendResult:
    """Decode ``path``; see the module docstring. Raises on a snaplen-cut packet.

    ``fast``: read through :mod:`netcapture.fastpath` where it applies (a pcap or pcapng file,
    plain or gzip, of a link type :mod:`netcapture.pcapindex` decodes), with the same result as the
    reference path (``fast=False``: scapy's reader, one packet at a time), which reads
    everything else.
    """
    path = Path(path)
    if fast:
        from netcapture.pcapbatch import Unavailable

        try:
            return _decode(path, server_ports, strict, fast=True)
        except Unavailable:
            pass  # not a file the fast path reads, or a damaged gzip one: start again
    return _decode(path, server_ports, strict, fast=False)


def _decode(path: Path, server_ports: frozenset[int] | None, strict: bool, fast: bool) -> BackendResult:
    decoder = _Decoder(path, server_ports)
    loop = _PacketLoop(decoder, path)
    reader = loop.reader
    truncated = False
    try:
        loop.read(fast)
    except (TruncatedCapture, CorruptTail) as exc:
        if strict:
            raise
        truncated = True
        decoder.warn(exc.problem)
    decoder.warnings[:0] = reader.notes
    decoded = _finish(decoder, loop.last_number, loop.last_time)
    return BackendResult(
        path=path, backend="scapy", packets=reader.packets_read, file_format=reader.format,
        truncated=truncated, kernel_drops=reader.kernel_drops, frames=decoded.frames,
        tcp=decoded.tcp, gaps=decoded.gaps, losses=decoded.losses,
        damaged_streams=decoded.damaged_streams, warnings=decoded.warnings,
        other_tcp_connections=decoded.other_tcp_connections, non_tcp_packets=loop.non_tcp,
    )


@dataclasses.dataclass(frozen=True)
class DecodedSegments:
    """What the decoder made of a capture's TCP segments: the parts of a
    :class:`~netcapture.backend.BackendResult` that do not depend on how packets were read."""

    frames: tuple[Http2Frame, ...]
    tcp: tuple[TcpDirectionStats, ...]
    gaps: tuple[TcpGap, ...]
    losses: tuple[DirectionLoss, ...]
    damaged_streams: frozenset[tuple[ConnectionId, int]]
    warnings: tuple[str, ...]
    other_tcp_connections: int


def decode_segments(path: Path, segments: Iterable[tuple[TcpSegment, int, int]], last_packet: tuple[int, int],
                    server_ports: frozenset[int] | None = None) -> DecodedSegments:
    """Decode TCP segments another reader took from the capture ``path`` (messages name it):
    ``(segment, packet number, time in ns)`` in file order, everything this module does from
    reassembly on (the tshark backend's route for connections Wireshark's HTTP/2 dissector
    cannot decode whole, :mod:`netcapture.tshark_backend`). ``last_packet``: the number and
    time of the capture's last packet, where the capture ends for every connection.
    """
    decoder = _Decoder(path, server_ports)
    for segment, packet_number, time_ns in segments:
        decoder.segment(segment, packet_number, time_ns)
    return _finish(decoder, *last_packet)


def _finish(decoder: _Decoder, last_number: int, last_time: int) -> DecodedSegments:
    """End every connection at the capture's last packet; the frames in capture order, and
    per HTTP/2 direction its reassembly statistics and losses (warned about)."""
    server_ports = decoder.server_ports
    connections = decoder.all_connections()
    for connection in connections:
        connection.finish(last_number, last_time)
    tcp_stats, gaps, losses, others = [], [], [], 0
    for connection in connections:
        if connection.state == "http2" and connection.mid_stream:
            decoder.warn(f"{connection.id}: the capture starts after this connection opened; decoding starts at "
                         "the first frame boundary found, and its header blocks are decoded only where they do not "
                         "refer to what the capture missed")
        for direction in connection.directions.values():
            stats = direction.reassembler.stats()
            if connection.state == "http2":
                tcp_stats.append(stats)
                gaps.extend(stats.gaps)
                loss = direction.loss()
                losses.append(loss)
                if loss.lost_bytes or loss.skipped_bytes:
                    decoder.warn(loss.describe())
        if connection.state != "http2" and any(d.reassembler.delivered_bytes for d in connection.directions.values()):
            others += 1
            if server_ports is not None and _client_spoke(connection, server_ports):
                a, _ = connection.directions
                decoder.warn(f"{a[0]} <-> {a[1]}: not decodable as HTTP/2 (no connection preface at the start "
                             "of the captured client stream; was the capture started after the connection?)")
    decoder.frames.sort(key=operator.itemgetter(0, 1))  # packet number, offset in the stream
    return DecodedSegments(
        frames=tuple(frame for _, _, frame in decoder.frames), tcp=tuple(tcp_stats), gaps=tuple(gaps),
        losses=tuple(losses), damaged_streams=frozenset(decoder.damaged_streams),
        warnings=tuple(decoder.warnings), other_tcp_connections=others)
