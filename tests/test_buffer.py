"""The PS port's buffer: from which W the workers' uploads overflow it (predict --buffer), the
rule the lab checks against measured drops (bench/results/lab-2026-11-26-transport)."""

import json

import pytest
from cli_runner import run

from simulate.cluster import overflow_onset_workers
from tfbase.errors import UsageError
from tfbase.units import parse_size


@pytest.mark.parametrize(("text", "size"), [("160kb", 160_000), ("2MiB", 2 * 1024 ** 2), ("65536", 65_536),
                                            ("1.5 kB", 1_500), ("1gb", 10 ** 9)])
def test_sizes_are_read_as_network_people_write_them(text, size):
    assert parse_size(text, "buffer") == size


@pytest.mark.parametrize("text", ["", "kb", "12xb", "-5kb", "0", "2TiB", "nan"])
def test_a_bad_size_names_the_parameter(text):
    with pytest.raises(UsageError) as err:
        parse_size(text, "buffer")
    assert err.value.source == "buffer"


def test_the_onset_is_the_first_w_whose_windows_exceed_the_buffer():
    # The lab's 100 Mbit/s links: 5 ms of queue is tbf's 160,804-byte limit, 50 ms 723,304 bytes;
    # the calibrated window 65,160 bytes. Measured: drops from W = 3 at 5 ms, none up to W = 4 at 50 ms.
    assert overflow_onset_workers(65_160, 160_804) == 3
    assert overflow_onset_workers(65_160, 723_304) == 12
    assert overflow_onset_workers(65_160, 2 * 65_160) == 3  # two windows fit exactly
    assert overflow_onset_workers(65_160, 60_000) == 1
    assert overflow_onset_workers(0.0, 60_000) is None


def test_predict_says_where_the_buffer_overflows_and_holds_the_queue_to_it(data_dir, tmp_path, capsys):
    base = ["predict", data_dir / "profiles" / "tiny.npz", "--cluster", data_dir / "clusters" / "lab-1gbit.json",
            "--workers", "1-6", "--steps", "60", "--warmup", "10", "--no-progress", "--jobs", "1"]
    code, _, err = run([*base, "--json", tmp_path / "plain.json"], capsys)
    assert code == 0, err
    code, out, err = run([*base, "--buffer", "500kb", "--json", tmp_path / "buffer.json"], capsys)
    assert code == 0, err
    code, _, err = run([*base, "--buffer", "100mb", "--json", tmp_path / "deep.json"], capsys)
    assert code == 0, err
    plain, buffered, deep = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("plain", "buffer", "deep"))
    assert "buffer" not in plain
    window = buffered["buffer"]["queue_window_bytes"]
    assert window == 195_480.0  # the bundled calibration's
    assert buffered["buffer"]["overflow_from_workers"] == 3 == 500_000 // window + 1
    assert "from W = 3 the workers' uploads overflow it" in out
    # a buffer no queue reaches predicts as the unbounded one; one that W = 3 windows overflow
    # holds the queue to itself: the same up to W = 2, shorter waits and more throughput at W = 6
    throughput = {name: [row["throughput_eps"] for row in doc["rows"]]
                  for name, doc in (("plain", plain), ("buffer", buffered), ("deep", deep))}
    assert throughput["deep"] == throughput["plain"]
    assert throughput["buffer"][:2] == throughput["plain"][:2]
    assert throughput["buffer"][5] > throughput["plain"][5]
    code, out, _ = run([*base, "--buffer", "100kb"], capsys)
    assert code == 0 and "one worker's uploads already overflow it" in out


def test_a_bad_buffer_is_one_line_and_exit_2(data_dir, capsys):
    code, out, err = run(["predict", data_dir / "profiles" / "tiny.npz", "--cluster",
                          data_dir / "clusters" / "lab-1gbit.json", "--workers", "1", "--buffer", "12xb"], capsys)
    assert code == 2 and out == ""
    assert err.strip() == "tfsim: error: --buffer: unknown unit 'xb' in '12xb'; use b, kb, mb, gb, kib, mib or gib"
