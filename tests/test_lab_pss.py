"""``tfsim lab --api tf2-pss``: a TF2 ParameterServerStrategy job in the emulated cluster, its
coordinator on a host of its own (root, TensorFlow, iproute2 for the end-to-end test)."""

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from tfbase.errors import UsageError
from tfsim.lab.collect import COORDINATOR_HOST, HostQuotas, host_names
from tfsim.lab.validate import MACHINE_CORES, LabSetting

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
                                reason="the lab needs root, ip and tc")


def test_the_coordinator_is_one_more_host_with_an_equal_share():
    assert host_names(1, 2, coordinator=True) == ["ps0", "w0", "w1", COORDINATOR_HOST]
    assert host_names(1, 2) == ["ps0", "w0", "w1"]
    setting = LabSetting("t", "tiny", 32, 100_000_000, workers=(1, 2, 3), api="tf2-pss")
    quotas = setting.quotas()
    share = MACHINE_CORES / 5  # 1 PS, 3 workers and the coordinator
    assert quotas.ps_cores == quotas.worker_cores == quotas.coordinator_cores == pytest.approx(share)
    assert quotas.cores_of(COORDINATOR_HOST) == pytest.approx(share)
    assert LabSetting("t", "tiny", 32, 100_000_000, workers=(1, 2, 3)).quotas().worker_cores == pytest.approx(
        MACHINE_CORES / 4)
    # Without its own quota the coordinator has a worker's.
    assert HostQuotas(0.5, 0.25).cores_of(COORDINATOR_HOST) == 0.25


def test_a_tf2_pss_setting_is_checked():
    with pytest.raises(UsageError, match="api"):
        LabSetting("t", "tiny", 32, 100_000_000, api="tf3")
    with pytest.raises(UsageError, match="timeline"):
        LabSetting("t", "tiny", 32, 100_000_000, api="tf2-pss", timeline=True)


def test_traced_steps_is_checked(tmp_path):
    from tfprofile.harness.launcher import CollectConfig, TrainingApi

    pss = {"out_dir": tmp_path, "api": TrainingApi.TF2_PSS, "steps": 10}
    assert CollectConfig(**pss, traced_steps=5).traced_steps == 5
    with pytest.raises(UsageError, match="from 0 to the 10 measured steps"):
        CollectConfig(**pss, traced_steps=11)
    with pytest.raises(UsageError, match="at least 2 warm-up steps"):
        CollectConfig(**pss, traced_steps=0, warmup_steps=1)
    # A tf1 job traces its first traced_steps measured steps (every trace_every-th), at least one.
    assert CollectConfig(out_dir=tmp_path, steps=10, traced_steps=5).traced_steps == 5
    with pytest.raises(UsageError, match="a tf1 job traces at least its first measured step"):
        CollectConfig(out_dir=tmp_path, steps=10, traced_steps=0, warmup_steps=3)


def test_a_tf2_pss_job_on_given_hosts_names_the_coordinator_last(tmp_path):
    """One host, command prefix and wrapper per task, the coordinator's last: a list one short is refused."""
    from tfprofile.harness.launcher import CollectConfig, TrainingApi, collect

    config = CollectConfig(out_dir=tmp_path / "run", api=TrainingApi.TF2_PSS, workers=2)
    with pytest.raises(UsageError, match=r"one wrapper per task \(4, the coordinator last\)"):
        collect(config, progress=False, hosts=["10.0.0.1", "10.0.0.2", "10.0.0.3"])
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.incomplete").exists()


@needs_root
@pytest.mark.tensorflow
def test_tf2_pss_lab_end_to_end(tmp_path):
    """W = 1..2, one measurement each: every task in the lab's hosts, the coordinator's too; the
    throughput from the step times the PSS run records, by the common-window rule."""
    pytest.importorskip("tensorflow")
    from tfsim.lab.netns import list_namespaces

    before = set(list_namespaces())
    result = subprocess.run([sys.executable, "-m", "tfsim", "lab", "--api", "tf2-pss", "--model", "tiny",
                             "--rate", "100mbit", "--workers", "1-2", "--repeat", "1", "--no-rerun",
                             "--profile-steps", "12", "--measure-steps", "16", "--no-progress", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    with open(tmp_path / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["setting"], r["api"], int(r["workers"])) for r in rows] == [("tiny-100mbit", "tf2-pss", 1),
                                                                           ("tiny-100mbit", "tf2-pss", 2)]
    share = os.cpu_count() / 4  # 1 PS, 2 workers, the coordinator
    for row in rows:
        w = int(row["workers"])
        assert float(row["measured_eps"]) > 0 and float(row["predicted_grpc_eps"]) > 0
        assert float(row["ps_cores"]) == pytest.approx(share, rel=1e-3)
        run_dir = tmp_path / "tiny-100mbit" / f"measure-w{w}-r1"
        lab = json.loads((run_dir / "lab.json").read_text())
        assert set(lab["tasks"]) == {"ps0", *(f"w{k}" for k in range(w)), COORDINATOR_HOST}
        assert all(t["usage_s"] > 0 for t in lab["tasks"].values())
        assert lab["rule"] == "common window" and len(lab["per_worker_eps"]) == w
        assert lab["load"]["outside_cores"] >= 0
        run = json.loads((run_dir / "run.json").read_text())
        assert run["config"]["api"] == "tf2-pss" and run["config"]["traced_steps"] == 0
        assert all(a.startswith("10.231.0.") for job in run["cluster"].values() for a in job)
        with open(run_dir / "step_times.csv") as handle:
            steps = list(csv.DictReader(handle))
        # the coordinator hands out W x 16 steps; no measured step was traced (the trace covers the warm-up)
        assert len(steps) == 16 * w and {s["traced"] for s in steps} == {"0"}
        assert {int(s["worker"]) for s in steps} == set(range(w))
    profile_run = json.loads((tmp_path / "tiny-100mbit" / "profile-run" / "run.json").read_text())
    assert profile_run["config"]["traced_steps"] == 6 and profile_run["link"]["rate_bit_s"] == 100_000_000
    with open(tmp_path / "tiny-100mbit" / "profile-run" / "step_times.csv") as handle:
        rows = list(csv.DictReader(handle))
    traced, numbers = [s["traced"] for s in rows], [int(s["step"]) for s in rows]
    assert len(traced) == 12 and traced[-6:] == ["0"] * 6  # the one-worker correction fits the untraced ones
    # The settling steps after the trace are left out but keep their numbers: a gap before the untraced ones.
    assert numbers[6] > numbers[5] + 1 and numbers[6:] == list(range(numbers[6], numbers[6] + 6))
    # The tasks' CPU read a third time as the trace ended: the PS's CPU per step is the untraced steps'.
    with open(tmp_path / "tiny-100mbit" / "profile-run" / "task_cpu.csv") as handle:
        readings = sorted({int(r["step"]) for r in csv.DictReader(handle) if r["task"] == "ps0"})
    assert len(readings) == 3 and readings[-1] - readings[-2] == 6
    cluster = json.loads((tmp_path / "tiny-100mbit" / "CLUSTER.json").read_text())
    assert cluster["ps_cpu"]["steps"] == 6 and cluster["ps_cpu"]["cpu_s_per_step"] > 0
    # The round began with a one-worker tail run, untraced like a measuring run: the correction and
    # the PS CPU bound took it with the profiling run's tail.
    tail = json.loads((tmp_path / "tiny-100mbit" / "profile-tail-r1" / "run.json").read_text())
    assert tail["config"]["workers"] == 1 and tail["config"]["traced_steps"] == 0
    with open(tmp_path / "results.csv") as handle:
        assert [int(r["profile_tails"]) for r in csv.DictReader(handle)] == [2, 2]
    assert cluster["ps_cpu"]["runs"] == 2
    # Then a busy-PS run with the setting's largest W (2), the coordinator dispatching to both:
    # the PS's CPU per step of any worker, counted over both workers' steps.
    busy = json.loads((tmp_path / "tiny-100mbit" / "profile-busy-r1" / "run.json").read_text())
    assert busy["config"]["workers"] == 2 and busy["config"]["api"] == "tf2-pss"
    with open(tmp_path / "tiny-100mbit" / "profile-busy-r1" / "step_times.csv") as handle:
        assert {r["worker"] for r in csv.DictReader(handle)} == {"0", "1"}
    [entry] = cluster["ps_cpu"]["busy"]
    assert entry["workers"] == 2 and entry["runs"] == 1 and 0 < entry["cpu_s_per_step"] < 1
    assert "| tiny-100mbit | tf2-pss |" in (tmp_path / "results.md").read_text()
    assert set(list_namespaces()) == before
