"""Issue 21's reproducers, one test each: limits checked before any work, inputs that would demand
unbounded time or memory, bad values refused, and messages that name what is wrong. Every bad
input ends with exit status 2 and exactly one line on stderr."""

import gzip
import importlib
import inspect
import io
import json
import pickle
import pkgutil
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
TINY = DATA / "profiles" / "tiny.npz"
CLUSTER = DATA / "clusters" / "lab-1gbit.json"
FAST = ["--steps", "30", "--warmup", "5", "--jobs", "1", "--no-progress"]
COMPARE_FAST = ["--steps", "30", "--jobs", "1", "--no-progress"]


def one_error(capsys, argv, *needles):
    """Run ``tfsim ARGV``: exit 2, one line on stderr that mentions every needle; return it."""
    code, _out, err = run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("tfsim: error: "), (code, err)
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def run_dir(tmp_path, data_dir):
    """A copy of the bundled tiny_lo run directory (traces, capture, iperf3)."""
    target = tmp_path / "run"
    shutil.copytree(data_dir / "captures" / "tiny_lo", target)
    return target


def edit_json(path: Path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


# ------------------------------------------------------------------ 5. limits, before any work

@pytest.mark.parametrize("jobs", ["1", "2"])
def test_workers_beyond_the_limit_are_refused_at_once(capsys, jobs):
    one_error(capsys, ["predict", TINY, "--bandwidth", "1gbit", "--workers", "1-2000", "--jobs", jobs],
              "--workers", "1024")
    one_error(capsys, ["predict", TINY, "--bandwidth", "1gbit", "--workers", "1-100000", "--jobs", jobs],
              "--workers")


def test_steps_times_workers_is_bounded(capsys):
    one_error(capsys, ["predict", TINY, "--bandwidth", "1gbit", "--workers", "1024", "--steps", "100000"],
              "--steps", "worker-steps")


def test_a_sweep_beyond_its_op_event_budget_is_refused(capsys):
    one_error(capsys, ["predict", DATA / "profiles" / "inception3.npz", "--bandwidth", "1gbit", "--workers",
                       "1-1024", "--steps", "19000", "--transfer", "http2,fifo,tic,tac,random"], "events",
              "TFSIM_MAX_OP_EVENTS")


def test_a_large_tensor_on_a_small_window_is_counted_in_the_budget(tmp_path, capsys, monkeypatch):
    """The grpc model cuts a stream at every window's worth of bytes: a 1 TiB tensor on a 16 KiB window
    is 2^26 chunks a step, which the budget counts (it used to run for hours)."""
    members = _profile_members()
    members["op_size_bytes"] = members["op_size_bytes"].copy()
    members["op_size_bytes"][int(np.flatnonzero(members["op_resource"] == 0)[0])] = 2**40
    cluster = json.loads(CLUSTER.read_text())
    cluster["flow_control"]["downlink"]["window_timeline"] = [{"t_s": 0, "window_bytes": 16384}]
    (tmp_path / "c.json").write_text(json.dumps(cluster))
    monkeypatch.setenv("TFSIM_MAX_OP_EVENTS", "1e8")
    one_error(capsys, ["predict", _npz(tmp_path, members), "--cluster", tmp_path / "c.json", "--transfer", "grpc",
                       "--workers", "1", "--steps", "3", "--warmup", "1", "--jobs", "1"], "events")


def test_a_window_update_delay_the_engine_cannot_hold_is_one_line(tmp_path, capsys):
    """The compiled engine holds a bounded number of pending WINDOW_UPDATEs per link: a delay of a
    second on a job whose steps take milliseconds overflows it (found by the command fuzz campaign)."""
    cluster = json.loads(CLUSTER.read_text())
    cluster["flow_control"]["uplink"]["update_delay_s"] = 1
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cluster))
    one_error(capsys, ["predict", TINY, "--cluster", path, "--workers", "1", "--transfer", "grpc", *FAST],
              str(path), "update_delay_s")


def test_every_error_class_pickles():
    """Errors cross process boundaries (worker processes): each must come back as itself."""
    from tfbase.errors import InputError, Terminated, TfsimWarning

    classes = set()
    for package in ("tfbase", "tfprofile", "netcapture", "simulate", "calibration", "tfsim"):
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, package + "."):
            if info.name.startswith(("tfprofile.harness.task", "tfprofile.harness.zoo")) or \
                    info.name.endswith("__main__"):
                continue  # import TensorFlow, or run the command line
            mod = importlib.import_module(info.name)
            classes |= {c for _, c in inspect.getmembers(mod, inspect.isclass)
                        if issubclass(c, BaseException) and c.__module__ == mod.__name__}
    assert len(classes) > 15
    for cls in classes:
        if issubclass(cls, (InputError, TfsimWarning)):
            error = cls("some/file.json", "the problem")
        elif issubclass(cls, Terminated):
            error = cls(15)
        else:
            error = cls("the problem")
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is cls and str(again) == str(error), cls


# ------------------------------------------------------------------ 6. small inputs, huge demands

def _profile_members(path=TINY) -> dict:
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _npz(tmp_path, members, name="p.npz", compressed=True) -> Path:
    path = tmp_path / name
    (np.savez_compressed if compressed else np.savez)(path, **members)
    return path


def test_a_profile_declaring_more_than_its_data_is_refused_before_allocating(tmp_path, capsys):
    source = _npz(tmp_path, _profile_members(), name="source.npz", compressed=False)
    path = tmp_path / "p.npz"
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(path, "w") as archive:
        for member in original.namelist():
            data = original.read(member)
            if member == "duration_s.npy":  # declares 10^12 steps, holds 30
                data = data.replace(b"'shape': (30, 93)", b"'shape': (1000000000000, 93)")
            archive.writestr(member, data)
    one_error(capsys, ["profile", "--summary", path], "declares", "bytes of data")


def test_a_profile_expanding_beyond_the_limit_is_refused(tmp_path, capsys):
    path = _npz(tmp_path, _profile_members())
    raw = bytearray(path.read_bytes())
    # Set the declared (uncompressed) size of the first member in the central directory to 1 GiB.
    central = raw.rindex(b"PK\x01\x02", 0, raw.index(b"PK\x05\x06"))
    central = raw.index(b"PK\x01\x02")
    struct.pack_into("<I", raw, central + 24, 2**30)
    path.write_bytes(bytes(raw))
    one_error(capsys, ["profile", "--summary", path], "256 MiB")


def test_a_trace_gzip_bomb_is_refused(tmp_path, capsys, monkeypatch):
    import tfprofile.runmetadata

    monkeypatch.setattr(tfprofile.runmetadata, "MAX_TRACE_BYTES", 1 << 20)
    bomb = tmp_path / "step_00000.pb.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (3 << 20)))
    one_error(capsys, ["profile", bomb, "--batch", "8", "-o", tmp_path / "p.npz"], "expands to more than")
    assert not (tmp_path / "p.npz").exists()


def test_trace_options_that_would_take_gigabytes_are_refused(capsys, tmp_path):
    one_error(capsys, ["predict", TINY, "--bandwidth", "1gbit", "--workers", "1", "--trace-workers", "1000",
                       "--trace-steps", "100000", "--trace-out", tmp_path / "t.json"], "--trace-steps")
    one_error(capsys, ["predict", TINY, "--bandwidth", "1gbit", "--workers", "1", "--trace-workers", "1000",
                       "--trace-steps", "100", "--trace-out", tmp_path / "t.json"], "--trace-workers")
    assert list(tmp_path.iterdir()) == []


def test_a_window_below_one_frame_is_raised_with_a_warning(tmp_path, capsys):
    cluster = json.loads(CLUSTER.read_text())
    cluster["win_bytes"] = 1
    for direction in cluster["flow_control"].values():
        for point in direction["window_timeline"]:
            point["window_bytes"] = 1
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cluster))
    code, _out, err = run(["predict", DATA / "profiles" / "resnet50.npz", "--cluster", path, "--workers", "1",
                          "--steps", "5", "--warmup", "1", "--jobs", "1", "--no-progress"], capsys)
    assert code == 0, err
    assert f"{path}: win_bytes 1 is below one HTTP/2 frame (16384 bytes): raised to 16384" in err
    from simulate.cluster_file import load_cluster

    with pytest.warns(UserWarning):
        loaded = load_cluster(path)
    assert loaded.win_bytes == 16384 and loaded.flow_downlink.window_timeline[0][1] == 16384


# ------------------------------------------------------------------ 7. tracebacks that are now one line

def test_measured_csv_with_a_repeated_w(tmp_path, capsys):
    path = tmp_path / "lab.csv"
    path.write_text("workers,measured_eps\n1,10\n2,19\n2,18\n")
    one_error(capsys, ["compare", TINY, "--bandwidth", "1gbit", "--workers", "1,2", "--measured", path,
                       *COMPARE_FAST], "W = 2 appears in 2 rows")


def test_a_prediction_csv_given_as_measurements(tmp_path, capsys):
    prediction = tmp_path / "prediction.csv"
    code, _, err = run(["predict", TINY, "--bandwidth", "1gbit", "--workers", "1,2", "--transfer", "http2,fifo",
                        "--csv", prediction, *FAST], capsys)
    assert code == 0, err
    one_error(capsys, ["compare", TINY, "--bandwidth", "1gbit", "--workers", "1,2", "--measured", prediction,
                       *COMPARE_FAST], "prediction.csv", "one row per configuration")


@pytest.mark.parametrize("command", ["predict", "report"])
def test_a_negative_seed(tmp_path, capsys, command):
    argv = [command, TINY, "--bandwidth", "1gbit", "--workers", "1", "--seed", "-1", *FAST]
    one_error(capsys, argv + (["--out", tmp_path / "r"] if command == "report" else []), "--seed")
    one_error(capsys, [command, TINY, "--bandwidth", "1gbit", "--workers", "1", "--seed", str(2**40), *FAST]
              + (["--out", tmp_path / "r"] if command == "report" else []), "--seed", "4294967295")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("value", ["abc", -1, 0, 2.5, 2**40])
def test_a_bad_batch_size_in_run_json(run_dir, tmp_path, capsys, value):
    edit_json(run_dir / "run.json", batch_size=value)
    one_error(capsys, ["profile", run_dir, "-o", tmp_path / "p.npz"], "run.json", "batch_size")


def test_a_profile_with_no_ops(tmp_path, capsys):
    members = _profile_members()
    empty = {k: (v[:0] if k.startswith(("op_", "data_idx", "ctrl_idx")) else v) for k, v in members.items()}
    empty.update(data_ptr=np.zeros(1, np.int64), ctrl_ptr=np.zeros(1, np.int64),
                 duration_s=np.zeros((3, 0)), start_s=np.zeros((3, 0)), step_makespan_s=np.zeros(3))
    path = _npz(tmp_path, empty)
    one_error(capsys, ["predict", path, "--bandwidth", "1gbit", "--workers", "1", *FAST], "no ops")


# ------------------------------------------------------------------ 8. values that are now refused

@pytest.mark.parametrize("wall", ["-1.0", "nan", "inf"])
def test_negative_or_nan_step_times(run_dir, tmp_path, capsys, wall):
    path = run_dir / "step_times.csv"
    lines = path.read_text().splitlines()
    fields = lines[2].split(",")
    fields[-1] = wall
    lines[2] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    one_error(capsys, ["profile", run_dir, "-o", tmp_path / "p.npz"], "step_times.csv", "line 3", "wall_s")


def test_byte_totals_that_would_overflow_int64(run_dir, tmp_path, capsys):
    document = json.loads((run_dir / "variables.json").read_text())
    for variable in document["variables"]:
        variable["bytes"] = 2**62
    (run_dir / "variables.json").write_text(json.dumps(document))
    one_error(capsys, ["profile", run_dir, "-o", tmp_path / "p.npz"], "variables.json", "1 TiB")


def test_a_server_index_beyond_the_ps_count(run_dir, tmp_path, capsys):
    document = json.loads((run_dir / "variables.json").read_text())
    document["variables"][0]["device"] = "/job:ps/replica:0/task:3/device:CPU:0"
    (run_dir / "variables.json").write_text(json.dumps(document))
    one_error(capsys, ["profile", run_dir, "-o", tmp_path / "p.npz"], "parameter server 3", "run had 1")
    # and in a profile: its ops on a server its run did not have
    members = _profile_members()
    members["op_server"] = np.where(members["op_server"] >= 0, 2, -1).astype(np.int16)
    one_error(capsys, ["profile", "--summary", _npz(tmp_path, members)], "server 2", "1 parameter server")


def test_ci_target_zero(capsys):
    one_error(capsys, ["predict", TINY, "--bandwidth", "1gbit", "--workers", "1", "--ci-target", "0", *FAST],
              "--ci-target")


@pytest.mark.parametrize("workers", ["1,,2", "1-", "-3", "1-3-5", "2-1", " ", "1, 2x"])
def test_malformed_worker_lists(capsys, workers):
    one_error(capsys, ["predict", TINY, "--bandwidth", "1gbit", "--workers", workers, *FAST], "--workers")


def test_a_cluster_without_win_bytes(tmp_path, capsys):
    cluster = json.loads(CLUSTER.read_text())
    del cluster["win_bytes"]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cluster))
    one_error(capsys, ["predict", TINY, "--cluster", path, "--workers", "1", *FAST], str(path), "win_bytes is missing")


@pytest.mark.parametrize("command", ["compare", "report"])
def test_measured_w_outside_the_sweep(tmp_path, capsys, command):
    path = tmp_path / "lab.csv"
    path.write_text("workers,measured_eps\n1,10\n2,19\n8,40\n")
    argv = [command, TINY, "--bandwidth", "1gbit", "--workers", "1-3", "--measured", path]
    argv += [*FAST, "--out", tmp_path / "r"] if command == "report" else COMPARE_FAST
    one_error(capsys, argv, "W = 8", "1-3")


# ------------------------------------------------------------------ 9. messages

def test_random_bytes_as_a_profile(tmp_path, capsys):
    path = tmp_path / "random.npz"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    assert "allow_pickle" not in one_error(capsys, ["profile", "--summary", path], str(path), "not an .npz")
    pickled = io.BytesIO()
    np.save(pickled, np.array([object()], dtype=object), allow_pickle=True)
    path = tmp_path / "objects.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("format.npy", pickled.getvalue())
    line = one_error(capsys, ["profile", "--summary", path], "Python objects")
    assert "allow_pickle" not in line


@pytest.mark.parametrize("rate", [0, -5e9])
def test_iperf3_rates_at_or_below_zero_name_the_file_and_key(run_dir, tmp_path, capsys, rate):
    path = run_dir / "iperf3" / "downlink_1.json"
    document = json.loads(path.read_text())
    document["end"]["sum_received"]["bits_per_second"] = rate
    path.write_text(json.dumps(document))
    one_error(capsys, ["calibrate", run_dir, "-o", tmp_path / "c.json"], str(path),
              "end.sum_received.bits_per_second")
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("where", ["top", "downlink"])
def test_a_negative_alpha_names_the_file_and_key(tmp_path, capsys, where):
    cluster = json.loads(CLUSTER.read_text())
    if where == "top":
        cluster["alpha_s_per_byte"] = -1e-9
        key = "alpha_s_per_byte"
    else:
        cluster["overhead"]["downlink"]["alpha_s_per_byte"] = -1e-9
        key = "overhead.downlink.alpha_s_per_byte"
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cluster))
    one_error(capsys, ["predict", TINY, "--cluster", path, "--workers", "1", *FAST], str(path), key)


def test_gantt_workers_beyond_the_limit_blames_gantt_workers(tmp_path, capsys):
    line = one_error(capsys, ["report", TINY, "--bandwidth", "1gbit", "--workers", "1", "--gantt-workers", "5000",
                              *FAST, "--out", tmp_path / "r"], "--gantt-workers")
    assert "--workers" not in line.replace("--gantt-workers", "")
    assert not (tmp_path / "r").exists()


def test_report_input_errors_are_one_line_despite_stage_lines(tmp_path, capsys):
    """Report says what it does on stderr ([1/4] reading ...), but not before its inputs are good."""
    one_error(capsys, ["report", tmp_path / "missing.npz", "--bandwidth", "1gbit", "--out", tmp_path / "r"],
              "missing.npz")
    one_error(capsys, ["report", TINY, "--bandwidth", "1gbit", "--workers", "1", "--warmup", "40", "--steps", "30",
                       "--out", tmp_path / "r"], "--warmup")


@pytest.mark.parametrize("command", ["collect", "profile", "calibrate", "order", "predict", "compare", "report",
                                     "lab", "demo"])
def test_help_has_no_doubled_percent(capsys, command):
    from tfsim.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "%%" not in capsys.readouterr().out


def test_transfer_help_lists_every_order(capsys):
    from tfsim.cli import main

    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    start = text.index("--transfer TRANSFER transfer")
    help_text = text[start:text.index("--priorities NAME=FILE|FILE a TicTac")]
    for name in ("grpc", "http2", "fifo", "tic", "tac", "reverse", "random"):
        assert f" {name} " in help_text or f" {name}," in help_text or f"({name}" in help_text, name


def test_the_verdict_names_a_lucky_random_order():
    import pandas as pd

    from tfsim.prediction import ordering_verdict

    summary = pd.DataFrame({"policy": ["recorded", "http2", "tic", "tac", "random#0", "random#1"],
                            "best_gain": [0.0, 0.03, 0.01, 0.012, 0.02, 0.06],
                            "best_gain_workers": [1, 2, 4, 4, 3, 3],
                            "mean_gain": [0.0, 0.025, 0.005, 0.01, -0.01, 0.045],
                            "mean_gain_over_random": [0.004, 0.03, 0.01, 0.016, -0.007, 0.05]})
    verdict = ordering_verdict(summary)
    assert "random#1's +4.5% is one random permutation's luck" in verdict
    # http2 is a model of gRPC, not an order one could enforce: it is not weighed
    assert "no chosen order (tic, tac) beats the recorded order by more than 2%" in verdict
    assert "(best: tac, +1.0%, +1.6% over the median random order)" in verdict and "not worth enforcing" in verdict
    assert ordering_verdict(summary[summary["policy"] != "recorded"].assign(mean_gain=float("nan"))).startswith(
        "no recorded reference in this sweep")


def test_the_bundled_loopback_captures_calibrate_as_laid_out(data_dir, tmp_path, capsys):
    for name in ("tiny_lo", "tiny16_lo_smallwin"):
        code, _out, err = run(["calibrate", data_dir / "captures" / name, "-o", tmp_path / f"{name}.json"], capsys)
        assert code == 0, err
        assert json.loads((tmp_path / f"{name}.json").read_text())["format"] == "tfsim.cluster/1"


@pytest.mark.parametrize("command", ["predict", "report"])
@pytest.mark.parametrize("speed, needle", [("lognormal:x", "lognormal:SIGMA needs a number"),
                                           ("lognormal:nan", "a lognormal sigma must be above 0"),
                                           ("1,fast", "is not a list of speed factors"),
                                           (",", "give speed factors"), ("1,-0.5", "speed factors must be between")])
def test_a_bad_worker_speed(tmp_path, capsys, command, speed, needle):
    out = ["--out", str(tmp_path / "r")] if command == "report" else []
    one_error(capsys, [command, TINY, "--cluster", CLUSTER, "--workers", "2", *FAST, *out, "--worker-speed", speed],
              "--worker-speed: ", needle)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_profile_whose_ops_take_no_time_fails_before_the_sweep(tmp_path, capsys, command):
    """Durations cast to whole seconds are all 0: ring all-reduce's step at W = 1 (no transfer) takes
    no time. Found by the command fuzz campaign after the sweep, below a warning; now one line
    before it, naming the file."""
    members = _profile_members()
    members["duration_s"] = members["duration_s"].astype(np.int64)
    profile = _npz(tmp_path, members)
    fast = FAST if command == "report" else COMPARE_FAST
    out = ["--out", tmp_path / "r"] if command == "report" else []
    line = one_error(capsys, [command, profile, "--bandwidth", "1gbit", "--workers", "1-3", *fast, *out],
                     "p.npz", "the ring-allreduce baseline at W = 1", "every time is zero")
    assert "warning" not in line
    assert not (tmp_path / "r").exists()
