"""The busy PS's CPU per worker-step (docs/model.md §4.7, calibration.md §4.8): measured by a run
with several workers, kept in CLUSTER.json's ``ps_cpu.busy``, and bounding each W's prediction."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from calibration.pscpu import busy_ps_cpu_record, read_busy_ps_run, with_busy_runs
from simulate.cluster import BusyPsCpu, PsCpu
from simulate.cluster_file import ClusterFormatError, cluster_from_dict, load_cluster
from tfbase.errors import InputError, UsageError

ROOT = Path(__file__).resolve().parent.parent
# A real run of the lab's harness: deep_narrow (66 small variables) at 400 Mbit/s, 1 PS and 3
# workers on quota hosts of 0.29 core, untraced but for its first step.
BUSY_RUN = ROOT / "data" / "runs" / "deep-narrow-busy-w3"


def _readings(run_dir: Path) -> dict[str, list[tuple[int, float, float]]]:
    with open(run_dir / "task_cpu.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    tasks: dict[str, list] = {}
    for row in rows:
        tasks.setdefault(row["task"], []).append((int(row["step"]), float(row["time_unix_s"]), float(row["cpu_s"])))
    return tasks


def _write_step_times(run_dir: Path, rows: list[dict]) -> None:
    with open(run_dir / "step_times.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_a_busy_ps_run_gives_the_ps_cpu_per_step_of_any_worker_between_its_readings():
    record = read_busy_ps_run(BUSY_RUN)
    ps = sorted(_readings(BUSY_RUN)["ps0"])
    (_, start, first_cpu), (_, end, last_cpu) = ps[0], ps[-1]
    with open(BUSY_RUN / "step_times.csv", newline="") as handle:
        ends = [float(r["start_unix_s"]) + float(r["wall_s"]) for r in csv.DictReader(handle)]
    steps = sum(start < t <= end for t in ends)
    assert record["workers"] == 3 and record["worker_steps"] == steps
    # Counted over every worker's steps, not the chief's: about three times the chief's.
    chief_steps = ps[-1][0] - ps[0][0]
    assert 2.5 * chief_steps < steps <= 3 * chief_steps + 3
    assert record["cpu_s_per_step"] == pytest.approx((last_cpu - first_cpu) / steps)
    quota = json.loads((BUSY_RUN / "run.json").read_text())["task_cpu"]["limits"]["ps0"]["cores"]
    assert record["busy_fraction"] == pytest.approx((last_cpu - first_cpu) / (quota * (end - start)))
    assert 0.9 < record["busy_fraction"] <= 1.05  # three workers kept this PS at its quota


def test_a_run_that_cannot_show_a_busy_ps_is_refused_naming_its_file(tmp_path):
    one = tmp_path / "one"
    shutil.copytree(BUSY_RUN, one)
    with open(one / "step_times.csv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["worker"] == "0"]
    _write_step_times(one, rows)
    with pytest.raises(InputError, match=r"one/step_times.csv: has 1 worker\(s\): a busy-PS run has at least 2"):
        read_busy_ps_run(one)
    (one / "task_cpu.csv").unlink()
    run = json.loads((one / "run.json").read_text())
    with pytest.raises(InputError, match=r"task_cpu\.csv"):
        busy_ps_cpu_record(one, run)
    (one / "run.json").write_text("{not json")
    with pytest.raises(InputError, match=r"run\.json: is not JSON"):
        read_busy_ps_run(one)
    with pytest.raises(InputError, match="no such file"):
        read_busy_ps_run(tmp_path / "missing")


def test_the_cpu_per_step_is_a_fixed_part_and_a_part_shared_by_the_workers_one_wake_up_serves():
    """``a + b / W`` through the measured points; past the last, the last two points' line, or
    the last value where that line's fixed part would be negative."""
    cpu = PsCpu(0.030, 0.25, busy=(BusyPsCpu(3, 0.021), BusyPsCpu(2, 0.024)))
    assert [x.workers for x in cpu.busy] == [2, 3]  # kept in worker order
    assert cpu.cpu_s_per_step_at(1) == 0.030 and cpu.cpu_s_per_step_at(2) == pytest.approx(0.024)
    assert cpu.cpu_s_per_step_at(3) == pytest.approx(0.021)
    # Past W = 3, the line through W = 2 and 3: b = 0.003 / (1/2 - 1/3) = 0.018, a = 0.021 - 0.006.
    assert cpu.cpu_s_per_step_at(9) == pytest.approx(0.015 + 0.018 / 9)
    assert cpu.ceiling_steps_per_s(1, workers=3) == pytest.approx(0.25 / 0.021)
    one_busy = PsCpu(0.030, 0.25, busy=(BusyPsCpu(4, 0.018),))
    # Between W = 1 and 4: 1/W falls by 1/2 of its way at W = 2 (1 - 1/2 of 1 - 1/4 = 2/3).
    assert one_busy.cpu_s_per_step_at(2) == pytest.approx(0.030 - 0.012 * (1 - 1 / 2) / (1 - 1 / 4))
    # A busy run at a sixth of the one-worker CPU: b = 0.025 / 0.75, a = 0.005 - b / 4 < 0: flat past it.
    steep = PsCpu(0.030, 0.25, busy=(BusyPsCpu(4, 0.005),))
    assert steep.cpu_s_per_step_at(4) == pytest.approx(0.005) and steep.cpu_s_per_step_at(16) == pytest.approx(0.005)
    with pytest.raises(UsageError, match=r"busy\.workers"):
        BusyPsCpu(1, 0.01)
    with pytest.raises(UsageError, match=r"busy\.cpu_s_per_step"):
        BusyPsCpu(2, -0.01)
    with pytest.raises(UsageError, match="one record per worker count"):
        PsCpu(0.03, 0.25, busy=(BusyPsCpu(2, 0.02), BusyPsCpu(2, 0.021)))
    with pytest.raises(UsageError, match="workers"):
        cpu.cpu_s_per_step_at(0)


def test_cluster_json_keeps_the_busy_runs_and_refuses_a_malformed_entry():
    document = json.loads((ROOT / "data" / "clusters" / "lab-1gbit.json").read_text())
    ps_cpu = with_busy_runs({"cpu_s_per_step": 0.03, "cores": 0.25}, [
        {"workers": 3, "cpu_s_per_step": 0.020}, {"workers": 3, "cpu_s_per_step": 0.024},
        {"workers": 2, "cpu_s_per_step": 0.026}])
    assert ps_cpu["busy"] == [
        {"workers": 2, "cpu_s_per_step": 0.026, "runs": 1, "cpu_s_per_step_runs": [0.026]},
        {"workers": 3, "cpu_s_per_step": pytest.approx(0.022), "runs": 2, "cpu_s_per_step_runs": [0.020, 0.024]}]
    cluster = cluster_from_dict({**document, "ps_cpu": ps_cpu})
    assert [(x.workers, x.cpu_s_per_step) for x in cluster.ps_cpu.busy] == [(2, 0.026), (3, pytest.approx(0.022))]
    for busy, message in (([{"workers": 1, "cpu_s_per_step": 0.02}], "whole number from 2"),
                          ([{"workers": 2, "cpu_s_per_step": "fast"}], "ps_cpu.busy.cpu_s_per_step"),
                          ({"workers": 2}, "must be a list"),
                          ([{"workers": 2, "cpu_s_per_step": 0.02}] * 2, "two entries for one worker count")):
        with pytest.raises(ClusterFormatError, match=message):
            cluster_from_dict({**document, "ps_cpu": {"cpu_s_per_step": 0.03, "cores": 0.25, "busy": busy}}, "c.json")


def test_each_ws_prediction_is_held_to_the_ps_cpu_that_w_costs(tmp_path):
    from simulate.sweep import predict
    from tfprofile.profile_io import load_profile
    from tfsim.prediction import ps_cpu_fields

    profile = load_profile(ROOT / "data" / "profiles" / "tiny.npz")
    base = load_cluster(ROOT / "data" / "clusters" / "lab-1gbit.json")
    free = predict(profile, base, workers=[1, 2, 4], steps=60, warmup=10)
    one_worker = float(free["throughput_eps"].iloc[0]) / profile.batch_size
    # A PS that one worker keeps 80% busy, and that costs 30% less per worker-step from 3 workers on.
    step_cpu = 0.8 / one_worker
    document = json.loads((ROOT / "data" / "clusters" / "lab-1gbit.json").read_text())
    document["ps_cpu"] = {"cpu_s_per_step": step_cpu, "cores": 1.0,
                          "busy": [{"workers": 3, "cpu_s_per_step": 0.7 * step_cpu}]}
    cluster = cluster_from_dict(document)
    held = predict(profile, cluster, workers=[1, 2, 4], steps=60, warmup=10)
    # a + b / W through W = 1 and 3: b = 0.3 c / (1 - 1/3) = 0.45 c, a = 0.7 c - 0.15 c; at W = 4 a + b / 4.
    bounds = [profile.batch_size / step_cpu, None, profile.batch_size / ((0.55 + 0.45 / 4) * step_cpu)]
    assert held["ps_cpu_limit_eps"].iloc[0] == pytest.approx(bounds[0])
    assert held["ps_cpu_limit_eps"].iloc[2] == pytest.approx(bounds[2])
    assert bounds[0] < held["ps_cpu_limit_eps"].iloc[1] < profile.batch_size / (0.7 * step_cpu)
    assert held["throughput_eps"].iloc[2] == pytest.approx(min(free["throughput_eps"].iloc[2], bounds[2]))
    fields = ps_cpu_fields(held, cluster)
    assert fields["limit_eps"] == pytest.approx(held["ps_cpu_limit_eps"].max())
    assert fields["busy"] == [{"workers": 3, "cpu_s_per_step": pytest.approx(0.7 * step_cpu)}]
    assert f"{0.7 * step_cpu * 1e3:.2f} ms with 3 workers" in fields["text"]


def _tfsim(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "tfsim", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_calibrate_names_the_flag_when_the_one_worker_run_has_no_ps_cpu(tmp_path):
    out = tmp_path / "c.json"
    result = _tfsim("calibrate", "data/captures/tiny_lo", "--busy-ps-run", str(BUSY_RUN), "-o", str(out))
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.strip().splitlines()[-1].startswith("tfsim: error: --busy-ps-run")
    assert "Traceback" not in result.stderr


def test_calibrate_names_the_file_of_a_run_that_is_not_a_busy_ps_run(tmp_path):
    out = tmp_path / "c.json"
    result = _tfsim("calibrate", "data/captures/tiny_lo", "--busy-ps-run", str(tmp_path / "nowhere"), "-o", str(out))
    assert result.returncode == 2 and not out.exists() and "Traceback" not in result.stderr
    assert "nowhere" in result.stderr


def test_each_round_runs_a_busy_ps_run_after_its_tail_run_on_the_profiling_cluster(tmp_path, monkeypatch):
    """``profile-busy-r<k>``: the profiling run's PS count with the setting's busy-PS workers (held
    to its largest W), untraced, as long as a measuring run, run again once when loaded."""
    from tfbase.load import LoadSample
    from tfsim.lab import validate
    from tfsim.lab.collect import LabRun

    calls = []

    def collect(setting, out, *, workers, steps, capture, progress, fork_servers=None, profile_side=False):
        calls.append((out.name, workers, steps, capture, profile_side))
        busy = 0.5 if out.name == "profile-busy-r1" and calls.count(calls[-1]) == 1 else 0.0
        (out / "trace").mkdir(parents=True, exist_ok=True)
        return LabRun(out, LoadSample(1.0, 1.0 + busy, 1.0), {})

    monkeypatch.setattr(validate, "_collect", collect)
    monkeypatch.setattr(validate, "_measure_run", lambda setting, out_dir, w, k, **kwargs: {"w": w, "k": k})
    monkeypatch.setattr(validate, "_point", lambda runs: runs)
    setting = validate.LabSetting("s", "tiny", 32, 100_000_000, workers=(1, 2), ps_tasks=2, profile_ps=1,
                                  measure_steps=20)
    assert setting.busy_workers == 2  # the default 3, held to the largest W
    measured = validate.measure_points(setting, tmp_path, setting.workers, repeat=2, rerun_loaded=True,
                                       progress=False, tail_runs=True, busy_workers=setting.busy_workers)
    assert calls == [("profile-tail-r1", 1, 20, False, True), ("profile-busy-r1", 2, 20, False, True),
                     ("profile-busy-r1", 2, 20, False, True), ("profile-tail-r2", 1, 20, False, True),
                     ("profile-busy-r2", 2, 20, False, True)]
    assert measured.busy_loads == (0.0, 0.0) and not (tmp_path / "profile-busy-r1" / "trace").exists()


def test_a_settings_busy_ps_workers_are_checked_and_held_to_its_largest_w():
    from tfsim.lab.validate import LabSetting

    assert LabSetting("s", "tiny", 32, 100_000_000, workers=(1, 2, 3, 4, 5, 6)).busy_workers == 3
    assert LabSetting("s", "tiny", 32, 100_000_000, workers=(1, 6), busy_ps_workers=5).busy_workers == 5
    assert LabSetting("s", "tiny", 32, 100_000_000, workers=(1, 2), busy_ps_workers=0).busy_workers is None
    assert LabSetting("s", "tiny", 32, 100_000_000, workers=(1,)).busy_workers is None
    for bad in (1, -2, True, 2.5):
        with pytest.raises(UsageError, match="busy_ps_workers"):
            LabSetting("s", "tiny", 32, 100_000_000, busy_ps_workers=bad)


def test_the_lab_pools_its_finished_busy_ps_runs(tmp_path, capsys):
    from tfsim.lab.validate import busy_ps_runs

    for name in ("profile-busy-r2", "profile-busy-r1", "profile-busy-r3.incomplete"):
        shutil.copytree(BUSY_RUN, tmp_path / name)
    lines = (BUSY_RUN / "task_cpu.csv").read_text().splitlines()
    first = next(k for k, line in enumerate(lines) if ",ps0," in line)
    step, time_s, task, cpu_s, slices = lines[first].split(",")
    lines[first] = ",".join((step, time_s, task, str(float(cpu_s) + 1.0), slices))  # its first reading 1 s more
    (tmp_path / "profile-busy-r2" / "task_cpu.csv").write_text("\n".join(lines) + "\n")
    records = busy_ps_runs(tmp_path)
    assert [r["workers"] for r in records] == [3, 3]
    # In round order: run 2's first reading charges it 1 s less of PS CPU over its steps.
    assert records[0]["cpu_s_per_step"] - records[1]["cpu_s_per_step"] == pytest.approx(
        1.0 / records[0]["worker_steps"], rel=1e-6)
    # A run that gives no record (here: one worker's steps only) is left out, saying why.
    shutil.copytree(BUSY_RUN, tmp_path / "profile-busy-r4")
    with open(tmp_path / "profile-busy-r4" / "step_times.csv", newline="") as handle:
        _write_step_times(tmp_path / "profile-busy-r4", [r for r in csv.DictReader(handle) if r["worker"] == "0"])
    assert busy_ps_runs(tmp_path) == records
    assert "busy-PS run left out: " in capsys.readouterr().err
    pooled = with_busy_runs({"cpu_s_per_step": 0.03, "cores": 0.29}, records)["busy"]
    assert pooled[0]["runs"] == 2
    assert pooled[0]["cpu_s_per_step"] == pytest.approx(sum(r["cpu_s_per_step"] for r in records) / 2)


def test_results_md_says_what_the_busy_ps_runs_changed_and_w_equal_k_apart():
    import pandas as pd

    from tfsim.lab.validate import _busy_ps_lines

    nan = float("nan")
    frame = pd.DataFrame({"setting": ["a"] * 3 + ["b"] * 2, "workers": [1, 2, 3, 1, 2],
                          "busy_ps_runs": [3, 3, 3, 0, 0], "busy_ps_workers": [3.0, 3.0, 3.0, nan, nan],
                          "ps_cpu_one_worker_s": [0.0265] * 5, "ps_cpu_busy_s": [0.0214] * 3 + [nan] * 2,
                          "error_grpc_one_worker_cpu": [0.02, -0.2, -0.25, 0.0, 0.0],
                          "error_grpc": [0.02, 0.05, -0.01, 0.0, 0.0]})
    assert _busy_ps_lines(frame) == [
        "- a: the PS's CPU per worker-step 26.5 ms with one worker, 21.4 ms with 3 (the mean of 3 busy-PS run(s)); "
        "with the one-worker CPU alone grpc's mean |error| is 15.7% (max 25.0%) against 2.7% (max 5.0%); at W other "
        "than 3, 11.0% against 3.5%"]


def test_a_busy_ps_run_with_traced_steps_between_its_readings_is_refused(tmp_path):
    """A trace costs the PS CPU: a run that traced steps while its PS was being read would charge
    that to every worker-step."""
    traced = tmp_path / "traced"
    shutil.copytree(BUSY_RUN, traced)
    with open(traced / "step_times.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if row["worker"] == "1" and row["step"] in ("20", "40"):
            row["traced"] = "1"
    _write_step_times(traced, rows)
    with pytest.raises(InputError, match=r"traced/step_times\.csv: has 2 traced steps between the CPU readings"):
        read_busy_ps_run(traced)
