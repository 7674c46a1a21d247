"""Re-placing a one-PS profile's variables over M servers (docs/model.md §2.2): round robin as
TensorFlow's ``replica_device_setter`` does by default, or greedy by bytes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run

from simulate.cluster_file import load_cluster
from simulate.config import Placement
from simulate.prepare import greedy_partition, repartition_servers, round_robin_partition
from simulate.sweep import predict
from tfbase.errors import UsageError
from tfprofile.dag import Resource
from tfprofile.profile_io import load_profile
from tfprofile.rundir import profile_from_run_dir

DATA = Path(__file__).resolve().parent.parent / "data"
TINY = DATA / "profiles" / "tiny.npz"
LAB = DATA / "clusters" / "lab-1gbit.json"


def _measured_servers(path: Path) -> dict[str, int]:
    """Each variable's PS task in a real run's variables.json."""
    table = json.loads(path.read_text())["variables"]
    return {v["name"]: int(v["device"].rsplit(":", 1)[1]) for v in table}


def test_round_robin_places_the_variables_where_tensorflow_did_in_a_two_ps_run():
    # A real lab run with two PS (bench/results/lab-2026-11-27-2ps): TensorFlow alternated the
    # servers in creation order, so every weight of tiny sits on PS 1 and every bias on PS 0.
    measured = _measured_servers(DATA / "runs" / "tiny-2ps" / "variables.json")
    profile = load_profile(TINY)
    placed = round_robin_partition(len(profile.variables), 2)
    assert dict(zip(profile.variables.name.tolist(), placed.tolist(), strict=True)) == measured
    # Greedy by bytes puts them elsewhere: it is not what this job did.
    greedy = greedy_partition(profile.variables.size_bytes, 2)
    assert greedy.tolist() != placed.tolist()


def test_every_variable_op_follows_its_variable_round_robin():
    profile = load_profile(TINY)
    graph = profile.graph
    server = repartition_servers(profile, 3, Placement.ROUND_ROBIN)
    linked = (graph.variable >= 0) & (graph.resource != Resource.WORKER)
    assert linked.any()
    np.testing.assert_array_equal(server[linked], graph.variable[linked] % 3)
    assert (server[graph.resource == Resource.WORKER] == -1).all()
    on_server = graph.resource != Resource.WORKER
    assert ((server[on_server] >= 0) & (server[on_server] < 3)).all()


def test_the_placement_moves_the_prediction():
    profile = load_profile(TINY)
    cluster = load_cluster(LAB)
    rows = {placement: predict(profile, cluster, workers=2, servers=2, placement=placement, steps=60, warmup=10)
            for placement in ("round_robin", "greedy")}
    # Round robin puts every weight (the bytes) on one server, greedy spreads them: the link
    # utilisations of the two servers differ, and so does the throughput.
    assert rows["round_robin"]["throughput_eps"].iloc[0] != pytest.approx(rows["greedy"]["throughput_eps"].iloc[0],
                                                                          rel=1e-3)
    one = predict(profile, cluster, workers=2, steps=60, warmup=10)
    assert rows["round_robin"]["servers"].iloc[0] == 2 and one["servers"].iloc[0] == 1


def test_an_unknown_placement_names_the_parameter():
    with pytest.raises(UsageError, match="placement"):
        predict(load_profile(TINY), load_cluster(LAB), workers=1, servers=2, placement="by_size", steps=20, warmup=2)


def test_predict_records_the_placement_and_refuses_an_unknown_one(tmp_path, capsys):
    out = tmp_path / "prediction.json"
    code, stdout, stderr = run(["predict", TINY, "--cluster", LAB, "--workers", "2", "--ps", "2", "--placement",
                                "greedy", "--steps", "40", "--warmup", "5", "--json", out, "--no-progress"], capsys)
    assert code == 0, stderr
    assert "greedily by bytes (--placement greedy)" in stdout
    assert json.loads(out.read_text())["placement"] == "greedy"
    code, _, stderr = run(["predict", TINY, "--cluster", LAB, "--ps", "2", "--placement", "by_size"], capsys)
    assert code == 2 and "--placement" in stderr and "Traceback" not in stderr


def test_without_a_placement_the_profiled_jobs_own_is_followed():
    profile = load_profile(TINY)
    cluster = load_cluster(LAB)
    greedy_job = dataclasses.replace(profile, meta={**profile.meta, "placement": "greedy"})
    kwargs = dict(workers=2, servers=2, steps=60, warmup=10)
    assert predict(greedy_job, cluster, **kwargs)["throughput_eps"].iloc[0] == \
        predict(profile, cluster, placement="greedy", **kwargs)["throughput_eps"].iloc[0]
    assert predict(profile, cluster, **kwargs)["throughput_eps"].iloc[0] == \
        predict(profile, cluster, placement="round_robin", **kwargs)["throughput_eps"].iloc[0]


def test_a_profile_records_how_its_run_placed_the_variables():
    assert profile_from_run_dir(DATA / "runs" / "tiny").meta["placement"] == "round_robin"
