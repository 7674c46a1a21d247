"""Each task's CPU, as collect reads it (tfprofile/harness/taskcpu.py), and the parameter
servers' CPU per step that calibration takes from it (calibration/pscpu.py, docs/calibration.md §4.8)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

import pytest

from calibration.pscpu import ps_cpu_record, tracing_cpu_ratio
from simulate.cluster import ClusterModel, PsCpu
from simulate.cluster_file import ClusterFormatError, cluster_from_dict
from tfbase.errors import InputError, UsageError
from tfprofile.harness.taskcpu import TASK_CPU_FILE, TaskCpuSampler, cpu_limit, cpu_reading, cpu_seconds, quota_cores


def _fake_process(proc, pid: int, cgroup_lines: list[str]) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text("\n".join(cgroup_lines) + "\n")


def test_the_tightest_quota_over_a_tasks_cgroup_and_its_ancestors_v1(tmp_path):
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    _fake_process(proc, 7, ["4:memory:/", "1:cpu,cpuacct:/lab/ps0", "0::/"])
    for group, quota in ((root / "cpu,cpuacct" / "lab", 150_000), (root / "cpu,cpuacct" / "lab" / "ps0", 28_571)):
        group.mkdir(parents=True, exist_ok=True)
        (group / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        (group / "cpu.cfs_period_us").write_text("100000\n")
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    assert quota_cores(7, proc, root) == pytest.approx(0.28571)
    (root / "cpu,cpuacct" / "lab" / "cpu.cfs_quota_us").write_text("20000\n")  # the parent is tighter
    assert quota_cores(7, proc, root) == pytest.approx(0.2)


def test_the_quota_of_a_unified_hierarchy_and_none(tmp_path):
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    _fake_process(proc, 8, ["0::/system.slice/job"])
    (root / "system.slice" / "job").mkdir(parents=True)
    (root / "system.slice" / "job" / "cpu.max").write_text("150000 100000\n")
    (root / "system.slice" / "cpu.max").write_text("max 100000\n")
    assert quota_cores(8, proc, root) == 1.5
    (root / "system.slice" / "job" / "cpu.max").write_text("max 100000\n")
    assert math.isinf(quota_cores(8, proc, root))
    assert math.isinf(quota_cores(9, proc, root))  # a process that is gone


def test_a_tasks_cpu_time_and_limit_are_read_and_recorded():
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.04
    # A thread that sleeps and wakes is put on a CPU again each time.
    slices_before = cpu_reading(os.getpid())[1]
    for _ in range(20):
        time.sleep(0.001)
    assert cpu_reading(os.getpid())[1] - slices_before >= 20
    limit = cpu_limit(os.getpid())
    assert limit.cpus == len(os.sched_getaffinity(0)) and limit.cores <= limit.cpus
    gone = 2 ** 22 + 12345
    assert cpu_seconds(gone) is None and cpu_reading(gone) is None and cpu_limit(gone) is None
    sampler = TaskCpuSampler({"ps0": os.getpid(), "worker0": gone})
    sampler.sample(4)
    sampler.sample(24)
    lines = sampler.csv_text().splitlines()
    assert lines[0] == "step,time_unix_s,task,cpu_s,slices"
    assert [line.split(",")[0] for line in lines[1:]] == ["4", "24"]
    assert sampler.record() == {"file": TASK_CPU_FILE, "limits": {"ps0": limit.to_json()}}
    # Every task's limit is read at the first reading, not only the first task's.
    both = TaskCpuSampler({"ps0": os.getpid(), "ps1": os.getpid()})
    both.sample(4)
    both.sample(24)
    assert both.record()["limits"] == {"ps0": limit.to_json(), "ps1": limit.to_json()}


def _run_dir(tmp_path, readings: list[tuple[int, float, float]], *, cores=0.25):
    """A run directory whose PS 0 had CPU time ``cpu_s`` at ``time_unix_s`` after ``step``."""
    sampler = TaskCpuSampler({})
    sampler.rows = [(step, now, "ps0", cpu, 10 * step) for step, now, cpu in readings]
    (tmp_path / TASK_CPU_FILE).write_text(sampler.csv_text())
    return {"task_cpu": {"file": TASK_CPU_FILE, "limits": {"ps0": {"cpus": 2, "quota_cores": cores, "cores": cores}}}}


def test_the_ps_cpu_per_step_is_its_cpu_between_the_first_and_last_measured_step(tmp_path):
    # 20 steps of 40 ms in which the PS spent 0.2 s of CPU: 10 ms per step, 1.0 of 0.25 core
    record = ps_cpu_record(tmp_path, _run_dir(tmp_path, [(4, 1000.0, 2.5), (24, 1000.8, 2.7)]))
    assert record["cpu_s_per_step"] == pytest.approx(0.01)
    assert record["steps"] == 20 and record["cores"] == 0.25 and record["servers"] == 1
    assert record["busy_fraction"] == pytest.approx(1.0)



def test_a_tf2_pss_run_read_when_its_trace_ended_gives_the_untraced_cpu_per_step(tmp_path):
    # Traced steps 4..15 cost 12 ms each (0.132 s), the 12 untraced after them 9 ms (0.108 s).
    record = ps_cpu_record(tmp_path, _run_dir(tmp_path, [(4, 1000.0, 2.5), (15, 1000.5, 2.632), (27, 1001.0, 2.74)]))
    assert record["cpu_s_per_step"] == pytest.approx(0.009) and record["steps"] == 12
    assert "as the trace ended" in record["source"]
    # Too few untraced steps after the third reading: the whole span, as with two readings.
    record = ps_cpu_record(tmp_path, _run_dir(tmp_path, [(4, 1000.0, 2.5), (25, 1000.9, 2.752), (27, 1001.0, 2.77)]))
    assert record["cpu_s_per_step"] == pytest.approx(0.27 / 23) and record["steps"] == 23
    assert "between the first and the last" in record["source"]


def test_too_few_steps_or_no_readings_give_no_record(tmp_path):
    assert ps_cpu_record(tmp_path, {"config": {}}) is None  # collected before the readings existed
    assert ps_cpu_record(tmp_path, _run_dir(tmp_path, [(4, 1000.0, 2.5), (6, 1000.1, 2.52)])) is None
    (tmp_path / TASK_CPU_FILE).write_text("task,cpu_s\nps0,x\n")
    with pytest.raises(InputError, match=r"task_cpu\.csv: is not a task CPU table"):
        ps_cpu_record(tmp_path, {"task_cpu": {"limits": {}}, "config": {}})


def test_the_ps_cpu_bounds_the_throughput_of_any_number_of_workers():
    bound = PsCpu(cpu_s_per_step=0.008, cores=0.25)
    assert bound.ceiling_steps_per_s(1) == pytest.approx(31.25)
    with pytest.raises(UsageError, match="cores"):
        PsCpu(cpu_s_per_step=0.008, cores=0.0)
    with pytest.raises(UsageError, match="servers"):
        PsCpu(cpu_s_per_step=0.008, cores=1.0, servers=0)
    assert ClusterModel(1e8, 1e8).ps_cpu is None


def test_cluster_json_reads_ps_cpu_and_names_a_bad_one(data_dir):
    document = json.loads((data_dir / "clusters" / "lab-1gbit.json").read_text())
    cluster = cluster_from_dict({**document, "ps_cpu": {"cpu_s_per_step": 0.008, "cores": 0.25, "steps": 12}})
    assert cluster.ps_cpu == PsCpu(0.008, 0.25, 1)
    assert cluster_from_dict(document).ps_cpu is None
    with pytest.raises(ClusterFormatError, match=r"ps_cpu\.cores must be"):
        cluster_from_dict({**document, "ps_cpu": {"cpu_s_per_step": 0.008, "cores": -1}}, "c.json")
    with pytest.raises(ClusterFormatError, match="ps_cpu must be an object"):
        cluster_from_dict({**document, "ps_cpu": 3}, "c.json")


def test_a_prediction_is_held_to_the_ps_cpu_and_says_so(data_dir, tmp_path, capsys):
    from cli_runner import run

    from simulate.cluster_file import load_cluster
    from simulate.sweep import predict
    from tfprofile.profile_io import load_profile

    profile = load_profile(data_dir / "profiles" / "tiny.npz")
    cluster = load_cluster(data_dir / "clusters" / "lab-1gbit.json")
    free = predict(profile, cluster, workers=[1, 2, 4], steps=60, warmup=10, jobs=1)
    assert free["ps_cpu_limit_eps"].isna().all()
    # a PS budget of 1.5 free one-worker steps' worth: W = 1 is below it, W = 2 and 4 are held to it
    step_s = profile.batch_size / float(free["throughput_eps"].iloc[0])
    limited = dataclasses.replace(cluster, ps_cpu=PsCpu(cpu_s_per_step=step_s / 1.5, cores=1.0))
    held = predict(profile, limited, workers=[1, 2, 4], steps=60, warmup=10, jobs=1)
    bound = 1.5 * float(free["throughput_eps"].iloc[0])
    assert held["ps_cpu_limit_eps"].tolist() == pytest.approx([bound] * 3)
    assert held["throughput_eps"].iloc[0] == free["throughput_eps"].iloc[0]
    assert held["throughput_eps"].iloc[1:].tolist() == pytest.approx([bound, bound])
    slower = free["throughput_eps"].iloc[2] / bound
    assert held["step_time_s"].iloc[2] == pytest.approx(free["step_time_s"].iloc[2] * slower)
    # the CLI says where the bound holds, and the JSON carries it
    document = {**json.loads((data_dir / "clusters" / "lab-1gbit.json").read_text()),
                "ps_cpu": {"cpu_s_per_step": step_s / 1.5, "cores": 1.0}}
    (tmp_path / "c.json").write_text(json.dumps(document))
    code, out, err = run(["predict", data_dir / "profiles" / "tiny.npz", "--cluster", tmp_path / "c.json",
                          "--workers", "1,2,4", "--steps", "60", "--warmup", "10", "--no-progress", "--jobs", "1",
                          "--json", tmp_path / "p.json"], capsys)
    assert code == 0, err
    assert "allows at most" in out and "it holds the prediction from W = 2 on" in out
    saved = json.loads((tmp_path / "p.json").read_text())
    assert saved["ps_cpu"]["limited_from_workers"] == 2
    assert [r["ps_cpu_limit_eps"] for r in saved["rows"]] == pytest.approx([bound] * 3)


def test_the_tracing_cpu_ratio_is_the_traced_over_the_untraced_cpu_per_step(tmp_path):
    # 11 traced steps at 12 ms each, then 12 untraced at 9 ms: 1.333
    run = _run_dir(tmp_path, [(4, 1000.0, 2.5), (15, 1000.5, 2.632), (27, 1001.0, 2.74)])
    assert tracing_cpu_ratio(tmp_path, run) == {"ps0": pytest.approx(0.012 / 0.009)}
    # two readings, or too few steps on one side of the third, give none
    assert tracing_cpu_ratio(tmp_path, _run_dir(tmp_path, [(4, 1000.0, 2.5), (27, 1001.0, 2.74)])) == {}
    assert tracing_cpu_ratio(tmp_path, _run_dir(tmp_path, [(4, 1000.0, 2.5), (25, 1000.9, 2.752),
                                                           (27, 1001.0, 2.77)])) == {}
    assert tracing_cpu_ratio(tmp_path, {"config": {}}) == {}
