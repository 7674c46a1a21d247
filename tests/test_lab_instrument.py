"""The lab as a measuring instrument: emulated hosts (cgroups), repeated measurements, outside
load, settings files, and the host model that predicts for the same hosts."""

import json
import math
import os
import subprocess
import sys
import time

import pytest

from simulate.config import Colocation, TaskHosts
from tfbase.errors import InputError, UsageError
from tfbase.load import LoadSample, machine_busy_s
from tfsim.lab.validate import LabSetting, measurement_stats, read_settings, untraced_step_s

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")


def _cpu_controller() -> bool:
    try:
        from tfsim.lab.cgroups import find_hierarchy

        find_hierarchy()
        return True
    except UsageError:
        return False


needs_cgroups = pytest.mark.skipif(os.geteuid() != 0 or not _cpu_controller(), reason="needs root and a cpu cgroup")


@needs_cgroups
def test_a_task_in_its_cgroup_gets_no_more_than_its_quota():
    from tfsim.lab.cgroups import LabCgroups

    with LabCgroups() as cgroups:
        group = cgroups.group("w0", 0.2)
        started = time.monotonic()
        spin = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5: pass\n"
        subprocess.run([*group.wrapper(), sys.executable, "-c", spin], check=True)
        wall = time.monotonic() - started
        stats = group.stats()
        parents = cgroups.parents
        assert all(p.is_dir() for p in parents)
    # A busy loop wants a whole core: the quota holds it to 0.2 of one (plus a period's slack).
    assert 0 < stats.usage_s <= 0.2 * wall + 0.1
    assert stats.nr_throttled > 0 and stats.throttled_s > 0
    assert not any(p.exists() for p in parents)  # removed on exit


@needs_cgroups
def test_the_cpu_trace_reads_a_task_at_its_quota_inside_a_window():
    """A busy loop under a 0.25-core quota, sampled while it runs: over a window inside the run
    it used 0.25 core and was throttled most of the time; over the whole run less (start-up)."""
    from tfsim.lab.cgroups import LabCgroups
    from tfsim.lab.cpu_trace import MACHINE, CpuTrace, window_usage

    spin = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 2.0: pass\n"
    with LabCgroups() as cgroups:
        group = cgroups.group("ps0", 0.25)
        with CpuTrace([group], interval_s=0.05) as trace:
            started = time.time()
            subprocess.run([*group.wrapper(), sys.executable, "-c", spin], check=True)
            ended = time.time()
    inside = window_usage(trace.samples, started + 0.8, ended - 0.3)
    assert abs(inside["ps0"]["cores"] - 0.25) < 0.04
    assert 0.5 < inside["ps0"]["throttled_fraction"] <= 1.0
    assert 0 < inside[MACHINE]["cores"] <= os.cpu_count()
    assert window_usage(trace.samples, started - 60, ended) == {}  # the samples do not reach back that far


@needs_cgroups
def test_cleanup_removes_the_groups_of_dead_runs_only():
    from tfsim.lab.cgroups import PREFIX, LabCgroups, cleanup_cgroups, find_hierarchy

    root = find_hierarchy().cpu
    dead = root / f"{PREFIX}-999999-abcdef"
    dead.mkdir()
    (dead / "w0").mkdir()
    with LabCgroups() as live:
        live.group("ps0", None)
        removed = cleanup_cgroups()
        assert str(dead) in removed
        assert not dead.exists()
        assert live.parents[0].is_dir()


@needs_cgroups
def test_a_command_that_cannot_join_its_group_says_so():
    result = subprocess.run([sys.executable, "-m", "tfsim.lab.cgexec", "/nonexistent/cgroup.procs", "--", "true"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["tfsim.lab.cgexec: cannot join /nonexistent/cgroup.procs: "
                                                  "No such file or directory"]


def test_machine_busy_time_reads_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal
    stat.write_text("cpu  100 10 50 1000 40 5 5 2 0 0\ncpu0 50 5 25 500 20 2 3 1 0 0\n")
    assert machine_busy_s(str(stat)) == pytest.approx((100 + 10 + 50 + 5 + 5 + 2) / os.sysconf("SC_CLK_TCK"))
    assert machine_busy_s() > 0


def test_outside_load_is_what_the_lab_did_not_use():
    sample = LoadSample(wall_s=10.0, machine_cores=1.5, lab_cores=1.3)
    assert sample.outside_cores == pytest.approx(0.2)
    assert sample.flagged
    assert not LoadSample(10.0, 1.0, 0.95).flagged
    assert LoadSample(10.0, 1.0, 1.2).outside_cores == 0.0  # accounting skew never reads as negative load


def test_repeated_measurements_are_summarised_with_their_spread():
    stats = measurement_stats([100.0, 110.0, 90.0])
    assert (stats["mean"], stats["min"], stats["max"]) == (100.0, 90.0, 110.0)
    assert stats["cv"] == pytest.approx(0.1)
    assert stats["ci95"] == pytest.approx(4.302653 * 10 / 3 ** 0.5, rel=1e-3)  # Student t, 2 dof
    single = measurement_stats([5.0])
    assert single["cv"] == 0.0 and single["ci95"] != single["ci95"]  # nan: one run has no interval


def _write_run(run_dir, api, rows):
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"config": {"api": api}}))
    lines = ["worker,step,measured,traced,start_unix_s,wall_s"]
    lines += [f"0,{step},1,{traced},{start:.6f},{wall:.6f}" for step, traced, start, wall in rows]
    (run_dir / "step_times.csv").write_text("\n".join(lines) + "\n")


def test_a_settings_points_are_measured_in_rounds_and_a_loaded_run_again(tmp_path, monkeypatch):
    """Round k measures every W once (W = 1 first), so each point's runs are spread over the
    setting's time; a run with outside load is measured again once, in its place."""
    from tfsim.lab import validate
    from tfsim.lab.collect import LabRun

    calls = []
    loaded = {(2, 2)}  # W = 2's second run carries outside load the first time

    def collect(setting, out, *, workers, steps, capture, progress, fork_servers=None, profile_side=False):
        k = int(out.name.rsplit("-r", 1)[1])
        calls.append((workers, k))
        busy = 0.5 if (workers, k) in loaded and calls.count((workers, k)) == 1 else 0.0
        out.mkdir(parents=True, exist_ok=True)
        return LabRun(out, LoadSample(1.0, 1.0 + busy, 1.0), {})

    def throughput(run_dir):
        workers, k = (int(x) for x in run_dir.name[len("measure-w"):].split("-r"))
        eps = 100.0 * workers + k
        return {"throughput_eps": eps, "rule": "common window", "window_s": 1.0, "per_worker_eps": [eps],
                "per_worker_sum_eps": eps, "finish_spread_s": 0.0, "step_time_median_s": 1.0 / eps,
                "window_unix_s": (0.0, 1.0)}

    monkeypatch.setattr(validate, "_collect", collect)
    monkeypatch.setattr(validate, "measured_throughput", throughput)
    monkeypatch.setattr(validate, "transport_summary",
                        lambda run, run_dir: dict.fromkeys(validate.TRANSPORT_COLUMNS, 0.0))
    setting = LabSetting("s", "tiny", 32, 100_000_000, workers=(1, 2))
    measured = validate.measure_points(setting, tmp_path, setting.workers, repeat=3, rerun_loaded=True,
                                       progress=False)
    points = measured.points
    assert calls == [(1, 1), (2, 1), (1, 2), (2, 2), (2, 2), (1, 3), (2, 3)] and measured.tail_loads == ()
    assert points[1]["runs"] == [101.0, 102.0, 103.0] and points[2]["runs"] == [201.0, 202.0, 203.0]
    assert points[2]["reruns"] == 1 and points[1]["reruns"] == 0 and points[2]["loaded_runs"] == 0
    assert points[2]["stats"]["min"] == 201.0 and points[2]["stats"]["max"] == 203.0
    record = json.loads((tmp_path / "measure-w2-r3" / "lab.json").read_text())
    assert record["round"] == 3 and record["throughput_eps"] == 203.0


def test_each_round_begins_with_a_one_worker_tail_run_of_the_profiling_cluster(tmp_path, monkeypatch):
    """With ``tail_runs`` every round first runs one untraced worker on the profiling run's PS
    (``profile-tail-r<k>``, as long as a measuring run, no capture); a loaded one is run again
    once, and each round's outside load is returned."""
    from tfsim.lab import validate
    from tfsim.lab.collect import LabRun

    calls, real_collect = [], validate._collect

    def collect(setting, out, *, workers, steps, capture, progress, fork_servers=None, profile_side=False):
        calls.append((out.name, workers, steps, capture, profile_side))
        busy = 0.5 if out.name == "profile-tail-r2" and calls.count(calls[-1]) == 1 else 0.0
        (out / "trace").mkdir(parents=True, exist_ok=True)
        return LabRun(out, LoadSample(1.0, 1.0 + busy, 1.0), {})

    monkeypatch.setattr(validate, "_collect", collect)
    monkeypatch.setattr(validate, "_measure_run", lambda setting, out_dir, w, k, **kwargs: {"w": w, "k": k})
    monkeypatch.setattr(validate, "_point", lambda runs: runs)
    setting = LabSetting("s", "tiny", 32, 100_000_000, workers=(1, 3), ps_tasks=2, profile_ps=1, measure_steps=20)
    measured = validate.measure_points(setting, tmp_path, setting.workers, repeat=2, rerun_loaded=True,
                                       progress=False, tail_runs=True)
    assert calls == [("profile-tail-r1", 1, 20, False, True), ("profile-tail-r2", 1, 20, False, True),
                     ("profile-tail-r2", 1, 20, False, True)]
    assert measured.tail_loads == (0.0, 0.0) and measured.points[3] == [{"w": 3, "k": 0}, {"w": 3, "k": 1}]
    assert not (tmp_path / "profile-tail-r1" / "trace").exists()  # one traced step: the profile has them
    # The tail run takes the profiling run's PS count, a measuring run the setting's.
    seen = []
    monkeypatch.setattr(validate, "collect_in_lab", lambda config, *args, **kwargs: seen.append(config.ps_tasks))
    real_collect(setting, tmp_path / "t", workers=1, steps=4, capture=False, progress=False, profile_side=True)
    real_collect(setting, tmp_path / "m", workers=1, steps=4, capture=False, progress=False)
    assert seen == [1, 2]


def _write_one_worker_run(run_dir, walls, readings):
    """A tf1 one-worker run: its measured steps' wall times (``(traced, wall_s)``) and PS 0's
    CPU readings (``(step, time_unix_s, cpu_s)``) under a 0.5-core quota."""
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"config": {"api": "tf1"}, "task_cpu": {
        "file": "task_cpu.csv", "limits": {"ps0": {"cores": 0.5}}}}))
    lines = ["worker,step,measured,traced,start_unix_s,wall_s"]
    lines += [f"0,{k},1,{traced},{k:.6f},{wall:.6f}" for k, (traced, wall) in enumerate(walls)]
    (run_dir / "step_times.csv").write_text("\n".join(lines) + "\n")
    (run_dir / "task_cpu.csv").write_text("step,time_unix_s,task,cpu_s,slices\n" + "".join(
        f"{step},{t},ps0,{cpu},1\n" for step, t, cpu in readings))


def test_the_one_worker_step_and_ps_cpu_are_the_means_over_the_profiling_tail_and_the_tail_runs(tmp_path):
    """Each run weighs alike: the profiling run's untraced tail (0.2 s steps, 10 ms of PS CPU per
    step after its third reading) and two tail runs (0.1 and 0.3 s; 20 and 30 ms from their
    first reading to their last); a tail run stopped midway (.incomplete) is left out; the
    pooled CPU replaces CLUSTER.json's ps_cpu and says over how many runs."""
    from tfsim.lab.validate import one_worker_tails, pooled_ps_cpu

    _write_one_worker_run(tmp_path / "profile-run", [(1, 0.5)] * 4 + [(0, 0.2)] * 4,
                          [(4, 0.0, 1.0), (8, 2.0, 2.0), (12, 2.8, 2.04)])
    _write_one_worker_run(tmp_path / "profile-tail-r1", [(1, 0.5)] + [(0, 0.1)] * 6,
                          [(4, 0.0, 1.0), (10, 0.6, 1.12)])
    _write_one_worker_run(tmp_path / "profile-tail-r2", [(1, 0.5)] + [(0, 0.3)] * 6,
                          [(4, 0.0, 1.0), (10, 1.8, 1.18)])
    _write_one_worker_run(tmp_path / "profile-tail-r3.incomplete", [(0, 9.0)] * 6, [(4, 0.0, 1.0), (10, 1.8, 9.0)])
    tails = one_worker_tails(tmp_path)
    assert tails.step_s == pytest.approx((0.2, 0.1, 0.3)) and tails.mean_step_s == pytest.approx(0.2)
    assert tails.ps_cpu_s == pytest.approx((0.01, 0.02, 0.03)) and tails.mean_ps_cpu_s == pytest.approx(0.02)
    document = {"ps_cpu": {"cpu_s_per_step": 0.01, "cores": 0.5, "servers": 1, "steps": 4}}
    pooled = pooled_ps_cpu(document, tails)["ps_cpu"]
    assert pooled["cpu_s_per_step"] == pytest.approx(0.02) and pooled["runs"] == 3 and pooled["cores"] == 0.5
    assert pooled["cpu_s_per_step_runs"] == pytest.approx([0.01, 0.02, 0.03])
    assert document["ps_cpu"]["cpu_s_per_step"] == 0.01  # the calibration's own record is left alone
    alone = one_worker_tails(tmp_path / "profile-run")  # no tail runs beside it: nothing pooled
    assert pooled_ps_cpu(document, alone) is document and alone.step_s == ()


def test_the_profiling_tails_outside_load_is_the_machines_busy_cores_beyond_its_tasks(tmp_path):
    """Over the untraced steps (task_cpu.csv's third reading to its last), from the run's CPU
    samples: 1.2 machine cores busy while the tasks used 0.3 + 0.4 leaves 0.5 core outside; the
    traced steps' load before does not count."""
    from tfsim.lab.collect import LabRun
    from tfsim.lab.cpu_trace import MACHINE
    from tfsim.lab.validate import profile_tail_outside_cores

    (tmp_path / "run.json").write_text(json.dumps({"task_cpu": {"file": "task_cpu.csv", "limits": {}}}))
    (tmp_path / "task_cpu.csv").write_text("step,time_unix_s,task,cpu_s,slices\n"
                                           "4,100.0,ps0,1.0,1\n15,110.0,ps0,2.0,1\n27,120.0,ps0,5.0,1\n")
    samples = [(t, {"ps0": (0.3 * t, 0.0), "w0": (0.4 * t, 0.0), MACHINE: (busy, 0.0)})
               for t, busy in ((100.0, 0.0), (110.0, 19.0), (120.0, 31.0))]  # 1.9 then 1.2 cores busy
    run = LabRun(tmp_path, LoadSample(20.0, 1.5, 0.7), {}, cpu_samples=tuple(samples))
    assert profile_tail_outside_cores(run) == pytest.approx(0.5)
    (tmp_path / "task_cpu.csv").write_text("step,time_unix_s,task,cpu_s,slices\n4,100.0,ps0,1.0,1\n"
                                           "27,120.0,ps0,5.0,1\n")
    assert math.isnan(profile_tail_outside_cores(run))  # no untraced tail read apart


def test_the_untraced_step_of_a_tf2_pss_run_is_its_tail_after_the_settling_steps(tmp_path):
    """Start to start over consecutive untraced steps of the last run of consecutive step numbers:
    neither the traced phase's steps that ended after the trace (traced 0, before the gap the
    settling steps leave) nor the pair across the gap count."""
    rows = [(3, 1, 10.00, 0.01), (4, 1, 10.02, 0.01), (5, 0, 10.04, 0.05), (6, 0, 10.20, 0.05),  # after the trace
            (9, 0, 11.00, 0.01), (10, 0, 11.03, 0.01), (11, 0, 11.05, 0.01)]  # 7 and 8 settled, left out
    _write_run(tmp_path / "pss", "tf2-pss", rows)
    assert untraced_step_s(tmp_path / "pss") == pytest.approx(0.025)
    # an older run without a gap: every pair of consecutive untraced steps
    _write_run(tmp_path / "old", "tf2-pss", rows[:4] + [(7, 0, 10.30, 0.01)])
    assert untraced_step_s(tmp_path / "old") == pytest.approx((0.16 + 0.10) / 2)
    # a tf1 run: the untraced steps' own wall times
    _write_run(tmp_path / "tf1", "tf1", rows)
    assert untraced_step_s(tmp_path / "tf1") == pytest.approx((0.05 * 2 + 0.01 * 3) / 5)


def test_the_profiling_run_of_a_tf2_pss_setting_is_longer():
    assert LabSetting("s", "tiny", 32, 100_000_000).profiling_steps == 24
    assert LabSetting("s", "tiny", 32, 100_000_000, api="tf2-pss").profiling_steps == 48
    assert LabSetting("s", "tiny", 32, 100_000_000, api="tf2-pss", profile_steps=16).profiling_steps == 16
    with pytest.raises(UsageError, match="profile_steps"):
        LabSetting("s", "tiny", 32, 100_000_000, profile_steps=0)


def test_default_quotas_share_the_machine_at_the_largest_w(monkeypatch):
    import tfsim.lab.validate as validate

    monkeypatch.setattr(validate, "MACHINE_CORES", 2.0)
    setting = LabSetting("s", "tiny", 32, 100_000_000, workers=(1, 2, 3))
    quotas = setting.quotas()
    assert quotas.ps_cores == pytest.approx(0.5) and quotas.worker_cores == pytest.approx(0.5)
    assert LabSetting("s", "tiny", 32, 100_000_000, colocated=True).quotas().colocated
    too_many = LabSetting("s", "tiny", 32, 100_000_000, workers=(1, 4), ps_cores=0.5, worker_cores=0.5)
    with pytest.raises(UsageError) as err:
        too_many.quotas()
    assert err.value.source == "workers" and "2.5 cores" in str(err.value)


def test_a_settings_file_describes_a_matrix(tmp_path):
    path = tmp_path / "matrix.toml"
    path.write_text('[[setting]]\nmodel_fn = "mymodels:recommender"\nbatch = 256\nrate = "400mbit"\n'
                    'workers = "1-6"\nworker_cores = 0.25\nps_cores = 0.25\n\n'
                    '[[setting]]\nname = "wide-1g"\nmodel = "wide_mlp"\nrate = "1gbit"\nworkers = [1, 2]\n'
                    'colocated = true\npacket = true\npacket_steps = 40\n')
    first, second = read_settings(path)
    assert (first.name, first.model, first.model_fn) == ("recommender-400mbit", "recommender", "mymodels:recommender")
    assert (first.batch_size, first.rate_bit, first.workers) == (256, 400_000_000, (1, 2, 3, 4, 5, 6))
    assert (second.name, second.workers, second.colocated) == ("wide-1g", (1, 2), True)
    assert (first.packet, first.packet_steps, second.packet, second.packet_steps) == (False, 120, True, 40)


@pytest.mark.parametrize("text, message", [
    ("[[setting]]\nmodel = \"tiny\"\nrate = \"1gbit\"\nspeed = 3\n", "setting 1: settings: unknown key(s) speed"),
    ("[[setting]]\nmodel = \"tiny\"\nrate = \"0\"\n", "setting 1: rate: bandwidth must be positive"),
    ("[[setting]]\nmodel = \"tiny\"\nrate = \"1gbit\"\npacket_steps = 0\n",
     "setting 1: packet_steps: must be at least 1, not 0"),
    ("[setting\n", "is not TOML"),
    ("title = 'x'\n", "has no [[setting]] table"),
])
def test_a_bad_settings_file_names_itself_and_the_setting(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        read_settings(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_task_hosts_give_the_ps_a_capacity_that_all_workers_share():
    import simulate
    import tfprofile

    profile = tfprofile.load_profile(os.path.join(DATA, "profiles", "tiny.npz"))
    cluster = simulate.load_cluster(os.path.join(DATA, "clusters", "lab-1gbit.json"))
    assert TaskHosts(worker_cores=1, ps_cores=0.5)(2, 1) == Colocation((0, 1), (2,), (1.0, 1.0, 0.5))
    kwargs = dict(workers=[1, 4], steps=120, warmup=20, transfer="grpc")
    free = simulate.predict(profile, cluster, **kwargs)["throughput_eps"].to_numpy()
    roomy = simulate.predict(profile, cluster, colocation=TaskHosts(worker_cores=64, ps_cores=64),
                             **kwargs)["throughput_eps"].to_numpy()
    small_ps = simulate.predict(profile, cluster, colocation=TaskHosts(ps_cores=0.25),
                                **kwargs)["throughput_eps"].to_numpy()
    assert roomy == pytest.approx(free, rel=1e-9)  # hosts with cores to spare change nothing
    assert small_ps[0] < free[0]  # one worker: its PS ops run at a quarter speed
    # Four workers' PS ops queue on one small PS host: throughput grows far less than 4x.
    assert small_ps[1] / small_ps[0] < 0.8 * free[1] / free[0]
    with pytest.raises(UsageError) as err:
        simulate.predict(profile, cluster, cores=2, colocation=TaskHosts(ps_cores=1), **kwargs)
    assert err.value.source == "cores"
    with pytest.raises(UsageError) as err:
        TaskHosts()
    assert err.value.source == "ps_cores"


def test_predict_takes_a_host_per_task_from_the_command_line(capsys):
    from tfsim.cli import main

    base = ["predict", os.path.join(DATA, "profiles", "tiny.npz"), "--cluster",
            os.path.join(DATA, "clusters", "lab-1gbit.json"), "--workers", "1-2", "--steps", "60", "--warmup", "10",
            "--no-progress", "--jobs", "1"]
    assert main([*base, "--ps-cores", "0.5", "--worker-cores", "1"]) == 0
    assert main([*base, "--ps-cores", "0.5", "--cores", "2"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "tfsim: error: --cores: give one shared host (--cores) or a host per task (--ps-cores, --worker-cores), "
        "not both")
    assert main([*base, "--worker-cores", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("tfsim: error: --worker-cores: must be between")


def test_the_transport_sets_the_queue_in_time_or_bytes():
    from tfsim.lab.netns import DEFAULT_QUEUE_MS, Transport, _tbf

    assert Transport().queue_ms == DEFAULT_QUEUE_MS
    shallow = _tbf(400_000_000, Transport(queue_ms=5))
    assert shallow[shallow.index("latency") + 1] == "5ms" and "limit" not in shallow
    deep = _tbf(400_000_000, Transport(queue_bytes=2_000_000))
    assert deep[deep.index("limit") + 1] == "2000000" and "latency" not in deep
    tiny = _tbf(100_000_000, Transport(queue_bytes=2000))  # never below one burst: tbf would refuse it
    assert int(tiny[tiny.index("limit") + 1]) == 96 * 1024
    assert Transport(congestion_control="cubic", slow_start_after_idle=False).sysctls() == [
        "net.ipv4.tcp_congestion_control=cubic", "net.ipv4.tcp_slow_start_after_idle=0"]
    for bad in (dict(queue_ms=0.0), dict(queue_bytes=10), dict(congestion_control="vegas")):
        with pytest.raises(UsageError) as err:
            Transport(**bad)
        assert err.value.source == next(iter(bad))


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/proc/sys/net/ipv4/tcp_allowed_congestion_control"),
                    reason="needs root")
def test_a_congestion_control_is_allowed_for_the_run_and_the_list_restored():
    import shutil

    from tfsim.lab.netns import ALLOWED_CC, EmulatedCluster, Transport, allowed_congestion_control

    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs ip and tc")
    available = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    before = open(ALLOWED_CC).read().split()
    other = next((cc for cc in ("cubic", "bbr", "reno") if cc in available and cc not in before), None)
    if other is None:
        pytest.skip("every congestion control here is allowed already")
    transport = Transport(congestion_control=other, slow_start_after_idle=False)
    with pytest.raises(RuntimeError, match="boom"):
        with allowed_congestion_control(other), EmulatedCluster(["a"], rate_bit=50_000_000,
                                                                 transport=transport) as cluster:
            assert other in open(ALLOWED_CC).read().split()
            shown = subprocess.run([*cluster.hosts["a"].exec_prefix(), "sysctl", "-n",
                                    "net.ipv4.tcp_congestion_control", "net.ipv4.tcp_slow_start_after_idle"],
                                   capture_output=True, text=True).stdout.split()
            assert shown == [other, "0"]
            raise RuntimeError("boom")
    assert open(ALLOWED_CC).read().split() == before


def test_throughput_counts_only_what_all_workers_do_together():
    """A worker that speeds up once the other has finished its steps (it had the link to
    itself) must not add that rate to the job's: the per-worker sum says 96, the rate while
    both ran is 64."""
    import numpy as np

    from tfsim.lab.measure import window_throughput

    both = np.array([[t, t + 1.0] for t in range(10)], dtype=float)  # 10 shared steps of 1 s
    alone = np.array([[10 + 0.5 * k, 10.5 + 0.5 * k] for k in range(10)])  # then 10 of 0.5 s alone
    steps = {0: both, 1: np.vstack([both, alone])}
    own_half_rates = sum(32 * (len(s) - len(s) // 2) / (s[-1, 1] - s[len(s) // 2, 0]) for s in steps.values())
    assert own_half_rates == pytest.approx(96.0)
    result = window_throughput(steps, batch=32)
    assert result["throughput_eps"] == pytest.approx(64.0)
    assert result["window_s"] == pytest.approx(5.0) and result["per_worker_eps"] == pytest.approx([32.0, 32.0])
    # workers whose measured steps never overlap have no common window
    assert np.isnan(window_throughput({0: both, 1: alone + 1.0}, batch=32)["throughput_eps"])


def test_measured_throughput_of_a_real_two_worker_run():
    from pathlib import Path

    from tfsim.lab.measure import measured_throughput

    run = Path(__file__).resolve().parents[1] / "data" / "captures" / "tiny_100mbit_w2_ps"
    result = measured_throughput(run)
    assert result["rule"] == "common window" and result["workers"] == 2 and result["window_s"] > 0.3
    # two workers that shared evenly: both rules agree, and the link (100 Mbit/s, 0.55 MB per
    # step each way) bounds the rate
    assert result["throughput_eps"] == pytest.approx(result["per_worker_sum_eps"], rel=0.03)
    assert result["throughput_eps"] < 32 * 100e6 / 8 / 547_496
    assert sum(result["per_worker_eps"]) == pytest.approx(result["throughput_eps"])


def test_a_many_ps_setting_can_be_profiled_with_one_ps(tmp_path, monkeypatch):
    """profile_ps: the profiling run has that many PS, the measuring runs ps_tasks (the check of
    a 2-PS prediction from a 1-PS profile)."""
    import tfsim.lab.validate as validate

    setting = LabSetting("two", "tiny", 32, 100_000_000, workers=(1, 2), ps_tasks=2, profile_ps=1)
    assert setting.profiled_ps == 1 and LabSetting("s", "tiny", 32, 100_000_000, ps_tasks=2).profiled_ps == 2
    seen = []
    monkeypatch.setattr(validate, "collect_in_lab", lambda config, *args, **kwargs: seen.append(config.ps_tasks))
    validate._collect(setting, tmp_path / "p", workers=1, steps=4, capture=True, progress=False)
    validate._collect(setting, tmp_path / "m", workers=2, steps=4, capture=False, progress=False)
    assert seen == [1, 2]
    with pytest.raises(UsageError) as err:
        LabSetting("s", "tiny", 32, 100_000_000, ps_tasks=2, profile_ps=3)
    assert err.value.source == "profile_ps"
    path = tmp_path / "m.toml"
    path.write_text('[[setting]]\nmodel = "tiny"\nrate = "100mbit"\nps = 2\nprofile_ps = 1\n')
    (read,) = read_settings(path)
    assert (read.ps_tasks, read.profiled_ps, read.placement) == (2, 1, "round_robin")


def test_a_setting_places_its_variables_as_it_says(tmp_path, monkeypatch):
    """placement: the lab's runs place their variables so (collect's --placement), and the
    prediction follows the profiling run's placement (docs/model.md §2.2)."""
    import tfsim.lab.validate as validate

    setting = LabSetting("g", "tiny", 32, 100_000_000, workers=(1, 2), ps_tasks=2, profile_ps=1, placement="greedy")
    seen = []
    monkeypatch.setattr(validate, "collect_in_lab", lambda config, *args, **kwargs: seen.append(config.placement))
    validate._collect(setting, tmp_path / "p", workers=1, steps=4, capture=True, progress=False)
    validate._collect(setting, tmp_path / "m", workers=2, steps=4, capture=False, progress=False)
    assert seen == ["greedy", "greedy"]
    for bad, api in (("by_size", "tf1"), ("greedy", "tf2-pss")):
        with pytest.raises(UsageError) as err:
            LabSetting("s", "tiny", 32, 100_000_000, ps_tasks=2, placement=bad, api=api)
        assert err.value.source == "placement"
    path = tmp_path / "bad.toml"
    path.write_text('[[setting]]\nmodel = "tiny"\nrate = "100mbit"\nps = 2\nplacement = "by_size"\n')
    with pytest.raises(InputError) as err:
        read_settings(path)
    assert str(path) in str(err.value) and "placement" in str(err.value)


def test_the_matrix_preset_is_the_published_matrix():
    """``tfsim lab --preset matrix`` runs what bench/results/lab-2026-11-27-matrix published."""
    from pathlib import Path

    from tfsim.lab.validate import PRESETS

    published = Path(__file__).parent.parent / "bench" / "results" / "lab-2026-11-27-matrix" / "matrix.toml"
    assert tuple(read_settings(published)) == PRESETS["matrix"]
    assert {s.model for s in PRESETS["matrix"]} == {"tiny", "recommender", "convnet", "wide_mlp"}
    assert all(s.workers == (1, 2, 3, 4, 5, 6) for s in PRESETS["matrix"])


@pytest.mark.tensorflow
def test_the_convnet_model_has_its_documented_size_and_trains():
    """The matrix's compute-bound model: about 1.34 M parameters (5.4 MB each way per step)."""
    code = (
        "import types, tensorflow as tf\n"
        "tf1 = tf.compat.v1; tf1.disable_eager_execution()\n"
        "from tfsim.lab.models import convnet\n"
        "loss, batch = convnet(types.SimpleNamespace(batch_size=8, zero_init=False))\n"
        "step = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)\n"
        "n = sum(v.shape.num_elements() for v in tf1.trainable_variables())\n"
        "with tf1.Session() as s:\n"
        "    s.run(tf1.global_variables_initializer()); first = s.run(loss); s.run(step)\n"
        "print(n, batch, first > 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split()[-3:] == ["1341226", "8", "True"]


@needs_cgroups
def test_a_shorter_cfs_period_spreads_the_same_quota_over_more_periods():
    """cpu_period_ms: the quota holds as before, in slices of the period (many more, shorter
    throttles), so that a busy emulated host stalls for milliseconds, not for most of 100 ms."""
    from tfsim.lab.cgroups import PERIOD_US, LabCgroups, find_hierarchy

    spin = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.0: pass\n"
    stats = {}
    with LabCgroups() as cgroups:
        for name, period in (("long", PERIOD_US), ("short", 10_000)):
            group = cgroups.group(name, 0.25, period)
            if find_hierarchy().version == 2:
                assert (group.paths[0] / "cpu.max").read_text().split() == [str(period // 4), str(period)]
            subprocess.run([*group.wrapper(), sys.executable, "-c", spin], check=True)
            stats[name] = group.stats()
    for s in stats.values():
        assert 0 < s.usage_s
    # The same quota per wall second, throttled in ten times as many, ten times shorter, stalls.
    assert stats["short"].nr_throttled >= 4 * stats["long"].nr_throttled
    def stall_s(name):
        return stats[name].throttled_s / stats[name].nr_throttled

    assert stall_s("short") < stall_s("long") / 4


def test_a_setting_takes_its_cfs_period_and_checks_it(tmp_path):
    from tfsim.cli import build_parser
    from tfsim.cli.lab import settings_of
    from tfsim.lab.cgroups import PERIOD_US

    assert LabSetting("s", "tiny", 32, 100_000_000).quotas().period_us == PERIOD_US
    setting = LabSetting("s", "tiny", 32, 100_000_000, workers=(1, 2), cpu_period_ms=10)
    assert setting.quotas().period_us == 10_000 and "10 ms periods" in setting.hosts_text()
    for bad in (0.5, 2000.0, float("nan")):
        with pytest.raises(UsageError) as err:
            LabSetting("s", "tiny", 32, 100_000_000, cpu_period_ms=bad)
        assert err.value.source == "cpu_period_ms"
    # A quota of 0.29 core over 2 ms is 0.57 ms: below the kernel's 1 ms per period.
    with pytest.raises(UsageError) as err:
        LabSetting("s", "tiny", 32, 100_000_000, workers=(1, 6), cpu_period_ms=2)
    assert err.value.source == "cpu_period_ms" and "1 ms" in str(err.value)
    args = build_parser().parse_args(["lab", "--model", "tiny", "--workers", "1-2", "--cpu-period", "10"])
    _, settings = settings_of(args)
    assert [s.cpu_period_ms for s in settings] == [10.0]
    path = tmp_path / "s.toml"
    path.write_text('[[setting]]\nmodel = "tiny"\nrate = "100mbit"\ncpu_period_ms = 20\n')
    assert read_settings(path)[0].quotas().period_us == 20_000
