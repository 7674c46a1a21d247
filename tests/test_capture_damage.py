"""Damaged captures, made from a bundled real capture by tests/capture_damage.py, on both backends.

Each damage is what a real cluster's capture shows: a packet tcpdump dropped, packets out of
order, a capture started after the connections, two runs in one file (every 4-tuple reused),
a cut or corrupt tail, two files written back to back. Each test asserts the decoded counts
against the undamaged capture, the warning, and (for calibration) the recorded loss.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import capture_damage as damage
import pytest
from cli_runner import run as run_cli

from calibration.capture_loss import CaptureLossError
from netcapture import CorruptTail, read_capture
from netcapture.errors import CaptureWarning
from netcapture.http2 import DATA, FLAG_END_HEADERS, HEADERS, FrameSplitter, plausible_header

RUN = Path(__file__).resolve().parent.parent / "data" / "captures" / "tiny16_lo_smallwin"
BACKENDS = ("scapy", pytest.param("tshark", marks=pytest.mark.skipif(shutil.which("tshark") is None,
                                                                        reason="tshark is not installed")))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Every damaged copy, written once: name -> path."""
    out = tmp_path_factory.mktemp("damaged")
    packets = damage.packets_of(next(RUN.glob("capture.pcap*")))
    ports = damage.server_ports(RUN)
    dropped_index = damage.largest_downlink_index(packets, ports)
    files = {
        "clean": packets,
        "dropped": damage.drop(packets, dropped_index),
        "reordered": damage.reorder(packets, 8),
        "late": damage.start_late(packets, len(packets) // 3),
        "two_runs": damage.two_runs(packets, 30.0),
        "two_runs_new_isn": damage.two_runs(packets, 30.0, isn_shift=123_456_789),
        "swapped": damage.swap_adjacent(packets, 50),
    }
    paths = {name: damage.write_pcap(out / f"{name}.pcap", p) for name, p in files.items()}
    clean = paths["clean"].read_bytes()
    paths["garbage_tail"] = out / "garbage_tail.pcap"
    paths["garbage_tail"].write_bytes(clean + b"\xde\xad\xbe\xef" * 1000)
    paths["concatenated"] = out / "concatenated.pcap"
    paths["concatenated"].write_bytes(clean + clean)
    paths["cut"] = out / "cut.pcap"
    paths["cut"].write_bytes(clean[: len(clean) * 2 // 3])
    paths["dropped_payload_bytes"] = damage.payload_bytes(packets[dropped_index])
    return paths


def decode(path, backend, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capture = read_capture(path, backend=backend, server_ports=damage.server_ports(RUN), **kwargs)
    return capture, [str(w.message) for w in caught if issubclass(w.category, CaptureWarning)]


def by_key(capture):
    return {(s.connection.instance, s.rendezvous_key, s.step_id): s for s in capture.recv_tensor_streams()}


def same_stream(a, b) -> bool:
    return (a.response_data_bytes, a.response_last_data_time_s, a.request_headers_time_s, a.tensor_content_bytes) \
        == (b.response_data_bytes, b.response_last_data_time_s, b.request_headers_time_s, b.tensor_content_bytes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dropped_packet_is_reported_per_direction_with_its_exact_size(made, backend):
    clean, _ = decode(made["clean"], backend)
    capture, notes = decode(made["dropped"], backend)
    lost = [loss for loss in capture.losses if loss.lost_bytes]
    assert len(lost) == 1 and lost[0].lost_bytes == made["dropped_payload_bytes"] and lost[0].gaps == 1
    assert not lost[0].from_client  # the dropped packet carried a tensor, server to client
    assert any("never captured" in note for note in notes)
    assert len(by_key(capture)) == len(by_key(clean))  # requests are all there


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dropped_packet_costs_only_the_frames_it_touches(made, backend):
    clean, _ = decode(made["clean"], backend)
    capture, _ = decode(made["dropped"], backend)
    direction = next(loss for loss in capture.losses if loss.lost_bytes)
    # Decoding resumed at the next frame boundary: almost everything after the gap is decoded.
    assert direction.resyncs == 1 and direction.skipped_bytes < 16_384
    assert len(clean.frames) - 8 <= len(capture.frames) < len(clean.frames)
    damaged = [s for s in capture.recv_tensor_streams() if s.damaged]
    assert 1 <= len(damaged) <= 4
    reference = by_key(clean)
    intact = [s for s in capture.recv_tensor_streams() if not s.damaged]
    assert all(same_stream(s, reference[key]) for key, s in by_key(capture).items() if s in intact)


@pytest.mark.parametrize("backend", BACKENDS)
def test_shuffled_packets_decode_as_the_ordered_capture(made, backend):
    clean, _ = decode(made["clean"], backend)
    capture, notes = decode(made["reordered"], backend)
    assert not defects(notes) and not any(loss.lost_bytes or loss.skipped_bytes for loss in capture.losses)
    assert len(capture.frames) == len(clean.frames)
    reference = by_key(clean)
    assert by_key(capture).keys() == reference.keys()
    assert all(same_stream(s, reference[key]) for key, s in by_key(capture).items())


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_capture_that_starts_mid_connection_is_decoded_from_the_next_frame_boundary(made, backend):
    clean, _ = decode(made["clean"], backend)
    capture, notes = decode(made["late"], backend)
    assert sum("starts after this connection opened" in note for note in notes) == 2
    assert all(loss.mid_stream_start for loss in capture.losses)
    found = by_key(capture)
    assert len(found) >= len(by_key(clean)) // 2  # RecvTensor told by its request body
    reference = by_key(clean)
    for key, stream in found.items():
        original = reference[key]
        assert stream.response_data_bytes == original.response_data_bytes
        assert stream.response_last_data_time_s == original.response_last_data_time_s


# Damages Wireshark's dissector cannot decode whole (a connection's data after a lost segment,
# a connection whose start is out of order or not captured, a 4-tuple reused with the same
# sequence numbers, frames completed out of time order); the tshark backend decodes those
# connections from tshark's TCP payload with netcapture's decoder, and says so.
REROUTED = {"dropped": 1, "reordered": 2, "swapped": 2, "late": 2, "two_runs": 2, "concatenated": 2}


def defects(notes):
    """The warnings about the capture, without the tshark backend's note on its route."""
    return [note for note in notes if ROUTE not in note]


ROUTE = "decoded from tshark's TCP payload by netcapture's own HTTP/2 decoder"


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
@pytest.mark.parametrize("name", ["clean", "dropped", "reordered", "swapped", "late", "two_runs", "two_runs_new_isn",
                                  "garbage_tail", "concatenated", "cut"])
def test_both_backends_decode_each_damage_alike(made, name):
    ours, ours_notes = decode(made[name], "scapy")
    theirs, their_notes = decode(made[name], "tshark")
    assert theirs.frames == ours.frames  # packet, time, connection, type, stream, flags, contents; in capture order
    assert theirs.streams == ours.streams  # damaged streams marked alike
    assert theirs.flow_control == ours.flow_control and theirs.connections == ours.connections
    assert set(theirs.losses) == set(ours.losses)  # decoded, lost, not decodable, unfinished, resyncs
    assert sum(ROUTE in note for note in their_notes) == REROUTED.get(name, 0)
    # The same warnings, but for how each backend words a cut file.
    assert sorted(defects(their_notes)) == sorted(ours_notes) or name == "cut"


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_runs_on_the_same_4_tuples_are_separate_connections(made, backend):
    clean, _ = decode(made["clean"], backend)
    capture, _ = decode(made["two_runs_new_isn"], backend)
    assert len(capture.connections) == 2 * len(clean.connections)
    assert sorted(c.connection.instance for c in capture.connections) == [0, 0, 1, 1]
    assert len(capture.frames) == 2 * len(clean.frames)
    assert len(capture.streams) == 2 * len(clean.streams)
    first = [s for s in capture.recv_tensor_streams() if s.connection.instance == 0]
    assert max(s.response_last_data_time_s for s in first) < min(
        s.request_headers_time_s for s in capture.recv_tensor_streams() if s.connection.instance == 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_run_written_twice_is_two_runs_even_with_the_same_sequence_numbers(made, backend):
    clean, _ = decode(made["clean"], backend)
    capture, _ = decode(made["two_runs"], backend)
    assert len(capture.connections) == 2 * len(clean.connections) and len(capture.frames) == 2 * len(clean.frames)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_corrupt_tail_keeps_every_packet_before_it(made, backend):
    clean, _ = decode(made["clean"], backend)
    capture, notes = decode(made["garbage_tail"], backend)
    assert capture.truncated and capture.frames == clean.frames
    assert any(f"at byte {made['clean'].stat().st_size}" in note for note in notes)
    with pytest.raises(CorruptTail, match=r"garbage_tail\.pcap"):
        decode(made["garbage_tail"], backend, strict=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_captures_written_back_to_back_are_read_as_one(made, backend):
    clean, _ = decode(made["clean"], backend)
    capture, notes = decode(made["concatenated"], backend)
    assert any("second capture's file header" in note for note in notes)
    assert capture.packets == 2 * clean.packets
    assert len(capture.frames) == 2 * len(clean.frames)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cut_capture_keeps_its_complete_packets_and_says_where_it_stopped(made, backend):
    clean, _ = decode(made["clean"], backend)
    capture, notes = decode(made["cut"], backend)
    assert capture.truncated and any("cut short" in note for note in notes)
    assert 0 < len(capture.frames) < len(clean.frames)
    assert capture.frames == clean.frames[: len(capture.frames)]


def _run_dir_with(tmp_path, capture: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(RUN, run_dir)
    for old in run_dir.glob("capture.pcap*"):
        old.unlink()
    shutil.copy(capture, run_dir / "capture.pcap")
    return run_dir


def test_calibration_refuses_a_direction_that_lost_too_much_unless_allowed(made, tmp_path):
    from calibration import calibrate_run

    run_dir = _run_dir_with(tmp_path, made["dropped"])
    with pytest.raises(CaptureLossError, match=r"capture.pcap: the downlink lost 7\.\d\d% .*allow_loss") as caught:
        calibrate_run(run_dir)
    assert caught.value.direction == "downlink" and caught.value.loss.lost_bytes == made["dropped_payload_bytes"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        document = calibrate_run(run_dir, allow_loss=True).to_cluster_json()
    loss = document["capture_loss"]
    assert loss["allowed"] and loss["by_direction"]["downlink"]["lost_bytes"] == made["dropped_payload_bytes"]
    assert loss["by_direction"]["downlink"]["streams_excluded"] >= 1
    assert loss["by_direction"]["uplink"]["lost_bytes"] == 0
    assert loss["kernel_drops"] is None  # this run.json has no count of tcpdump's, the pcap none either
    assert document["win_bytes"] is not None


def test_calibrate_cli_exits_2_naming_the_capture_and_the_flag(made, tmp_path, capsys):
    import json

    run_dir = _run_dir_with(tmp_path, made["dropped"])
    run = json.loads((run_dir / "run.json").read_text())
    run["capture"] = {**(run.get("capture") or {}), "dropped_by_kernel": 1}  # tcpdump's count when it stopped
    (run_dir / "run.json").write_text(json.dumps(run))
    code, _, err = run_cli(["calibrate", run_dir, "-o", tmp_path / "cluster.json"], capsys)
    assert code == 2 and "capture.pcap: the downlink lost" in err
    assert "--allow-loss" in err and "allow_loss" not in err and "Traceback" not in err
    assert not (tmp_path / "cluster.json").exists()
    code, out, _ = run_cli(["calibrate", run_dir, "-o", tmp_path / "cluster.json", "--allow-loss"], capsys)
    assert code == 0 and "capture loss, downlink: 7." in out and "the kernel dropped 1 packets" in out
    assert json.loads((tmp_path / "cluster.json").read_text())["capture_loss"]["kernel_drops"] == 1


def test_a_shuffled_capture_calibrates_as_the_ordered_one(made, tmp_path):
    from calibration import calibrate_run

    clean = calibrate_run(RUN).to_cluster_json()
    shuffled = calibrate_run(_run_dir_with(tmp_path, made["reordered"])).to_cluster_json()
    # Not flow_control: its stalls pair DATA with the other direction's WINDOW_UPDATEs in file
    # order, which the shuffle changed.
    for key in ("bandwidth_Bps", "win_bytes", "win_bytes_by_direction", "alpha_s_per_byte", "beta_s", "overhead"):
        assert shuffled[key] == clean[key], key


# -- the splitter's side of a loss --------------------------------------------------------

def _frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def test_a_loss_inside_a_frame_whose_header_was_captured_damages_that_frame_only():
    first = _frame(DATA, 0, 1, b"a" * 100)
    second = _frame(HEADERS, FLAG_END_HEADERS, 3, b"\x88")
    splitter = FrameSplitter(expect_preface=False)
    assert splitter.feed(first[:40]) == []
    assert splitter.lose(30) == []  # the frame is not over yet: it comes out when its end does
    damaged, after = splitter.feed(first[70:] + second)
    assert damaged.damaged and damaged.length == 100 and damaged.stream_id == 1 and damaged.payload == b""
    assert (after.type, after.stream_id, after.payload, after.damaged) == (HEADERS, 3, b"\x88", False)
    assert splitter.lost_bytes == 30 and splitter.damaged_frames == 1 and splitter.resyncs == 0


def test_a_loss_that_takes_a_frame_header_resynchronises_on_a_chain_of_plausible_headers():
    frames = [_frame(DATA, 0, 1, bytes([9]) * 50), _frame(DATA, 0, 1, bytes([9]) * 50),
              _frame(HEADERS, FLAG_END_HEADERS, 3, b"\x88"), _frame(DATA, 1, 3, b"\x00" * 5),
              _frame(HEADERS, FLAG_END_HEADERS | 1, 3, b"\x89")]
    stream = b"".join(frames)
    splitter = FrameSplitter(expect_preface=False)
    splitter.feed(stream[:5])
    assert splitter.lose(20) == []  # the first header is cut: the boundary after the hole is unknown
    got = splitter.feed(stream[25:])
    assert [f.offset for f in got] == [59, 2 * 59, 2 * 59 + 10, 2 * 59 + 10 + 14]  # the second frame on
    assert splitter.resyncs == 1 and splitter.skipped_bytes == 59 - 25 + 5


def test_plausible_headers_are_what_a_grpc_peer_sends():
    assert plausible_header(_frame(DATA, 0, 1, b""), 0, 16_384) == 0
    assert plausible_header(_frame(DATA, 0, 0, b""), 0, 16_384) is None        # DATA on stream 0
    assert plausible_header(_frame(DATA, 0x40, 1, b""), 0, 16_384) is None     # a flag DATA does not have
    assert plausible_header(_frame(4, 0, 0, b"x" * 7), 0, 16_384) is None      # SETTINGS of 7 bytes
    assert plausible_header(_frame(DATA, 0, 1, b"x" * 20), 0, 16) is None      # longer than allowed


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_frame_a_capture_ends_inside_is_not_a_loss(tmp_path, backend):
    whole = RUN.parent / "wide_1gbit" / "capture.pcap.gz"
    cut = tmp_path / "cut.pcap.gz"
    cut.write_bytes(whole.read_bytes()[:400_000])  # ends inside a large DATA frame
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        capture = read_capture(cut, backend=backend)
    assert capture.truncated
    assert sum(loss.unfinished_bytes for loss in capture.losses) > 16_384
    assert all(loss.lost_fraction == 0 and not loss.lost_bytes and not loss.skipped_bytes for loss in capture.losses)
    cut_frames = [w for w in capture.warnings if "ends inside an HTTP/2 frame" in w]
    assert len(cut_frames) == sum(1 for loss in capture.losses if loss.unfinished_bytes) >= 1
    # A capture stopped while the job ran (collect's, as the traced steps end) expects them.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        stopped = read_capture(cut, backend=backend, stopped_mid_run=True)
    assert not [w for w in stopped.warnings if "ends inside an HTTP/2 frame" in w]
    assert [loss.unfinished_bytes for loss in stopped.losses] == [loss.unfinished_bytes for loss in capture.losses]
