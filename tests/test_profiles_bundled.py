"""Every bundled real run and profile: the checks of the foundation issue's "done when"."""

import json
import warnings

import numpy as np
import pytest
from conftest import BUNDLED_MODELS

from tfprofile.dag import Resource
from tfprofile.profile_io import load_profile, save_profile
from tfprofile.rundir import open_run_dir, profile_from_run_dir
from tfprofile.runmetadata import read_run_metadata, step_records
from tfsim.cli import main

# The keys of `tfsim profile --summary --json` that scripts rely on (docs/formats.md §3.1).
SUMMARY_KEYS = {"steps", "ops", "ops_by_resource", "bytes_downlink", "bytes_uplink", "step_time_s"}


def kahn_is_acyclic(graph) -> bool:
    indegree = graph.in_degree.copy()
    ready = list(np.flatnonzero(indegree == 0))
    seen = 0
    while ready:
        op = ready.pop()
        seen += 1
        for succ in graph.successors(op):
            indegree[succ] -= 1
            if indegree[succ] == 0:
                ready.append(succ)
    return seen == graph.n_ops


@pytest.mark.parametrize("name", BUNDLED_MODELS)
def test_bundled_profile_is_a_valid_dag(bundled_profile, name):
    profile = bundled_profile(name)
    graph = profile.graph
    assert kahn_is_acyclic(graph)
    assert profile.n_steps >= 19  # at least 20 traced steps, of which TF may lose one's records
    assert set(np.unique(graph.resource)) == {int(r) for r in Resource}
    # Every transfer has a size; only zero-byte control tokens have none.
    links = np.isin(graph.resource, [Resource.DOWNLINK, Resource.UPLINK])
    assert (graph.op_type[links] == "Transfer").all()


@pytest.mark.parametrize("name", BUNDLED_MODELS)
def test_downlink_bytes_equal_the_trainable_variables(bundled_profile, name):
    profile = bundled_profile(name)
    trainable = profile.variables.trainable_bytes
    assert trainable > 0
    assert abs(profile.bytes_per_step(Resource.DOWNLINK) - trainable) <= 0.01 * trainable
    # Gradients go back up: the same bytes, plus the learning rate.
    assert abs(profile.bytes_per_step(Resource.UPLINK) - trainable) <= 0.01 * trainable


@pytest.mark.parametrize("name", BUNDLED_MODELS)
def test_every_recvtensor_record_is_paired(data_dir, name):
    run = open_run_dir(data_dir / "runs" / name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile = profile_from_run_dir(data_dir / "runs" / name)
    dropped = {d["source"] for d in profile.meta["dropped_steps"]}
    assert len(caught) == len(dropped) <= 1  # TF now and then loses one device's records of a step
    transfers = int(np.isin(profile.graph.resource, [Resource.DOWNLINK, Resource.UPLINK]).sum())
    for path in run.trace_files:
        if str(path) in dropped:
            continue
        records = step_records(read_run_metadata(path), path).transfers
        assert len(records) == transfers
        assert {r.tensor_name for r in records} == set(map(str, profile.graph.name[np.isin(
            profile.graph.resource, [Resource.DOWNLINK, Resource.UPLINK])]))


@pytest.mark.parametrize("name", ["tiny", "resnet50"])
def test_bundled_profile_file_matches_its_run(data_dir, bundled_profile, name, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rebuilt = profile_from_run_dir(data_dir / "runs" / name)
    bundled = bundled_profile(name)
    assert np.array_equal(rebuilt.graph.name, bundled.graph.name)
    assert np.array_equal(rebuilt.graph.succ_idx, bundled.graph.succ_idx)
    assert np.array_equal(rebuilt.duration_s, bundled.duration_s)
    save_profile(rebuilt, tmp_path / "again.npz")
    assert (tmp_path / "again.npz").read_bytes() == (data_dir / "profiles" / f"{name}.npz").read_bytes()


@pytest.mark.parametrize("name", BUNDLED_MODELS)
def test_summary_json_has_the_spec_keys(data_dir, name, capsys):
    assert main(["profile", "--summary", str(data_dir / "profiles" / f"{name}.npz"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert SUMMARY_KEYS <= set(summary)
    assert set(summary["ops_by_resource"]) == {"DOWNLINK", "WORKER", "UPLINK", "PS"}
    assert sum(summary["ops_by_resource"].values()) == summary["ops"]
    assert {"median", "mean", "p95"} <= set(summary["step_time_s"])
    assert 0 < summary["step_time_s"]["median"] <= summary["step_time_s"]["p95"]
    profile = load_profile(data_dir / "profiles" / f"{name}.npz")
    assert summary["bytes_downlink"] == profile.bytes_per_step(Resource.DOWNLINK)
