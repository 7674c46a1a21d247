"""The readers :mod:`fuzz` attacks: their seed inputs, how one input is run, what it may raise.

Seeds are cut from the real bundled artifacts in ``data/`` and kept small, so that one
input costs about a millisecond: the first packets of each capture (cut at a record
boundary of the decompressed file), the first bytes of each direction of one HTTP/2
connection, the header blocks and gRPC messages in them, a RunMetadata trace reduced to a
few nodes, and the JSON, CSV, TSV and ``.npz`` files as they are.

A :class:`Target` runs one input through the reader's public entry point and returns
normally or raises; the documented exception types of the reader are in ``accepted``.

"prediction": tfsim has no reader of its ``tfsim.prediction/1`` JSON; a prediction comes
back in as the CSV table that ``tfsim compare --measured`` reads
(:func:`tfsim.comparison.read_measured`, also the reader of ``tfsim lab`` measurements),
and that is the reader fuzzed under this name.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import struct
import warnings
from collections.abc import Callable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
CAPTURES = DATA / "captures"
SLICE_BYTES = 6_000  # a capture slice: the packets that fit, at least 10


@dataclasses.dataclass(frozen=True)
class Target:
    """One reader under test.

    ``seeds()``: the seed inputs. ``run(data, scratch)``: run one input (``scratch`` is a
    directory for readers that take a path). ``accepted()``: the exception types the reader
    documents. ``boundaries(data)``: offsets where records start (for truncation, duplication
    and reordering); ``length_fields``: ``(offset from a record start, width, byte order)``
    of the length fields to corrupt. ``compress``: inputs are gzip-compressed after mutation.
    """

    name: str
    seeds: Callable[[], list[bytes]]
    run: Callable[[bytes, Path], None]
    accepted: Callable[[], tuple[type, ...]]
    boundaries: Callable[[bytes], list[int]] = lambda data: []
    length_fields: tuple[tuple[int, int, str], ...] = ()
    compress: bool = False
    json: bool = False


def _write(scratch: Path, name: str, data: bytes) -> Path:
    path = scratch / name
    path.write_bytes(data)
    return path


# -- captures -----------------------------------------------------------------------------

def _decompressed(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def pcap_boundaries(data: bytes) -> list[int]:
    """Record starts of a classic pcap (little or big endian), as far as the lengths are sane."""
    if len(data) < 24:
        return []
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out, position = [24], 24
    while position + 16 <= len(data):
        caplen = struct.unpack_from(endian + "I", data, position + 8)[0]
        position += 16 + caplen
        if position > len(data):
            break
        out.append(position)
    return out


def pcapng_boundaries(data: bytes) -> list[int]:
    """Block starts of a pcapng file (little endian), as far as the lengths are sane."""
    out, position = [0], 0
    while position + 8 <= len(data):
        length = struct.unpack_from("<I", data, position + 4)[0]
        if length < 12:
            break
        position += length
        if position > len(data):
            break
        out.append(position)
    return out


def _slice(data: bytes, boundaries: list[int]) -> bytes:
    """The file up to the last record start within :data:`SLICE_BYTES` (at least 10 records)."""
    cut = [b for b in boundaries if b <= SLICE_BYTES]
    end = cut[-1] if len(cut) > 10 else boundaries[min(10, len(boundaries) - 1)]
    return data[:end]


@cache
def capture_seeds(kind: str) -> tuple[bytes, ...]:
    """Slices of the bundled captures of one format (``"pcap"`` or ``"pcapng"``)."""
    out = []
    for path in sorted(CAPTURES.glob("*/capture.*")):
        data = _decompressed(path)
        if kind == "pcapng" and data[:4] == b"\x0a\x0d\x0d\x0a":
            out.append(_slice(data, pcapng_boundaries(data)))
        elif kind == "pcap" and data[:4] != b"\x0a\x0d\x0d\x0a":
            out.append(_slice(data, pcap_boundaries(data)))
    return tuple(out)


def _capture_accepted() -> tuple[type, ...]:
    from netcapture.errors import CaptureError

    return (CaptureError,)


def _run_capture(suffix: str) -> Callable[[bytes, Path], None]:
    def run(data: bytes, scratch: Path) -> None:
        from netcapture import read_capture

        path = _write(scratch, "capture" + suffix, data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            capture = read_capture(path, "scapy", require_http2=False)
        capture.recv_tensor_streams()
    return run


# -- HTTP/2, HPACK, gRPC: byte streams of one real connection --------------------------------

@cache
def connection_streams() -> tuple[bytes, bytes]:
    """The first bytes of the client and the server side of the first HTTP/2 connection of
    the ``wide_100mbit`` capture, in sequence order."""
    from netcapture.http2 import PREFACE
    from netcapture.layers import decode_tcp
    from netcapture.pcap import iter_packets

    segments: dict[tuple, dict[int, bytes]] = {}
    client = None
    for packet in iter_packets(CAPTURES / "wide_100mbit" / "capture.pcap.gz"):
        if packet.number > 3000:
            break
        segment = decode_tcp(packet.linktype, packet.data)
        if segment is None or not segment.payload:
            continue
        key = (segment.src_ip, segment.src_port, segment.dst_ip, segment.dst_port)
        if client is None and segment.payload.startswith(PREFACE):
            client = key
        segments.setdefault(key, {}).setdefault(segment.seq, segment.payload)
    server = (client[2], client[3], client[0], client[1])
    return _in_order(segments[client]), _in_order(segments[server])


def _in_order(by_seq: dict[int, bytes], limit: int = 24_000) -> bytes:
    out = bytearray()
    expected = min(by_seq)
    for seq in sorted(by_seq):
        if seq != expected:
            break
        out += by_seq[seq]
        expected = seq + len(by_seq[seq])
        if len(out) >= limit:
            break
    return bytes(out[:limit])


def http2_boundaries(data: bytes) -> list[int]:
    """Frame starts of an HTTP/2 byte stream (after the preface when it has one)."""
    from netcapture.http2 import PREFACE

    position = len(PREFACE) if data.startswith(PREFACE) else 0
    out = [position]
    while position + 9 <= len(data):
        position += 9 + int.from_bytes(data[position: position + 3], "big")
        if position > len(data):
            break
        out.append(position)
    return out


def _frames(data: bytes):
    from netcapture.http2 import PREFACE, FrameSplitter

    splitter = FrameSplitter(expect_preface=data.startswith(PREFACE[:4]))
    frames = []
    for start in range(0, len(data), 1400):  # fed as TCP segments would be
        frames.extend(splitter.feed(data[start: start + 1400]))
    return frames


def _run_http2(data: bytes, scratch: Path) -> None:
    from netcapture.errors import MalformedFrame
    from netcapture.http2 import DirectionDecoder

    decoder = DirectionDecoder()
    for frame in _frames(data):
        try:
            decoder.decode(frame)
        except MalformedFrame:
            continue  # as the backend does: the frame is reported, decoding goes on


@cache
def header_block_seeds() -> tuple[bytes, ...]:
    """Each direction's HPACK header blocks in order, each with a 2-byte length prefix."""
    from netcapture.http2 import HEADERS, split_padding

    out = []
    for stream in connection_streams():
        blocks = []
        for frame in _frames(stream):
            if frame.type == HEADERS:
                start, end = split_padding(frame.flags, frame.payload)
                blocks.append(frame.payload[start:end])
        out.append(b"".join(struct.pack("!H", len(b)) + b for b in blocks[:40]))
    return tuple(out)


def length_prefixed_boundaries(data: bytes, width: int = 2) -> list[int]:
    out, position = [0], 0
    while position + width <= len(data):
        position += width + int.from_bytes(data[position: position + width], "big")
        if position > len(data):
            break
        out.append(position)
    return out


def _run_hpack(data: bytes, scratch: Path) -> None:
    from netcapture.errors import MalformedFrame
    from netcapture.http2 import FLAG_END_HEADERS, HEADERS, DirectionDecoder, RawFrame

    decoder = DirectionDecoder()
    position = 0
    while position + 2 <= len(data):
        length = int.from_bytes(data[position: position + 2], "big")
        block = data[position + 2: position + 2 + length]
        position += 2 + length
        try:
            decoder.decode(RawFrame(0, HEADERS, FLAG_END_HEADERS, 1, block))
        except MalformedFrame:
            continue


@cache
def grpc_seeds() -> tuple[bytes, ...]:
    """The DATA payloads of the first RecvTensor streams: requests, and the start of responses,
    one byte tagging the direction (1: from the client)."""
    from netcapture.grpc import RECV_TENSOR_PATH  # noqa: F401  (the path the seeds are for)
    from netcapture.http2 import DATA, split_padding

    out = []
    for tag, stream in zip((1, 0), connection_streams()):
        by_stream: dict[int, bytearray] = {}
        for frame in _frames(stream):
            if frame.type == DATA:
                start, end = split_padding(frame.flags, frame.payload)
                by_stream.setdefault(frame.stream_id, bytearray()).extend(frame.payload[start:end])
        for body in list(by_stream.values())[:6]:
            out.append(bytes([tag]) + bytes(body[:4096]))
    return tuple(out)


def _run_grpc(data: bytes, scratch: Path) -> None:
    from netcapture.grpc import RECV_TENSOR_PATH, GrpcDeframer, describe_message, keep_bytes_for

    if not data:
        return
    from_client = bool(data[0] & 1)
    deframer = GrpcDeframer(keep_bytes_for(RECV_TENSOR_PATH, from_client))
    for start in range(1, len(data), 700):
        for message in deframer.feed(data[start: start + 700]):
            describe_message(RECV_TENSOR_PATH, from_client, *message)


def _frame_accepted() -> tuple[type, ...]:
    from netcapture.errors import MalformedFrame

    return (MalformedFrame,)


# -- traces ---------------------------------------------------------------------------------

@cache
def run_metadata_seeds() -> tuple[bytes, ...]:
    """The bundled RunMetadata trace, reduced to its first nodes per device (binary)."""
    from tensorboard.compat.proto import config_pb2

    metadata = config_pb2.RunMetadata()
    metadata.ParseFromString((DATA / "raw" / "tiny_step.pb").read_bytes())
    small = config_pb2.RunMetadata()
    small.CopyFrom(metadata)
    for device in small.step_stats.dev_stats:
        del device.node_stats[4:]
    for graph in small.partition_graphs:
        del graph.node[5:]
    return (small.SerializeToString(),)


@cache
def run_metadata_text_seeds() -> tuple[bytes, ...]:
    from google.protobuf import text_format
    from tensorboard.compat.proto import config_pb2

    metadata = config_pb2.RunMetadata()
    metadata.ParseFromString(run_metadata_seeds()[0])
    return (text_format.MessageToString(metadata).encode(),)


def _run_run_metadata(suffix: str) -> Callable[[bytes, Path], None]:
    def run(data: bytes, scratch: Path) -> None:
        from tfprofile.runmetadata import graph_nodes, read_run_metadata, step_records

        path = _write(scratch, "step" + suffix, data)
        metadata = read_run_metadata(path)
        step_records(metadata, path)
        graph_nodes(metadata, path)
    return run


@cache
def chrome_seeds() -> tuple[bytes, ...]:
    return (gzip.decompress((DATA / "raw" / "tiny_step.chrome.json.gz").read_bytes()),)


def _run_chrome(data: bytes, scratch: Path) -> None:
    from tfprofile.chrome import profile_from_chrome_traces

    profile_from_chrome_traces([_write(scratch, "step.chrome.json", data)], batch_size=1)


def _input_errors() -> tuple[type, ...]:
    from tfbase.errors import InputError

    return (InputError,)


# -- files of tfsim and of the tools it runs ------------------------------------------------

def _files(*patterns: str) -> Callable[[], list[bytes]]:
    def seeds() -> list[bytes]:
        return [p.read_bytes() for pattern in patterns for p in sorted(DATA.glob(pattern))]
    return seeds


def _run_iperf(data: bytes, scratch: Path) -> None:
    from netcapture.iperf import read_iperf

    read_iperf(_write(scratch, "iperf3.json", data))


def _run_cluster(data: bytes, scratch: Path) -> None:
    from simulate.cluster_file import load_cluster

    load_cluster(_write(scratch, "cluster.json", data))


def _run_profile(data: bytes, scratch: Path) -> None:
    from tfprofile.profile_io import load_profile

    load_profile(_write(scratch, "profile.npz", data))


@cache
def profile_seeds() -> tuple[bytes, ...]:
    """The tiny profile as bundled, and variants whose members have the wrong type, shape or
    dtype, or hold Python objects (which must never be unpickled)."""
    import numpy as np

    raw = (DATA / "profiles" / "tiny.npz").read_bytes()
    with np.load(io.BytesIO(raw), allow_pickle=False) as archive:
        members = {name: archive[name] for name in archive.files}
    variants = [raw]
    name = sorted(members)[len(members) // 2]
    for replacement in (np.array([object()], dtype=object), np.zeros((2, 2, 2)), np.array("x"), np.array([], "i8")):
        changed = dict(members)
        changed[name] = replacement
        buffer = io.BytesIO()
        np.savez(buffer, **changed)
        variants.append(buffer.getvalue())
    return tuple(variants)


def _priority_graph():
    return _cached_profile().graph


@cache
def _cached_profile():
    from tfprofile.profile_io import load_profile

    return load_profile(DATA / "profiles" / "tiny.npz")


@cache
def priority_seeds() -> tuple[bytes, ...]:
    from tfprofile.tictac import compute_ordering, format_priorities

    profile = _cached_profile()
    return tuple(format_priorities(compute_ordering(profile, policy)).encode() for policy in ("tic", "tac"))


def _run_priorities(data: bytes, scratch: Path) -> None:
    from tfprofile.tictac import read_priorities

    read_priorities(_write(scratch, "order.tsv", data), _priority_graph())


@cache
def prediction_seeds() -> tuple[bytes, ...]:
    """A ``tfsim predict --csv`` table and a lab measurement table, as ``tfsim compare
    --measured`` reads them."""
    predicted = ("workers,transfer,mode,throughput_eps,ci95_eps,step_time_s\n"
                 + "".join(f"{w},http2,async,{41.5 * w:.3f},{0.4 * w:.3f},{0.75:.4f}\n" for w in range(1, 9)))
    measured = ("setting,workers,measured_eps,step_time_s\n"
                + "".join(f"1gbit,{w},{39.2 * w:.3f},0.8\n" for w in range(1, 5))
                + "".join(f"100mbit,{w},{11.1 * w:.3f},2.6\n" for w in range(1, 5)))
    return (predicted.encode(), measured.encode())


def _run_prediction(data: bytes, scratch: Path) -> None:
    from tfbase.errors import InputError
    from tfsim.comparison import read_measured

    path = _write(scratch, "predicted.csv", data)
    for setting in (None, "1gbit"):  # as tfsim compare reads it, without and with --setting
        try:
            read_measured(path, setting)
        except InputError:
            continue


def _pcap_lengths() -> tuple[tuple[int, int, str], ...]:
    return ((8, 4, "<"), (12, 4, "<"))


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("pcap", lambda: list(capture_seeds("pcap")), _run_capture(".pcap"), _capture_accepted,
           pcap_boundaries, _pcap_lengths()),
    Target("pcapng", lambda: list(capture_seeds("pcapng")), _run_capture(".pcapng"), _capture_accepted,
           pcapng_boundaries, ((4, 4, "<"), (20, 4, "<"), (24, 4, "<"))),
    Target("pcap.gz", lambda: list(capture_seeds("pcap")) + list(capture_seeds("pcapng")),
           _run_capture(".pcap.gz"), _capture_accepted, pcap_boundaries, _pcap_lengths(), compress=True),
    Target("http2", lambda: list(connection_streams()), _run_http2, _frame_accepted, http2_boundaries,
           ((0, 3, ">"),)),
    Target("hpack", lambda: list(header_block_seeds()), _run_hpack, _frame_accepted, length_prefixed_boundaries,
           ((0, 2, ">"),)),
    Target("grpc", lambda: list(grpc_seeds()), _run_grpc, _frame_accepted, lambda d: [1], ((2, 4, ">"),)),
    Target("runmetadata.pb", lambda: list(run_metadata_seeds()), _run_run_metadata(".pb"), _input_errors),
    Target("runmetadata.pbtxt", lambda: list(run_metadata_text_seeds()), _run_run_metadata(".pbtxt"),
           _input_errors),
    Target("chrome", lambda: list(chrome_seeds()), _run_chrome, _input_errors, json=True),
    Target("iperf3", _files("captures/iperf3/*.json"), _run_iperf, _input_errors, json=True),
    Target("profile", lambda: list(profile_seeds()), _run_profile, _input_errors),
    Target("cluster", _files("clusters/*.json"), _run_cluster, _input_errors, json=True),
    Target("prediction", lambda: list(prediction_seeds()), _run_prediction, _input_errors),
    Target("priorities", lambda: list(priority_seeds()), _run_priorities, _input_errors),
)}


def scratch_dir() -> Path:
    """A directory for input files: in memory (``/dev/shm``) where there is one."""
    import tempfile

    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="tfsim-fuzz-", dir=base))


def json_seed(data: bytes):
    """The parsed JSON of a seed, or ``None``."""
    try:
        return json.loads(data)
    except ValueError:
        return None
