"""The default backend's fast path (:mod:`netcapture.fastpath`) decodes exactly as the reference path.

The reference path (``scapy_backend.decode(..., fast=False)``) reads one packet at a time with
scapy's reader and the ``struct`` header decoder; the fast path indexes records and headers
with compiled kernels and takes the common packets in a few steps. Every field of every
record must be the same: on a bundled multi-worker capture (plain and gzip), on damaged
copies of a slice of it, with windows, batches and gzip chunks small enough that records and
frames straddle every boundary, and header by header on packets cut and scrambled at random.
pcapng files are read by the fast path too (their packet blocks by a kernel, every other
block by the reference reader's own code), unless a block is not one it reads as the reference
reader would (then decoding starts again on the reference path). Files the fast path does not
read (a link type only scapy dissects, a damaged gzip file) are decoded by the reference path.
``bench/decode_check.py`` runs the same comparison on every bundled capture.
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import random
import socket
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import capture_damage as damage
import numpy as np
import pytest

from netcapture import capture as capture_module
from netcapture import pcapbatch, scapy_backend
from netcapture.layers import decode_tcp
from netcapture.pcap import LINKTYPE_LINUX_SLL

ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = ROOT / "data" / "captures" / "tiny_100mbit_w2_ps"  # two workers, eight connections, 31 MB
PORTS = frozenset(damage.server_ports(RUN_DIR))
SLICE_PACKETS = 900  # enough for every connection to open and carry tensors
LINKTYPE_COOKED_SCAPY = 144  # scapy dissects it as Linux cooked capture; the kernels do not take it
ETHERNET_HEADER_BYTES = 14
MUTATED_PACKETS = 4000


def decode(path: Path, fast: bool, ports=PORTS, strict: bool = False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capture_module.assemble(scapy_backend.decode(path, ports, strict=strict, fast=fast),
                                       require_http2=False)


def assert_same(fast, reference) -> None:
    """Every field of the two captures equal; on failure, the first that differs."""
    for field in dataclasses.fields(reference):
        a, b = getattr(fast, field.name), getattr(reference, field.name)
        if isinstance(a, tuple) and isinstance(b, tuple) and a != b:
            assert len(a) == len(b), f"{field.name}: {len(a)} != {len(b)} items"
            index = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            assert a[index] == b[index], f"{field.name}[{index}]"
        assert a == b, field.name


@pytest.fixture
def fast_path_runs(monkeypatch):
    """Fails the test if the fast path gives up (returns how often it was tried and gave up)."""
    outcome = {"gave_up": 0}
    original = scapy_backend._decode

    def spy(path, ports, strict, fast):
        try:
            return original(path, ports, strict, fast)
        except pcapbatch.Unavailable:
            outcome["gave_up"] += 1
            raise

    monkeypatch.setattr(scapy_backend, "_decode", spy)
    return outcome


@pytest.fixture(scope="module")
def packets():
    return damage.packets_of(next(RUN_DIR.glob("capture.*")))


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plain") / "capture.pcap"
    path.write_bytes(damage.plain_bytes(next(RUN_DIR.glob("capture.*"))))
    return path


def test_fast_path_matches_reference_on_a_multi_worker_capture(plain, fast_path_runs):
    bundled = next(RUN_DIR.glob("capture.*"))
    for path in (plain, bundled):
        fast = decode(path, fast=True)
        assert len(fast.frames) > 4000 and len({s.connection for s in fast.streams}) > 2
        assert_same(fast, decode(path, fast=False))
    assert_same(decode(plain, fast=True, ports=None), decode(plain, fast=False, ports=None))
    assert fast_path_runs["gave_up"] == 0


@pytest.mark.parametrize("kind", ["cut", "garbage_tail", "concatenated", "dropped", "reordered", "swapped",
                                  "late", "two_runs"])
def test_fast_path_matches_reference_on_damaged_copies(kind, packets, tmp_path, fast_path_runs):
    head = packets[:SLICE_PACKETS]
    path = tmp_path / f"{kind}.pcap"
    if kind in ("cut", "garbage_tail", "concatenated"):
        clean = damage.write_pcap(tmp_path / "clean.pcap", head).read_bytes()
        path.write_bytes({"cut": clean[: len(clean) * 2 // 3],
                          "garbage_tail": clean + bytes(random.Random(1).randrange(256) for _ in range(5000)),
                          "concatenated": clean + clean}[kind])
    else:
        damaged = {"dropped": lambda: damage.drop(head, damage.largest_downlink_index(head, set(PORTS))),
                   "reordered": lambda: damage.reorder(head, 8), "swapped": lambda: damage.swap_adjacent(head, 50),
                   "late": lambda: damage.start_late(head, len(head) // 9),  # resynchronising is slow: not far
                   "two_runs": lambda: damage.two_runs(head, 30.0)}[kind]()
        damage.write_pcap(path, damaged)
    fast = decode(path, fast=True)
    assert fast.frames
    assert_same(fast, decode(path, fast=False))
    if kind == "cut":
        with pytest.raises(Exception) as fast_error:
            decode(path, fast=True, strict=True)
        with pytest.raises(Exception) as reference_error:
            decode(path, fast=False, strict=True)
        assert str(fast_error.value) == str(reference_error.value)
    assert fast_path_runs["gave_up"] == 0


def test_records_and_frames_straddling_every_boundary(plain, tmp_path, monkeypatch, fast_path_runs):
    """Windows of 1 MiB, batches of 7 packets, gzip chunks of 100 kB."""
    monkeypatch.setattr(pcapbatch, "WINDOW_BYTES", 1 << 20)
    monkeypatch.setattr(pcapbatch, "BATCH_PACKETS", 7)
    monkeypatch.setattr(pcapbatch, "GZIP_CHUNK_BYTES", 100_000)
    compressed = tmp_path / "capture.pcap.gz"
    compressed.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1))
    reference = decode(plain, fast=False)
    assert_same(decode(plain, fast=True), reference)
    gzip_reference = decode(compressed, fast=False)
    assert_same(decode(compressed, fast=True), gzip_reference)
    assert fast_path_runs["gave_up"] == 0


# -- pcapng ------------------------------------------------------------------------------

SHB, IDB, EPB, ISB, COMMENT_OPTION = 0x0A0D0D0A, 1, 6, 5, 1


def _block(kind: int, body: bytes, order: str = "<") -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack(order + "II", kind, len(body) + 12) + body + struct.pack(order + "I", len(body) + 12)


def _option(code: int, value: bytes, order: str = "<") -> bytes:
    return struct.pack(order + "HH", code, len(value)) + value + bytes(-len(value) % 4)


def _section(order: str = "<") -> bytes:
    return _block(SHB, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1), order)


def _interface(linktype: int, order: str = "<", resolution: int | None = 9, offset_s: int = 0) -> bytes:
    options = b"" if resolution is None else _option(9, bytes([resolution]), order)
    if offset_s:
        options += _option(14, struct.pack(order + "q", offset_s), order)
    return _block(IDB, struct.pack(order + "HHI", linktype, 0, damage.SNAPLEN) + options + bytes(4), order)


def _packet(packet, interface: int = 0, ticks_per_s: int = 10**9, offset_s: int = 0, order: str = "<",
            options: bytes = b"") -> bytes:
    ticks = (packet.time_ns - offset_s * 10**9) * ticks_per_s // 10**9
    return _block(EPB, struct.pack(order + "IIIII", interface, ticks >> 32, ticks & 0xFFFFFFFF, len(packet.data),
                                   len(packet.data)) + packet.data + bytes(-len(packet.data) % 4) + options, order)


def _statistics(drops: int, order: str = "<") -> bytes:
    return _block(ISB, struct.pack(order + "III", 0, 0, 0) + _option(5, struct.pack(order + "Q", drops), order)
                  + bytes(4), order)


def write_pcapng(path: Path, packets: list, kind: str) -> Path:
    """The packets as a pcapng file of one of the kinds the tests below name."""
    linktype, half = packets[0].linktype, len(packets) // 2
    order = ">" if kind == "big_endian" else "<"
    out = [_section(order), _interface(linktype, order)]
    if kind == "microseconds_offset":  # if_tsresol absent (microseconds), if_tsoffset
        out = [_section(), _interface(linktype, resolution=None, offset_s=1_000_000)]
        out += [_packet(p, ticks_per_s=10**6, offset_s=1_000_000) for p in packets]
    elif kind == "two_interfaces":  # another resolution (2**-20 s) on the second interface
        out.append(_interface(linktype, resolution=0x80 | 20))
        out += [_packet(p, i % 2, 10**9 if i % 2 == 0 else 1 << 20) for i, p in enumerate(packets)]
    elif kind == "statistics":
        out += [_packet(p) for p in packets[:half]] + [_statistics(7)]
        out += [_packet(p) for p in packets[half:]] + [_statistics(42)]
    elif kind == "two_sections":  # interface numbers start again in the second section
        out += [_packet(p) for p in packets[:half]]
        out += [_section(">"), _interface(linktype, ">", 6)] + [_packet(p, 0, 10**6, order=">") for p in packets[half:]]
    elif kind == "packet_options":  # a comment on one packet: left to the reference reader
        out += [_packet(p, options=_option(COMMENT_OPTION, b"hi") + bytes(4) if i == half else b"")
                for i, p in enumerate(packets)]
    else:  # "plain", "big_endian", "cut"
        out += [_packet(p, order=order) for p in packets]
    data = b"".join(out)
    path.write_bytes(data[: len(data) * 2 // 3] if kind == "cut" else data)
    return path


@pytest.mark.parametrize("kind", ["plain", "big_endian", "microseconds_offset", "two_interfaces", "statistics",
                                  "two_sections"])
def test_pcapng_is_read_by_the_fast_path(kind, packets, tmp_path, fast_path_runs):
    path = write_pcapng(tmp_path / f"{kind}.pcapng", packets[:SLICE_PACKETS], kind)
    fast = decode(path, fast=True)
    assert fast.frames and fast.file_format == "pcapng" and fast_path_runs["gave_up"] == 0
    assert_same(fast, decode(path, fast=False))
    result = scapy_backend.decode(path, PORTS)
    assert result.kernel_drops == (42 if kind == "statistics" else None)


def test_pcapng_straddling_every_boundary(packets, tmp_path, monkeypatch, fast_path_runs):
    """Windows of 1 MiB, batches of 7 packets, gzip chunks of 100 kB, as for pcap."""
    monkeypatch.setattr(pcapbatch, "WINDOW_BYTES", 1 << 20)
    monkeypatch.setattr(pcapbatch, "BATCH_PACKETS", 7)
    monkeypatch.setattr(pcapbatch, "GZIP_CHUNK_BYTES", 100_000)
    plain = write_pcapng(tmp_path / "capture.pcapng", packets[:SLICE_PACKETS], "statistics")
    compressed = tmp_path / "capture.pcapng.gz"
    compressed.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1))
    for path in (plain, compressed):
        assert_same(decode(path, fast=True), decode(path, fast=False))
    assert fast_path_runs["gave_up"] == 0


@pytest.mark.parametrize("kind", ["cut", "packet_options"])
def test_pcapng_the_fast_path_leaves_to_the_reference_path(kind, packets, tmp_path, fast_path_runs):
    """A block it does not read as the reference reader would: decoding starts again, on that path."""
    path = write_pcapng(tmp_path / f"{kind}.pcapng", packets[:SLICE_PACKETS], kind)
    fast = decode(path, fast=True)
    assert fast.frames and fast_path_runs["gave_up"] == 1 and fast.truncated == (kind == "cut")
    assert_same(fast, decode(path, fast=False))


def test_bundled_pcapng_is_read_by_the_fast_path(tmp_path, fast_path_runs):
    bundled = ROOT / "data" / "captures" / "tiny16_lo_smallwin" / "capture.pcapng.gz"
    plain = tmp_path / "capture.pcapng"
    plain.write_bytes(gzip.decompress(bundled.read_bytes()))
    ports = frozenset(damage.server_ports(bundled.parent))
    for path in (bundled, plain):
        assert_same(decode(path, fast=True, ports=ports), decode(path, fast=False, ports=ports))
    assert fast_path_runs["gave_up"] == 0


def test_files_the_fast_path_does_not_read_are_decoded_by_the_reference_path(packets, tmp_path, fast_path_runs):
    # a link type only scapy's dissectors decode: the same packets as Linux cooked v1, relabelled
    head = packets[:300]
    cooked = [dataclasses.replace(p, linktype=LINKTYPE_LINUX_SLL, data=struct.pack("!HHH8sH", 0, 1, 6, bytes(8),
                                                                                  0x0800) + p.data[14:])
              for p in head]
    sll = damage.write_pcap(tmp_path / "sll.pcap", cooked)
    other = damage.write_pcap(tmp_path / "other.pcap",
                              [dataclasses.replace(p, linktype=LINKTYPE_COOKED_SCAPY) for p in cooked])
    fast_sll, other_link = decode(sll, fast=True), decode(other, fast=True)
    assert fast_path_runs["gave_up"] == 1
    assert other_link.frames and other_link.frames == fast_sll.frames and other_link.streams == fast_sll.streams
    # a damaged gzip file: the fast path gives up, decoding starts again on the reference path
    cut = tmp_path / "cut.pcap.gz"
    data = gzip.compress(damage.write_pcap(tmp_path / "head.pcap", packets[:SLICE_PACKETS]).read_bytes())
    cut.write_bytes(data[: len(data) // 2])
    fast = decode(cut, fast=True)
    assert fast.truncated and fast_path_runs["gave_up"] == 2
    assert_same(fast, decode(cut, fast=False))


def test_a_wrapped_frames_from_sees_every_delivery(plain, monkeypatch):
    """The lab's timeline wraps _Decoder.frames_from to time each frame's first byte: while it
    is wrapped, the fast path skips no delivery."""
    def deliveries(fast: bool) -> list:
        seen = []
        original = scapy_backend._Decoder.frames_from

        def wrapper(self, direction, data, offset, packet_number, time_ns):
            seen.append((direction.src, offset, len(data), packet_number, time_ns))
            original(self, direction, data, offset, packet_number, time_ns)

        monkeypatch.setattr(scapy_backend._Decoder, "frames_from", wrapper)
        decode(plain, fast=fast)
        monkeypatch.setattr(scapy_backend._Decoder, "frames_from", original)
        return seen

    fast = deliveries(True)
    assert len(fast) > 1000 and fast == deliveries(False)


# -- the header kernel against layers.decode_tcp, packet by packet ---------------------------

def _relinked(packet: bytes, linktype: int) -> bytes:
    ip = packet[ETHERNET_HEADER_BYTES:]
    link = {1: packet[:ETHERNET_HEADER_BYTES], 113: struct.pack("!HHH8sH", 0, 1, 6, bytes(8), 0x0800),
            276: struct.pack("!HHIHBB8s", 0x0800, 0, 2, 1, 0, 6, bytes(8)), 101: b"", 228: b"",
            0: struct.pack("<I", 2), 108: struct.pack(">I", 2),
            229: None}[linktype]
    if link is None:  # as IPv6
        header = (ip[0] & 0x0F) * 4
        payload = ip[header:]
        return struct.pack("!IHBB", 6 << 28, len(payload), ip[9], 64) + bytes(12) + ip[12:16] + bytes(12) \
            + ip[16:20] + payload
    return link + ip


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """Cut, scramble a header byte, or both: the bounds checks are what is tested."""
    data = bytearray(data)
    if rng.random() < 0.5 and data:
        data[rng.randrange(min(len(data), 80))] = rng.randrange(256)
    if rng.random() < 0.5:
        del data[rng.randrange(min(len(data), 90) + 1):]
    return bytes(data)


def test_header_kernel_decodes_as_decode_tcp(packets):
    from netcapture.pcapindex import TCP, decode_headers

    rng = random.Random(5)
    for linktype in (1, 113, 276, 101, 228, 229, 0, 108):
        datas = [_relinked(p.data, linktype)[:400] for p in packets[:MUTATED_PACKETS // 8]]
        datas = [d if i % 4 == 0 else _mutate(d, rng) for i, d in enumerate(datas)]
        buffer = np.frombuffer(b"".join(datas) + bytes(64), dtype=np.uint8)
        starts = np.cumsum([0] + [len(d) for d in datas[:-1]]).astype(np.int64)
        lengths = np.array([len(d) for d in datas], dtype=np.int64)
        n = len(datas)
        out = [np.zeros(n, np.int8), np.zeros(n, np.int64), np.zeros(n, np.int8)] + \
            [np.zeros(n, np.int64) for _ in range(7)]
        decode_headers(buffer, n, starts, lengths, linktype, *out)
        kind, ip, version, sport, dport, seq, ack, flags, first, last = out
        taken = 0
        for i, data in enumerate(datas):
            expected = decode_tcp(linktype, data)
            if expected is None:
                assert kind[i] != TCP, (linktype, i, data.hex())
                continue
            taken += 1
            assert kind[i] == TCP, (linktype, i, data.hex())
            family, size, source = (socket.AF_INET, 4, 12) if version[i] == 4 else (socket.AF_INET6, 16, 8)
            at = int(ip[i]) + source
            got = (socket.inet_ntop(family, buffer[at: at + size].tobytes()), int(sport[i]),
                   socket.inet_ntop(family, buffer[at + size: at + 2 * size].tobytes()), int(dport[i]),
                   int(seq[i]), int(ack[i]), int(flags[i]), buffer[first[i]: last[i]].tobytes())
            assert got == dataclasses.astuple(expected), (linktype, i)
        assert taken > MUTATED_PACKETS // 40  # the unmutated quarter at least


def test_importing_netcapture_does_not_import_numba():
    code = "import sys, netcapture; netcapture.read_capture; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


# -- DATA bodies kept sparsely: the frame splitter and the gRPC layer -----------------------

KEEPS = {1: 64 << 10, 3: 1024, 5: 0}  # a request's keep, a response's, a stream read for lengths only


def _grpc_stream(rng: random.Random) -> bytes:
    """Frames of three streams: small HEADERS, DATA frames of up to 300 kB (some padded)
    carrying gRPC messages of every size, some across frames, with random bytes inside."""
    from netcapture.http2 import DATA, FLAG_END_HEADERS, FLAG_PADDED, HEADERS

    out = bytearray()
    for stream in KEEPS:
        out += struct.pack("!I", 3)[1:] + bytes([HEADERS, FLAG_END_HEADERS]) + struct.pack("!I", stream) \
            + b"\x88\x82\x84"
    messages = {stream: bytearray() for stream in KEEPS}
    for body in messages.values():
        for _ in range(rng.randrange(3, 30)):
            size = rng.choice([0, 1, 4, 100, 5000, 70_000, 250_000])
            body += bytes([0]) + struct.pack("!I", size) + rng.randbytes(size)
    while any(messages.values()):
        stream = rng.choice([s for s, body in messages.items() if body])
        body = messages[stream]
        take = min(len(body), rng.choice([10, 16_384, 20_000, 100_000, 300_000]))
        chunk, messages[stream] = bytes(body[:take]), body[take:]
        flags = 0
        if rng.random() < 0.3:
            pad = rng.randrange(0, 200)
            chunk, flags = bytes([pad]) + chunk + bytes(pad), FLAG_PADDED
        out += struct.pack("!I", len(chunk))[1:] + bytes([DATA, flags]) + struct.pack("!I", stream) + chunk
    return bytes(out)


def _split_and_deframe(data: bytes, cuts: list[int], sparse: bool) -> tuple[list, int]:
    from netcapture.grpc import MAX_KEEP_BYTES, GrpcDeframer, NeedCursor
    from netcapture.http2 import DATA, FrameSplitter, split_padding

    splitter = FrameSplitter(expect_preface=False)
    deframers: dict[int, GrpcDeframer] = {}
    if sparse:
        splitter.body_needs = lambda stream: deframers[stream].cursor() if stream in deframers \
            else NeedCursor(MAX_KEEP_BYTES)
    seen, skipped = [], 0
    for start, end in itertools.pairwise([0, *cuts, len(data)]):
        chunk = memoryview(data)[start:end]
        passed = min(len(chunk), splitter.skippable)  # right up to what may be skipped: the boundary is tested
        if passed:
            splitter.skip(passed)
            skipped += passed
            chunk = chunk[passed:]
        for raw in splitter.cut(chunk):
            seen.append((raw.offset, raw.type, raw.flags, raw.stream_id, raw.length))
            if raw.type == DATA:
                first, last = split_padding(raw.flags, raw.payload)
                deframer = deframers.setdefault(raw.stream_id, GrpcDeframer(KEEPS[raw.stream_id]))
                seen.extend(deframer.feed(raw.payload[first:last]))
    return seen, skipped


@pytest.mark.parametrize("seed", range(4))
def test_sparse_data_frames_give_the_gRPC_layer_every_byte_it_reads(seed):
    rng = random.Random(seed)
    data = _grpc_stream(rng)
    cuts = sorted(rng.sample(range(1, len(data)), len(data) // rng.choice([1500, 9000, 65_000])))
    sparse, skipped = _split_and_deframe(data, cuts, sparse=True)
    whole, _ = _split_and_deframe(data, cuts, sparse=False)
    assert sparse == whole
    assert skipped > len(data) // 4  # most of the large messages were passed over unread
