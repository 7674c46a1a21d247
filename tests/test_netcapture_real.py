"""netcapture on the bundled real captures (data/captures/): TensorFlow 2.21 gRPC on loopback.

- ``tiny_lo``: the tiny model, 1 warm-up + 4 traced steps, TensorFlow's default windows;
  classic pcap, microsecond timestamps.
- ``tiny16_lo_smallwin``: 16-pixel images, receive window pinned to 64 KiB and BDP probing
  off (``TF_GRPC_DEFAULT_OPTIONS``), so that streams stall on flow control; pcapng,
  nanosecond timestamps.

Each sits next to its run directory, whose traces' RecvTensor records must all match a
captured stream. tshark is the independent reference: the two backends must agree on every
HTTP/2 frame and on every record built from the frames.

Other complete captures bundled in data/captures (a ``capture.*`` file inside a run
directory, e.g. the tc-shaped namespace links) get the same agreement and matching checks.
"""

from __future__ import annotations

import itertools
import shutil
import warnings
from pathlib import Path

import pytest

from calibration.runmatch import MatchError, match_run, run_server_ports, run_tasks
from netcapture import read_capture
from netcapture.http2 import DATA, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE, WINDOW_UPDATE
from netcapture.layers import decode_tcp, decode_tcp_scapy
from netcapture.pcap import iter_packets

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "captures"
OWN = {
    "tiny_lo": DATA_DIR / "tiny_lo" / "capture.pcap.gz",
    "tiny16_lo_smallwin": DATA_DIR / "tiny16_lo_smallwin" / "capture.pcapng.gz",
}


def run_dir_of(capture: Path) -> Path | None:
    for candidate in (capture.parent, capture.parent / "run"):
        if (candidate / "run.json").is_file():
            return candidate
    return None


OTHERS = {p.parent.name: p for p in sorted(DATA_DIR.glob("*/capture.*"))
          if p.parent.name not in OWN and not p.parent.name.endswith(".incomplete") and run_dir_of(p)}
CAPTURES = {**OWN, **OTHERS}
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (apt-get install "
                                  "tshark): the tshark backend is the reference the scapy backend is checked against")
_cache: dict = {}


def capture_of(name, backend="scapy", ports=True):
    key = (name, backend, ports)
    if key not in _cache:
        server_ports = run_server_ports(run_dir_of(CAPTURES[name])) if ports else None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a clean capture decodes without a single warning
            _cache[key] = read_capture(CAPTURES[name], backend, server_ports=server_ports)
    return _cache[key]


@needs_tshark
@pytest.mark.parametrize("name", CAPTURES)
def test_backends_agree_frame_for_frame(name):
    ours, reference = capture_of(name, "scapy"), capture_of(name, "tshark")
    assert len(ours.frames) > 1000
    assert ours.recv_tensor_streams()
    for mine, theirs in zip(ours.frames, reference.frames):
        assert mine.key() == theirs.key()  # packet, time, connection, side, type, stream, length, flags
        assert mine == theirs  # and decoded contents: headers, settings, increments, gRPC messages
    assert len(ours.frames) == len(reference.frames)
    assert ours.streams == reference.streams
    assert ours.flow_control == reference.flow_control
    assert ours.connections == reference.connections


@needs_tshark
@pytest.mark.parametrize("name", OWN)
def test_backends_find_the_same_http2_connections_without_being_told_the_ports(name):
    assert capture_of(name, "scapy", ports=False).frames == capture_of(name, "scapy").frames
    assert capture_of(name, "tshark", ports=False).frames == capture_of(name, "scapy").frames


@pytest.mark.parametrize("name", CAPTURES)
def test_header_decoder_agrees_with_scapy(name):
    # every packet of our captures; the first 3,000 of others (scapy takes ~1 ms a packet)
    packets = iter_packets(CAPTURES[name]) if name in OWN else itertools.islice(iter_packets(CAPTURES[name]), 3000)
    for packet in packets:
        assert decode_tcp(packet.linktype, packet.data) == decode_tcp_scapy(packet.linktype, packet.data)


@pytest.mark.parametrize("name", CAPTURES)
def test_every_traced_recv_tensor_record_matches_exactly_one_stream(name):
    capture = capture_of(name)
    run = run_dir_of(CAPTURES[name])
    result = match_run(capture, run)
    assert not result.unmatched_transfers
    assert not result.unmatched_streams  # the traced steps' streams are all claimed
    assert len({id(m.stream) for m in result.matches}) == len(result.matches)
    traced = len(result.step_ids)
    assert len({step_id for _, step_id in result.step_ids}) == traced
    if name in OWN:
        assert traced == 4 and len(result.matches) == 4 * 19  # 4 traced steps, 19 transfers each
    tasks = run_tasks(run)
    for match in result.matches:
        transfer, stream = match.transfer, match.stream
        assert stream.tensor_name == transfer.tensor_name
        assert (stream.src_device, stream.dst_device) == (transfer.send_device, transfer.recv_device)
        # RecvTensor: the receiver is the gRPC client, the sender serves the tensor.
        assert stream.tensor_direction == "server_to_client"
        assert tasks[stream.server].startswith("ps" if transfer.direction == "downlink" else "worker")
        # Sizes. The response is one gRPC message, a RecvTensorResponse whose raw
        # tensor_content is exactly the trace's requested_bytes, after a header of 15-37
        # bytes here (send_start_micros, the TensorProto's dtype and shape, field tags and
        # length varints); the DATA bytes add the 5-byte gRPC prefix.
        assert stream.response_messages == 1
        assert stream.tensor_content_bytes == transfer.requested_bytes
        assert 10 <= stream.response_message_bytes - transfer.requested_bytes <= 64
        assert stream.response_data_bytes == stream.response_message_bytes + 5
        assert sum(e.length_bytes for e in stream.response_frames) == stream.response_data_bytes
        # Times: the request precedes the trace's record end; the last DATA frame arrives
        # before the receiver's RecvTensor record ends.
        assert stream.request_headers_time_s <= stream.request_end_time_s <= transfer.end_s
        assert stream.response_first_data_time_s <= stream.response_last_data_time_s <= transfer.end_s + 1e-3
        assert stream.grpc_status == 0 and stream.complete


def test_capture_and_trace_of_different_runs_do_not_match():
    with pytest.raises(MatchError, match="same run"):
        match_run(capture_of("tiny_lo"), run_dir_of(CAPTURES["tiny16_lo_smallwin"]))


def test_default_windows_of_tensorflow_grpc():
    """docs/calibration.md §2.3-2.4: both peers announce 4 MiB windows and frames, then open the connection window."""
    capture = capture_of("tiny_lo")
    assert len(capture.connections) == 2  # one per PS/worker pair and direction of RPCs
    for timeline in capture.flow_control:
        assert timeline.initial_window_timeline[0][1] == 4_194_304
        assert timeline.max_frame_timeline[0][1] == 4_194_304
        assert timeline.window_updates[0].stream_id == 0
        assert timeline.window_updates[0].increment_bytes == 4_128_769
    largest = max(capture.recv_tensor_streams(), key=lambda s: s.response_data_bytes)
    # gRPC's write size starts at 128 KiB: the 512 KiB tensor goes out in 128 KiB frames
    assert [e.length_bytes for e in largest.response_frames][:4] == [131_072] * 4


def test_small_window_capture_shows_streams_stalling_on_flow_control():
    capture = capture_of("tiny16_lo_smallwin")
    for stream in capture.recv_tensor_streams():
        timeline = capture.flow_control_of(stream)
        assert timeline.initial_window_at(stream.request_headers_time_s) == 65_535
    largest = max(capture.recv_tensor_streams(), key=lambda s: s.response_data_bytes)
    assert largest.response_data_bytes > 2 * 65_535
    timeline = capture.flow_control_of(largest)
    windows = [s for s in timeline.stream_windows if s.stream_id == largest.stream_id]
    # The stream runs its window down to less than a frame, then a WINDOW_UPDATE reopens it.
    low = min(w.window_bytes for w in windows if w.cause == "data")
    assert 0 <= low < 16_384
    assert any(w.cause == "window_update" for w in windows)
    assert all(w.window_bytes >= 0 for w in windows)
    assert all(w.window_bytes >= 0 for w in timeline.connection_window)
    updates = [u for u in timeline.window_updates if u.stream_id == largest.stream_id]
    assert updates and all(u.increment_bytes > 0 for u in updates)
    assert largest.response_frames[0].length_bytes <= timeline.max_frame_at(largest.request_headers_time_s)


@pytest.mark.parametrize("name", CAPTURES)
def test_frames_are_in_capture_order_and_typed(name):
    capture = capture_of(name)
    numbers = [f.packet_number for f in capture.frames]
    assert numbers == sorted(numbers)
    assert {f.type for f in capture.frames} >= {DATA, WINDOW_UPDATE}
    assert not capture.warnings and not capture.gaps and not capture.truncated
    if name in OWN:  # loopback: nothing lost, nothing sent twice
        assert all(t.duplicate_bytes == 0 for t in capture.tcp)
    settings_ids = {s.setting_id for t in capture.flow_control for s in t.receiver_settings}
    assert {SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE} <= settings_ids
