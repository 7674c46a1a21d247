"""netcapture on hand-made captures: each defect or corner case with its documented outcome.

The captures are built here byte by byte (Ethernet/IPv4/TCP with struct, HTTP/2 frames
with hyperframe and hpack's encoder), and the expected outcome is computed here
independently: which packet completes each frame follows from which byte ranges have
arrived, in file order. Where tshark is installed, its backend must agree frame for frame.
"""

from __future__ import annotations

import dataclasses
import gzip
import re
import shutil
import socket
import struct
import warnings

import pytest
from hpack import Encoder
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from calibration.runmatch import MatchError, match_run
from netcapture import CaptureWarning, MalformedCapture, NoHttp2Error, SnaplenError, TruncatedCapture, read_capture
from netcapture.grpc import RECV_TENSOR_PATH
from netcapture.http2 import DATA, HEADERS, PREFACE

HAVE_TSHARK = shutil.which("tshark") is not None
needs_tshark = pytest.mark.skipif(not HAVE_TSHARK, reason="tshark is not installed (apt-get install tshark): "
                                  "the tshark backend is the reference the scapy backend is checked against")
BACKENDS = ["scapy", pytest.param("tshark", marks=needs_tshark)]

CLIENT = ("10.1.0.1", 41000)
SERVER = ("10.1.0.2", 50051)
SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01
KEY = ("/job:ps/replica:0/task:0/device:CPU:0;0123456789abcdef;/job:worker/replica:0/task:0/device:CPU:0;"
       "edge_32_affine0/MatMul/ReadVariableOp;0:0")


# -- building captures ---------------------------------------------------------------------

def tcp_packet(src, dst, seq, ack, flags, payload=b""):
    tcp = struct.pack("!HHIIBBHHH", src[1], dst[1], seq & 0xFFFFFFFF, ack, 5 << 4, flags, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0,
                     socket.inet_aton(src[0]), socket.inet_aton(dst[0]))
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp


def pcap_bytes(packets, nanoseconds=False, snaplen=262144):
    """Classic pcap: ``packets`` are (time_ns, data) or (time_ns, data, wire_len)."""
    magic = 0xA1B23C4D if nanoseconds else 0xA1B2C3D4
    out = [struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, 1)]
    for item in packets:
        time_ns, data = item[0], item[1]
        wire = item[2] if len(item) > 2 else len(data)
        sec, rest = divmod(time_ns, 10**9)
        out.append(struct.pack("<IIII", sec, rest if nanoseconds else rest // 1000, len(data), wire) + data)
    return b"".join(out)


def pcapng_bytes(packets):
    """pcapng with nanosecond resolution (if_tsresol = 9)."""
    def block(kind, body):
        body += b"\x00" * (-len(body) % 4)
        return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)
    out = [block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)),
           block(1, struct.pack("<HHI", 1, 0, 262144) + struct.pack("<HHB3x", 9, 1, 9) + b"\x00" * 4)]
    for time_ns, data in packets:
        out.append(block(6, struct.pack("<IIIII", 0, time_ns >> 32, time_ns & 0xFFFFFFFF, len(data), len(data))
                         + data))
    return b"".join(out)


@dataclasses.dataclass
class Segment:
    from_client: bool
    offset: int  # in its direction's byte stream
    payload: bytes
    flags: int = PSH | ACK


@dataclasses.dataclass
class Conversation:
    """One TCP connection: the two byte streams, their frames, and the segments to send."""

    client_stream: bytes = b""
    server_stream: bytes = b""
    client_frames: list = dataclasses.field(default_factory=list)  # (end offset, type, flags, stream, length)
    server_frames: list = dataclasses.field(default_factory=list)
    isn_client: int = 1000
    isn_server: int = 900_000

    def add(self, from_client, frame_bytes, *, frame=True):
        if from_client:
            self.client_stream += frame_bytes
            if frame:
                self.client_frames.append((len(self.client_stream), *_header(frame_bytes)))
        else:
            self.server_stream += frame_bytes
            if frame:
                self.server_frames.append((len(self.server_stream), *_header(frame_bytes)))

    def segments(self, size=1000, client_size=None):
        """Both streams cut into segments, client first then server, interleaved in order of offset."""
        result = []
        for from_client, stream, step in ((True, self.client_stream, client_size or size),
                                          (False, self.server_stream, size)):
            result += [Segment(from_client, o, stream[o: o + step]) for o in range(0, len(stream), step)]
        return result


def _header(frame_bytes):
    length = int.from_bytes(frame_bytes[:3], "big")
    return frame_bytes[3], frame_bytes[4], int.from_bytes(frame_bytes[5:9], "big") & 0x7FFFFFFF, length


def grpc_message(body):
    return b"\x00" + len(body).to_bytes(4, "big") + body


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, wire_type, value):
    tag = varint(number << 3 | wire_type)
    return tag + (varint(value) if wire_type == 0 else varint(len(value)) + value)


def recv_tensor_request(step_id, key):
    return field(1, 0, step_id) + field(2, 2, key.encode()) + field(7, 0, 12345)


def recv_tensor_response(content, shape):
    shape_proto = b"".join(field(2, 2, field(1, 0, d)) for d in shape)
    tensor = field(1, 0, 1) + field(2, 2, shape_proto) + field(4, 2, content)
    return field(3, 0, 1_795_000_000_000_000) + field(1, 2, tensor)  # as TF writes it: small fields first


def grpc_conversation(tensor_bytes=40_000, max_frame=16_384, streams=(1,), split_headers=False, pad=0):
    """A RecvTensor exchange per stream id, with SETTINGS, WINDOW_UPDATE and PING around it."""
    conv = Conversation()
    client_hpack, server_hpack = Encoder(), Encoder()
    conv.add(True, PREFACE, frame=False)
    conv.add(True, SettingsFrame(0, settings={4: 4_194_304, 5: 4_194_304}).serialize())
    conv.add(True, WindowUpdateFrame(0, window_increment=4_128_769).serialize())
    conv.add(False, SettingsFrame(0, settings={4: 4_194_304, 5: 4_194_304}).serialize())
    conv.add(False, SettingsFrame(0, flags=["ACK"]).serialize())
    conv.add(True, SettingsFrame(0, flags=["ACK"]).serialize())
    for stream in streams:
        block = client_hpack.encode([(":method", "POST"), (":scheme", "http"), (":path", RECV_TENSOR_PATH),
                                     (":authority", f"{SERVER[0]}:{SERVER[1]}"), ("content-type", "application/grpc"),
                                     ("te", "trailers")])
        if split_headers:
            conv.add(True, HeadersFrame(stream, data=block[:10]).serialize())
            conv.add(True, ContinuationFrame(stream, data=block[10:20]).serialize())
            conv.add(True, ContinuationFrame(stream, data=block[20:], flags=["END_HEADERS"]).serialize())
        else:
            conv.add(True, HeadersFrame(stream, data=block, flags=["END_HEADERS"]).serialize())
        conv.add(True, WindowUpdateFrame(stream, window_increment=5).serialize())
        conv.add(True, DataFrame(stream, data=grpc_message(recv_tensor_request(7_000 + stream, KEY)),
                                 flags=["END_STREAM"]).serialize())
    conv.add(True, PingFrame(0, opaque_data=b"\x01\x02\x03\x04\x05\x06\x07\x08").serialize())
    conv.add(False, PingFrame(0, opaque_data=b"\x01\x02\x03\x04\x05\x06\x07\x08", flags=["ACK"]).serialize())
    for stream in streams:
        content = bytes(range(256)) * (tensor_bytes // 256) + b"\x07" * (tensor_bytes % 256)
        message = grpc_message(recv_tensor_response(content, (tensor_bytes // 4,)))
        conv.add(False, HeadersFrame(stream, data=server_hpack.encode(
            [(":status", "200"), ("content-type", "application/grpc")]), flags=["END_HEADERS"]).serialize())
        for start in range(0, len(message), max_frame):
            chunk = message[start: start + max_frame]
            if pad:
                conv.add(False, DataFrame(stream, data=chunk, pad_length=pad, flags=["PADDED"]).serialize())
            else:
                conv.add(False, DataFrame(stream, data=chunk).serialize())
        conv.add(False, HeadersFrame(stream, data=server_hpack.encode([("grpc-status", "0")]),
                                     flags=["END_HEADERS", "END_STREAM"]).serialize())
        conv.add(True, WindowUpdateFrame(0, window_increment=len(message)).serialize())
    return conv


def build_packets(conv, segments, handshake=True, start_ns=1_700_000_000_000_000_000):
    """(time_ns, bytes) per packet, in the order given; each packet 10 µs after the previous."""
    packets = []
    time_ns = start_ns

    def emit(data):
        nonlocal time_ns
        packets.append((time_ns, data))
        time_ns += 10_000

    if handshake:
        emit(tcp_packet(CLIENT, SERVER, conv.isn_client, 0, SYN))
        emit(tcp_packet(SERVER, CLIENT, conv.isn_server, conv.isn_client + 1, SYN | ACK))
        emit(tcp_packet(CLIENT, SERVER, conv.isn_client + 1, conv.isn_server + 1, ACK))
    for seg in segments:
        if seg.from_client:
            emit(tcp_packet(CLIENT, SERVER, conv.isn_client + 1 + seg.offset, conv.isn_server + 1, seg.flags,
                            seg.payload))
        else:
            emit(tcp_packet(SERVER, CLIENT, conv.isn_server + 1 + seg.offset, conv.isn_client + 1, seg.flags,
                            seg.payload))
    return packets


def expected_frames(conv, segments, first_number=4):
    """(packet number, from_client, type, flags, stream, length) per frame, from byte coverage."""
    covered = {True: bytearray(len(conv.client_stream)), False: bytearray(len(conv.server_stream))}
    frames = {True: list(conv.client_frames), False: list(conv.server_frames)}
    contiguous = {True: 0, False: 0}
    out = []
    for number, seg in enumerate(segments, start=first_number):
        direction = seg.from_client
        covered[direction][seg.offset: seg.offset + len(seg.payload)] = b"\x01" * len(seg.payload)
        while contiguous[direction] < len(covered[direction]) and covered[direction][contiguous[direction]]:
            contiguous[direction] += 1
        while frames[direction] and frames[direction][0][0] <= contiguous[direction]:
            _end, kind, flags, stream, length = frames[direction].pop(0)
            out.append((number, direction, kind, flags, stream, length))
    return out


def write(tmp_path, name, data, compress=False):
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def frame_keys(capture):
    return [(f.packet_number, f.from_client, f.type, f.flags, f.stream_id, f.length) for f in capture.frames]


def read_quietly(path, backend, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        return read_capture(path, backend, **kwargs)


# -- frame timing, reordering, duplicates ----------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_frames_split_across_segments_get_the_time_of_the_completing_packet(tmp_path, backend):
    conv = grpc_conversation(tensor_bytes=40_000, max_frame=16_384)
    segments = conv.segments(size=3_000, client_size=50)  # every DATA frame spans several segments
    path = write(tmp_path, "split.pcap", pcap_bytes(build_packets(conv, segments)))
    capture = read_quietly(path, backend)
    assert frame_keys(capture) == expected_frames(conv, segments)
    times = {f.packet_number: f.time_ns for f in capture.frames}
    packets = build_packets(conv, segments)
    assert all(times[n] == packets[n - 1][0] for n in times)
    (stream,) = capture.streams
    assert stream.tensor_name == "edge_32_affine0/MatMul/ReadVariableOp"
    assert stream.step_id == 7_001 and stream.tensor_content_bytes == 40_000
    assert stream.response_message_bytes == len(recv_tensor_response(b"\0" * 40_000, (10_000,)))
    assert stream.response_data_bytes == stream.response_message_bytes + 5
    assert [e.length_bytes for e in stream.response_frames] == [16_384, 16_384, stream.response_data_bytes - 32_768]
    assert stream.grpc_status == 0 and stream.complete


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_order_segments_complete_frames_at_the_packet_that_fills_the_hole(tmp_path, backend):
    conv = grpc_conversation(tensor_bytes=30_000, streams=(1, 3))
    segments = conv.segments(size=2_000, client_size=120)
    # Swap neighbours and move one segment far back, in both directions.
    for i in range(2, len(segments) - 1, 5):
        segments[i], segments[i + 1] = segments[i + 1], segments[i]
    segments.append(segments.pop(7))
    path = write(tmp_path, "ooo.pcap", pcap_bytes(build_packets(conv, segments)))
    capture = read_quietly(path, backend)
    assert frame_keys(capture) == expected_frames(conv, segments)
    if backend == "scapy":
        assert sum(t.out_of_order_segments for t in capture.tcp) >= 5
        assert not capture.gaps
    assert {s.stream_id: s.tensor_content_bytes for s in capture.streams} == {1: 30_000, 3: 30_000}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_frame_completed_behind_a_hole_gets_the_later_stamp_when_the_file_is_out_of_time_order(tmp_path, backend):
    conv = grpc_conversation(tensor_bytes=30_000)
    segments = conv.segments(size=2_000, client_size=120)
    ends = [end for end, *_ in conv.server_frames]
    # Two server segments in a row, the second completing a frame: swapped in the file, stamps kept.
    k = next(i for i in range(len(segments) - 1) if not segments[i].from_client and not segments[i + 1].from_client
             and any(segments[i + 1].offset < end <= segments[i + 1].offset + len(segments[i + 1].payload)
                     for end in ends))
    packets = build_packets(conv, segments)
    first, second = 3 + k, 4 + k  # list indexes after the 3 handshake packets
    packets[first], packets[second] = packets[second], packets[first]
    path = write(tmp_path, "stamps.pcap", pcap_bytes(packets, nanoseconds=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capture = read_capture(path, backend)
    later, filler = packets[first][0], packets[second][0]
    # The filler's packet completes its own frames (its stamp) and the waiting data's (the later one).
    stamps = {f.time_ns for f in capture.frames if f.packet_number == second + 1 and not f.from_client}
    assert later > filler and later in stamps and stamps <= {filler, later}
    notes = [str(w.message) for w in caught]
    assert any("out of time order" in n for n in notes) == (backend == "tshark")


@pytest.mark.parametrize("backend", BACKENDS)
def test_retransmitted_bytes_are_dropped_once_delivered(tmp_path, backend):
    conv = grpc_conversation(tensor_bytes=20_000)
    segments = conv.segments(size=1_500, client_size=200)
    resent = [segments[4], segments[9], segments[12]]
    assert not any(s.from_client for s in segments[12:15])
    base = segments[12].offset
    # exact retransmissions, and a repacketised segment that overlaps two delivered ones
    # (2,300 old bytes) and brings 600 new ones, which the next original segment repeats
    overlap = Segment(False, base + 700, conv.server_stream[base + 700: base + 3_600])
    with_dups = segments[:14] + [*resent, overlap] + segments[14:]
    path = write(tmp_path, "retrans.pcap", pcap_bytes(build_packets(conv, with_dups)))
    capture = read_quietly(path, backend)
    assert frame_keys(capture) == expected_frames(conv, with_dups)
    assert len(capture.frames) == len(conv.client_frames) + len(conv.server_frames)
    if backend == "scapy":
        assert sum(t.duplicate_bytes for t in capture.tcp) == sum(len(s.payload) for s in resent) + 2_300 + 600


@pytest.mark.parametrize("backend", BACKENDS)
def test_sequence_numbers_wrapping_past_2_to_the_32(tmp_path, backend):
    conv = grpc_conversation(tensor_bytes=20_000)
    conv.isn_server = (1 << 32) - 5_000
    segments = conv.segments(size=1_400)
    path = write(tmp_path, "wrap.pcap", pcap_bytes(build_packets(conv, segments)))
    capture = read_quietly(path, backend)
    assert frame_keys(capture) == expected_frames(conv, segments)
    assert capture.streams[0].tensor_content_bytes == 20_000


# -- HTTP/2 corners -------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_continuation_frames_end_the_header_block(tmp_path, backend):
    conv = grpc_conversation(tensor_bytes=5_000, split_headers=True)
    segments = conv.segments(size=1_000, client_size=30)
    path = write(tmp_path, "cont.pcap", pcap_bytes(build_packets(conv, segments)))
    capture = read_quietly(path, backend)
    assert frame_keys(capture) == expected_frames(conv, segments)
    client_headers = [f for f in capture.frames if f.from_client and f.type in (HEADERS, 9)]
    assert [f.headers is None for f in client_headers] == [True, True, False]
    assert dict(client_headers[-1].headers)[":path"] == RECV_TENSOR_PATH
    stream = capture.streams[0]
    assert stream.rpc_path == RECV_TENSOR_PATH and stream.request_headers_time_s == client_headers[0].time_s


@pytest.mark.parametrize("backend", BACKENDS)
def test_padded_data_frames(tmp_path, backend):
    conv = grpc_conversation(tensor_bytes=9_000, max_frame=4_000, pad=17)
    segments = conv.segments(size=1_200)
    path = write(tmp_path, "pad.pcap", pcap_bytes(build_packets(conv, segments)))
    capture = read_quietly(path, backend)
    assert frame_keys(capture) == expected_frames(conv, segments)
    data = [f for f in capture.frames if f.type == DATA and not f.from_client]
    assert all(f.data_bytes == f.length - 18 for f in data)
    stream = capture.streams[0]
    assert stream.response_data_bytes == stream.response_message_bytes + 5
    assert stream.tensor_content_bytes == 9_000


@pytest.mark.parametrize("backend", BACKENDS)
def test_grpc_messages_spanning_and_sharing_data_frames(tmp_path, backend):
    """A streaming RPC: three messages in two DATA frames (one spans both, one shares the second)."""
    conv = Conversation()
    hp_client, hp_server = Encoder(), Encoder()
    conv.add(True, PREFACE, frame=False)
    conv.add(True, SettingsFrame(0).serialize())
    conv.add(False, SettingsFrame(0).serialize())
    conv.add(True, HeadersFrame(1, data=hp_client.encode([(":method", "POST"), (":scheme", "http"),
                                                          (":path", "/demo.Echo/Stream"), (":authority", "x"),
                                                          ("content-type", "application/grpc")]),
                                flags=["END_HEADERS"]).serialize())
    # valid protobuf bodies of 100, 300 and 50 bytes (tshark stops at a body that does not parse)
    messages = (grpc_message(field(1, 2, b"a" * 98)) + grpc_message(field(1, 2, b"b" * 297))
                + grpc_message(field(1, 2, b"c" * 48)))
    conv.add(True, DataFrame(1, data=messages[:200]).serialize())
    conv.add(True, DataFrame(1, data=messages[200:], flags=["END_STREAM"]).serialize())
    conv.add(False, HeadersFrame(1, data=hp_server.encode([(":status", "200"), ("content-type", "application/grpc"),
                                                           ("grpc-status", "0")]),
                                 flags=["END_HEADERS", "END_STREAM"]).serialize())
    segments = conv.segments(size=5_000)
    path = write(tmp_path, "stream.pcap", pcap_bytes(build_packets(conv, segments)))
    capture = read_quietly(path, backend)
    data = [f for f in capture.frames if f.type == DATA]
    assert [[m.length_bytes for m in f.grpc_messages] for f in data] == [[100], [300, 50]]
    (stream,) = capture.streams
    assert (stream.request_messages, stream.request_message_bytes) == (3, 450)
    assert stream.rendezvous_key is None and not stream.is_recv_tensor


@pytest.mark.parametrize("backend", BACKENDS)
def test_flow_control_windows_follow_settings_and_window_updates(tmp_path, backend):
    conv = Conversation()
    hp = Encoder()
    conv.add(True, PREFACE, frame=False)
    conv.add(True, SettingsFrame(0, settings={4: 10_000}).serialize())
    conv.add(False, SettingsFrame(0).serialize())
    conv.add(False, SettingsFrame(0, flags=["ACK"]).serialize())
    conv.add(True, HeadersFrame(1, data=hp.encode([(":method", "GET"), (":scheme", "http"), (":path", "/"),
                                                   (":authority", "x")]),
                                flags=["END_HEADERS", "END_STREAM"]).serialize())
    hs = Encoder()
    conv.add(False, HeadersFrame(1, data=hs.encode([(":status", "200")]), flags=["END_HEADERS"]).serialize())
    conv.add(False, DataFrame(1, data=b"x" * 8_000).serialize())
    conv.add(True, WindowUpdateFrame(1, window_increment=3_000).serialize())
    conv.add(True, SettingsFrame(0, settings={4: 20_000}).serialize())  # +10,000 for the open stream
    conv.add(False, DataFrame(1, data=b"y" * 9_000, flags=["END_STREAM"]).serialize())
    conv.add(True, WindowUpdateFrame(0, window_increment=17_000).serialize())
    conv.add(True, PriorityFrame(3, depends_on=1, stream_weight=16).serialize())
    conv.add(True, RstStreamFrame(3, error_code=8).serialize())
    segments = conv.segments(size=4_000)
    path = write(tmp_path, "window.pcap", pcap_bytes(build_packets(conv, segments)))
    capture = read_quietly(path, backend)
    assert frame_keys(capture) == expected_frames(conv, segments)
    server_data = capture.flow_control_of(capture.streams[0], data_from_client=False)
    assert [v for _, v in server_data.initial_window_timeline] == [10_000, 20_000]
    stream_1 = [s.window_bytes for s in server_data.stream_windows if s.stream_id == 1]
    # in file order: the client's frames (all of its segments come first), then the server's
    assert stream_1 == [10_000, 13_000, 23_000, 15_000, 6_000]
    assert [s.window_bytes for s in server_data.connection_window] == [82_535, 74_535, 65_535]
    assert [(u.stream_id, u.increment_bytes) for u in server_data.window_updates] == [(1, 3_000), (0, 17_000)]
    assert dict(capture.connections[0].frames_by_type)["PRIORITY"] == 1
    assert capture.connections[0].skipped_frames == 1
    rst = next(s for s in capture.streams if s.stream_id == 3)
    assert rst.reset_error_code == 8


# -- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("compress", [False, True], ids=["pcap", "pcap.gz"])
def test_truncated_file_warns_with_the_packet_count_or_raises_when_strict(tmp_path, backend, compress):
    conv = grpc_conversation(tensor_bytes=20_000)
    segments = conv.segments(size=1_500)
    packets = build_packets(conv, segments)
    data = pcap_bytes(packets)
    cut = data[: len(data) - 700]  # inside the last record
    path = write(tmp_path, "cut.pcap" + (".gz" if compress else ""), cut, compress=compress)
    if compress:  # a gzip stream cut short, not a complete gzip of a cut pcap
        path.write_bytes(gzip.compress(data)[:-40])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capture = read_capture(path, backend)
    notes = [str(w.message) for w in caught if issubclass(w.category, CaptureWarning)]
    assert any(re.search(r"cut\.pcap(\.gz)?: .*cut short.*\d+ complete packets", n) for n in notes), notes
    assert capture.truncated
    assert 0 < capture.packets < len(packets)
    with pytest.raises(TruncatedCapture, match=str(path.name)):
        read_capture(path, backend, strict=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_snaplen_cut_capture_says_capture_with_s0(tmp_path, backend):
    conv = grpc_conversation(tensor_bytes=20_000)
    packets = build_packets(conv, conv.segments(size=1_500))
    cut = [(t, d[:96], len(d)) for t, d in packets]  # as with tcpdump -s 96
    path = write(tmp_path, "snap.pcap", pcap_bytes(cut, snaplen=96))
    with pytest.raises(SnaplenError, match=r"snap\.pcap.*capture with -s 0"):
        read_capture(path, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_capture_without_http2(tmp_path, backend):
    conv = Conversation()
    conv.add(True, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 10, frame=False)
    conv.add(False, b"HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n" + b"z" * 3000, frame=False)
    path = write(tmp_path, "plain.pcap", pcap_bytes(build_packets(conv, conv.segments(size=800))))
    with pytest.raises(NoHttp2Error, match=r"plain\.pcap: no HTTP/2 traffic"):
        read_capture(path, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_grpc_http2_decodes_but_matches_no_tensor(tmp_path, backend):
    conv = Conversation()
    hp_client, hp_server = Encoder(), Encoder()
    conv.add(True, PREFACE, frame=False)
    conv.add(True, SettingsFrame(0).serialize())
    conv.add(False, SettingsFrame(0).serialize())
    conv.add(True, HeadersFrame(1, data=hp_client.encode([(":method", "GET"), (":scheme", "http"),
                                                          (":path", "/index.html"), (":authority", "x")]),
                                flags=["END_HEADERS", "END_STREAM"]).serialize())
    conv.add(False, HeadersFrame(1, data=hp_server.encode([(":status", "200"), ("content-type", "text/html")]),
                                 flags=["END_HEADERS"]).serialize())
    conv.add(False, DataFrame(1, data=b"<html>" * 1000, flags=["END_STREAM"]).serialize())
    path = write(tmp_path, "web.pcap", pcap_bytes(build_packets(conv, conv.segments(size=1_000))))
    with pytest.warns(CaptureWarning, match="no gRPC"):
        capture = read_capture(path, backend)
    (stream,) = capture.streams
    assert (stream.rpc_path, stream.content_type, stream.is_grpc) == ("/index.html", "text/html", False)
    assert stream.response_data_bytes == 6_000 and stream.response_messages == 0
    run = _bundled_run()
    with pytest.raises(MatchError, match="same run"):
        match_run(capture, run)


@pytest.mark.parametrize("backend", BACKENDS)
def test_connection_captured_after_its_start_is_not_decoded(tmp_path, backend):
    conv = grpc_conversation(tensor_bytes=20_000)
    segments = conv.segments(size=1_500)[6:]  # the preface and SETTINGS were before the capture
    path = write(tmp_path, "late.pcap", pcap_bytes(build_packets(conv, segments, handshake=False)))
    with pytest.raises(NoHttp2Error, match="1 TCP connection"):
        read_capture(path, backend)


def test_not_a_capture_file(tmp_path):
    path = write(tmp_path, "notes.txt", b"this is not a capture\n" * 10)
    with pytest.raises(MalformedCapture, match=r"notes\.txt: not a pcap or pcapng"):
        read_capture(path)


# -- file formats -------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["pcap-ns", "pcapng", "pcapng.gz"])
def test_pcap_nanosecond_and_pcapng_give_the_same_frames(tmp_path, backend, kind):
    conv = grpc_conversation(tensor_bytes=12_000)
    segments = conv.segments(size=1_400)
    packets = [(t + 123, d) for t, d in build_packets(conv, segments)]  # sub-microsecond times
    if kind == "pcap-ns":
        path = write(tmp_path, "x.pcap", pcap_bytes(packets, nanoseconds=True))
    else:
        path = write(tmp_path, "x." + kind, pcapng_bytes(packets), compress=kind.endswith(".gz"))
    capture = read_quietly(path, backend)
    assert frame_keys(capture) == expected_frames(conv, segments)
    assert {f.time_ns % 1000 for f in capture.frames} == {123}
    assert capture.file_format == ("pcap" if kind == "pcap-ns" else "pcapng")


def _bundled_run():
    from pathlib import Path

    return Path(__file__).resolve().parents[1] / "data" / "captures" / "tiny_lo"
