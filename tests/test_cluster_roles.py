"""``tfsim collect --role``: one task per host, as on a real cluster.

The cluster tests use network namespaces as hosts on a bridge (:class:`EmulatedCluster`),
and start every task as its own ``tfsim collect --role ...`` process inside its namespace
with ``TF_CONFIG`` in its environment, the way a user starts them over ssh. The bad-input
tests check the one-line message, the task it names and exit status 2.
"""

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfbase.errors import ClusterError, InputError
from tfprofile.harness.tfconfig import agreement_difference, load_task

FIXTURES = Path(__file__).parent / "fixtures"
IS_ROOT = os.geteuid() == 0
needs_lab = pytest.mark.skipif(
    not IS_ROOT or not all(shutil.which(t) for t in ("ip", "tc", "tcpdump", "iperf3")),
    reason="the emulated cluster needs root, ip, tc, tcpdump and iperf3")
TINY = ("--model", "tiny", "--batch", "4", "--steps", "4", "--warmup", "1", "--intra-op-threads", "1",
        "--inter-op-threads", "1", "--no-progress")
TFSIM = [str(Path(sys.executable).with_name("tfsim"))] if Path(sys.executable).with_name("tfsim").exists() \
    else [sys.executable, "-m", "tfsim"]


def tf_config(ps: list[str], workers: list[str], role: str | None = None, index: int = 0) -> str:
    config = {"cluster": {"ps": ps, "worker": workers}}
    if role is not None:
        config["task"] = {"type": role, "index": index}
    return json.dumps(config)


def env_with(tf_config_text: str | None = None, pythonpath: Path = FIXTURES) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), os.environ.get("PYTHONPATH", "")])
    if tf_config_text is not None:
        env["TF_CONFIG"] = tf_config_text
    return env


def tfsim(*args, env: dict, prefix=(), timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, *TFSIM, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)


class Tasks:
    """Background ``tfsim collect --role`` processes; every one is killed at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, *args, env: dict, prefix=()) -> subprocess.Popen:
        proc = subprocess.Popen([*prefix, *TFSIM, *map(str, args)], env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(10)


@pytest.fixture
def tasks():
    started = Tasks()
    yield started
    started.stop_all()


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---------------------------------------------------------------------------- the cluster spec, no TensorFlow

def test_tf_config_and_cluster_spec_file(tmp_path):
    text = tf_config(["h1:2222", "h2:2222"], ["h3:2222"], "ps", 1)
    cluster, task, source = load_task({"TF_CONFIG": text})
    assert (cluster.ps, cluster.worker, task.label, source) == (("h1:2222", "h2:2222"), ("h3:2222",), "ps1",
                                                               "TF_CONFIG")
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({"ps": ["h1:2222"], "worker": ["h3:2222", "h4:2222"]}))
    cluster, task, source = load_task({"TF_CONFIG": text}, spec, "worker", 1)
    assert (cluster.worker, task.label, task.is_chief, source) == (("h3:2222", "h4:2222"), "worker1", False, str(spec))
    with pytest.raises(ClusterError, match=r"^worker0: .*job 'chief' is not supported"):
        load_task({"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"], "ps": ["b:1"], "worker": ["c:1"]}})},
                  role="worker", index=0)
    with pytest.raises(ClusterError, match=r"address b:1 is given to two tasks"):
        load_task({"TF_CONFIG": tf_config(["b:1"], ["b:1"], "ps")})


def test_a_tf2_pss_cluster_has_its_coordinator_as_chief():
    pss = {"cluster": {"chief": ["a:1"], "ps": ["b:1"], "worker": ["c:1", "d:1"]}, "task": {"type": "chief"}}
    cluster, task, _ = load_task({"TF_CONFIG": json.dumps(pss)}, coordinator=True)
    assert (cluster.chief, task.label, task.is_coordinator, task.is_chief) == (("a:1",), "chief0", True, False)
    assert cluster.as_dict() == pss["cluster"] and cluster.address("chief", 0) == "a:1"
    _, worker, _ = load_task({"TF_CONFIG": json.dumps(pss)}, role="worker", index=1, coordinator=True)
    assert (worker.label, worker.is_coordinator) == ("worker1", False)
    with pytest.raises(ClusterError, match=r"needs a non-empty list of 'chief' addresses \(host:port\): a tf2-pss "
                                           r"job's coordinator"):
        load_task({"TF_CONFIG": tf_config(["b:1"], ["c:1"], "ps")}, coordinator=True)
    with pytest.raises(ClusterError, match=r"a tf2-pss job has one coordinator: 'chief' lists 2"):
        load_task({"TF_CONFIG": json.dumps({"cluster": {**pss["cluster"], "chief": ["a:1", "e:1"]}})}, role="ps",
                  coordinator=True)
    with pytest.raises(ClusterError, match=r"job 'chief' is not supported: .* or, with --api tf2-pss, a 'chief'"):
        load_task({"TF_CONFIG": json.dumps(pss)}, role="worker")
    from tfprofile.harness.pss_role import check_profiler_ports, profiler_port

    assert profiler_port("h:2222") == 12222
    with pytest.raises(ClusterError, match=r"worker0's profiler port 12222 is another task's address"):
        check_profiler_ports(load_task({"TF_CONFIG": json.dumps(
            {"cluster": {"chief": ["h:12222"], "ps": ["g:1"], "worker": ["h:2222"]}})}, role="ps",
            coordinator=True)[0], "ps0")


PSS_SPEC = {"chief": ["127.0.0.1:5"], "ps": ["127.0.0.1:1", "127.0.0.1:2"], "worker": ["127.0.0.1:3", "127.0.0.1:4"]}


def test_a_server_host_answers_the_coordinator_in_its_handoff_directory(tmp_path, monkeypatch):
    """The manifest says what the host does; a request it cannot serve is answered with an error that
    the host raises too once released; closing removes the directory."""
    from tfprofile.harness import pss_handoff
    from tfprofile.harness.capture_site import CaptureDuty
    from tfprofile.harness.launcher import CollectConfig, TrainingApi
    from tfprofile.harness.role import RoleOptions
    from tfprofile.harness.tfconfig import ClusterSpec, TaskId

    monkeypatch.setattr(pss_handoff, "handoff_dir", lambda cluster, task: str(tmp_path / task.label))
    cluster = ClusterSpec(("10.0.0.1:2222",), ("10.0.0.3:2222",), ("10.0.0.9:2222",))
    role = RoleOptions(TaskId("ps", 0), cluster, iperf_server=False)
    host = pss_handoff.HandoffHost.open(CollectConfig(tmp_path / "run", api=TrainingApi.TF2_PSS), role,
                                        CaptureDuty.NONE)
    manifest = json.loads((tmp_path / "ps0" / "manifest.json").read_text())
    assert {k: manifest[k] for k in ("format", "task", "capture_site", "iperf_server", "repeat")} == {
        "format": "tfsim.pss-handoff/1", "task": "ps0", "capture_site": None, "iperf_server": False, "repeat": 1}
    host.serve()
    assert not (tmp_path / "ps0" / "capture.json").exists()  # nothing asked yet
    (tmp_path / "ps0" / "capture.request").write_text('{"sto')  # seen half written: asked again later
    host.serve()
    assert not (tmp_path / "ps0" / "capture.json").exists()
    (tmp_path / "ps0" / "capture.request").write_text('{"stop": true}')
    host.serve()
    assert json.loads((tmp_path / "ps0" / "capture.json").read_text()) == {
        "error": "ps0: takes no capture (capture)", "status": 2}
    with pytest.raises(ClusterError, match=r"^ps0: takes no capture \(capture\)$"):
        host.finish(pss_handoff.SERVERS_FAILED)
    host.close()
    assert not (tmp_path / "ps0").exists()


@pytest.mark.parametrize(("task", "extra", "message"), [
    ("worker1", ("--capture",),
     "--capture: in a tf2-pss job the capture runs on worker0 (and the coordinator fetches it), not on worker1"),
    ("ps0", ("--capture",), "--capture: in a tf2-pss job the capture runs on worker0 (and the coordinator fetches "
                            "it), not on ps0: to capture at PS 0, give capture_site ps here and on the coordinator"),
    ("worker0", ("--capture", "--capture-at", "ps"),
     "--capture-at: the capture at the PS runs on ps0 (and the coordinator fetches it), not on worker0"),
    ("ps1", ("--capture", "--capture-at", "ps"),
     "--capture-at: the capture at the PS runs on ps0 (and the coordinator fetches it), not on ps1"),
    ("worker0", ("--iperf",), "--iperf: in a tf2-pss job the coordinator has worker0's host measure the links: give "
                              "it to the coordinator, not to worker0"),
    ("worker0", ("--iperf-server",), "--iperf-server: runs on a PS task, not on worker0"),
    ("ps0", ("--capture-interface", "eth0"), "--capture-interface: ps0 captures only with capture"),
    ("chief0", ("--capture", "--capture-interface", "eth0", "--out", "{tmp}/run"),
     "--capture-interface: the capture runs on the chief (worker 0) or, with capture_site ps, on ps0; not on chief0"),
    ("chief0", ("--capture", "--capture-at", "ps"), "--out: give the run directory to create (--out RUN_DIR)"),
])
def test_tf2_pss_capture_options_given_to_the_wrong_task_exit_2(task, extra, message, tmp_path, capsys,
                                                                monkeypatch):
    """Refused before anything starts: one line naming the option, nothing written."""
    from cli_runner import run

    monkeypatch.delenv("TF_CONFIG", raising=False)
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps(PSS_SPEC))
    role = "chief" if task.startswith("chief") else task[:-1]
    code, _, err = run(["collect", "--api", "tf2-pss", "--cluster-spec", spec, "--role", role, "--task-index",
                        task[-1], *TINY, *(a.format(tmp=tmp_path) for a in extra)], capsys)
    assert code == 2
    assert err.strip().splitlines() == [f"tfsim: error: {message}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json"]


def test_tf2_pss_capture_duty_of_each_task(tmp_path):
    from tfprofile.harness.capture_site import CaptureDuty, pss_capture_duty
    from tfprofile.harness.launcher import CaptureSite, CollectConfig, TrainingApi
    from tfprofile.harness.pss_handoff import capture_task
    from tfprofile.harness.role import RoleOptions
    from tfprofile.harness.tfconfig import ClusterSpec, TaskId

    cluster = ClusterSpec(("10.0.0.1:2222",), ("10.0.0.3:2222", "10.0.0.4:2222"), ("10.0.0.9:2222",))

    def duty(config, label):
        task = TaskId("chief", 0) if label == "chief0" else TaskId(label[:-1], int(label[-1]))
        return pss_capture_duty(config, RoleOptions(task, cluster))

    pss = {"out_dir": tmp_path / "run", "api": TrainingApi.TF2_PSS}
    at_worker = CollectConfig(**pss, capture=True)
    at_ps = CollectConfig(**pss, capture=True, capture_site=CaptureSite.PS)
    labels = ("chief0", "worker0", "ps0")
    assert [duty(at_worker, t) for t in labels[:2]] == [CaptureDuty.FETCH, CaptureDuty.CAPTURE]
    assert [duty(at_ps, t) for t in ("chief0", "ps0")] == [CaptureDuty.FETCH, CaptureDuty.CAPTURE]
    assert {duty(CollectConfig(**pss), t) for t in (*labels, "worker1")} == {CaptureDuty.NONE}
    assert (capture_task(at_worker), capture_task(at_ps), capture_task(CollectConfig(**pss))) == (
        TaskId("worker", 0), TaskId("ps", 0), None)


class _LocalTf:
    """Enough of TensorFlow for the coordinator's side of the handoff: an op placed on a task
    reads this host's files (every namespace of the emulated cluster shares one file system)."""

    class _Value:
        def __init__(self, value) -> None:
            self.value = value

        def numpy(self):
            return self.value

    class errors:
        NotFoundError = FileNotFoundError

    class io:
        @staticmethod
        def matching_files(pattern: str):
            import glob

            import numpy as np

            return _LocalTf._Value(np.array([p.encode() for p in glob.glob(pattern)]))

        @staticmethod
        def read_file(path: str):
            return _LocalTf._Value(Path(path).read_bytes())

    @staticmethod
    def device(_name: str):
        import contextlib

        return contextlib.nullcontext()


def test_the_coordinator_checks_what_each_host_does(tmp_path, monkeypatch):
    """Each manifest against the coordinator's options: one line naming the task and what to give it."""
    from tfprofile.harness import pss_handoff
    from tfprofile.harness.launcher import CaptureSite, CollectConfig, TrainingApi
    from tfprofile.harness.role import RoleOptions
    from tfprofile.harness.tfconfig import ClusterSpec, TaskId

    monkeypatch.setattr(pss_handoff, "handoff_dir", lambda cluster, task: str(tmp_path / task.label))
    cluster = ClusterSpec(("10.0.0.1:2222", "10.0.0.1:2223"), ("10.0.0.3:2222",), ("10.0.0.9:2222",))
    coordinator = TaskId("chief", 0)

    def manifests(**tasks) -> None:
        for label in ("worker0", "ps0", "ps1"):
            (tmp_path / label).mkdir(exist_ok=True)
            (tmp_path / label / "manifest.json").write_text(json.dumps(
                {"capture_site": None, "iperf3": True, "iperf_server": False, **tasks.get(label, {})}))

    def check(iperf: bool = False, repeat: int = 1, **config) -> None:
        config = CollectConfig(tmp_path / "run", api=TrainingApi.TF2_PSS, **config)
        role = RoleOptions(coordinator, cluster, iperf=iperf, repeat=repeat)
        spec = {"handoff": pss_handoff.coordinator_spec(config, role)}
        pss_handoff.check_manifests(_LocalTf, spec)

    manifests(worker0={"capture_site": "chief-worker"}, ps1={"iperf_server": True})
    check(capture=True)
    check(capture=True, iperf=True)  # both PS tasks on one host: ps1's iperf3 server serves it
    with pytest.raises(pss_handoff.HandoffError, match=r"^chief0: worker0 captures \(capture_site chief-worker\) but "
                                                       r"the coordinator does not fetch it: give the coordinator "
                                                       r"capture too$"):
        check()
    with pytest.raises(pss_handoff.HandoffError, match=r"^chief0: ps0 takes no capture: give it capture and "
                                                       r"capture_site ps too, as the coordinator$"):
        check(capture=True, capture_site=CaptureSite.PS)
    manifests(worker0={"iperf3": False})
    with pytest.raises(pss_handoff.HandoffError, match=r"^chief0: worker0 takes no capture: give it capture too"):
        check(capture=True)
    with pytest.raises(pss_handoff.HandoffError, match=r"^chief0: worker0's host has no iperf3 on PATH"):
        check(iperf=True)
    manifests()
    with pytest.raises(pss_handoff.HandoffError, match=r"^chief0: no PS task on 10.0.0.1 serves iperf3: give ps0 "
                                                       r"iperf_server$"):
        check(iperf=True)
    manifests(worker0={"repeat": 2}, ps0={"repeat": 2}, ps1={"repeat": 2})
    check(repeat=2)
    manifests(worker0={"repeat": 2}, ps1={"repeat": 2})  # a host that says no repeat runs the job once
    with pytest.raises(pss_handoff.HandoffError, match=r"^chief0: the run options differ from ps0's: repeat is 2 "
                                                       r"here, 1 on ps0$"):
        check(repeat=2)
    (tmp_path / "ps1" / "manifest.json").unlink()
    with pytest.raises(pss_handoff.HandoffError, match=r"^chief0: ps1 has no .*manifest.json on its host"):
        check()


def test_agreement_difference_names_what_differs():
    own = {"options": {"batch_size": 8}, "cluster": {"ps": ["a:1"]},
           "variables": [["w", [64, 128], "float32", "/job:ps/task:0"]]}
    assert agreement_difference(own, json.loads(json.dumps(own)), "ps0") is None
    assert agreement_difference(own, {**own, "options": {"batch_size": 16}}, "ps1") == \
        "batch_size is 8 here, 16 on ps1"
    other = {**own, "variables": [["w", [64, 256], "float32", "/job:ps/task:0"]]}
    assert agreement_difference(own, other, "ps0") == \
        "variable w is float32[64, 128] on /job:ps/task:0 here, float32[64, 256] on /job:ps/task:0 on ps0"
    assert "exists on ps0, not here" in agreement_difference(own, {**own, "variables": own["variables"] + [
        ["v", [1], "float32", "/job:ps/task:0"]]}, "ps0")


def test_tf_config_missing(tmp_path):
    result = tfsim("collect", "--role", "worker", "--task-index", "0", "--out", tmp_path / "run", env=env_with())
    assert result.returncode == 2
    assert error_line(result).startswith("tfsim: error: worker0: TF_CONFIG is not set and no --cluster-spec")


def test_tf_config_malformed(tmp_path):
    result = tfsim("collect", "--role", "ps", "--task-index", "1", env=env_with('{"cluster": {"ps": ['))
    assert result.returncode == 2
    assert error_line(result).startswith("tfsim: error: ps1: TF_CONFIG is not valid JSON")
    result = tfsim("collect", env=env_with(json.dumps({"cluster": {"ps": "h:1", "worker": ["h:2"]},
                                                       "task": {"type": "ps", "index": 0}})))
    assert result.returncode == 2
    assert "needs a non-empty list of 'ps' addresses" in error_line(result)


def test_task_index_outside_the_cluster(tmp_path):
    result = tfsim("collect", "--out", tmp_path / "run",
                   env=env_with(tf_config(["h1:2222"], ["h2:2222", "h3:2222"], "worker", 2)))
    assert result.returncode == 2
    assert error_line(result) == ("tfsim: error: worker2: task index 2 is outside the cluster: TF_CONFIG lists 2 "
                                  "worker task(s), worker0 to worker1")
    assert not (tmp_path / "run").exists()


def test_unreachable_ps_times_out(tmp_path):
    ps_port, worker_port = free_ports(2)
    started = time.monotonic()
    result = tfsim("collect", "--role", "worker", "--task-index", "0", "--connect-timeout", "2", *TINY,
                   "--out", tmp_path / "run",
                   env=env_with(tf_config([f"127.0.0.1:{ps_port}"], [f"127.0.0.1:{worker_port}"])), timeout=60)
    assert result.returncode == 2
    assert error_line(result).startswith(f"tfsim: error: worker0: ps0 at 127.0.0.1:{ps_port} is unreachable")
    assert "after 2 s (--connect-timeout)" in result.stderr
    assert time.monotonic() - started < 30
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------- where the capture runs, no TensorFlow

def _role(label: str, **options):
    from tfprofile.harness.role import RoleOptions
    from tfprofile.harness.tfconfig import ClusterSpec, TaskId

    cluster = ClusterSpec(("10.0.0.1:2222", "10.0.0.2:2222"), ("10.0.0.3:2222", "10.0.0.4:2222"))
    return RoleOptions(TaskId(label[:-1], int(label[-1])), cluster, **options)


def test_capture_duty_of_each_task(tmp_path):
    from tfbase.errors import UsageError
    from tfprofile.harness.capture_site import CaptureDuty, capture_duty, chief_record, ps_capture_pairs
    from tfprofile.harness.launcher import CaptureSite, CollectConfig

    at_chief = CollectConfig(tmp_path / "run", capture=True)
    at_ps = CollectConfig(tmp_path / "run", capture=True, capture_site=CaptureSite.PS)
    none = CollectConfig(tmp_path / "run")
    assert [capture_duty(at_chief, _role(t)) for t in ("worker0",)] == [CaptureDuty.CAPTURE]
    assert [capture_duty(at_ps, _role(t)) for t in ("worker0", "ps0")] == [CaptureDuty.RECORD, CaptureDuty.CAPTURE]
    assert {capture_duty(none, _role(t)) for t in ("worker0", "worker1", "ps0", "ps1")} == {CaptureDuty.NONE}
    assert capture_duty(at_ps, _role("ps0", capture_interface="eth1")) is CaptureDuty.CAPTURE
    for label in ("worker1", "ps1"):
        with pytest.raises(UsageError, match=rf"^capture_site: the capture at the PS runs on ps0 \(and the chief "
                                             rf"records it\), not on {label}$"):
            capture_duty(at_ps, _role(label))
    with pytest.raises(UsageError, match=r"^capture: the capture runs on the chief \(worker 0\), not on ps0: to "
                                         r"capture at PS 0, give capture_site ps here and on the chief$"):
        capture_duty(at_chief, _role("ps0"))
    with pytest.raises(UsageError, match=r"^capture: the capture runs on the chief \(worker 0\), not on worker1$"):
        capture_duty(at_chief, _role("worker1"))
    with pytest.raises(UsageError, match=r"^capture_interface: with capture_site ps the capture runs on ps0"):
        capture_duty(at_ps, _role("worker0", capture_interface="eth0"))
    with pytest.raises(UsageError, match=r"^capture_interface: ps0 captures only with capture and capture_site ps$"):
        capture_duty(none, _role("ps0", capture_interface="eth0"))
    with pytest.raises(UsageError, match=r"^capture_interface: the capture runs on the chief \(worker 0\) or, "
                                         r"with capture_site ps, on ps0; not on worker1$"):
        _role("worker1", capture_interface="eth0")
    with pytest.raises(UsageError, match=r"^capture_site: applies to a capture: give capture too$"):
        CollectConfig(tmp_path / "run", capture_site=CaptureSite.PS)
    # PS 0 sees each worker on two connections: to its own port, and from it to the worker's
    assert ps_capture_pairs(_role("ps0")) == [("10.0.0.3", 2222), ("10.0.0.3", 2222), ("10.0.0.4", 2222),
                                              ("10.0.0.4", 2222)]
    record = chief_record(_role("worker0"))
    assert (record["host"], record["file"], record["record"], record["taken_on"]) == (
        "ps0", "capture.pcap.gz", "capture.json", "10.0.0.1")


@pytest.mark.parametrize(("task", "extra", "message"), [
    ("worker1", ("--capture", "--capture-at", "ps"),
     "--capture-at: the capture at the PS runs on ps0 (and the chief records it), not on worker1"),
    ("ps1", ("--capture", "--capture-at", "ps", "--out", "{tmp}/cap"),
     "--capture-at: the capture at the PS runs on ps0 (and the chief records it), not on ps1"),
    ("ps0", ("--capture", "--capture-at", "ps"), "--out: ps0 writes its capture into a directory: give it (--out DIR)"),
    ("ps0", ("--capture", "--out", "{tmp}/cap"), "--capture: the capture runs on the chief (worker 0), not on ps0: "
                                                 "to capture at PS 0, give capture_site ps here and on the chief"),
    ("worker0", ("--capture-at", "ps", "--out", "{tmp}/run"), "--capture-at: applies to a capture: give capture too"),
    ("worker0", ("--capture", "--capture-at", "ps", "--capture-interface", "eth0", "--out", "{tmp}/run"),
     "--capture-interface: with capture_site ps the capture runs on ps0: give its interface there, not on worker0"),
])
def test_capture_site_given_to_the_wrong_task_exits_2(task, extra, message, tmp_path, capsys, monkeypatch):
    from cli_runner import run

    monkeypatch.delenv("TF_CONFIG", raising=False)
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({"ps": ["127.0.0.1:1", "127.0.0.1:2"], "worker": ["127.0.0.1:3", "127.0.0.1:4"]}))
    code, _, err = run(["collect", "--cluster-spec", spec, "--role", task[:-1], "--task-index", task[-1],
                          *TINY, *(a.format(tmp=tmp_path) for a in extra)], capsys)
    assert code == 2
    assert err.strip().splitlines() == [f"tfsim: error: {message}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json"]  # nothing written


def test_capture_site_without_capture_exits_2_in_local_mode(tmp_path, capsys, monkeypatch):
    from cli_runner import run

    monkeypatch.delenv("TF_CONFIG", raising=False)
    code, _, err = run(["collect", *TINY, "--capture-at", "ps", "--out", tmp_path / "run"], capsys)
    assert (code, err.strip()) == (2, "tfsim: error: --capture-at: applies to a capture: give capture too")
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------- repetitions, no TensorFlow

@pytest.mark.parametrize(("extra", "message"), [
    (("--repeat", "0"), "argument --repeat: must be at least 1, not 0 (see tfsim collect --help)"),
    (("--repeat", "-2"), "argument --repeat: must be at least 1, not -2 (see tfsim collect --help)"),
    (("--repeat", "2"), "--repeat: repeats a job with one task per host: give --role (or TF_CONFIG); on one "
                        "machine, tfsim lab --repeat measures each point N times"),
])
def test_bad_repeat_exits_2(extra, message, tmp_path, capsys, monkeypatch):
    from cli_runner import run

    monkeypatch.delenv("TF_CONFIG", raising=False)
    code, _, err = run(["collect", *TINY, *extra, "--out", tmp_path / "run"], capsys)
    assert (code, err.strip().splitlines()) == (2, [f"tfsim: error: {message}"])
    assert not list(tmp_path.iterdir())


def test_hosts_with_different_repeats_disagree():
    from tfbase.errors import UsageError
    from tfprofile.harness.launcher import CollectConfig
    from tfprofile.harness.role import agreement_options

    config = CollectConfig(Path("run"))
    assert "repeat" not in agreement_options(config)  # a job run once records what it always did
    twice = {"options": agreement_options(config, 2)}
    assert agreement_difference(twice, {"options": agreement_options(config)}, "ps0") == "repeat is 2 here, 1 on ps0"
    assert agreement_difference({"options": agreement_options(config)}, twice, "ps0") == "repeat is 1 here, 2 on ps0"
    assert agreement_difference(twice, {"options": agreement_options(config, 2)}, "ps0") is None
    with pytest.raises(UsageError, match=r"^repeat: must be at least 1, not 0$"):
        _role("worker0", repeat=0)


def test_the_end_of_a_repetition_reaches_every_host():
    """PS 0's listener greets a probe without counting it, tells each worker its own load, and
    gives the chief every worker's load once both have reported."""
    import threading

    from tfprofile.harness.handoff import Handoff, hand_over, handing_over, serve_handoff

    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    served: dict = {}
    ps = threading.Thread(target=lambda: served.update(serve_handoff(port, Handoff("ps0", 3, {"outside_cores": 0.5}),
                                                                      ["worker0", "worker1"], timeout_s=60)))
    ps.start()
    answers: dict = {}

    def chief() -> None:
        answers["worker0"] = hand_over(address, "ps0", Handoff("worker0", 3, {"outside_cores": 0.01}), relay=True,
                                       timeout_s=60)

    first = threading.Thread(target=chief)
    first.start()
    deadline = time.monotonic() + 60
    while True:  # the listener is up once a probe is greeted
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                assert handing_over(sock)
                break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    answers["worker1"] = hand_over(address, "ps0", Handoff("worker1", 3, {"outside_cores": 0.2}), relay=False,
                                   timeout_s=60)
    first.join(60)
    ps.join(60)
    assert served == {"worker0": {"outside_cores": 0.01}, "worker1": {"outside_cores": 0.2}}
    assert answers["worker1"] == {"label": "ps0", "repetition": 3, "host_load": {"outside_cores": 0.5}}
    assert answers["worker0"]["hosts"] == served and answers["worker0"]["host_load"] == {"outside_cores": 0.5}


def test_a_tf2_pss_server_hands_its_port_over_to_the_coordinator_alone():
    """A tf2-pss server's host holds its port until the coordinator has reported; nothing is relayed."""
    import threading

    from tfbase.errors import CollectError
    from tfprofile.harness.handoff import Handoff, hand_over, serve_handoff

    (port,) = free_ports(1)
    served: dict = {}
    server = threading.Thread(target=lambda: served.update(serve_handoff(
        port, Handoff("worker1", 2, {"outside_cores": 0.3}), ["chief0"], timeout_s=60, relay_to=None)))
    server.start()
    answer = hand_over(f"127.0.0.1:{port}", "worker1", Handoff("chief0", 2, {"outside_cores": 0.02}), relay=False,
                       timeout_s=60)
    server.join(60)
    assert not server.is_alive() and served == {"chief0": {"outside_cores": 0.02}}
    assert answer == {"label": "worker1", "repetition": 2, "host_load": {"outside_cores": 0.3}}
    with socket.create_server(("", port)), pytest.raises(
            CollectError, match=rf"^worker1: cannot hold the task's port {port} between repetitions: Address "
                                r"already in use \(has another process taken it\?\)$"):
        serve_handoff(port, Handoff("worker1", 3, {}), ["chief0"], timeout_s=60, relay_to=None)


def test_a_worker_in_another_repetition_is_refused():
    import threading

    from tfprofile.harness.handoff import Handoff, hand_over, serve_handoff

    (port,) = free_ports(1)
    errors: list = []

    def ps() -> None:
        try:
            serve_handoff(port, Handoff("ps0", 1, {}), ["worker0"], timeout_s=60)
        except ClusterError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=ps)
    thread.start()
    with pytest.raises(ClusterError, match=r"^worker0: ps0 ended repetition 1 while this task ended repetition 2: "
                                           r"give every task the same repeat$"):
        hand_over(f"127.0.0.1:{port}", "ps0", Handoff("worker0", 2, {}), relay=True, timeout_s=60)
    thread.join(1)  # the PS still waits for worker 0's report of repetition 1
    assert errors == [] and thread.is_alive()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:  # a worker of repetition 2 answers anyway
        sock.recv(4096)
        sock.sendall(Handoff("worker0", 2, {}).line())
    thread.join(60)
    assert errors == ["ps0: worker0 ended repetition 2 while this task ended repetition 1: give every task the same "
                      "repeat"]


# ---------------------------------------------------------------------------- TensorFlow on loopback

@pytest.mark.tensorflow
def test_a_different_model_on_the_ps_is_refused(tmp_path, tasks):
    """Same flags, but the PS host's ``user_models`` defines another network."""
    pytest.importorskip("tensorflow")
    other = tmp_path / "other"
    other.mkdir()
    (other / "user_models.py").write_text((FIXTURES / "user_models.py").read_text().replace(
        'get_variable("mlp/w1", [64, 128])', 'get_variable("mlp/w1", [64, 256])').replace(
        'get_variable("mlp/w2", [128, 10])', 'get_variable("mlp/w2", [256, 10])'))
    ps_port, worker_port = free_ports(2)
    config = tf_config([f"127.0.0.1:{ps_port}"], [f"127.0.0.1:{worker_port}"])
    options = ("--model-fn", "user_models:small_mlp", *TINY[2:])
    ps = tasks.start("collect", "--role", "ps", *options, env=env_with(config, other))
    chief = tfsim("collect", "--role", "worker", *options, "--out", tmp_path / "run", env=env_with(config))
    assert chief.returncode == 2
    assert error_line(chief) == ("tfsim: error: worker0: the model or run options differ from ps0's: variable "
                                 "mlp/w1 is float32[64, 128] on /job:ps/task:0 here, float32[64, 256] on "
                                 "/job:ps/task:0 on ps0")
    _, ps_err = ps.communicate(timeout=60)
    assert ps.returncode == 2
    assert ps_err.strip() == ("tfsim: error: ps0: worker0 stopped with status 2, so this PS stops too (see "
                              "worker0's message)")
    assert not (tmp_path / "run").exists()


@pytest.mark.tensorflow
def test_hosts_started_with_different_repeats_are_refused(tmp_path, tasks):
    pytest.importorskip("tensorflow")
    ps_port, worker_port = free_ports(2)
    config = tf_config([f"127.0.0.1:{ps_port}"], [f"127.0.0.1:{worker_port}"])
    ps = tasks.start("collect", "--role", "ps", *TINY, env=env_with(config))
    chief = tfsim("collect", "--role", "worker", *TINY, "--repeat", "2", "--out", tmp_path / "run",
                  env=env_with(config))
    assert chief.returncode == 2
    assert error_line(chief) == ("tfsim: error: worker0: the model or run options differ from ps0's: repeat is 2 "
                                 "here, 1 on ps0")
    ps.communicate(timeout=60)
    assert ps.returncode == 2
    assert not (tmp_path / "run").exists()  # the repetitions are written into run.incomplete until the last


# ---------------------------------------------------------------------------- an emulated cluster

@pytest.fixture(scope="module")
def lab():
    """Hosts ps0, ps1, w0 and w1 on a bridge, 200 Mbit/s links; always torn down."""
    from tfsim.lab.netns import EmulatedCluster, list_namespaces

    cluster = EmulatedCluster(["ps0", "ps1", "w0", "w1"], rate_bit=200_000_000).up()
    try:
        yield cluster
    finally:
        cluster.down()
        assert not set(cluster.namespaces()) & set(list_namespaces())


def _run_job(lab, tasks, out: Path, ps_hosts: list[str], *chief_args: str,
             options: tuple = TINY) -> tuple[subprocess.CompletedProcess, list[subprocess.CompletedProcess]]:
    """Start a PS in each of ``ps_hosts``, then the chief in w0, every task with ``options``; return the
    chief's result and the PS tasks'."""
    hosts = lab.hosts
    config = {"ps": [f"{hosts[h].address}:2222" for h in ps_hosts], "worker": [f"{hosts['w0'].address}:2222"]}
    ps_procs = [tasks.start("collect", "--role", "ps", "--task-index", p, "--iperf-server", *options,
                            env=env_with(json.dumps({"cluster": config})), prefix=hosts[h].exec_prefix())
                for p, h in enumerate(ps_hosts)]
    chief = tfsim("collect", *options, "--out", out, *chief_args,
                  env=env_with(json.dumps({"cluster": config, "task": {"type": "worker", "index": 0}})),
                  prefix=hosts["w0"].exec_prefix())
    outputs = [proc.communicate(timeout=60) for proc in ps_procs]
    return chief, [subprocess.CompletedProcess(p.args, p.returncode, *o) for p, o in zip(ps_procs, outputs)]


@needs_lab
@pytest.mark.tensorflow
def test_one_ps_job_calibrates_profiles_and_predicts(lab, tasks, tmp_path):
    pytest.importorskip("tensorflow")
    run = tmp_path / "run"
    chief, ps_procs = _run_job(lab, tasks, run, ["ps0"], "--capture", "--iperf", "--iperf-repeats", "1",
                               "--iperf-seconds", "1")
    assert chief.returncode == 0, chief.stderr
    assert [p.returncode for p in ps_procs] == [0]
    record = json.loads((run / "run.json").read_text())
    ps_address, chief_address = f"{lab.hosts['ps0'].address}:2222", f"{lab.hosts['w0'].address}:2222"
    assert record["cluster"] == record["cluster_spec"] == {"ps": [ps_address], "worker": [chief_address]}
    assert record["hosts"]["ps0"]["ip"] == lab.hosts["ps0"].address
    assert record["capture"]["interface"] == "eth0" and record["capture"]["captured"] > 100
    assert record["capture"]["filter"] == (f"tcp and ((host {lab.hosts['ps0'].address} and port 2222))")
    assert sorted(p.name for p in (run / "iperf3").iterdir()) == ["downlink_0.json", "uplink_0.json"]
    rate = json.loads((run / "iperf3" / "uplink_0.json").read_text())["end"]["sum_received"]["bits_per_second"]
    assert 150e6 < rate < 210e6
    assert record["placement"]["ps_tasks"] == 1 and record["placement"]["bytes_per_ps"] == [547504]
    assert not list(run.glob("*.incomplete"))
    # a job run once is what it always was: no repetition, no other host's load, no repeat to agree on
    assert not {"repetition", "host_loads"} & set(record) and not (run / "repeats.json").exists()
    assert "repeat" not in json.loads((run / "logs" / "worker0.spec.json").read_text())["agreement"]
    # Each host records its load while its task ran, and what of it was not the task's own.
    load = record["host_load"]
    assert load["wall_s"] > 1 and 0 < load["own_cores"] and 0 <= load["outside_cores"] <= load["machine_cores"]
    assert "tfsim: host of worker0: " in chief.stderr

    cluster_json = tmp_path / "CLUSTER.json"
    result = tfsim("calibrate", run, "-o", cluster_json, env=env_with())
    assert result.returncode == 0, result.stderr
    calibrated = json.loads(cluster_json.read_text())
    # What the 200 Mbit/s link sustains; B itself may be the burst of an idle shaper above it.
    peak = calibrated["bandwidth_Bps"]["uplink"]
    sustained = calibrated["token_bucket"].get("uplink", {}).get("sustained_Bps", peak)
    assert 150e6 / 8 < sustained < 210e6 / 8 and sustained <= peak
    profile = tmp_path / "tiny.npz"
    result = tfsim("profile", run, "-o", profile, env=env_with())
    assert result.returncode == 0, result.stderr
    table = tmp_path / "predict.json"
    result = tfsim("predict", profile, "--cluster", cluster_json, "--workers", "1,2", "--steps", "60",
                   "--warmup", "10", "--jobs", "1", "--json", table, "--no-progress", env=env_with())
    assert result.returncode == 0, result.stderr
    rows = json.loads(table.read_text())["rows"]
    assert sorted(r["workers"] for r in rows) == [1, 2]
    assert all(r["throughput_eps"] > 0 for r in rows)


@needs_lab
@pytest.mark.tensorflow
def test_two_ps_job_keeps_each_server_apart(lab, tasks, tmp_path):
    pytest.importorskip("tensorflow")
    run = tmp_path / "run"
    chief, ps_procs = _run_job(lab, tasks, run, ["ps0", "ps1"], "--capture", "--iperf", "--iperf-repeats", "1",
                               "--iperf-seconds", "1", options=(*TINY, "--ps-strategy", "greedy"))
    assert chief.returncode == 0, chief.stderr
    assert [p.returncode for p in ps_procs] == [0, 0]
    record = json.loads((run / "run.json").read_text())
    assert record["config"]["placement"] == "greedy" and record["placement"]["ps_tasks"] == 2
    assert sum(record["placement"]["bytes_per_ps"]) == 547504 and min(record["placement"]["bytes_per_ps"]) > 0
    assert sorted(p.name for p in (run / "iperf3").iterdir()) == ["downlink_0.json", "downlink_ps1_0.json",
                                                                 "uplink_0.json", "uplink_ps1_0.json"]
    assert [link["ps_tasks"] for link in record["iperf3_links"]] == [[0], [1]]
    for host in ("ps0", "ps1"):
        assert f"host {lab.hosts[host].address} and port 2222" in record["capture"]["filter"]
    result = tfsim("calibrate", run, "-o", tmp_path / "CLUSTER.json", env=env_with())
    assert result.returncode == 0, result.stderr
    assert 150e6 / 8 < json.loads((tmp_path / "CLUSTER.json").read_text())["bandwidth_Bps"]["downlink"] < 210e6 / 8
    profile = tmp_path / "tiny2.npz"
    result = tfsim("profile", run, "-o", profile, env=env_with())
    assert result.returncode == 0, result.stderr
    from tfprofile.dag import Resource
    from tfprofile.profile_io import load_profile

    graph = load_profile(profile).graph
    for link in (Resource.DOWNLINK, Resource.UPLINK):
        assert sorted(set(graph.server[graph.resource == link].tolist())) == [0, 1]
    table = tmp_path / "predict.json"
    result = tfsim("predict", profile, "--bandwidth", "200mbit", "--workers", "1,2", "--steps", "60", "--warmup",
                   "10", "--jobs", "1", "--json", table, "--no-progress", env=env_with())
    assert result.returncode == 0, result.stderr
    rows = json.loads(table.read_text())["rows"]
    assert sorted(r["workers"] for r in rows) == [1, 2] and {r["servers"] for r in rows} == {2}
    assert all(r["throughput_eps"] > 0 for r in rows)


@needs_lab
@pytest.mark.tensorflow
def test_a_repeated_job_writes_a_run_directory_per_repetition_and_their_summary(lab, tasks, tmp_path):
    """Two repetitions of a one-PS job, each on fresh TF servers: two run directories that read
    as any other, and repeats.json whose throughput is what each one's step times give."""
    pytest.importorskip("tensorflow")
    import tfprofile
    from simulate.results import measurement_stats
    from tfsim.lab.measure import measured_throughput

    out = tmp_path / "run"
    chief, ps_procs = _run_job(lab, tasks, out, ["ps0"], options=(*TINY, "--repeat", "2"))
    assert chief.returncode == 0, chief.stderr
    ps_out, ps_err = ps_procs[0].stdout, ps_procs[0].stderr
    assert ps_procs[0].returncode == 0, ps_err
    assert ps_out.strip() == "ps0: done" and chief.stdout.strip() == str(out)
    for k in (1, 2):
        assert f"tfsim: host of ps0 (repetition {k} of 2): " in ps_err
        assert f"tfsim: host of worker0 (repetition {k} of 2): " in chief.stderr
    assert sorted(p.name for p in out.iterdir()) == ["r1", "r2", "repeats.json"]
    assert not list(tmp_path.glob("*.incomplete"))
    summary = json.loads((out / "repeats.json").read_text())
    assert (summary["format"], summary["repeat"], summary["workers"], summary["batch_size"]) == (
        "tfsim.repeats/1", 2, 1, 4)
    runs = []
    for k, rep in enumerate(summary["repetitions"], 1):
        run = out / f"r{k}"
        record = json.loads((run / "run.json").read_text())
        assert record["repetition"] == {"index": k, "of": 2} and record["status"] == "complete"
        assert sorted(record["host_loads"]) == ["ps0", "worker0"]
        assert record["host_loads"]["worker0"] == record["host_load"]
        measured = measured_throughput(run)
        assert rep["repetition"] == k and rep["run_dir"] == f"r{k}"
        assert rep["throughput_eps"] == measured["throughput_eps"] > 0
        assert rep["outside_cores"] == {h: load["outside_cores"] for h, load in record["host_loads"].items()}
        assert rep["flagged"] == any(c > 0.1 for c in rep["outside_cores"].values())
        assert len(tfprofile.read_profile(run).graph.name) > 0  # a run directory profile reads unchanged
        runs.append(measured["throughput_eps"])
    assert summary["throughput_eps"] == pytest.approx(measurement_stats(runs), rel=1e-12)
    assert summary["flagged_repetitions"] == [r["repetition"] for r in summary["repetitions"] if r["flagged"]]
    assert f"tfsim: 2 repetitions: {summary['throughput_eps']['mean']:.2f} examples/s" in chief.stderr


@needs_lab
@pytest.mark.tensorflow
def test_a_capture_interface_without_traffic_is_refused(lab, tasks, tmp_path):
    pytest.importorskip("tensorflow")
    chief, ps_procs = _run_job(lab, tasks, tmp_path / "run", ["ps0"], "--capture", "--capture-interface", "lo")
    assert chief.returncode == 2
    assert error_line(chief) == (f"tfsim: error: worker0: the capture on interface lo saw no traffic with the PS "
                                 f"tasks (tcp and ((host {lab.hosts['ps0'].address} and port 2222))): give the "
                                 "interface that carries it (--capture-interface)")
    assert [p.returncode for p in ps_procs] == [0]
    assert not (tmp_path / "run").exists()


@needs_lab
@pytest.mark.tensorflow
# The workers' reachability probes connect to PS 0 and close without a word of HTTP/2: a probe
# is not traffic the capture missed the start of, and must not be warned about as such.
@pytest.mark.filterwarnings("error:.*not decodable as HTTP/2")
def test_capture_at_the_ps_of_a_two_worker_job_is_what_the_timeline_reads(lab, tasks, tmp_path):
    """PS 0 captures both workers' traffic into its own --out; the chief records where; the two
    files copied into the run directory make a run the timeline decodes, every worker's tensors
    in every step."""
    pytest.importorskip("tensorflow")
    from tfsim.lab.timeline import measured_timeline
    from tfsim.lab.timeline_view import ps_capture_of

    hosts = lab.hosts
    config = {"ps": [f"{hosts['ps0'].address}:2222"],
              "worker": [f"{hosts['w0'].address}:2222", f"{hosts['w1'].address}:2222"]}

    def task_env(role: str, index: int) -> dict:
        return env_with(json.dumps({"cluster": config, "task": {"type": role, "index": index}}))

    run, ps_out = tmp_path / "run", tmp_path / "ps0-capture"
    ps = tasks.start("collect", *TINY, "--capture", "--capture-at", "ps", "--out", ps_out, env=task_env("ps", 0),
                     prefix=hosts["ps0"].exec_prefix())
    worker1 = tasks.start("collect", *TINY, env=task_env("worker", 1), prefix=hosts["w1"].exec_prefix())
    chief = tfsim("collect", *TINY, "--capture", "--capture-at", "ps", "--out", run, env=task_env("worker", 0),
                  prefix=hosts["w0"].exec_prefix())
    assert chief.returncode == 0, chief.stderr
    ps_stdout, ps_stderr = ps.communicate(timeout=60)
    worker1.communicate(timeout=60)
    assert (ps.returncode, worker1.returncode) == (0, 0), ps_stderr
    assert ps_stdout.strip() == str(ps_out)
    record = json.loads((run / "run.json").read_text())
    assert record["config"]["capture_site"] == "ps"
    assert {k: record["capture"][k] for k in ("host", "file", "record", "taken_on")} == {
        "host": "ps0", "file": "capture.pcap.gz", "record": "capture.json", "taken_on": hosts["ps0"].address}
    assert not (run / "capture.pcap.gz").exists()
    assert (f"tfsim: the capture was taken on ps0 ({hosts['ps0'].address}): copy capture.pcap.gz and capture.json "
            f"from its --out directory into {run}") in chief.stderr
    with pytest.raises(InputError, match=r"has no capture.pcap.gz: the capture was taken on ps0; copy capture.pcap.gz "
                                         r"and capture.json from the --out directory of ps0"):
        ps_capture_of(run)

    assert sorted(p.name for p in ps_out.iterdir()) == ["capture.json", "capture.pcap.gz"]
    ps_record = json.loads((ps_out / "capture.json").read_text())
    w0, w1 = hosts["w0"].address, hosts["w1"].address
    assert ps_record["host"] == "ps0" and ps_record["interface"] == "eth0" and ps_record["captured"] > 100
    assert ps_record["filter"] == f"tcp and ((host {w0} and port 2222) or (host {w1} and port 2222))"
    assert ps_record["cluster"] == record["cluster"]
    for name in ("capture.pcap.gz", "capture.json"):
        shutil.copy(ps_out / name, run / name)
    timeline = measured_timeline(ps_capture_of(run), run, rate_Bps=200e6 / 8, chain=())
    assert timeline.layout.worker_ips == (w0, w1)
    # every measured step of each worker fetches tiny's 10 tensors and sends its 9 gradients, through PS 0
    per_step: dict = {}
    for m in timeline.messages:
        if m["rpc"] == "RecvTensor" and m["step"] >= 0:
            key = (m["worker"], m["step"], m["response_dir"])
            per_step[key] = per_step.get(key, 0) + 1
    for w in (0, 1):
        assert len(timeline.layout.steps[w]) == 4
        assert {(per_step.get((w, k, "down")), per_step.get((w, k, "up"))) for k in range(4)} == {(10, 9)}


@needs_lab
@pytest.mark.tensorflow
def test_tf2_pss_job_with_a_host_per_task(tmp_path, tasks):
    """PS, two workers and the coordinator ("chief"), each its own tfsim collect --role in its own
    namespace: the coordinator writes the run directory (worker 0's partition graphs read through
    an op on worker 0, every server traced at its host), each server exits 0 once told the job is over."""
    pytest.importorskip("tensorflow")
    from tfsim.lab.netns import EmulatedCluster, list_namespaces

    cluster = EmulatedCluster(["ps0", "w0", "w1", "c0"], rate_bit=200_000_000).up()
    try:
        hosts = cluster.hosts
        spec = {"chief": [f"{hosts['c0'].address}:2222"], "ps": [f"{hosts['ps0'].address}:2222"],
                "worker": [f"{hosts['w0'].address}:2222", f"{hosts['w1'].address}:2222"]}
        options = ("--api", "tf2-pss", "--model", "tiny", "--batch", "4", "--steps", "8", "--warmup", "2",
                   "--inter-op-threads", "1", "--trace-ms", "3000", "--no-progress")
        servers = [tasks.start("collect", "--role", role, "--task-index", index, *options,
                               env=env_with(json.dumps({"cluster": spec})), prefix=hosts[host].exec_prefix())
                   for role, index, host in (("ps", 0, "ps0"), ("worker", 0, "w0"), ("worker", 1, "w1"))]
        run = tmp_path / "run"
        chief = tfsim("collect", *options, "--out", run,
                      env=env_with(json.dumps({"cluster": spec, "task": {"type": "chief", "index": 0}})),
                      prefix=hosts["c0"].exec_prefix(), timeout=400)
        assert chief.returncode == 0, chief.stderr[-3000:]
        for proc in servers:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err[-2000:]
            assert "the coordinator is done" in err
    finally:
        cluster.down()
    assert not set(cluster.namespaces()) & set(list_namespaces())
    record = json.loads((run / "run.json").read_text())
    assert record["cluster"] == record["cluster_spec"] == spec and record["task"] == {"role": "chief", "index": 0}
    assert record["hosts"]["chief0"]["ip"] == hosts["c0"].address
    assert sorted(record["traced_steps"]) == ["ps0.xplane.pb.gz", "worker0.xplane.pb.gz", "worker1.xplane.pb.gz"]
    assert sorted(p.name for p in (run / "graphs").iterdir()) == [
        "job_ps_replica_0_task_0_device_CPU_0.pbtxt.gz", "job_worker_replica_0_task_0_device_CPU_0.pbtxt.gz"]
    with open(run / "step_times.csv") as handle:
        steps = list(csv.DictReader(handle))
    assert len(steps) == 8 and {s["worker"] for s in steps} <= {"0", "1"}
    import tfprofile

    profile = tfprofile.read_profile(run)
    assert profile.graph.name[0] == "ClusterCoordinatorDispatch" and profile.bytes_per_step(0) == 547_496
    assert not list(Path("/tmp").glob("tfsim-pss-done-*")) and not list(Path("/tmp").glob("tfsim-pss-graphs-*"))


@pytest.fixture(scope="module")
def pss_lab():
    """Hosts ps0, w0 and c0 (the coordinator) on a bridge, 200 Mbit/s links; always torn down."""
    from tfsim.lab.netns import EmulatedCluster, list_namespaces

    cluster = EmulatedCluster(["ps0", "w0", "c0"], rate_bit=200_000_000).up()
    try:
        yield cluster
    finally:
        cluster.down()
        assert not set(cluster.namespaces()) & set(list_namespaces())


PSS_TINY = ("--api", "tf2-pss", "--model", "tiny", "--batch", "4", "--steps", "8", "--warmup", "2",
            "--inter-op-threads", "1", "--trace-ms", "3000", "--no-progress")


def _run_pss_job(pss_lab, tasks, out: Path, server_args: dict, *chief_args: str) -> tuple:
    """PS 0 in ps0, worker 0 in w0 (each with its ``server_args``), then the coordinator in c0;
    return the coordinator's result and the servers' (status, stderr)."""
    hosts = pss_lab.hosts
    spec = {"chief": [f"{hosts['c0'].address}:2222"], "ps": [f"{hosts['ps0'].address}:2222"],
            "worker": [f"{hosts['w0'].address}:2222"]}
    servers = [tasks.start("collect", "--role", role, *PSS_TINY, *server_args.get(role, ()),
                           env=env_with(json.dumps({"cluster": spec})), prefix=hosts[host].exec_prefix())
               for role, host in (("ps", "ps0"), ("worker", "w0"))]
    chief = tfsim("collect", *PSS_TINY, "--out", out, *chief_args,
                  env=env_with(json.dumps({"cluster": spec, "task": {"type": "chief", "index": 0}})),
                  prefix=hosts["c0"].exec_prefix(), timeout=400)
    ended = []
    for proc in servers:
        _, err = proc.communicate(timeout=90)
        ended.append((proc.returncode, err))
    return chief, ended


@needs_lab
@pytest.mark.tensorflow
@pytest.mark.parametrize("site", ["chief-worker", "ps"])
def test_tf2_pss_job_with_a_host_per_task_captures_and_calibrates(site, pss_lab, tasks, tmp_path):
    """Worker 0's host (or PS 0's) captures, worker 0's measures the link to the PS; the coordinator
    fetches both into its run directory, which calibrate reads like a one-host tf2-pss run: a
    bandwidth and a window each way."""
    pytest.importorskip("tensorflow")
    run = tmp_path / "run"
    at = ("--capture", "--capture-at", site)
    taker = "ps" if site == "ps" else "worker"
    server_args = {"ps": ("--iperf-server", *at) if taker == "ps" else ("--iperf-server",),
                   "worker": at if taker == "worker" else ()}
    chief, servers = _run_pss_job(pss_lab, tasks, run, server_args, *at, "--iperf", "--iperf-repeats", "1",
                                  "--iperf-seconds", "1")
    assert chief.returncode == 0, chief.stderr[-3000:]
    for code, err in servers:
        assert code == 0 and "the coordinator is done" in err, err[-2000:]
    hosts = pss_lab.hosts
    ps_ip, w0_ip = hosts["ps0"].address, hosts["w0"].address
    record = json.loads((run / "run.json").read_text())
    capture = record["capture"]
    assert (capture["host"], capture["file"], capture["interface"], capture["taken_on"]) == (
        f"{taker}0", "capture.pcap.gz", "eth0", ps_ip if taker == "ps" else w0_ip)
    peer = w0_ip if taker == "ps" else ps_ip
    assert capture["filter"] == f"tcp and ((host {peer} and port 2222))" and capture["captured"] > 100
    assert record["config"]["capture"] and record["config"]["capture_site"] == site
    assert record["iperf3"] == ["downlink_0.json", "uplink_0.json"]
    assert record["iperf3_links"] == [{"host": ps_ip, "ps_tasks": [0],
                                       "files": ["uplink_0.json", "downlink_0.json"]}]
    rate = json.loads((run / "iperf3" / "uplink_0.json").read_text())["end"]["sum_received"]["bits_per_second"]
    assert 150e6 < rate < 210e6
    assert sorted(record["traced_steps"]) == ["ps0.xplane.pb.gz", "worker0.xplane.pb.gz"]
    assert sorted(p.name for p in run.iterdir()) == ["capture.pcap.gz", "graphs", "iperf3", "logs", "run.json",
                                                     "step_times.csv", "tensors.json", "trace", "variables.json"]
    assert not list(Path("/tmp").glob("tfsim-pss-handoff-*"))

    from calibration import calibrate_run

    calibration = calibrate_run(run)
    for direction in ("uplink", "downlink"):
        sustained = calibration.token_bucket.get(direction, {}).get("sustained_Bps",
                                                                    calibration.bandwidth_Bps[direction])
        assert 150e6 / 8 < sustained < 210e6 / 8, (direction, sustained)
        assert calibration.window_bytes[direction] > 0
    # the traced steps' tensors were captured: 11 receives on the worker, 9 on the PS per step
    fits = calibration.to_cluster_json()["overhead"]
    assert fits["downlink"]["n"] >= 11 and fits["uplink"]["n"] >= 9
    result = tfsim("calibrate", run, "-o", tmp_path / "CLUSTER.json", env=env_with())
    assert result.returncode == 0, result.stderr


@needs_lab
@pytest.mark.tensorflow
def test_tf2_pss_capture_the_coordinator_would_not_fetch_is_refused(pss_lab, tasks, tmp_path):
    """Worker 0 captures, the coordinator was not told: it stops before the first step with one line
    naming worker0 and what to give, and releases the servers, which stop too."""
    pytest.importorskip("tensorflow")
    run = tmp_path / "run"
    chief, servers = _run_pss_job(pss_lab, tasks, run, {"worker": ("--capture",)})
    assert chief.returncode == 2, chief.stderr[-3000:]
    assert error_line(chief) == ("tfsim: error: chief0: worker0 captures (capture_site chief-worker) but the "
                                 "coordinator does not fetch it: give the coordinator capture too")
    for code, err in servers:
        assert code == 2, err[-2000:]
        assert err.strip().splitlines()[-1].endswith("the coordinator stopped before the job was done, so this "
                                                     "task stops too (see the coordinator's message)")
    assert not run.exists() and not list(Path("/tmp").glob("tfsim-pss-handoff-*"))


@needs_lab
@pytest.mark.tensorflow
def test_a_repeated_tf2_pss_job_writes_a_run_directory_per_repetition_and_their_summary(pss_lab, tasks, tmp_path):
    """Two repetitions, each on new servers and a new coordinator: two run directories with their own
    steps, capture and iperf3 results, and repeats.json with every host's load."""
    pytest.importorskip("tensorflow")
    from tfsim.lab.measure import measured_throughput

    out, repeat = tmp_path / "run", ("--repeat", "2")
    at = ("--capture", "--capture-at", "chief-worker")
    chief, servers = _run_pss_job(pss_lab, tasks, out, {"ps": ("--iperf-server", *repeat), "worker": (*at, *repeat)},
                                  *at, *repeat, "--iperf", "--iperf-repeats", "1", "--iperf-seconds", "1")
    assert chief.returncode == 0, chief.stderr[-3000:]
    for (code, err), label in zip(servers, ("ps0", "worker0")):
        assert code == 0, err[-2000:]
        for k in (1, 2):
            assert f"tfsim: host of {label} (repetition {k} of 2): " in err
            assert f"tfsim: {label}: the coordinator is done (repetition {k} of 2)" in err
    assert sorted(p.name for p in out.iterdir()) == ["r1", "r2", "repeats.json"]
    assert not list(tmp_path.glob("*.incomplete")) and not list(Path("/tmp").glob("tfsim-pss-handoff-*"))
    summary = json.loads((out / "repeats.json").read_text())
    assert (summary["repeat"], summary["workers"], summary["batch_size"]) == (2, 1, 4)
    assert len(summary["repetitions"]) == 2
    ends = []
    for k, rep in enumerate(summary["repetitions"], 1):
        run = out / f"r{k}"
        record = json.loads((run / "run.json").read_text())
        assert record["repetition"] == {"index": k, "of": 2} and record["status"] == "complete"
        assert sorted(record["host_loads"]) == ["chief0", "ps0", "worker0"]
        assert record["host_loads"]["chief0"] == record["host_load"]
        assert all(load["wall_s"] > 1 for load in record["host_loads"].values())
        assert record["capture"]["host"] == "worker0" and record["capture"]["captured"] > 100
        assert record["iperf3"] == ["downlink_0.json", "uplink_0.json"]
        assert sorted(record["traced_steps"]) == ["ps0.xplane.pb.gz", "worker0.xplane.pb.gz"]
        with open(run / "step_times.csv") as handle:
            steps = [(float(s["start_unix_s"]), float(s["wall_s"])) for s in csv.DictReader(handle)]
        assert len(steps) == 8
        ends.append((min(a for a, _ in steps), max(a + w for a, w in steps)))
        assert rep["repetition"] == k and rep["run_dir"] == f"r{k}"
        assert rep["throughput_eps"] == measured_throughput(run)["throughput_eps"] > 0
        assert sorted(rep["outside_cores"]) == ["chief0", "ps0", "worker0"]
    assert ends[0][1] < ends[1][0]  # the second repetition's steps came after the first's
    assert f"tfsim: 2 repetitions: {summary['throughput_eps']['mean']:.2f} examples/s" in chief.stderr


@needs_lab
@pytest.mark.tensorflow
def test_a_tf2_pss_server_started_with_another_repeat_is_refused(pss_lab, tasks, tmp_path):
    """PS 0 runs the job once, worker 0 and the coordinator twice: the coordinator stops before the first
    step with one line naming ps0 and what differs, and releases the servers, which stop too."""
    pytest.importorskip("tensorflow")
    run = tmp_path / "run"
    chief, servers = _run_pss_job(pss_lab, tasks, run, {"worker": ("--repeat", "2")}, "--repeat", "2")
    assert chief.returncode == 2, chief.stderr[-3000:]
    assert error_line(chief) == "tfsim: error: chief0: the run options differ from ps0's: repeat is 2 here, 1 on ps0"
    for code, err in servers:
        assert code == 2, err[-2000:]
        assert err.strip().splitlines()[-1].endswith("the coordinator stopped before the job was done, so this "
                                                     "task stops too (see the coordinator's message)")
    assert not run.exists() and not list(Path("/tmp").glob("tfsim-pss-handoff-*"))


def test_a_handoff_directory_is_private_and_never_follows_a_symlink(tmp_path):
    """Its name is known in advance: a symlink planted there is refused, its target untouched."""
    from tfbase.errors import ClusterError
    from tfprofile.harness.pss_handoff import fresh_private_dir

    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("x")
    planted = tmp_path / "handoff-ps0"
    planted.symlink_to(target)
    with pytest.raises(ClusterError, match="not a directory of this user's"):
        fresh_private_dir(planted, "ps0")
    assert (target / "keep").read_text() == "x" and planted.is_symlink()

    ours = tmp_path / "handoff-w0"
    ours.mkdir()
    (ours / "stale.json").write_text("{}")
    made = fresh_private_dir(ours, "w0")
    assert made == ours and list(ours.iterdir()) == [] and (ours.stat().st_mode & 0o777) == 0o700
