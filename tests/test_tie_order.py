"""The recorded tie order (docs/model.md §2.4): under fifo, http2 and grpc, the ops that become
ready at one instant on one slot take their turns in the profiled run's order, not by op index."""

import dataclasses
import json
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine import CLUSTER, CONFIG_SPACE, RPC, engine_vs_reference, make_profile, random_profiles

import simulate
from simulate.cluster import ClusterModel
from simulate.cluster_file import load_cluster
from simulate.config import SimConfig, TieOrder, Transfer
from simulate.engine import run
from simulate.prepare import KIND_TRANSFER, prepare
from tfbase.errors import TfsimWarning, UsageError
from tfprofile import load_profile
from tfprofile.dag import Resource
from tfprofile.tictac import recorded_order

D, WK, PS = int(Resource.DOWNLINK), int(Resource.WORKER), int(Resource.PS)
MB = 2 ** 20
LINK = ClusterModel(float(MB), float(MB))  # 1 MiB/s, no parsing: a 1 MiB transfer takes 1 s
LINK_ORDERS = (Transfer.FIFO, Transfer.HTTP2, Transfer.GRPC)


def with_starts(profile, starts):
    """``profile`` with these recorded starts (one row per step; NaN: not recorded)."""
    return dataclasses.replace(profile, start_s=np.atleast_2d(np.array(starts, dtype=float)))


def first_step_link_spans(profile, transfer, tie_order, cluster=LINK):
    graph = prepare(profile, cluster)
    result = run(graph, cluster, SimConfig(workers=1, transfer=transfer, steps=1, warmup=0, trace_steps=1,
                                           tie_order=tie_order))
    trace = result.trace
    return {int(op): (float(a), float(b)) for op, a, b, slot in
            zip(trace["op"], trace["start_s"], trace["end_s"], trace["slot"]) if graph.resource[op] == D}


def two_roots_profile():
    """Two 1 MiB downlinks ready at the step's start; the profiled run started op 1 first."""
    profile = make_profile([D, D], [0, 0], [MB, MB], [[0.0, 0.0]], [])
    return with_starts(profile, [[0.002, 0.001]])


@pytest.mark.parametrize("transfer", LINK_ORDERS, ids=lambda t: t.value)
def test_transfers_ready_together_leave_in_the_recorded_order(transfer):
    profile = two_roots_profile()
    assert first_step_link_spans(profile, transfer, TieOrder.RECORDED) == {1: (0.0, 1.0), 0: (1.0, 2.0)}
    assert first_step_link_spans(profile, transfer, TieOrder.INDEX) == {0: (0.0, 1.0), 1: (1.0, 2.0)}


def test_the_priority_scheduler_keeps_its_own_order():
    """The priority scheduler enforces the order it is given; ties there stay in op order."""
    profile = two_roots_profile()
    for tie_order in TieOrder:
        assert first_step_link_spans(profile, Transfer.PRIORITY, tie_order) == {0: (0.0, 1.0), 1: (1.0, 2.0)}


def test_a_profile_without_recorded_starts_keeps_op_index_order():
    profile = make_profile([D, D], [0, 0], [MB, MB], [[0.0, 0.0]], [])  # start_s all NaN
    assert first_step_link_spans(profile, Transfer.FIFO, TieOrder.RECORDED) == {0: (0.0, 1.0), 1: (1.0, 2.0)}


def test_the_ps_reads_its_variables_in_the_recorded_order():
    """Variables (PS roots) -> reads -> downlinks: the transfers become ready one at a time, in
    the order the PS runs its reads, so the PS's queue follows the recorded order too."""
    # ops 0, 1: variables; 2, 3: their reads (0.25 s each); 4, 5: the transfers (4 from 0, 5 from 1)
    profile = make_profile([PS, PS, PS, PS, D, D], [0] * 6, [0, 0, 0, 0, MB, MB],
                           [[0.0, 0.0, 0.25, 0.25, 0.0, 0.0]], [(0, 2), (1, 3), (2, 4), (3, 5)])
    profile = with_starts(profile, [[np.nan, np.nan, np.nan, np.nan, 0.9, 0.1]])
    # recorded: variable 1, its read (0 .. 0.25), transfer 5 (0.25 .. 1.25); then 0, 2, 4
    assert first_step_link_spans(profile, Transfer.FIFO, TieOrder.RECORDED) == {5: (0.25, 1.25), 4: (1.25, 2.25)}
    assert first_step_link_spans(profile, Transfer.FIFO, TieOrder.INDEX) == {4: (0.25, 1.25), 5: (1.25, 2.25)}


def test_ops_of_other_slots_keep_their_places():
    """A computation released with the transfers runs as before; only the link's turns change."""
    profile = make_profile([D, WK, D], [0, -1, 0], [MB, 0, MB], [[0.0, 0.5, 0.0]], [])
    profile = with_starts(profile, [[0.3, np.nan, 0.1]])
    graph = prepare(profile, LINK)
    result = run(graph, LINK, SimConfig(workers=1, transfer=Transfer.FIFO, steps=1, warmup=0, trace_steps=1,
                                        tie_order=TieOrder.RECORDED))
    spans = {int(op): (float(a), float(b)) for op, a, b in
             zip(result.trace["op"], result.trace["start_s"], result.trace["end_s"])}
    assert spans == {2: (0.0, 1.0), 1: (0.0, 0.5), 0: (1.0, 2.0)}


def test_tie_order_must_be_a_tie_order():
    with pytest.raises(UsageError) as err:
        SimConfig(workers=1, tie_order="index")
    assert err.value.source == "tie_order"


@st.composite
def recorded_profiles(draw, servers=1):
    """Random step DAGs whose downlinks have recorded starts (some never recorded, some equal)."""
    profile = draw(random_profiles(servers=servers))
    n_steps, n_ops = profile.duration_s.shape
    starts = np.full((n_steps, n_ops), np.nan)
    for op in np.flatnonzero(profile.graph.resource == D):
        for k in range(n_steps):
            if draw(st.integers(0, 4)):
                starts[k, op] = draw(st.integers(0, 6)) * 2.0 ** -10  # few values: equal medians happen
    return with_starts(profile, starts)


TIE_CONFIGS = st.builds(lambda config, tie_order: dataclasses.replace(config, tie_order=tie_order),
                        CONFIG_SPACE, st.sampled_from(list(TieOrder)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recorded_profiles(), TIE_CONFIGS)
def test_engine_matches_reference_with_recorded_ties(profile, config):
    assert engine_vs_reference(profile, config) < 1e-9


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recorded_profiles(servers=2), TIE_CONFIGS)
def test_engine_matches_reference_with_recorded_ties_and_the_rpc_chain(profile, config):
    """The RPC chain releases every downlink of a server at once: the most ties."""
    assert engine_vs_reference(profile, config, cluster=RPC) < 1e-9


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_profiles(), CONFIG_SPACE)
def test_without_recorded_starts_both_tie_orders_are_the_same_run(profile, config):
    graph = prepare(profile, CLUSTER, workers=config.workers, mode=config.mode)
    recorded = run(graph, CLUSTER, config)
    index = run(graph, CLUSTER, dataclasses.replace(config, tie_order=TieOrder.INDEX))
    assert np.array_equal(recorded.step_end_s, index.step_end_s)


def downlink_start_order(profile, cluster, tie_order):
    """The profile ops of the parameter transfers, in the order one worker's second step starts them."""
    graph = prepare(profile, cluster)
    result = run(graph, cluster, SimConfig(workers=1, transfer=Transfer.GRPC, steps=2, warmup=0, trace_steps=2,
                                           tie_order=tie_order))
    trace = result.trace
    first = {}
    for op, step, start in sorted(zip(trace["op"], trace["step"], trace["start_s"]), key=lambda r: r[2]):
        if step == 1 and graph.kind[op] == KIND_TRANSFER and graph.resource[op] == D:
            first.setdefault(int(graph.origin[op]), start)
    return list(first)


@pytest.mark.parametrize("name", ["tiny", "alexnet", "vgg11", "resnet50", "inception3", "tiny_tf2pss"])
def test_grpc_replays_the_recorded_order_on_every_bundled_profile(bundled_profile, data_dir, name):
    """One worker, the bundled calibration (with its RPC chain) and without: the parameter
    transfers leave in the recorded order; by op index they do not."""
    profile = bundled_profile(name)
    order = recorded_order(profile)
    rank = dict(zip(order.recv.tolist(), order.key.tolist()))
    for cluster in (load_cluster(data_dir / "clusters" / "lab-1gbit.json"), ClusterModel.from_bandwidth(125e6)):
        keys = [rank[op] for op in downlink_start_order(profile, cluster, TieOrder.RECORDED) if op in rank]
        assert len(keys) == len(rank)
        assert keys == sorted(keys)
        by_index = [rank[op] for op in downlink_start_order(profile, cluster, TieOrder.INDEX) if op in rank]
        assert by_index != sorted(by_index)


def test_the_cli_flag_selects_the_tie_order_and_the_json_says_which(data_dir, tmp_path, capsys):
    from cli_runner import run as cli

    def predict(command, *extra):
        out_json = tmp_path / f"{command}.json"
        warmup = ["--warmup", "12"] if command == "predict" else []  # compare's: min(50, steps // 5)
        code, out, err = cli([command, data_dir / "profiles" / "resnet50.npz", "--cluster",
                              data_dir / "clusters" / "lab-1gbit.json", "--workers", "2", "--steps", "60", *warmup,
                              "--jobs", "1", "--no-progress", "--json", out_json, *extra], capsys)
        assert code == 0, err
        return json.loads(out_json.read_text()), out

    default, _ = predict("predict")
    recorded, out = predict("predict", "--tie-order", "recorded")
    index, _ = predict("predict", "--tie-order", "index")
    # The default is op index, and a default document reads as before the option (no tie_order).
    assert default == index and "tie_order" not in default and recorded["tie_order"] == "recorded"
    assert "queue in the profiled run's order" in out
    profile = load_profile(data_dir / "profiles" / "resnet50.npz")
    cluster = load_cluster(data_dir / "clusters" / "lab-1gbit.json")
    for document, tie_order in ((recorded, TieOrder.RECORDED), (index, TieOrder.INDEX)):
        table = simulate.predict(profile, cluster, workers=2, steps=60, warmup=12, tie_order=tie_order)
        # prediction rows keep 10 decimals (docs/formats.md §6)
        assert document["rows"][0]["throughput_eps"] == pytest.approx(float(table["throughput_eps"].iloc[0]), rel=1e-10)
    assert index["rows"][0]["throughput_eps"] != recorded["rows"][0]["throughput_eps"]
    compared, _ = predict("compare", "--tie-order", "recorded")
    assert compared["tie_order"] == "recorded"
    assert "tie_order" not in predict("compare")[0]
    assert compared["rows"][0]["tfsim"] == pytest.approx(recorded["rows"][0]["throughput_eps"], rel=1e-10)


def test_a_bad_tie_order_exits_2_and_the_library_names_the_parameter(data_dir, capsys):
    from cli_runner import run as cli

    code, _, err = cli(["predict", data_dir / "profiles" / "tiny.npz", "--bandwidth", "1gbit", "--tie-order",
                        "alphabetical", "--no-progress"], capsys)
    assert code == 2 and "--tie-order" in err and "'alphabetical'" in err
    with pytest.raises(UsageError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", TfsimWarning)
        simulate.predict(load_profile(data_dir / "profiles" / "tiny.npz"), bandwidth_Bps=1e8, tie_order="alphabetical")
    assert info.value.source == "tie_order"
