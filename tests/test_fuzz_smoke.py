"""A short seeded fuzz run over every reader, and structure-aware inputs from hypothesis.

The run is ``bench/fuzz.py`` with few inputs per reader (seed 1), in a subprocess with a
hard timeout, so that a hang cannot stall the suite. Inputs depend only on the seed, the
reader and the input number; the test checks that, then that no reader fails.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import fuzz  # noqa: E402
import mutations  # noqa: E402
from fuzz_targets import TARGETS  # noqa: E402

INPUTS_PER_READER = 4000


def _digest(target: str, seed: int, count: int) -> str:
    reader = TARGETS[target]
    seeds = reader.seeds()
    digest = hashlib.sha256()
    for index in range(count):
        digest.update(fuzz.make_input(reader, seeds, seed, index))
    return digest.hexdigest()


def test_inputs_depend_only_on_seed_reader_and_number():
    for target in ("pcap", "iperf3", "hpack"):
        assert _digest(target, 1, 40) == _digest(target, 1, 40)
        assert _digest(target, 1, 40) != _digest(target, 2, 40)
    reader = TARGETS["cluster"]
    assert fuzz.make_input(reader, reader.seeds(), 1, 17) == fuzz.make_input(reader, reader.seeds(), 1, 17)


def test_short_seeded_campaign_finds_nothing_open(tmp_path):
    completed = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fuzz.py"), "--inputs", str(INPUTS_PER_READER), "--seed", "1",
         "--processes", "2", "--out", str(tmp_path), "--failures", str(tmp_path / "failures")],
        capture_output=True, text=True, timeout=600)
    summary = json.loads((tmp_path / "fuzz.json").read_text())
    rows = {row["reader"]: row for row in summary["rows"]}
    assert set(rows) == set(TARGETS)
    assert all(row["inputs"] == INPUTS_PER_READER for row in rows.values())
    assert {name: row["new_failures"] + row["reopened"] for name, row in rows.items() if row["open"]} == {}
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert sum(row["failures_fixed"] for row in rows.values()) == sum(row["failures_found"] for row in rows.values())


COMMAND_RUNS = 12


def test_short_seeded_command_campaign_finds_nothing_open(tmp_path):
    """The whole-command campaign (``bench/fuzz.py --commands``), a few runs of every command and the
    regression cases, in well under a minute."""
    from fuzz_commands import COMMAND_TARGETS

    completed = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fuzz.py"), "--commands", "--runs", str(COMMAND_RUNS), "--seed", "1",
         "--processes", "2", "--out", str(tmp_path), "--failures", str(tmp_path / "failures")],
        capture_output=True, text=True, timeout=300)
    summary = json.loads((tmp_path / "fuzz-commands.json").read_text())
    rows = {row["command"]: row for row in summary["rows"]}
    assert set(rows) == set(COMMAND_TARGETS)
    assert all(row["runs"] == COMMAND_RUNS for row in rows.values())
    assert {name: row["new_failures"] + row["reopened"] for name, row in rows.items() if row["open"]} == {}
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert sum(row["exit_0"] for row in rows.values()) and sum(row["exit_2"] for row in rows.values())


def test_command_runs_depend_only_on_seed_command_and_number(tmp_path):
    from fuzz_commands import COMMAND_TARGETS

    def argv(seed, index, copy):
        where = tmp_path / f"{seed}-{index}-{copy}"
        where.mkdir()
        return COMMAND_TARGETS["predict"].make(fuzz.input_rng(seed, "command/predict", index), where).argv

    first = argv(1, 5, "a")
    assert first == argv(1, 5, "b") and first != argv(2, 5, "a")


# -- structure-aware inputs ------------------------------------------------------------------

def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


frames = st.builds(_frame, st.integers(0, 10), st.integers(0, 255), st.sampled_from([0, 1, 3, 2 ** 31 - 1]),
                   st.binary(max_size=64))


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(frames, max_size=12), st.booleans())
def test_any_sequence_of_http2_frames_decodes_or_is_malformed(sequence, with_preface):
    from netcapture.http2 import PREFACE

    data = (PREFACE if with_preface else b"") + b"".join(sequence)
    try:
        TARGETS["http2"].run(data, Path("."))
    except TARGETS["http2"].accepted():
        pass


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["iperf3", "cluster", "chrome"]), st.data())
def test_json_readers_take_any_document_shaped_like_theirs(tmp_path_factory, target, data):
    """The seed document with one value replaced by any JSON value."""
    import random

    reader = TARGETS[target]
    seed = reader.seeds()[0]
    document = json.loads(seed)
    paths: list = []
    mutations._json_paths(document, (), paths, random.Random(0))
    path = data.draw(st.sampled_from(paths))
    value = data.draw(json_values)
    text = json.dumps(mutations._replaced(document, path, value), allow_nan=True).encode()
    try:
        reader.run(text, tmp_path_factory.mktemp("json"))
    except reader.accepted():
        pass
