"""netcapture's layers one at a time: pcap reading, headers, TCP reassembly, HTTP/2 and gRPC
framing, the RecvTensor protobuf, and iperf3 results."""

from __future__ import annotations

import gzip
import json
import socket
import struct
import tracemalloc
import zlib
from pathlib import Path

import pytest
from hyperframe.frame import DataFrame, SettingsFrame, WindowUpdateFrame
from hypothesis import given, settings
from hypothesis import strategies as st

from netcapture import IperfError, MalformedCapture, TruncatedCapture, read_iperf, summarise_iperf
from netcapture.errors import MalformedFrame, NeedMoreData
from netcapture.grpc import (
    GrpcDeframer,
    RendezvousKey,
    parse_recv_tensor_request,
    tensor_content_bytes,
    tensor_name,
)
from netcapture.http2 import FLAG_END_HEADERS, HEADERS, PREFACE, FrameSplitter, parse_frame
from netcapture.layers import TcpSegment, decode_tcp, decode_tcp_scapy
from netcapture.pcap import PcapReader, iter_packets
from netcapture.tcp import DirectionReassembler, Endpoint

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "captures"
KEY = ("/job:worker/replica:0/task:0/device:CPU:0;2931d12573f82680;/job:ps/replica:0/task:0/device:CPU:0;"
       "edge_93_gradients/conv1/BiasAdd_grad/BiasAddGrad;0:0")


# -- pcap -----------------------------------------------------------------------------------

def test_reading_a_capture_keeps_memory_bounded():
    """Packets are streamed: peak memory stays near one packet, not the file (5.6 MB here)."""
    path = DATA_DIR / "tiny_lo" / "capture.pcap.gz"
    tracemalloc.start()
    try:
        total = sum(len(p.data) for p in iter_packets(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total > 5_000_000
    assert peak < 1_000_000


def test_loopback_packets_over_65535_bytes_are_read_whole():
    sizes = [p.caplen_bytes for p in iter_packets(DATA_DIR / "tiny_lo" / "capture.pcap.gz")]
    assert max(sizes) > 65_535  # 64 KiB of IP plus the 14-byte Ethernet header
    assert all(p.caplen_bytes == len(p.data) == p.wire_bytes
               for p in iter_packets(DATA_DIR / "tiny_lo" / "capture.pcap.gz"))


def test_pcapng_statistics_block_reports_kernel_drops(tmp_path):
    def block(kind, body):
        body += b"\x00" * (-len(body) % 4)
        return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)
    isb_options = struct.pack("<HH", 5, 8) + struct.pack("<Q", 42) + b"\x00" * 4
    data = (block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
            + block(1, struct.pack("<HHI", 1, 0, 0))
            + block(6, struct.pack("<IIIII", 0, 0, 1_000_000, 4, 4) + b"abcd")
            + block(5, struct.pack("<III", 0, 0, 0) + isb_options))
    path = tmp_path / "drops.pcapng"
    path.write_bytes(data)
    reader = PcapReader(path)
    packets = list(reader)
    assert [(p.number, p.time_ns, p.data) for p in packets] == [(1, 1_000_000_000, b"abcd")]
    assert reader.kernel_drops == 42 and reader.format == "pcapng"


def test_truncated_and_malformed_files_are_different_errors(tmp_path):
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    record = struct.pack("<IIII", 1, 0, 100, 100) + b"x" * 100
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(header + record + record[:50])
    with pytest.raises(TruncatedCapture, match=r"cut\.pcap: inside packet 2: .* after 1 complete packets"):
        list(iter_packets(cut))
    huge = tmp_path / "huge.pcap"
    huge.write_bytes(header + struct.pack("<IIII", 1, 0, 1 << 30, 1 << 30))
    with pytest.raises(MalformedCapture, match="claims"):
        list(iter_packets(huge))
    # A gzip stream cut short yields every packet that decompresses whole, then the error.
    many = header + b"".join(struct.pack("<IIII", i, 0, 100, 100) + bytes([i % 256]) * 100 for i in range(3000))
    compressed = gzip.compress(many)
    cut_gzip = tmp_path / "cut.pcap.gz"
    cut_gzip.write_bytes(compressed[: len(compressed) // 2])
    readable = zlib.decompressobj(31).decompress(compressed[: len(compressed) // 2])
    complete = (len(readable) - 24) // 116
    seen = []
    with pytest.raises(TruncatedCapture, match=rf"gzip stream ends early.* after {complete} complete packets"):
        for packet in iter_packets(cut_gzip):
            seen.append(packet.number)
    assert seen == list(range(1, complete + 1)) and complete > 100
    bad_gzip = tmp_path / "bad.pcap.gz"
    bad_gzip.write_bytes(gzip.compress(header + record)[:12] + b"\xff" * 40)
    with pytest.raises((MalformedCapture, TruncatedCapture)):
        list(iter_packets(bad_gzip))


# -- link, IP and TCP headers ---------------------------------------------------------------

def _tcp_header(sport, dport, seq, flags, payload):
    return struct.pack("!HHIIBBHHH", sport, dport, seq, 7, 8 << 4, flags, 100, 0, 0) + b"\x01\x01\x08\x0a" + \
        b"\x00" * 8 + payload  # 12 bytes of options: NOP NOP timestamps


def _ipv6(src, dst, payload, hop_by_hop=False):
    next_header, extension = 6, b""
    if hop_by_hop:
        next_header, extension = 0, bytes([6, 0]) + b"\x00" * 6
    body = extension + payload
    return struct.pack("!IHBB", 6 << 28, len(body), next_header, 64) + socket.inet_pton(socket.AF_INET6, src) + \
        socket.inet_pton(socket.AF_INET6, dst) + body


@pytest.mark.parametrize("frame", [
    pytest.param((1, b"\x00" * 12 + b"\x81\x00\x00\x05\x86\xdd"), id="ethernet-vlan-ipv6"),
    pytest.param((113, b"\x00" * 14 + b"\x86\xdd"), id="linux-sll-ipv6"),
    pytest.param((276, b"\x86\xdd" + b"\x00" * 18), id="linux-sll2-ipv6"),
    pytest.param((101, b""), id="raw-ipv6"),
])
@pytest.mark.parametrize("hop_by_hop", [False, True])
def test_header_decoder_agrees_with_scapy(frame, hop_by_hop):
    linktype, link = frame
    payload = b"hello, tensor" * 7
    data = link + _ipv6("fd00::1", "fd00::2", _tcp_header(40000, 2222, 123456, 0x18, payload), hop_by_hop)
    fast = decode_tcp(linktype, data)
    assert fast == TcpSegment("fd00::1", 40000, "fd00::2", 2222, 123456, 7, 0x18, payload)
    assert decode_tcp_scapy(linktype, data) == fast


def test_non_tcp_packets_decode_to_none():
    udp = b"\x00" * 12 + b"\x08\x00" + struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28, 0, 0, 64, 17, 0,
                                                    b"\x7f\x00\x00\x01", b"\x7f\x00\x00\x01") + b"\x00" * 8
    arp = b"\x00" * 12 + b"\x08\x06" + b"\x00" * 28
    assert decode_tcp(1, udp) is None and decode_tcp(1, arp) is None


# -- TCP reassembly ------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(data=st.binary(min_size=1, max_size=3000), cuts=st.lists(st.integers(1, 2999), max_size=12),
       order=st.randoms(use_true_random=False), duplicates=st.lists(st.integers(0, 20), max_size=5),
       isn=st.integers(0, 2**32 - 1))
def test_reassembly_delivers_every_byte_once_in_order(data, cuts, order, duplicates, isn):
    bounds = sorted({0, len(data), *[c for c in cuts if c < len(data)]})
    pieces = [(a, data[a:b]) for a, b in zip(bounds, bounds[1:])]
    sent = list(pieces) + [pieces[d % len(pieces)] for d in duplicates]
    order.shuffle(sent)
    delivered = []
    src, dst = Endpoint("10.0.0.1", 1), Endpoint("10.0.0.2", 2)
    reassembler = DirectionReassembler(src, dst, lambda chunk, offset, n, t: delivered.append((offset, chunk)))
    reassembler.add(TcpSegment("10.0.0.1", 1, "10.0.0.2", 2, isn, 0, 0x02, b""), 1, 0)  # SYN
    for number, (offset, chunk) in enumerate(sent, start=2):
        reassembler.add(TcpSegment("10.0.0.1", 1, "10.0.0.2", 2, (isn + 1 + offset) & 0xFFFFFFFF, 0, 0x18, chunk),
                        number, number)
    reassembler.finish(len(sent) + 2, 0)
    assert b"".join(chunk for _, chunk in delivered) == data
    assert [offset for offset, _ in delivered] == sorted(offset for offset, _ in delivered)
    assert reassembler.duplicate_bytes == sum(len(c) for _, c in sent) - len(data)
    assert not reassembler.gaps


def test_a_hole_that_never_fills_becomes_a_gap_once_too_much_waits_behind_it():
    delivered, gaps = [], []
    reassembler = DirectionReassembler(Endpoint("a", 1), Endpoint("b", 2),
                                       lambda chunk, offset, n, t: delivered.append((offset, len(chunk), n)),
                                       lambda offset, missing, n: gaps.append((offset, missing, n)),
                                       max_buffered_bytes=2_500)
    segment = lambda seq, size: TcpSegment("a", 1, "b", 2, seq, 0, 0x18, b"x" * size)  # noqa: E731
    reassembler.add(TcpSegment("a", 1, "b", 2, 2**32 - 1, 0, 0x02, b""), 0, 0)  # SYN: offset 0 is seq 0
    reassembler.add(segment(0, 100), 1, 0)
    for number, seq in enumerate(range(600, 4_000, 1_000), start=2):  # bytes 100-599 never come
        reassembler.add(segment(seq, 1_000), number, number)
    assert gaps == [(100, 500, 4)]
    # After a gap, bytes that waited keep the stamps of the packets that carried them.
    assert delivered == [(0, 100, 1), (600, 1_000, 2), (1_600, 1_000, 3), (2_600, 1_000, 4), (3_600, 1_000, 5)]


def _offsets_and_numbers(segments, with_syn_at=None):
    delivered = []
    reassembler = DirectionReassembler(Endpoint("a", 1), Endpoint("b", 2),
                                       lambda chunk, offset, n, t: delivered.append((offset, len(chunk), n, t)))
    for number, (seq, size, time) in enumerate(segments, start=1):
        if number == with_syn_at:
            reassembler.add(TcpSegment("a", 1, "b", 2, 999, 0, 0x02, b""), 0, 0)
        reassembler.add(TcpSegment("a", 1, "b", 2, seq, 0, 0x18, b"x" * size), number, time)
    reassembler.finish(len(segments) + 1, 10**9)
    return delivered, reassembler


def test_a_stream_without_its_syn_starts_at_its_lowest_early_sequence_number_not_at_the_first_seen():
    # File order 2, 1, 3 of a stream that starts at seq 1000; stamps are those of sending order.
    delivered, reassembler = _offsets_and_numbers([(1100, 100, 20), (1000, 100, 10), (1200, 100, 30)])
    assert [(o, n) for o, _, n, _ in delivered] == [(0, 2), (100, 2), (200, 3)]
    assert [t for *_, t in delivered] == [10, 20, 30]  # the shuffled file keeps the ordered times
    assert not reassembler.gaps and reassembler.out_of_order_segments == 1


def test_a_syn_that_arrives_after_the_first_data_still_starts_the_stream():
    delivered, reassembler = _offsets_and_numbers([(1100, 100, 20), (1000, 100, 10)], with_syn_at=2)
    assert [o for o, *_ in delivered] == [0, 100] and reassembler.syn_seen and not reassembler.gaps


# -- HTTP/2 and gRPC framing ---------------------------------------------------------------

def test_incomplete_and_malformed_frames_are_different_exceptions():
    frame = WindowUpdateFrame(0, window_increment=5).serialize()
    for cut in range(len(frame)):
        with pytest.raises(NeedMoreData):
            parse_frame(frame[:cut], 0)
    assert parse_frame(frame, 0) == (8, 0, 0, 4, 13)
    with pytest.raises(MalformedFrame, match="exceeds"):
        parse_frame(b"\xff\xff\xff\x00\x00\x00\x00\x00\x01", 0, max_payload=16_384)
    with pytest.raises(MalformedFrame, match="preface"):
        FrameSplitter(expect_preface=True).feed(b"GET / HTTP/1.1\r\n\r\n" * 2)


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(1, 400), max_size=30))
def test_frame_splitter_is_indifferent_to_segmentation(cuts):
    frames = [SettingsFrame(0, settings={4: 65_535}).serialize(), DataFrame(1, data=b"d" * 300).serialize(),
              WindowUpdateFrame(0, window_increment=300).serialize(), DataFrame(3, data=b"").serialize()]
    stream = PREFACE + b"".join(frames)
    splitter = FrameSplitter(expect_preface=True)
    bounds = sorted({0, len(stream), *[c for c in cuts if c < len(stream)]})
    got = []
    for a, b in zip(bounds, bounds[1:]):
        got += splitter.feed(stream[a:b])
    assert [(f.type, f.stream_id, len(f.payload)) for f in got] == [(4, 0, 6), (0, 1, 300), (8, 0, 4), (0, 3, 0)]
    assert [f.offset for f in got] == [24, 39, 348, 361]


@settings(max_examples=150, deadline=None)
@given(bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=6),
       cuts=st.lists(st.integers(1, 2000), max_size=20), keep=st.sampled_from([0, 10, 1 << 16]))
def test_grpc_deframer_is_indifferent_to_data_frame_boundaries(bodies, cuts, keep):
    stream = b"".join(b"\x00" + len(b).to_bytes(4, "big") + b for b in bodies)
    bounds = sorted({0, len(stream), *[c for c in cuts if c < len(stream)]})
    deframer = GrpcDeframer(keep_bytes=keep)
    got = []
    for a, b in zip(bounds, bounds[1:]):
        got += deframer.feed(stream[a:b])
    assert got == [(len(b), False, b[:keep]) for b in bodies]
    assert not deframer.in_message


def test_grpc_prefix_with_a_bad_flag_is_malformed():
    with pytest.raises(MalformedFrame, match="compressed flag 60"):
        GrpcDeframer().feed(b"<html>")


def test_recv_tensor_request_and_response_fields():
    request = b"\x08" + bytes.fromhex("d5bdc48385e098cc01") + b"\x12" + bytes([len(KEY)]) + b"\x01" + KEY.encode()
    assert parse_recv_tensor_request(request) == (114950643498688213, KEY)
    parsed = RendezvousKey.parse(KEY)
    assert parsed.src_device == "/job:worker/replica:0/task:0/device:CPU:0"
    assert parsed.dst_device == "/job:ps/replica:0/task:0/device:CPU:0"
    assert tensor_name(KEY) == "edge_93_gradients/conv1/BiasAdd_grad/BiasAddGrad"
    assert tensor_name("not a key") is None
    # send_start_micros, then tensor { dtype, shape {dim {size 32}}, tensor_content (128 bytes) }
    tensor = b"\x08\x01" + b"\x12\x04\x12\x02\x08\x20" + b"\x22\x80\x01" + b"\x00" * 128
    response = b"\x18" + bytes.fromhex("b0e1a8c6d9b4e603") + b"\x0a" + bytes([len(tensor) - 128]) + b"\x01" + tensor
    assert tensor_content_bytes(response[:40]) == 128  # the header is enough
    assert tensor_content_bytes(response[:12]) is None  # cut inside the header
    with pytest.raises(MalformedFrame):
        parse_recv_tensor_request(request[:30])


# -- iperf3 ---------------------------------------------------------------------------------

def test_bundled_iperf_runs_give_a_median_and_a_spread():
    summary = summarise_iperf(sorted((DATA_DIR / "iperf3").glob("*.json")))
    rates = [r.received_bits_per_s for r in summary.runs]
    assert len(rates) == 3 and summary.received_bits_per_s.median == sorted(rates)[1]
    rate = summary.received_bits_per_s
    assert rate.minimum <= rate.median <= rate.maximum
    assert 1e9 < summary.received_bits_per_s.median < 1e12  # loopback: Gbit/s, not bit/s or bytes
    assert 0 <= summary.received_bits_per_s.spread < 1
    assert summary.received_bytes_per_s == summary.received_bits_per_s.median / 8
    run = summary.runs[0]
    assert run.streams and run.streams[0].mean_rtt_us > 0 and run.congestion_control


def test_iperf_error_field_names_the_file(tmp_path):
    path = tmp_path / "busy.json"
    path.write_text(json.dumps({"start": {}, "intervals": [], "end": {},
                                "error": "the server is busy running a test. try again later"}))
    with pytest.raises(IperfError, match=r"busy\.json: iperf3 reported an error: the server is busy"):
        read_iperf(path)
    with pytest.raises(IperfError, match=r"busy\.json"):
        summarise_iperf([DATA_DIR / "iperf3" / "lo_run1.json", path])


@pytest.mark.parametrize("text, problem", [
    ("Connecting to host 127.0.0.1, port 5201\n", "not JSON"),
    ("[1, 2]", "not an object"),
    (json.dumps({"end": {"sum_sent": {"bits_per_second": 1.0}}}), "end.sum_received.bits_per_second"),
])
def test_iperf_outputs_that_are_not_results(tmp_path, text, problem):
    path = tmp_path / "out.json"
    path.write_text(text)
    with pytest.raises(IperfError, match=problem):
        read_iperf(path)


def test_tshark_backend_without_tshark_says_how_to_install_it(monkeypatch):
    from netcapture import TsharkError, read_capture, tshark_backend

    monkeypatch.setattr(tshark_backend, "tshark_path", lambda: None)
    with pytest.raises(TsharkError, match="apt-get install tshark"):
        read_capture(DATA_DIR / "tiny_lo" / "capture.pcap.gz", "tshark")


def test_unknown_backend_is_a_usage_error():
    from netcapture import read_capture
    from tfbase.errors import UsageError

    with pytest.raises(UsageError, match="backend"):
        read_capture(DATA_DIR / "tiny_lo" / "capture.pcap.gz", "pyshark")


def test_a_repeated_header_block_decodes_against_the_table_as_it_is_now():
    from netcapture.http2 import DirectionDecoder, RawFrame

    decoder = DirectionDecoder()

    def headers(block):
        return decoder.decode(RawFrame(0, HEADERS, FLAG_END_HEADERS, 1, block)).headers

    newest = b"\xbe"  # "the dynamic table's newest entry": the same bytes name different fields over time
    assert headers(b"\x40\x03x-a\x011") == (("x-a", "1"),)  # inserted
    assert headers(newest) == (("x-a", "1"),)
    assert headers(newest) == (("x-a", "1"),)  # the cached decode, table unchanged
    assert headers(b"\x40\x03x-b\x012") == (("x-b", "2"),)  # a new insertion: the cache must not answer
    assert headers(newest) == (("x-b", "2"),)
