"""The command line: help, outputs, and one-line errors with exit status 2."""

import json

import pytest
from cli_runner import run

from tfsim.cli import build_parser, main

COMMANDS = ("collect", "profile", "calibrate", "order", "predict", "compare", "lab", "demo")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert f"tfsim {command}" in capsys.readouterr().out


def test_top_level_help_lists_the_workflow(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out


def test_predict_writes_json_csv_plot_and_trace(data_dir, tmp_path, capsys):
    out_json, out_csv, plot, trace = (tmp_path / n for n in ("p.json", "p.csv", "p.png", "t.json"))
    code, _out, err = run(["predict", data_dir / "profiles" / "tiny.npz", "--bandwidth", "100mbit", "--workers", "1-3",
                          "--steps", "60", "--warmup", "5", "--jobs", "1", "--no-progress", "--json", out_json,
                          "--csv", out_csv, "--plot", plot, "--trace-out", trace, "--trace-steps", "2"], capsys)
    assert code == 0, err
    assert "no calibration" in err
    document = json.loads(out_json.read_text())
    assert document["format"] == "tfsim.prediction/1"
    assert [r["workers"] for r in document["rows"]] == [1, 2, 3]
    for row in document["rows"]:
        assert {"workers", "transfer", "mode", "throughput_eps", "ci95_eps", "step_time_s"} <= set(row)
        assert row["throughput_eps"] > 0 and row["mode"] == "async" and row["transfer"] == "http2"
    assert out_csv.read_text().startswith("workers,")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {"worker 0", "worker 2", "ps 0"} <= names
    assert any(e["ph"] == "X" for e in events) and any(e["ph"] == "s" for e in events)


def test_predict_same_seed_same_bytes(data_dir, tmp_path):
    """Outputs are byte-identical for a seed: whatever the number of jobs or PYTHONHASHSEED."""
    import os
    import subprocess
    import sys

    outputs = []
    for k, hashseed in enumerate(("0", "12345")):
        path = tmp_path / f"p{k}.json"
        csv_path = tmp_path / f"p{k}.csv"
        result = subprocess.run(
            [sys.executable, "-m", "tfsim", "predict", str(data_dir / "profiles" / "tiny.npz"), "--bandwidth", "1gbit",
             "--workers", "1,4", "--steps", "50", "--warmup", "5", "--jobs", str(k + 1), "--no-progress",
             "--json", str(path), "--csv", str(csv_path), "--transfer", "http2,tic"],
            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": hashseed})
        assert result.returncode == 0, result.stderr
        outputs.append((path.read_bytes(), csv_path.read_bytes()))
    assert outputs[0] == outputs[1]


def test_atomic_output_survives_a_killed_writer(tmp_path):
    """A writer killed in the middle leaves the previous file whole."""
    import signal
    import subprocess
    import sys
    import time

    target = tmp_path / "out.bin"
    target.write_bytes(b"previous")
    code = (
        "import sys, time\n"
        "from tfbase.fileio import atomic_output\n"
        "with atomic_output(sys.argv[1], 'wb') as h:\n"
        "    h.write(b'x' * 1000); h.flush(); print('writing', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.read_bytes() == b"previous"
    time.sleep(0.1)
    assert [p.name for p in tmp_path.iterdir() if p.name != "out.bin"]  # the temporary file, never renamed


@pytest.mark.parametrize("args, message", [
    (["--workers", "0"], "--workers"),
    (["--workers", "2000"], "between 1 and 1024"),
    (["--workers", "a-b"], "--workers"),
    (["--bandwidth", "0"], "positive"),
    (["--bandwidth=-5mbit"], "not a rate"),
    (["--bandwidth", "nan"], "not a rate"),
    (["--bandwidth", "3 parsecs"], "unknown unit"),
    (["--transfer", "carrier-pigeon"], "unknown transfer"),
    (["--sharing", "telepathy"], "unknown sharing"),
    (["--sharing", "flow_cap"], "--flow-cap"),
    (["--warmup", "80", "--steps", "50"], "--warmup"),
], ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_predict_bad_options_exit_2_with_one_line(data_dir, capsys, args, message):
    base = ["predict", data_dir / "profiles" / "tiny.npz", "--no-progress", "--steps", "50", "--warmup", "5"]
    has_rate = any(a.startswith("--bandwidth") for a in args)
    code, _out, err = run(base + args if has_rate else base + ["--bandwidth", "1gbit"] + args, capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if not line.startswith("tfsim: warning")]
    assert len(lines) == 1 and lines[0].startswith("tfsim: error:") and message in lines[0], err


def test_predict_needs_a_cluster_or_bandwidth(data_dir, capsys):
    code, _, err = run(["predict", data_dir / "profiles" / "tiny.npz", "--no-progress"], capsys)
    assert code == 2 and "--cluster" in err


def test_wrong_format_versions_exit_2(data_dir, tmp_path, capsys):
    cluster = tmp_path / "CLUSTER.json"
    cluster.write_text(json.dumps({"format": "tfsim.cluster/9", "bandwidth_Bps": {"downlink": 1, "uplink": 1}}))
    code, _, err = run(["predict", data_dir / "profiles" / "tiny.npz", "--cluster", cluster], capsys)
    assert code == 2 and "tfsim.cluster/9" in err and str(cluster) in err
    bogus = tmp_path / "profile.npz"
    bogus.write_text("hello")
    code, _, err = run(["predict", bogus, "--bandwidth", "1gbit"], capsys)
    assert code == 2 and str(bogus) in err and len(err.strip().splitlines()) == 1


def test_priority_file_naming_unknown_tensors_exit_2(data_dir, tmp_path, capsys):
    priorities = tmp_path / "mine.tsv"
    priorities.write_text("edge_999_not_a_tensor\t0\n")
    code, _, err = run(["predict", data_dir / "profiles" / "tiny.npz", "--bandwidth", "1gbit", "--priorities",
                        priorities, "--transfer", "mine", "--no-progress"], capsys)
    assert code == 2 and "edge_999_not_a_tensor" in err


def test_profile_errors_exit_2(tmp_path, capsys):
    code, _, err = run(["profile", tmp_path / "nothing-here", "-o", tmp_path / "p.npz"], capsys)
    assert code == 2 and "nothing-here" in err
    (tmp_path / "x.pb").write_bytes(b"\x00\x01garbage")
    code, _, err = run(["profile", tmp_path / "x.pb", "--batch", "4", "-o", tmp_path / "p.npz"], capsys)
    assert code == 2 and "x.pb" in err
    assert not (tmp_path / "p.npz").exists()
    code, _, err = run(["profile", tmp_path / "x.pb", "-o", tmp_path / "p.npz"], capsys)
    assert code == 2 and "--batch" in err


def test_usage_error_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["predict"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("tfsim: error:")


def test_compare_sets_baselines_and_measurements_side_by_side(data_dir, tmp_path, capsys):
    measured = tmp_path / "lab.csv"
    measured.write_text("setting,workers,measured_eps\nx,1,2000\nx,2,3500\n")
    out = tmp_path / "cmp.json"
    code, stdout, err = run(["compare", data_dir / "profiles" / "tiny.npz", "--bandwidth", "100mbit", "--workers",
                             "1-2", "--measured", measured, "--steps", "60", "--jobs", "1", "--no-progress",
                             "--json", out, "--plot", tmp_path / "cmp.png"], capsys)
    assert code == 0, err
    rows = json.loads(out.read_text())["rows"]
    assert [r["workers"] for r in rows] == [1, 2]
    for row in rows:
        assert {"tfsim", "lin-async", "cynthia", "measured", "error_tfsim"} <= set(row)
        assert row["error_tfsim"] == pytest.approx(row["tfsim"] / row["measured"] - 1)
    assert "mean |error|" in stdout
    two = tmp_path / "two.csv"
    two.write_text("setting,workers,measured_eps\na,1,1\nb,1,2\n")
    code, _, err = run(["compare", data_dir / "profiles" / "tiny.npz", "--bandwidth", "1gbit", "--measured", two,
                        "--workers", "1"], capsys)
    assert code == 2 and "--setting" in err
