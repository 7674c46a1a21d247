"""The hosts the one-worker run's tasks had: recorded by calibration from run.json, used by a
prediction given no hosts (docs/calibration.md §4.10, docs/model.md §4.3)."""

from __future__ import annotations

import json
import shutil

import pytest

from calibration.calibrate import calibrate_run
from calibration.hosts import hosts_record
from simulate.cluster_file import ClusterFormatError, cluster_from_dict, load_cluster
from simulate.config import TaskHosts
from simulate.sweep import predict
from tfprofile.profile_io import load_profile


def _limits(**cores):
    return {task: {"cpus": 2, "quota_cores": q, "cores": q if q is not None else 2} for task, q in cores.items()}


def _run(limits, machine_cores=2):
    return {"task_cpu": {"file": "task_cpu.csv", "limits": limits}, "machine": {"cores": machine_cores}}


def test_quota_hosts_are_recorded_with_the_least_of_each_role():
    record = hosts_record(_run(_limits(ps0=0.5, ps1=0.4, worker0=0.3, worker1=0.35, coordinator0=0.2)))
    assert (record["ps_cores"], record["worker_cores"], record["machine_cores"]) == (0.4, 0.3, 2.0)


@pytest.mark.parametrize("run", [
    _run(_limits(ps0=0.5, worker0=None)),            # a task without a quota shared the machine
    _run(_limits(ps0=1.5, worker0=1.0)),             # the quotas oversubscribe the machine: shared
    _run(_limits(ps0=0.5)),                          # no worker recorded
    _run(_limits(ps0=0.5, worker0=0.5), machine_cores=None),
    {"machine": {"cores": 2}},                       # collected before task_cpu existed, or --role
])
def test_no_hosts_where_the_tasks_may_have_shared_the_machine(run):
    assert hosts_record(run) is None


@pytest.fixture(scope="module")
def quota_run(tmp_path_factory, data_dir):
    """The bundled loopback run, as if each task had run under a quota of its own."""
    run_dir = tmp_path_factory.mktemp("hosts") / "tiny_lo"
    shutil.copytree(data_dir / "captures" / "tiny_lo", run_dir)
    run = json.loads((run_dir / "run.json").read_text())
    run["task_cpu"] = {"file": "task_cpu.csv", "limits": _limits(ps0=0.5, worker0=0.25)}
    run["machine"] = {**run.get("machine", {}), "cores": 2}
    (run_dir / "run.json").write_text(json.dumps(run))
    return run_dir


def test_calibration_writes_the_hosts_and_a_prediction_uses_them(quota_run, data_dir, tmp_path):
    document = calibrate_run(quota_run).to_cluster_json()
    assert document["hosts"]["ps_cores"] == 0.5 and document["hosts"]["worker_cores"] == 0.25
    # Parsing on the receiver's host (lane), so that the PS host's core is what four workers
    # share. This loopback capture's one-worker check nearly ties lane and delay (0.107 against
    # 0.100 relative error), and delay parsing leaves tiny's PS host almost idle.
    document = {**document, "overhead_placement": "lane"}
    cluster = cluster_from_dict(document, "CLUSTER.json")
    assert (cluster.ps_host_cores, cluster.worker_host_cores) == (1.0, 1.0)  # a core or less: one op at a time
    profile = load_profile(data_dir / "profiles" / "tiny.npz")
    options = dict(workers="1,4", steps=60, warmup=10)
    recorded = predict(profile, cluster, **options)
    explicit = predict(profile, cluster, colocation=TaskHosts(worker_cores=1.0, ps_cores=1.0), **options)
    unlimited = predict(profile, cluster_from_dict({k: v for k, v in document.items() if k != "hosts"}), **options)
    assert recorded["throughput_eps"].tolist() == explicit["throughput_eps"].tolist()
    # Four workers' PS ops share the PS host's core: slower than a PS without a limit.
    assert recorded["throughput_eps"].iloc[1] < 0.9 * unlimited["throughput_eps"].iloc[1]
    # Given hosts win over the recorded ones.
    wide = predict(profile, cluster, colocation=TaskHosts(worker_cores=8.0, ps_cores=8.0), **options)
    assert wide["throughput_eps"].iloc[1] > recorded["throughput_eps"].iloc[1]


def test_a_cluster_without_hosts_reads_as_before(data_dir):
    cluster = load_cluster(data_dir / "clusters" / "lab-1gbit.json")
    assert cluster.ps_host_cores is None and cluster.worker_host_cores is None


@pytest.mark.parametrize("hosts, words", [
    ("4 cores", "hosts must be an object"),
    ({"ps_cores": -1, "worker_cores": 1}, "hosts.ps_cores"),
    ({"ps_cores": 1}, "hosts.worker_cores"),
])
def test_bad_hosts_name_the_file_and_the_key(data_dir, hosts, words):
    document = json.loads((data_dir / "clusters" / "lab-1gbit.json").read_text())
    with pytest.raises(ClusterFormatError) as err:
        cluster_from_dict({**document, "hosts": hosts}, "my/CLUSTER.json")
    assert "my/CLUSTER.json" in str(err.value) and words in str(err.value)


def test_predict_says_it_put_the_tasks_on_the_recorded_hosts(quota_run, tmp_path, capsys, data_dir):
    from tfsim.cli import main

    cluster_path = tmp_path / "CLUSTER.json"
    cluster_path.write_text(json.dumps(calibrate_run(quota_run).to_cluster_json()))
    common = [str(data_dir / "profiles" / "tiny.npz"), "--cluster", str(cluster_path), "--workers", "1-2",
              "--steps", "40", "--warmup", "5", "--no-progress"]
    assert main(["predict", *common, "--json", str(tmp_path / "p.json")]) == 0
    assert "as in the calibration run: PS 1, worker 1 model core(s)" in capsys.readouterr().out
    assert json.loads((tmp_path / "p.json").read_text())["cluster"]["host_cores"] == {"ps": 1.0, "worker": 1.0}
    assert main(["predict", *common, "--cores", "2"]) == 0
    assert "as in the calibration run" not in capsys.readouterr().out
