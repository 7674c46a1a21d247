"""The reference backend: Wireshark's dissectors, through ``tshark -T fields``.

For every connection its HTTP/2 dissector can decode whole (every connection of the
bundled undamaged captures; see Damage below for the others), tshark does everything the scapy
backend does by itself, independently: TCP reassembly
(``tcp.reassemble_out_of_order``, loopback captures are not in time order), HTTP/2
framing and HPACK, gRPC message framing, and the RecvTensor protobuf fields (from a
minimal ``.proto`` written to a temporary directory and loaded by tshark's protobuf
dissector). Python only regroups tshark's per-packet field lists into
:class:`~netcapture.http2.Http2Frame` records.

How the output is read. ``-E occurrence=a`` joins every occurrence of a field in a packet
with the aggregator, so a packet's frames are the i-th entries of ``http2.type``,
``http2.streamid``, ``http2.length`` and ``http2.flags``. Type-specific fields are taken
in order by frame type (one increment per WINDOW_UPDATE, ``length/6`` ids per SETTINGS,
``http2.header.count`` names and values per decoded header block). Which DATA frame
completed how many gRPC messages is in the Info column (``DATA[21] (GRPC)``, one ``(GRPC)``
per message); the packet's ``grpc.message_length`` values are assigned to those frames in
order, checked against each stream's byte count. RecvTensor keys and step ids come as one
value per request message; the tensor content length is the ``protobuf.field.value.length``
of the ``tensor_content`` field that follows each response's ``tensor`` field.

Never ``-T json`` or PDML: their output is many times the capture's size.

tshark's gRPC dissection of a DATA frame stops at the first message body that is not
valid protobuf, and the messages after it in that packet are not reported; TensorFlow's
messages are all protobuf.

Damage. A file tshark rejects at a bad record (a corrupt tail, captures written back to
back) is decoded from a clean copy of the packets :func:`netcapture.pcap.salvage_copy` can
read.

Connections Wireshark's HTTP/2 dissector cannot decode whole are decoded by netcapture's own
decoder instead, from the TCP segments a second tshark pass prints (``tcp.seq_raw``,
``tcp.flags``, ``tcp.payload``, no reassembly) for just their 4-tuples, fed to
:func:`netcapture.scapy_backend.decode_segments`: reassembly, frame boundaries after a loss
(:meth:`netcapture.http2.FrameSplitter.lose`), mid-connection starts, damaged streams,
reused 4-tuples and loss accounting are then exactly the default backend's. A warning per
4-tuple names the reason. The first pass tells such a connection from each direction's
``tcp.seq``/``tcp.nxtseq`` coverage and the frames the dissector reported:

- bytes never captured (a hole in the covered sequence range): the dissector does not
  resynchronise after a lost segment, the rest of the direction would be lost;
- bytes it did not frame, other than the frame the capture ended inside (at most one
  frame, after the start of the furthest packet that completed a frame): frames missed at a
  connection start the file has out of order, or after adjacent packets swapped;
- no captured preface: HTTP/2 frames on a server port without it, or data without a SYN (a
  capture started after the connection opened; only connections to ``server_ports`` when
  given). A connection whose SYN was captured but whose client did not open with the
  preface is not HTTP/2, as in the default backend;
- a SYN from a side that had sent data: the 4-tuple used again with the same sequence
  numbers, which tshark takes as retransmissions in one ``tcp.stream``;
- a frame completed by data stamped later than the packet that filled the hole before it
  (a file out of time order): Wireshark stamps the frame with the filler's time, netcapture
  with the later of the two.

What stays Wireshark's own: every connection of the bundled undamaged captures (the tests hold
the two backends to frame-for-frame agreement on every bundled capture, with no warning, so no
connection there takes the second route), a capture cut or with a corrupt tail, a 4-tuple
reused with new sequence numbers (tshark gives it a new ``tcp.stream``, numbered per
4-tuple into :attr:`ConnectionId.instance`). Its directions' losses say what the
dissector decoded, and the frame the capture ended inside
(:class:`~netcapture.backend.DirectionLoss`). ``Capture.tcp`` and ``Capture.gaps`` hold
the rerouted connections' reassembly statistics only (tshark reports no gap records).
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from netcapture.backend import BackendResult, DirectionLoss
from netcapture.errors import CorruptTail, MalformedCapture, SnaplenError, TruncatedCapture, TsharkError
from netcapture.grpc import RECV_TENSOR_PATH, GrpcMessage
from netcapture.http2 import (
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME_BYTES,
    FLAG_ACK,
    FLAG_END_HEADERS,
    FLAG_PADDED,
    FRAME_HEADER_BYTES,
    GOAWAY,
    HEADERS,
    PING,
    PREFACE,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    Http2Frame,
)
from netcapture.layers import ACK, FIN, SYN, TcpSegment
from netcapture.pcap import salvage_copy
from netcapture.scapy_backend import decode_segments
from netcapture.tcp import ConnectionId, Endpoint

AGGREGATOR = "\x1f"  # never in a field value: tshark prints control characters escaped
RECV_TENSOR_PROTO = """\
syntax = "proto3";
package tensorflow;
message RecvTensorRequest {
  int64 step_id = 1; string rendezvous_key = 2; bool dma_ok = 3;
  bytes client_locality = 4; bytes server_locality = 5; bytes transport_options = 6; int64 request_id = 7;
}
message TensorShapeProto { message Dim { int64 size = 1; string name = 2; } repeated Dim dim = 2; bool unknown_rank = 3; }
message TensorProto { int32 dtype = 1; TensorShapeProto tensor_shape = 2; int32 version_number = 3; bytes tensor_content = 4; }
message RecvTensorResponse {
  TensorProto tensor = 1; bool is_dead = 2; int64 send_start_micros = 3; bytes transport_options = 4; bool require_ack = 5;
}
service WorkerService { rpc RecvTensor(RecvTensorRequest) returns (RecvTensorResponse); }
"""
# SETTINGS ids tshark shows under their own field; others are in http2.settings.unknown.
SETTINGS_FIELDS = {
    1: "http2.settings.header_table_size", 2: "http2.settings.enable_push",
    3: "http2.settings.max_concurrent_streams", 4: "http2.settings.initial_window_size",
    5: "http2.settings.max_frame_size", 6: "http2.settings.max_header_list_size",
    8: "http2.settings.extended_connect",
}
FIELDS = (
    "frame.number", "frame.time_epoch", "frame.len", "frame.cap_len",
    "ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "tcp.stream", "tcp.srcport", "tcp.dstport", "tcp.flags",
    "tcp.seq", "tcp.nxtseq",
    "http2.magic", "http2.type", "http2.streamid", "http2.length", "http2.flags", "http2.pad_length",
    "http2.header.count", "http2.header.name", "http2.header.value",
    "http2.settings.id", *SETTINGS_FIELDS.values(), "http2.settings.unknown",
    "http2.window_update.window_size_increment", "http2.rst_stream.error",
    "http2.goaway.last_stream_id", "http2.goaway.error", "http2.ping", "http2.pong",
    "grpc.message_length", "grpc.compressed_flag",
    "pbf.tensorflow.RecvTensorRequest.step_id", "pbf.tensorflow.RecvTensorRequest.rendezvous_key",
    "protobuf.field.name", "protobuf.field.wiretype", "protobuf.field.value.length",
    "_ws.col.Info",
)
_INDEX = {name: i for i, name in enumerate(FIELDS)}
# The second pass, for connections the dissector cannot decode whole: each packet's TCP segment.
SEGMENT_FIELDS = (
    "frame.number", "frame.time_epoch", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "tcp.srcport", "tcp.dstport",
    "tcp.seq_raw", "tcp.ack_raw", "tcp.flags", "tcp.len", "tcp.payload",
)
_SEGMENT_INDEX = {name: i for i, name in enumerate(SEGMENT_FIELDS)}
TCP_FLAG_BITS = 0x1FF  # tshark's tcp.flags has 12 bits; netcapture.layers keeps the 9 defined ones
_INFO_DATA = re.compile(r"DATA\[(\d+)\]((?: \([A-Z0-9_-]+\))*)")
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}


def tshark_path() -> str | None:
    return shutil.which("tshark")


def _unescape(text: str) -> str:
    """Undo tshark's C-style escaping of string field values."""
    if "\\" not in text:
        return text

    def one(match: re.Match) -> str:
        code = match.group(1)
        if code[0] == "x":
            return chr(int(code[1:], 16))
        if code[0].isdigit():
            return chr(int(code, 8))
        return _ESCAPES.get(code, code)

    return _ESCAPE.sub(one, text)


def _epoch_ns(text: str) -> int:
    seconds, _, fraction = text.partition(".")
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


class _Cursor:
    """The occurrences of one field in one packet, taken in order."""

    __slots__ = ("position", "values")

    def __init__(self, raw: str):
        self.values = raw.split(AGGREGATOR) if raw else []
        self.position = 0

    def take(self) -> str | None:
        if self.position >= len(self.values):
            return None
        value = self.values[self.position]
        self.position += 1
        return value

    def remaining(self) -> int:
        return len(self.values) - self.position


class _Row:
    def __init__(self, line: str, index: dict[str, int] = _INDEX):
        """One line of ``-T fields`` output; ``index``: each field's column."""
        self.fields = line.rstrip("\n").split("\t")
        self.index = index
        if len(self.fields) < len(index):
            self.fields += [""] * (len(index) - len(self.fields))

    def get(self, name: str) -> str:
        return self.fields[self.index[name]]

    def first(self, name: str) -> str:
        return self.get(name).split(AGGREGATOR)[0]

    def last(self, name: str) -> str:
        return self.get(name).split(AGGREGATOR)[-1]

    def cursor(self, name: str) -> _Cursor:
        return _Cursor(self.get(name))


def _int(value: str | None, base: int = 10) -> int | None:
    if value is None or value == "":
        return None
    return int(value, base)


class _Connection:
    def __init__(self, index: int, endpoints: frozenset, instance: int = 0):
        self.index = index
        self.endpoints = endpoints  # the 4-tuple, as two (address, port) ends
        self.instance = instance  # how many connections used this 4-tuple before
        self.client: tuple[str, int] | None = None
        self.id: ConnectionId | None = None
        self.held: list[tuple[tuple[str, int], dict]] = []  # frames seen before the preface
        self.paths: dict[int, str] = {}
        # src -> (seq, nxtseq, time in ns) of each packet with data, in file order
        self.segments: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        # src -> (seq, nxtseq) of the furthest packet that completed a frame
        self.last_framing: dict[tuple[str, int], tuple[int, int]] = {}
        self.syn_seen = False
        self.syn_after_data = False  # a SYN from a side that had sent data: the 4-tuple used again
        self.received: dict[tuple[int, bool], int] = {}  # gRPC accounting per stream direction
        self.consumed: dict[tuple[int, bool], int] = {}


class _Decoder:
    def __init__(self, path: Path):
        self.path = path
        self.connections: dict[int, _Connection] = {}
        self.instances: dict[frozenset, int] = {}
        self.frames: list[Http2Frame] = []
        self.notes: list[tuple[int | None, str]] = []  # (tcp.stream or None, warning)
        self.packets = 0
        self.last_time_ns = 0

    def warn(self, connection: _Connection | None, message: str) -> None:
        self.notes.append((None if connection is None else connection.index, message))

    def row(self, row: _Row) -> None:
        number = int(row.get("frame.number"))
        self.packets = number
        self.last_time_ns = _epoch_ns(row.get("frame.time_epoch"))
        cap_len, wire_len = int(row.get("frame.cap_len")), int(row.get("frame.len"))
        if cap_len < wire_len:
            raise SnaplenError(self.path, f"packet {number} was cut to {cap_len} of its {wire_len} bytes by the "
                               "capture's snapshot length, so TCP payload is missing: capture with -s 0")
        stream_index = row.first("tcp.stream")
        if not stream_index:
            return
        src_ip = row.last("ip.src") or row.last("ipv6.src")
        dst_ip = row.last("ip.dst") or row.last("ipv6.dst")
        src = (src_ip, int(row.first("tcp.srcport")))
        dst = (dst_ip, int(row.first("tcp.dstport")))
        connection = self.connections.get(int(stream_index))
        if connection is None:
            # tshark gives a reused 4-tuple a new tcp.stream: number them per 4-tuple, in order.
            key = frozenset((src, dst))
            instance = self.instances[key] = self.instances.get(key, -1) + 1
            connection = self.connections[int(stream_index)] = _Connection(int(stream_index), key, instance)
        flags = _int(row.first("tcp.flags"), 16) or 0
        if flags & SYN:
            connection.syn_seen = True
            connection.syn_after_data |= src in connection.segments
        seq, nxtseq = _int(row.first("tcp.seq")), _int(row.first("tcp.nxtseq"))
        if seq is not None and nxtseq is not None and nxtseq > seq + (flags & (SYN | FIN) != 0):
            connection.segments.setdefault(src, []).append((seq, nxtseq, self.last_time_ns))
        if flags & (SYN | ACK) == SYN and connection.client is None:
            connection.client = src
        if _unescape(row.get("http2.magic")) == PREFACE.decode() and (connection.client in (None, src)):
            connection.client = src
            connection.id = ConnectionId(src[0], src[1], dst[0], dst[1], connection.instance)
            held, connection.held = connection.held, []
            for held_src, packet in held:
                self._frames(connection, held_src, packet)
        if not row.get("http2.type"):
            return
        packet = {"number": number, "time_ns": self.last_time_ns, "row": row, "seq": seq or 0,
                  "nxtseq": nxtseq or 0}
        if connection.id is None:
            connection.held.append((src, packet))
        else:
            self._frames(connection, src, packet)

    def assess(self, server_ports: frozenset[int] | None) -> tuple[tuple[DirectionLoss, ...], dict[frozenset, str]]:
        """What Wireshark's dissector made of each connection: per direction of the connections
        it decoded whole, the :class:`~netcapture.backend.DirectionLoss` (nothing lost; a frame
        the capture ended inside counted apart); and the 4-tuples it could not decode whole,
        each with the reason, for netcapture's own decoder (see the module docstring)."""
        framed: dict[tuple[ConnectionId, bool], int] = {}
        largest: dict[tuple[ConnectionId, bool], int] = {}
        ends: dict[tuple[ConnectionId, bool], list[int]] = {}  # where each frame ends, after the preface
        for frame in self.frames:
            key = (frame.connection, frame.from_client)
            framed[key] = framed.get(key, 0) + FRAME_HEADER_BYTES + frame.length
            ends.setdefault(key, []).append(framed[key])
            largest[key] = max(largest.get(key, DEFAULT_MAX_FRAME_BYTES), frame.length)
        losses, redo = [], {}
        for connection in self.connections.values():
            if connection.id is None:
                reason = self._undecoded_reason(connection, server_ports)
                if reason:
                    redo.setdefault(connection.endpoints, reason)
                continue
            if connection.syn_after_data:
                redo.setdefault(connection.endpoints, "a SYN after data: the 4-tuple used again")
                continue
            kept = []
            for from_client in (True, False):
                src = connection.client if from_client else (connection.id.server_ip, connection.id.server_port)
                dst = (connection.id.server_ip, connection.id.server_port) if from_client else connection.client
                segments = connection.segments.get(src, [])
                covered, span, holes = _coverage(segments)
                if holes:
                    redo.setdefault(connection.endpoints, f"{span - covered} bytes never captured")
                    break
                decoded = framed.get((connection.id, from_client), 0) + (len(PREFACE) if from_client else 0)
                undecoded = covered - decoded
                start = min((seq for seq, _, _ in segments), default=0)
                end = start + covered
                # Bytes not framed are the frame the capture ended inside when they are at most
                # one frame, all after the start of the furthest packet that completed a frame
                # and at least what came after that packet (it may hold the frame's first bytes).
                first, last = connection.last_framing.get(src, (start, start + (decoded if from_client else 0)))
                one_frame = FRAME_HEADER_BYTES + largest.get((connection.id, from_client), DEFAULT_MAX_FRAME_BYTES)
                if undecoded < 0 or (undecoded and not end - last <= undecoded <= min(end - first, one_frame)):
                    redo.setdefault(connection.endpoints, f"{abs(undecoded)} bytes it did not frame")
                    break
                # The frames tile the direction from its start: where each one ends is known.
                first_frame = start + (len(PREFACE) if from_client else 0)
                frame_ends = [first_frame + e for e in ends.get((connection.id, from_client), [])]
                if _completed_from_the_past(segments, frame_ends):
                    redo.setdefault(connection.endpoints, "a frame completed by data stamped after the packet that "
                                    "filled the hole before it: the file is out of time order")
                    break
                kept.append(DirectionLoss(connection.id, from_client, Endpoint(*src), Endpoint(*dst),
                                          decoded_bytes=decoded, lost_bytes=0, skipped_bytes=0,
                                          unfinished_bytes=undecoded))
            else:
                losses.extend((connection.endpoints, loss) for loss in kept)
        return tuple(loss for endpoints, loss in losses if endpoints not in redo), redo

    @staticmethod
    def _undecoded_reason(connection: _Connection, server_ports: frozenset[int] | None) -> str | None:
        """Why a connection without a captured preface may still be HTTP/2 (``None``: it is not):
        frames found on a server port, or data with no SYN (a capture started after it opened)."""
        if server_ports is not None and not any(port in server_ports for _, port in connection.endpoints):
            return None
        if connection.held:
            return "HTTP/2 frames without a captured connection preface"
        if connection.segments and not connection.syn_seen:
            return "no connection preface: the capture starts after the connection opened"
        return None

    def _frames(self, connection: _Connection, src: tuple[str, int], packet: dict) -> None:
        row: _Row = packet["row"]
        from_client = src == connection.client
        types = row.cursor("http2.type").values
        streams, lengths, flag_values = (row.cursor(n).values for n in ("http2.streamid", "http2.length",
                                                                         "http2.flags"))
        if not (len(types) == len(streams) == len(lengths) == len(flag_values)):
            self.warn(connection, f"packet {packet['number']}: tshark's HTTP/2 fields do not line up; "
                                  "the packet's frames are skipped")
            return
        cursors = {name: row.cursor(name) for name in FIELDS if name.startswith(("http2.", "grpc.", "pbf."))}
        built = []
        for kind, stream, length, flag in zip(types, streams, lengths, flag_values):
            built.append(self._frame(connection, from_client, packet, int(kind), int(stream), int(length),
                                     int(flag, 16), cursors))
        built = self._attach_grpc(connection, from_client, packet, row, built, cursors)
        self.frames.extend(built)
        if built and packet["nxtseq"] > connection.last_framing.get(src, (0, 0))[1]:
            connection.last_framing[src] = (packet["seq"], packet["nxtseq"])

    def _frame(self, connection: _Connection, from_client: bool, packet: dict, kind: int, stream: int,
               length: int, flags: int, cursors: dict[str, _Cursor]) -> Http2Frame:
        fields: dict = {}
        if kind in (DATA, HEADERS, PUSH_PROMISE) and flags & FLAG_PADDED:
            pad = _int(cursors["http2.pad_length"].take()) or 0
            if kind == DATA:
                fields["data_bytes"] = length - 1 - pad
        elif kind == DATA:
            fields["data_bytes"] = length
        if kind in (HEADERS, PUSH_PROMISE, CONTINUATION) and flags & FLAG_END_HEADERS:
            count = _int(cursors["http2.header.count"].take()) or 0
            names, values = cursors["http2.header.name"], cursors["http2.header.value"]
            headers = tuple((_unescape(names.take() or ""), _unescape(values.take() or "")) for _ in range(count))
            fields["headers"] = headers
            if from_client:
                path = dict(headers).get(":path")
                if path is not None:
                    connection.paths.setdefault(stream, path)
        elif kind == SETTINGS and not flags & FLAG_ACK:
            pairs = []
            for _ in range(length // 6):
                setting_id = int(cursors["http2.settings.id"].take())
                field = SETTINGS_FIELDS.get(setting_id, "http2.settings.unknown")
                pairs.append((setting_id, int(cursors[field].take())))
            fields["settings"] = tuple(pairs)
        elif kind == SETTINGS:
            fields["settings"] = ()
        elif kind == WINDOW_UPDATE:
            fields["window_increment"] = _int(cursors["http2.window_update.window_size_increment"].take())
        elif kind == PING:
            opaque = cursors["http2.pong" if flags & FLAG_ACK else "http2.ping"].take()
            fields["ping_opaque"] = (opaque or "").replace(":", "")
        elif kind == RST_STREAM:
            fields["error_code"] = _int(cursors["http2.rst_stream.error"].take())
        elif kind == GOAWAY:
            fields["last_stream_id"] = _int(cursors["http2.goaway.last_stream_id"].take())
            fields["error_code"] = _int(cursors["http2.goaway.error"].take())
        return Http2Frame(packet["number"], packet["time_ns"], connection.id, from_client, kind, flags, stream,
                          length, **fields)

    def _attach_grpc(self, connection: _Connection, from_client: bool, packet: dict, row: _Row,
                     frames: list[Http2Frame], cursors: dict[str, _Cursor]) -> list[Http2Frame]:
        """Give each DATA frame the gRPC messages it completed (see the module docstring)."""
        lengths = [int(v) for v in cursors["grpc.message_length"].values]
        compressed = [v in ("1", "True") for v in cursors["grpc.compressed_flag"].values]
        # tshark appends " (GRPC)" to a DATA frame's Info entry once per message it completed.
        marks = [m.group(2).count("(GRPC)") for m in _INFO_DATA.finditer(row.get("_ws.col.Info"))]
        data_frames = [i for i, f in enumerate(frames) if f.type == DATA]
        if len(marks) != len(data_frames) or sum(marks) != len(lengths):
            if lengths:
                self.warn(connection, f"packet {packet['number']}: cannot tell which DATA frames complete its "
                                      f"{len(lengths)} gRPC messages")
            marks = [0] * len(data_frames)
        for i in data_frames:
            key = (frames[i].stream_id, from_client)
            connection.received[key] = connection.received.get(key, 0) + frames[i].data_bytes
        # Walk backwards so that each frame's running byte count is the one after that frame.
        running: dict[tuple[int, bool], int] = {}
        after: dict[int, int] = {}
        for i in reversed(data_frames):
            key = (frames[i].stream_id, from_client)
            total = running.get(key, connection.received[key])
            after[i] = total
            running[key] = total - frames[i].data_bytes
        queue = list(zip(lengths, compressed))
        assigned: dict[int, list[tuple[int, bool]]] = {}
        for i, count in zip(data_frames, marks):
            if not count:
                continue
            key = (frames[i].stream_id, from_client)
            mine, queue = queue[:count], queue[count:]
            consumed = connection.consumed.get(key, 0) + sum(5 + length for length, _ in mine)
            if consumed > after[i]:
                self.warn(connection, f"packet {packet['number']}: gRPC messages longer than stream "
                                      f"{frames[i].stream_id}'s data so far")
            connection.consumed[key] = consumed
            assigned[i] = mine
        if queue:
            self.warn(connection, f"packet {packet['number']}: {len(queue)} gRPC messages could not be assigned "
                                  "to a DATA frame")
        return self._recv_tensor_fields(connection, from_client, packet, row, frames, assigned)

    def _recv_tensor_fields(self, connection: _Connection, from_client: bool, packet: dict, row: _Row,
                            frames: list[Http2Frame], assigned: dict[int, list[tuple[int, bool]]]
                            ) -> list[Http2Frame]:
        steps = row.cursor("pbf.tensorflow.RecvTensorRequest.step_id")
        keys = row.cursor("pbf.tensorflow.RecvTensorRequest.rendezvous_key")
        contents = self._tensor_contents(row)
        requests = sum(len(m) for i, m in assigned.items()
                       if connection.paths.get(frames[i].stream_id) == RECV_TENSOR_PATH and from_client)
        responses = sum(len(m) for i, m in assigned.items()
                        if connection.paths.get(frames[i].stream_id) == RECV_TENSOR_PATH and not from_client)
        requests_ok = requests == len(keys.values) == len(steps.values)
        responses_ok = responses == len(contents)
        if (requests and not requests_ok) or (responses and not responses_ok):
            self.warn(connection, f"packet {packet['number']}: RecvTensor protobuf fields do not line up with its "
                                  "gRPC messages; their keys or sizes are left out")
        out = list(frames)
        for i, messages in sorted(assigned.items()):
            recv_tensor = connection.paths.get(frames[i].stream_id) == RECV_TENSOR_PATH
            records = []
            for length, compressed in messages:
                if recv_tensor and from_client and requests_ok:
                    records.append(GrpcMessage(length, compressed, step_id=int(steps.take()),
                                               rendezvous_key=_unescape(keys.take())))
                elif recv_tensor and not from_client and responses_ok:
                    records.append(GrpcMessage(length, compressed, tensor_content_bytes=contents.pop(0)))
                else:
                    records.append(GrpcMessage(length, compressed))
            out[i] = _replace_messages(frames[i], tuple(records))
        return out

    @staticmethod
    def _tensor_contents(row: _Row) -> list[int | None]:
        """Per RecvTensorResponse in the packet: the length of its tensor_content, or None."""
        names = row.cursor("protobuf.field.name").values
        wire_types = row.cursor("protobuf.field.wiretype").values
        lengths = row.cursor("protobuf.field.value.length")
        contents: list[int | None] = []
        for name, wire_type in zip(names, wire_types):
            length = int(lengths.take()) if wire_type == "2" else None
            if name == "tensor":
                contents.append(None)
            elif name == "tensor_content" and contents and contents[-1] is None:
                contents[-1] = length
        return contents


def _replace_messages(frame: Http2Frame, messages: tuple[GrpcMessage, ...]) -> Http2Frame:
    import dataclasses

    return dataclasses.replace(frame, grpc_messages=messages)


def _run_lines(command: list[str], path: Path) -> Iterator[str]:
    """Stream tshark's stdout line by line; raise on failure (a truncated file is not one)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               encoding="utf-8", errors="replace", bufsize=1 << 20)
    try:
        yield from process.stdout
    finally:
        process.stdout.close()
        stderr = process.stderr.read()
        process.stderr.close()
        status = process.wait()
    lowered = stderr.lower()
    if "cut short" in lowered or "less data was read than was expected" in lowered or "truncated" in lowered:
        raise TruncatedCapture(path, "the file is cut short (tshark: "
                               f"{_first_error(stderr)})")
    if status != 0:
        message = _first_error(stderr)
        if "isn't a capture file" in lowered or "unknown format" in lowered or "not a capture" in lowered:
            raise MalformedCapture(path, f"not a capture file tshark can read ({message})")
        raise TsharkError(path, f"tshark failed with status {status}: {message}")


def _first_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and "Running as user" not in ln]
    return " ".join(lines[:2])[:300] or "no message"


def find_http2_ports(path: Path, tshark: str) -> frozenset[int]:
    """Server ports of the connections whose client opens with the HTTP/2 preface."""
    preface = ":".join(f"{b:02x}" for b in PREFACE)
    command = [tshark, "-r", str(path), "-n", "-o", "tcp.desegment_tcp_streams:FALSE",
               "-Y", f"tcp.payload[0:{len(PREFACE)}] == {preface}", "-T", "fields", "-e", "tcp.dstport"]
    ports = set()
    try:
        for line in _run_lines(command, path):
            if line.strip():
                ports.add(int(line.split("\t")[0]))
    except TruncatedCapture:
        pass  # reported by the main pass
    return frozenset(ports)


def decode(path: str | os.PathLike, server_ports: frozenset[int] | None = None, strict: bool = False
           ) -> BackendResult:
    """Decode ``path`` with tshark; see the module docstring."""
    path = Path(path)
    tshark = tshark_path()
    if tshark is None:
        raise TsharkError(path, "tshark is not installed (apt-get install tshark)")
    if not path.is_file():
        raise MalformedCapture(path, "no such file")
    with tempfile.TemporaryDirectory(prefix="netcapture-tshark-") as work_dir:
        (Path(work_dir) / "tfsim_recv_tensor.proto").write_text(RECV_TENSOR_PROTO)
        try:
            return _decode(path, path, server_ports, strict, tshark, work_dir)
        except TsharkError as exc:
            if "damaged or corrupt" not in exc.problem:
                raise
        # tshark rejects the file at its first bad record: hand it the packets our reader can
        # salvage (those before the damage, every capture of a back-to-back file).
        copy = Path(work_dir) / "salvaged.pcap"
        _, notes = salvage_copy(path, copy)
        if strict and notes:
            raise CorruptTail(path, notes[-1])
        result = _decode(path, copy, server_ports, strict, tshark, work_dir)
        return dataclasses.replace(result, truncated=result.truncated or any("damaged" in n for n in notes),
                                   warnings=tuple(notes) + result.warnings)


def _decode(path: Path, source: Path, server_ports: frozenset[int] | None, strict: bool, tshark: str,
            work_dir: str) -> BackendResult:
    """Decode ``source`` (``path`` or a salvaged copy of it; ``work_dir`` holds the RecvTensor
    .proto); messages name ``path``."""
    ports = server_ports if server_ports is not None else find_http2_ports(source, tshark)
    decoder = _Decoder(path)
    truncated = False
    command = [
        tshark, "-r", str(source), "-n",
        "-o", "tcp.desegment_tcp_streams:TRUE", "-o", "tcp.reassemble_out_of_order:TRUE",
        "-o", "protobuf.pbf_as_hf:TRUE", "-o", "protobuf.preload_protos:TRUE",
        "-o", f'uat:protobuf_search_paths:"{work_dir}","TRUE"',
    ]
    for port in sorted(ports):
        command += ["-d", f"tcp.port=={port},http2"]
    command += ["-T", "fields", "-E", "occurrence=a", "-E", f"aggregator={AGGREGATOR}", "-E", "separator=/t",
                "-E", "quote=n", "-E", "header=n"]
    for field in FIELDS:
        command += ["-e", field]
    try:
        for line in _run_lines(command, path):
            decoder.row(_Row(line))
    except TruncatedCapture as exc:
        if strict:
            raise TruncatedCapture(path, f"{exc.problem}; {decoder.packets} complete packets read") from None
        truncated = True
        decoder.warn(None, f"the file is cut short: the capture ends inside a packet after "
                     f"{decoder.packets} complete packets")
    losses, redo = decoder.assess(server_ports)
    redone = {c.index for c in decoder.connections.values() if c.endpoints in redo}
    warnings = [note for index, note in decoder.notes if index not in redone]
    frames = [frame for frame in decoder.frames if _endpoints(frame.connection) not in redo]
    others = sum(1 for c in decoder.connections.values() if c.id is None and c.index not in redone)
    tcp, gaps, damaged = (), (), frozenset()
    if redo:
        own = decode_segments(path, _segments(source, redo, tshark, path), (decoder.packets, decoder.last_time_ns),
                              server_ports)
        http2 = {_endpoints(loss.connection) for loss in own.losses}  # (a connection found not HTTP/2: no note)
        for endpoints, reason in redo.items():
            if endpoints in http2:
                a, b = sorted(endpoints)
                warnings.append(f"{Endpoint(*a)} <-> {Endpoint(*b)}: Wireshark's HTTP/2 dissector cannot decode this "
                                f"connection whole ({reason}); decoded from tshark's TCP payload by netcapture's "
                                "own HTTP/2 decoder, as the default backend does")
        frames += own.frames
        losses += own.losses
        tcp, gaps, damaged = own.tcp, own.gaps, own.damaged_streams
        warnings += own.warnings
        others += own.other_tcp_connections
    # Capture order. A connection's frames seen before its client preface (a server's SETTINGS
    # sent first) are decoded only once the preface comes, after other connections' later
    # frames; a packet's own frames keep their order (the sort is stable).
    frames.sort(key=lambda frame: frame.packet_number)
    return BackendResult(path=path, backend="tshark", packets=decoder.packets, file_format=_format(path),
                         truncated=truncated, kernel_drops=None, frames=tuple(frames), tcp=tcp, gaps=gaps,
                         losses=losses, damaged_streams=damaged, warnings=tuple(warnings),
                         other_tcp_connections=others)


def _endpoints(connection: ConnectionId) -> frozenset:
    return frozenset(((connection.client_ip, connection.client_port), (connection.server_ip, connection.server_port)))


def _segments(source: Path, redo: dict[frozenset, str], tshark: str, path: Path
              ) -> Iterator[tuple[TcpSegment, int, int]]:
    """The TCP segments of the 4-tuples in ``redo``, from tshark without reassembly, in file
    order: ``(segment, packet number, time in ns)``, for
    :func:`netcapture.scapy_backend.decode_segments`."""
    matches = []
    for endpoints in sorted(redo, key=sorted):
        (ip_a, port_a), (ip_b, port_b) = sorted(endpoints)
        address = "ipv6.addr" if ":" in ip_a else "ip.addr"
        matches.append(f"({address}=={ip_a} && {address}=={ip_b} && tcp.port=={port_a} && tcp.port=={port_b})")
    command = [tshark, "-r", str(source), "-n", "-o", "tcp.desegment_tcp_streams:FALSE",
               "-Y", f"tcp && !icmp && !icmpv6 && ({' || '.join(matches)})",
               "-T", "fields", "-E", "occurrence=a", "-E", f"aggregator={AGGREGATOR}", "-E", "separator=/t",
               "-E", "quote=n", "-E", "header=n"]
    for field in SEGMENT_FIELDS:
        command += ["-e", field]
    try:
        for line in _run_lines(command, path):
            row = _Row(line, _SEGMENT_INDEX)
            src = (row.last("ip.src") or row.last("ipv6.src"), int(row.first("tcp.srcport")))
            dst = (row.last("ip.dst") or row.last("ipv6.dst"), int(row.first("tcp.dstport")))
            if frozenset((src, dst)) not in redo:
                continue  # the same addresses and ports, paired the other way round
            payload = bytes.fromhex(row.first("tcp.payload"))
            if len(payload) != int(row.first("tcp.len") or 0):
                raise TsharkError(path, f"packet {row.get('frame.number')}: tshark gave {len(payload)} bytes of TCP "
                                  f"payload for a segment of {row.first('tcp.len')}")
            segment = TcpSegment(src[0], src[1], dst[0], dst[1], int(row.first("tcp.seq_raw")),
                                 int(row.first("tcp.ack_raw") or 0), int(row.first("tcp.flags"), 16) & TCP_FLAG_BITS,
                                 payload)
            yield segment, int(row.get("frame.number")), _epoch_ns(row.get("frame.time_epoch"))
    except TruncatedCapture:
        return  # the first pass said where the file stops


def _coverage(segments: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    """``(bytes covered, span from the lowest to the highest sequence number, holes)`` of a
    direction's ``(seq, nxtseq, time)`` segments (retransmissions and overlaps counted once)."""
    if not segments:
        return 0, 0, 0
    covered = holes = 0
    ordered = sorted(segments)
    start, end, _ = ordered[0]
    for seq, nxt, _ in ordered[1:]:
        if seq > end:
            covered += end - start
            holes += 1
            start, end = seq, nxt
        else:
            end = max(end, nxt)
    covered += end - start
    return covered, end - ordered[0][0], holes


def _completed_from_the_past(segments: list[tuple[int, int, int]], frame_ends: list[int]) -> bool:
    """Whether, in file order, a hole in a direction's ``(seq, nxtseq, time)`` segments was
    filled by a packet stamped earlier than data waiting behind the hole that completes a frame
    (one of the sorted ``frame_ends``). Wireshark gives such a frame the filler's time;
    netcapture the later of the two (:meth:`netcapture.tcp.DirectionReassembler._drain`), the
    time the frame's bytes were all there in a capture whose file order is not time order."""
    if not segments:
        return False
    contiguous = min(seq for seq, _, _ in segments)
    waiting: list[tuple[int, int, int]] = []  # (seq, nxtseq, time) beyond a hole
    for seq, nxt, time_ns in segments:
        if seq > contiguous:
            waiting.append((seq, nxt, time_ns))
            continue
        contiguous = max(contiguous, nxt)
        while waiting:
            ready = sorted(w for w in waiting if w[0] <= contiguous)
            if not ready:
                break
            waiting = [w for w in waiting if w[0] > contiguous]
            for w_seq, w_nxt, w_time in ready:
                new_from = max(w_seq, contiguous)
                if w_time > time_ns and bisect.bisect_right(frame_ends, w_nxt) > bisect.bisect_right(frame_ends,
                                                                                                     new_from):
                    return True
                contiguous = max(contiguous, w_nxt)
    return False


def _format(path: Path) -> str:
    from netcapture.pcap import open_capture

    with open_capture(path) as handle:
        try:
            magic = handle.read(4)
        except (OSError, EOFError):
            return ""
    return "pcapng" if magic == b"\x0a\x0d\x0d\x0a" else "pcap"
