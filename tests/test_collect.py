"""Real TensorFlow runs through ``tfsim collect``: end to end, and every way a run can end."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow
pytest.importorskip("tensorflow")

FIXTURES = Path(__file__).parent / "fixtures"


def tfsim(*args, timeout=300, **kwargs):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "tfsim", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, **kwargs)


def task_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "tfprofile.harness.task"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


@pytest.fixture(autouse=True)
def no_leftover_tasks():
    before = task_processes()
    yield
    deadline = time.time() + 10
    while task_processes() != before and time.time() < deadline:
        time.sleep(0.2)
    assert task_processes() == before, "a TensorFlow task outlived its run"


def test_collect_tiny_end_to_end(tmp_path):
    run = tmp_path / "run"
    result = tfsim("collect", "--model", "tiny", "--batch", "8", "--steps", "4", "--warmup", "1",
                   "--inter-op-threads", "1", "--out", run, "--no-progress")
    assert result.returncode == 0, result.stderr
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "complete" and record["format"] == "tfsim.run/1"
    assert record["versions"]["tensorflow"].startswith("2.")
    assert len(list((run / "trace").glob("step_*.pb.gz"))) == 4
    assert (run / "trace" / "step_00000.chrome.json.gz").exists()
    lines = (run / "step_times.csv").read_text().splitlines()
    assert lines[0] == "worker,step,measured,traced,start_unix_s,wall_s" and len(lines) == 1 + 5
    profile_path = tmp_path / "tiny.npz"
    result = tfsim("profile", run, "-o", profile_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(tfsim("profile", "--summary", profile_path, "--json").stdout)
    assert summary["steps"] >= 3 and summary["bytes_downlink"] == summary["trainable_variable_bytes"]
    assert summary["ops_by_resource"]["DOWNLINK"] == 10 and summary["ops_by_resource"]["UPLINK"] == 9


def test_collect_user_model_with_two_workers(tmp_path):
    run = tmp_path / "run"
    result = tfsim("collect", "--model-fn", "user_models:small_mlp", "--batch", "4", "--steps", "3", "--warmup", "1",
                   "--workers", "2", "--out", run, "--no-progress")
    assert result.returncode == 0, result.stderr
    times = (run / "step_times.csv").read_text().splitlines()[1:]
    assert {line.split(",")[0] for line in times} == {"0", "1"}
    variables = json.loads((run / "variables.json").read_text())["variables"]
    assert {v["name"] for v in variables if v["trainable"]} == {"mlp/w1", "mlp/w2"}
    from tfprofile.rundir import profile_from_run_dir

    profile = profile_from_run_dir(run)
    assert profile.bytes_per_step(0) == (64 * 128 + 128 * 10) * 4
    assert np.isfinite(profile.duration_s).all()


def test_collect_tf2_pss_end_to_end(tmp_path):
    """A TF2 ParameterServerStrategy job on loopback, each task traced by its profiler server."""
    run = tmp_path / "run"
    result = tfsim("collect", "--api", "tf2-pss", "--model", "tiny", "--batch", "4", "--steps", "6", "--warmup", "2",
                   "--trace-ms", "1200", "--out", run, "--no-progress")
    assert result.returncode == 0, result.stderr
    record = json.loads((run / "run.json").read_text())
    assert record["config"]["api"] == "tf2-pss" and set(record["cluster"]) == {"ps", "worker", "chief"}
    assert record["traced_steps"] == ["ps0.xplane.pb.gz", "worker0.xplane.pb.gz"]
    assert len(list((run / "graphs").glob("*.pbtxt.gz"))) == 2 and not (run / "graph_dump").exists()
    rows = (run / "step_times.csv").read_text().splitlines()[1:]
    assert len(rows) == 6 and {r.split(",")[0] for r in rows} == {"0"}
    from tfprofile.rundir import profile_from_run_dir

    profile = profile_from_run_dir(run)
    trainable = int(profile.variables.size_bytes[profile.variables.trainable].sum())
    assert trainable == 547_496 and profile.bytes_per_step(0) == profile.bytes_per_step(2) == trainable
    assert profile.n_steps >= 3 and np.isfinite(profile.duration_s).all()


def test_collect_tf2_pss_keras_model(tmp_path):
    """A --model-fn returning a built Keras model trains in tfsim's own PSS step."""
    run = tmp_path / "run"
    result = tfsim("collect", "--api", "tf2-pss", "--model-fn", "user_models:keras_mlp", "--batch", "4", "--steps",
                   "30", "--warmup", "1", "--trace-ms", "1500", "--workers", "2", "--out", run, "--no-progress")
    assert result.returncode == 0, result.stderr
    rows = (run / "step_times.csv").read_text().splitlines()[1:]
    assert len(rows) == 30 and {r.split(",")[0] for r in rows} == {"0", "1"}  # each step names its worker
    variables = json.loads((run / "variables.json").read_text())["variables"]
    assert sorted(v["bytes"] for v in variables if v["trainable"]) == [40, 512, 5120, 32768]
    assert all(v["device"].startswith("/job:ps/") for v in variables)
    from tfprofile.rundir import profile_from_run_dir

    profile = profile_from_run_dir(run)
    weights = (64 * 128 + 128 + 128 * 10 + 10) * 4
    assert profile.bytes_per_step(0) == profile.bytes_per_step(2) == weights  # weights down, gradients up, once


def test_model_that_fails_to_build_exits_1_and_leaves_no_run(tmp_path):
    run = tmp_path / "run"
    result = tfsim("collect", "--model-fn", "user_models:broken", "--steps", "2", "--out", run, "--no-progress")
    assert result.returncode == 1
    assert "worker0" in result.stderr and "this model does not build" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not run.exists() and (tmp_path / "run.incomplete").is_dir()
    from tfbase.errors import RunDirError
    from tfprofile.rundir import open_run_dir

    with pytest.raises(RunDirError):
        open_run_dir(tmp_path / "run.incomplete")


def test_timeout_stops_every_task(tmp_path):
    started = time.monotonic()
    result = tfsim("collect", "--model-fn", "user_models:hangs", "--steps", "2", "--timeout", "15",
                   "--out", tmp_path / "run", "--no-progress")
    assert result.returncode == 1 and "15 s" in result.stderr
    assert time.monotonic() - started < 60


def test_ctrl_c_stops_every_task(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(FIXTURES)}
    proc = subprocess.Popen([sys.executable, "-m", "tfsim", "collect", "--model-fn", "user_models:hangs",
                             "--out", str(tmp_path / "run"), "--no-progress"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 30
    while len(task_processes()) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert len(task_processes()) >= 2
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    assert not (tmp_path / "run").exists()


def test_existing_output_is_not_overwritten(tmp_path):
    (tmp_path / "run").mkdir()
    result = tfsim("collect", "--model", "tiny", "--out", tmp_path / "run", "--no-progress")
    assert result.returncode == 2 and "--force" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("tcpdump"), reason="needs root and tcpdump")
def test_a_capture_ends_where_the_traced_steps_end(tmp_path):
    """A tf1 run whose first measured steps are traced (``traced_steps``, the lab's profiling
    runs) stops tcpdump as they end: calibration reads the traced steps' packets only, and the
    untraced steps, whose time and CPU the one-worker correction and the PS CPU bound take, run
    as the job runs uncaptured. Steps that ran before the stop are in the capture, the last
    ones are not."""
    import csv

    from netcapture.pcap import iter_packets
    from tfprofile.harness.launcher import CollectConfig, collect

    run = collect(CollectConfig(out_dir=tmp_path / "run", model="tiny", batch_size=8, steps=60, warmup_steps=2,
                                traced_steps=3, capture=True, iperf_repeats=0, inter_op_threads=1),
                  progress=False, capture_interface="lo")
    with open(run / "step_times.csv", newline="") as handle:
        steps = [r for r in csv.DictReader(handle) if r["measured"] == "1"]
    assert [s["traced"] for s in steps[:4]] == ["1", "1", "1", "0"]
    last_packet_s = max(p.time_ns for p in iter_packets(run / "capture.pcap.gz")) / 1e9
    assert float(steps[2]["start_unix_s"]) < last_packet_s < float(steps[-1]["start_unix_s"])
    record = json.loads((run / "run.json").read_text())["capture"]
    assert record["file"] == "capture.pcap.gz" and record["stopped_at_step"] == 2 + 3


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("tcpdump"), reason="needs root and tcpdump")
def test_a_tf2_pss_capture_ends_once_the_trace_has_ended(tmp_path):
    """The same for a tf2-pss job: tcpdump stops with the third CPU reading, after the trace's
    window and the steps that settle after it, so the capture holds the traced steps and not the
    untraced tail's last steps; calibration still finds every traced step's streams in it."""
    import csv

    from calibration.calibrate import calibrate_run
    from netcapture.pcap import iter_packets
    from tfprofile.harness.launcher import CollectConfig, TrainingApi, collect

    run = collect(CollectConfig(out_dir=tmp_path / "run", model="tiny", batch_size=4, steps=80, warmup_steps=2,
                                traced_steps=4, trace_ms=1200, api=TrainingApi.TF2_PSS, capture=True,
                                iperf_repeats=1, iperf_seconds=1, inter_op_threads=1),
                  progress=False, capture_interface="lo")
    with open(run / "task_cpu.csv", newline="") as handle:
        readings = [int(r["step"]) for r in csv.DictReader(handle) if r["task"] == "ps0"]
    assert len(readings) == 3 and readings[1] < readings[2]
    with open(run / "step_times.csv", newline="") as handle:
        steps = sorted((float(r["start_unix_s"]), float(r["wall_s"])) for r in csv.DictReader(handle))
    last_packet_s = max(p.time_ns for p in iter_packets(run / "capture.pcap.gz")) / 1e9
    assert sum(steps[3]) < last_packet_s < steps[-1][0]
    assert json.loads((run / "run.json").read_text())["capture"]["stopped_at_step"] == readings[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibration = calibrate_run(run)
    assert calibration.samples and all(calibration.busy_rate_Bps.values())
    # the frames in flight at the stop are expected: not a warning, not a note in CLUSTER.json
    assert not [w for w in caught if "ends inside an HTTP/2 frame" in str(w.message)]
    assert not [n for n in calibration.capture_notes if "ends inside an HTTP/2 frame" in n]
