"""Every failure the fuzz campaign (``bench/fuzz.py``) found, replayed with its shrunk input.

``tests/fuzz_cases/cases.json`` lists the cases: the reader, the input file, and the
failure it once caused. Each must now be read, or refused with the reader's documented
exception in one line that names the file. A few cases are also spelled out inline, with
the error they must give.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from fuzz_targets import TARGETS  # noqa: E402

CASES_DIR = Path(__file__).resolve().parent / "fuzz_cases"
CASES = json.loads((CASES_DIR / "cases.json").read_text())["cases"]


def test_every_case_names_a_known_reader_and_an_existing_input():
    assert len(CASES) >= 20
    for case in CASES:
        assert case["target"] in TARGETS
        assert (CASES_DIR / case["file"]).stat().st_size > 0


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_fuzz_case_is_read_or_refused_with_a_documented_error(case, tmp_path):
    target = TARGETS[case["target"]]
    data = (CASES_DIR / case["file"]).read_bytes()
    try:
        target.run(data, tmp_path)
    except target.accepted() as exc:
        message = str(exc)
        assert "\n" not in message
        if getattr(exc, "source", None) is not None:  # file readers name the file first
            assert message.startswith(str(tmp_path)), message


def _run(target: str, data: bytes, tmp_path: Path) -> Exception | None:
    try:
        TARGETS[target].run(data, tmp_path)
    except TARGETS[target].accepted() as exc:
        return exc
    return None


def test_deeply_nested_json_is_refused_by_each_json_reader(tmp_path):
    deep = b"[" * 200_000 + b"]" * 200_000
    assert "iperf3.json: not an iperf3 -J result (JSON nested too deeply)" in str(_run("iperf3", deep, tmp_path))
    assert "cluster.json: not a cluster file (JSON nested too deeply)" in str(_run("cluster", deep, tmp_path))
    assert "step.chrome.json: not a Chrome trace (JSON nested too deeply)" in str(_run("chrome", deep, tmp_path))


def test_iperf_streams_must_be_a_list_of_objects(tmp_path):
    document = {"end": {"sum_received": {"bits_per_second": 8e9}, "sum_sent": {"bits_per_second": 8e9},
                        "streams": [7]}}
    error = _run("iperf3", json.dumps(document).encode(), tmp_path)
    assert str(error).endswith("iperf3.json: end.streams[0] is not an object: 7")


@pytest.mark.parametrize("text, problem", [
    (b"workers,,throughput_eps,\n\x7f,,3\n", "workers must be whole numbers from 1 to 1000000"),
    (b"workers,throughput_eps\n2,fast\n", "measured throughputs must be positive"),
    (b"workers,throughput_eps\n1e300,3\n", "workers must be whole numbers from 1 to 1000000"),
])
def test_measured_table_with_bad_values_is_refused(tmp_path, text, problem):
    from tfbase.errors import InputError
    from tfsim.comparison import read_measured

    path = tmp_path / "measured.csv"
    path.write_bytes(text)
    with pytest.raises(InputError) as info:
        read_measured(path)
    assert str(info.value) == f"{path}: {problem}"


def test_pcapng_with_a_cut_second_section_header_is_truncated(tmp_path):
    from netcapture.errors import TruncatedCapture
    from netcapture.pcap import iter_packets

    def block(kind, body):
        body += b"\x00" * (-len(body) % 4)
        return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)
    section = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + struct.pack("<HH", 1, 8) + b"x" * 8)
    packet = block(6, struct.pack("<IIIII", 0, 0, 1_000_000, 4, 4) + b"abcd")
    path = tmp_path / "two.pcapng"
    path.write_bytes(section + block(1, struct.pack("<HHI", 1, 0, 0)) + packet + section[:30])
    seen = []
    with pytest.raises(TruncatedCapture, match=r"two\.pcapng: inside the pcapng block after packet 1"):
        seen.extend(p.number for p in iter_packets(path))
    assert seen == [1]


def test_self_addressed_segments_are_not_a_connection(tmp_path):
    from netcapture import read_capture
    from netcapture.http2 import PREFACE
    from netcapture.pcap import LINKTYPE_RAW, PcapWriter

    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 20 + len(PREFACE), 0, 0, 64, 6, 0, b"\x7f\0\0\1", b"\x7f\0\0\1")
    tcp = struct.pack("!HHIIBBHHH", 5000, 5000, 1, 0, 5 << 4, 0x18, 1000, 0, 0)
    path = tmp_path / "self.pcap"
    with open(path, "wb") as handle:
        PcapWriter(handle, linktype=LINKTYPE_RAW).write(1_000_000_000, ip + tcp + PREFACE)
    capture = read_capture(path, require_http2=False)
    assert capture.frames == () and capture.packets == 1
