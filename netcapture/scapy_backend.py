"""The default backend: decode a capture in this process.

Packets come from :mod:`netcapture.pcap` (scapy's raw pcap/pcapng readers), headers from
:mod:`netcapture.layers` (a ``struct`` decoder for the common link types, scapy's
dissectors for the rest), TCP is
reassembled by :mod:`netcapture.tcp`, HTTP/2 framed and HPACK-decoded by
:mod:`netcapture.http2`, gRPC messages split by :mod:`netcapture.grpc`.

Which connections are HTTP/2: those whose client (the side that sent the SYN, or else the
side whose byte stream starts so) opens with the 24-byte connection preface. A connection
whose start is not in the capture cannot be decoded (its HPACK state and frame boundaries
are unknown) and is reported in the warnings. With ``server_ports``, only connections to
those ports are considered.

Bytes the server sends before the client's preface has been seen are held back (up to
``MAX_HELD_BYTES``) and decoded once the connection is known to be HTTP/2, with the
packet stamps they arrived with.

A TCP gap (bytes never captured) ends HTTP/2 decoding of that direction: frame
boundaries after it are unknown. The gap and the bytes left undecoded are reported.
"""

from __future__ import annotations

import os
from pathlib import Path

from netcapture.backend import BackendResult
from netcapture.errors import MalformedFrame, TruncatedCapture
from netcapture.grpc import GrpcDeframer, describe_message, keep_bytes_for
from netcapture.http2 import (
    DATA,
    FLAG_END_STREAM,
    PREFACE,
    DirectionDecoder,
    FrameSplitter,
    Http2Frame,
    RawFrame,
    split_padding,
)
from netcapture.layers import ACK, SYN, TcpSegment, decode_tcp
from netcapture.pcap import PcapReader, check_snaplen
from netcapture.tcp import ConnectionId, DirectionReassembler, Endpoint

MAX_HELD_BYTES = 4 << 20


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
        self.broken = False
        self.undecoded_bytes = 0
        self.deframers: dict[int, GrpcDeframer | None] = {}
        self.grpc_streams: set[int] = set()

    def _on_bytes(self, data: bytes, offset: int, packet_number: int, time_ns: int) -> None:
        self.connection.on_bytes(self, data, offset, packet_number, time_ns)

    def _on_gap(self, offset: int, missing_bytes: int, packet_number: int) -> None:
        if self.splitter is not None and not self.broken:
            self.connection.backend.warn(
                f"{self.src} -> {self.dst}: {missing_bytes} bytes at offset {offset} missing from the capture "
                f"(TCP gap, packet {packet_number}): HTTP/2 frames after it cannot be decoded")
        self.broken = True


class _Connection:
    """Both directions of one TCP connection and whether it carries HTTP/2."""

    def __init__(self, backend: _Decoder, a: Endpoint, b: Endpoint):
        self.backend = backend
        self.directions = {(a, b): _Direction(self, a, b), (b, a): _Direction(self, b, a)}
        self.client: Endpoint | None = None  # from the SYN, when captured
        self.state = "undecided"  # then "http2" or "other"
        self.id: ConnectionId | None = None
        self.paths: dict[int, str] = {}
        self.order: list[tuple[_Direction, bytes, int, int, int]] = []  # held chunks, arrival order

    def add(self, segment: TcpSegment, packet_number: int, time_ns: int) -> None:
        if segment.flags & (SYN | ACK) == SYN and self.client is None:
            self.client = Endpoint(segment.src_ip, segment.src_port)
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
        if not_http2 or sum(d.held_bytes for d in directions) > MAX_HELD_BYTES:
            self.state = "other"
            self.order.clear()

    def _start_http2(self, client: _Direction) -> None:
        self.state = "http2"
        server = next(d for d in self.directions.values() if d is not client)
        self.id = ConnectionId(client.src.ip, client.src.port, client.dst.ip, client.dst.port)
        for direction, expect_preface in ((client, True), (server, False)):
            direction.from_client = expect_preface
            direction.splitter = FrameSplitter(expect_preface)
            direction.decoder = DirectionDecoder()
        held, self.order = self.order, []
        for direction, data, offset, packet_number, time_ns in held:
            self.backend.frames_from(direction, data, offset, packet_number, time_ns)

    def finish(self, packet_number: int, time_ns: int) -> None:
        for direction in self.directions.values():
            direction.reassembler.finish(packet_number, time_ns)
        if self.state != "http2":
            return
        for direction in self.directions.values():
            left = direction.splitter.buffered_bytes if direction.splitter else 0
            if left and not direction.broken:
                self.backend.warn(f"{direction.src} -> {direction.dst}: the capture ends inside an HTTP/2 frame "
                                  f"({left} bytes of it captured)")


class _Decoder:
    def __init__(self, path: Path, server_ports: frozenset[int] | None):
        self.path = path
        self.server_ports = server_ports
        self.connections: dict[frozenset, _Connection] = {}
        self.retired: list[_Connection] = []
        self.frames: list[tuple[int, int, Http2Frame]] = []
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
        if connection is not None and segment.flags & (SYN | ACK) == SYN and self._reused(connection, segment):
            connection.finish(packet_number, time_ns)
            self.retired.append(connection)
            connection = None
        if connection is None:
            connection = self.connections[key] = _Connection(
                self, Endpoint(segment.src_ip, segment.src_port), Endpoint(segment.dst_ip, segment.dst_port))
        connection.add(segment, packet_number, time_ns)

    @staticmethod
    def _reused(connection: _Connection, segment: TcpSegment) -> bool:
        """A new SYN on a 4-tuple whose previous connection carried data: a new connection."""
        direction = connection.directions[(Endpoint(segment.src_ip, segment.src_port),
                                           Endpoint(segment.dst_ip, segment.dst_port))]
        return direction.reassembler.delivered_bytes > 0 or direction.reassembler.fin_seen

    def frames_from(self, direction: _Direction, data: bytes, offset: int, packet_number: int, time_ns: int) -> None:
        if direction.broken:
            direction.undecoded_bytes += len(data)
            return
        try:
            raws = direction.splitter.feed(data)
        except MalformedFrame as exc:
            self.warn(f"{direction.src} -> {direction.dst}: {exc.problem}; the rest of this direction is not decoded")
            direction.broken = True
            return
        for raw in raws:
            self.frames.append((packet_number, raw.offset, self._frame(direction, raw, packet_number, time_ns)))

    def _frame(self, direction: _Direction, raw: RawFrame, packet_number: int, time_ns: int) -> Http2Frame:
        connection = direction.connection
        try:
            details = direction.decoder.decode(raw)
        except MalformedFrame as exc:
            self.warn(f"{direction.src} -> {direction.dst}, packet {packet_number}: {exc.problem}")
            details = None
        messages = ()
        if details is not None:
            if details.headers:
                headers = dict(details.headers)
                if direction.from_client and ":path" in headers:
                    connection.paths.setdefault(raw.stream_id, headers[":path"])
                # Only a direction that declared gRPC is split into gRPC messages.
                if headers.get("content-type", "").startswith("application/grpc"):
                    direction.grpc_streams.add(raw.stream_id)
            if raw.type == DATA and details.data_bytes:
                messages = self._grpc(direction, raw, packet_number)
        if raw.flags & FLAG_END_STREAM:  # this direction of the stream is over (gRPC ends it with trailers)
            direction.deframers.pop(raw.stream_id, None)
            direction.grpc_streams.discard(raw.stream_id)
        fields = {} if details is None else {
            "data_bytes": details.data_bytes, "headers": details.headers, "settings": details.settings,
            "window_increment": details.window_increment, "ping_opaque": details.ping_opaque,
            "error_code": details.error_code, "last_stream_id": details.last_stream_id}
        return Http2Frame(packet_number, time_ns, connection.id, direction.from_client, raw.type, raw.flags,
                          raw.stream_id, len(raw.payload), grpc_messages=messages, **fields)

    def _grpc(self, direction: _Direction, raw: RawFrame, packet_number: int) -> tuple:
        if raw.stream_id not in direction.grpc_streams:
            return ()
        path = direction.connection.paths.get(raw.stream_id)
        deframer = direction.deframers.get(raw.stream_id, ...)
        if deframer is ...:
            deframer = direction.deframers[raw.stream_id] = GrpcDeframer(keep_bytes_for(path, direction.from_client))
        if deframer is None:
            return ()
        start, end = split_padding(raw.flags, raw.payload)
        try:
            done = deframer.feed(raw.payload[start:end])
            messages = tuple(describe_message(path, direction.from_client, *m) for m in done)
        except MalformedFrame as exc:
            self.warn(f"{direction.src} -> {direction.dst}, stream {raw.stream_id}, packet {packet_number}: "
                      f"{exc.problem}; gRPC decoding of this stream stops")
            direction.deframers[raw.stream_id] = None
            return ()
        if raw.flags & FLAG_END_STREAM:
            direction.deframers.pop(raw.stream_id, None)
        return messages

    def all_connections(self) -> list[_Connection]:
        return self.retired + list(self.connections.values())


def decode(path: str | os.PathLike, server_ports: frozenset[int] | None = None, strict: bool = False) -> BackendResult:
    """Decode ``path``; see the module docstring. Raises on a snaplen-cut packet."""
    path = Path(path)
    decoder = _Decoder(path, server_ports)
    reader = PcapReader(path)
    truncated = False
    last_number, last_time = 0, 0
    non_tcp = 0
    try:
        for packet in reader:
            check_snaplen(path, packet, reader.interfaces[-1].snaplen_bytes if reader.interfaces else None)
            last_number, last_time = packet.number, packet.time_ns
            segment = decode_tcp(packet.linktype, packet.data)
            if segment is None:
                non_tcp += 1
                continue
            decoder.segment(segment, packet.number, packet.time_ns)
    except TruncatedCapture as exc:
        if strict:
            raise
        truncated = True
        decoder.warn(exc.problem)
    connections = decoder.all_connections()
    for connection in connections:
        connection.finish(last_number, last_time)
    tcp_stats, gaps, others = [], [], 0
    for connection in connections:
        for direction in connection.directions.values():
            stats = direction.reassembler.stats()
            if connection.state == "http2":
                tcp_stats.append(stats)
                gaps.extend(stats.gaps)
                if direction.undecoded_bytes:
                    decoder.warn(f"{direction.src} -> {direction.dst}: {direction.undecoded_bytes} bytes after a "
                                 "TCP gap or a malformed frame were not decoded")
        if connection.state != "http2" and any(d.reassembler.delivered_bytes for d in connection.directions.values()):
            others += 1
            if server_ports is not None:
                a, _ = connection.directions
                decoder.warn(f"{a[0]} <-> {a[1]}: not decodable as HTTP/2 (no connection preface at the start "
                             "of the captured client stream; was the capture started after the connection?)")
    decoder.frames.sort(key=lambda item: (item[0], item[1]))
    return BackendResult(
        path=path, backend="scapy", packets=reader.packets_read, file_format=reader.format,
        truncated=truncated, kernel_drops=reader.kernel_drops,
        frames=tuple(frame for _, _, frame in decoder.frames),
        tcp=tuple(tcp_stats), gaps=tuple(gaps), warnings=tuple(decoder.warnings),
        other_tcp_connections=others, non_tcp_packets=non_tcp,
    )
