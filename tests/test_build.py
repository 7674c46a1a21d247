"""The DAG builder on hand-made partition graphs: the rules of docs/model.md §1.3, one at a time."""

import warnings

import numpy as np
import pytest

from tfbase.errors import GraphError, TraceWarning
from tfprofile.build import GraphNode, StepRecords, TransferRecord, build_profile, split_input
from tfprofile.dag import Resource

PS = "/job:ps/replica:0/task:0/device:CPU:0"
PS1 = "/job:ps/replica:0/task:1/device:CPU:0"
WK = "/job:worker/replica:0/task:0/device:CPU:0"


def send(name, tensor, src, dst, inputs=()):
    return GraphNode(name, "_Send", src, tuple(inputs), tensor, src, dst)


def recv(name, tensor, src, dst, inputs=()):
    return GraphNode(name, "_Recv", dst, tuple(inputs), tensor, src, dst)


def small_graph():
    """var -> read --(downlink w)--> matmul -> grad --(uplink g)--> apply."""
    return [
        GraphNode("w", "VarHandleOp", PS, ()),
        GraphNode("read", "ReadVariableOp", PS, ("w",)),
        send("read_S0", "edge_1_read", PS, WK, ["read"]),
        recv("read_S1", "edge_1_read", PS, WK),
        GraphNode("x", "Const", WK, ()),
        GraphNode("matmul", "MatMul", WK, ("x", "read_S1")),
        GraphNode("grad", "Identity", WK, ("matmul:0", "^x")),
        send("grad_S2", "edge_2_grad", WK, PS, ["grad"]),
        recv("grad_S3", "edge_2_grad", WK, PS),
        GraphNode("apply", "ResourceApplyGradientDescent", PS, ("w", "grad_S3")),
    ]


def records(t0=1_000_000, source="step0", skip=()):
    ops = {
        (PS, "w"): (t0, 1000), (PS, "read"): (t0 + 1000, 2000), (WK, "x"): (t0, 500),
        (WK, "matmul"): (t0 + 10_000, 40_000), (WK, "grad"): (t0 + 50_000, 1000),
        (PS, "apply"): (t0 + 80_000, 5000),
    }
    transfers = [
        TransferRecord("edge_1_read", PS, WK, 4096, t0 + 3000, 7000),
        TransferRecord("edge_2_grad", WK, PS, 4096, t0 + 51_000, 29_000),
    ]
    return StepRecords(source, ops, [t for t in transfers if t.tensor_name not in skip])


def test_split_input():
    assert split_input("x") == ("x", False)
    assert split_input("x:1") == ("x", False)
    assert split_input("^x") == ("x", True)
    assert split_input("scope/a:b") == ("scope/a:b", False)


def test_pairs_sends_and_recvs_into_transfers():
    profile = build_profile("g", small_graph(), [records()], batch_size=4)
    g = profile.graph
    names = list(map(str, g.name))
    assert sorted(names) == sorted(["w", "read", "edge_1_read", "x", "matmul", "grad", "edge_2_grad", "apply"])
    down, up = g.index["edge_1_read"], g.index["edge_2_grad"]
    assert g.resource[down] == Resource.DOWNLINK and g.resource[up] == Resource.UPLINK
    assert g.server[down] == 0 and g.server[up] == 0 and g.server[g.index["matmul"]] == -1
    assert g.size_bytes[down] == 4096 and g.size_bytes[g.index["matmul"]] == 0
    assert set(g.successors(g.index["read"])) == {down}
    assert set(g.successors(down)) == {g.index["matmul"]}
    assert set(g.successors(up)) == {g.index["apply"]}
    # Durations and starts in seconds, relative to the step's first record.
    assert profile.duration_s[0, g.index["matmul"]] == pytest.approx(40e-6)
    assert profile.start_s[0, down] == pytest.approx(3e-6)
    assert profile.duration_s[0, up] == pytest.approx(29e-6)
    assert profile.step_makespan_s[0] == pytest.approx(85e-6)


def test_topological_numbering_and_control_edges_kept_apart():
    g = build_profile("g", small_graph(), [records()], batch_size=4).graph
    src = np.repeat(np.arange(g.n_ops), np.diff(g.succ_ptr))
    assert (g.succ_idx > src).all()
    x, grad = g.index["x"], g.index["grad"]
    ctrl = g.ctrl_idx[g.ctrl_ptr[x]:g.ctrl_ptr[x + 1]]
    data = g.data_idx[g.data_ptr[x]:g.data_ptr[x + 1]]
    assert list(ctrl) == [grad] and grad not in data


def test_variable_carried_by_transfers():
    from tfprofile.dag import VariableTable

    table = VariableTable(np.array(["w"]), np.array([4096]), np.array([0]), np.array([True]))
    g = build_profile("g", small_graph(), [records()], batch_size=4, variables=table).graph
    for name in ("w", "read", "edge_1_read", "edge_2_grad", "apply"):
        assert g.variable[g.index[name]] == 0, name
    assert g.variable[g.index["matmul"]] == -1


def test_missing_record_in_one_step_drops_that_step_with_a_warning():
    steps = [records(source="s0"), records(source="s1", skip={"edge_2_grad"}), records(source="s2")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile = build_profile("g", small_graph(), steps, batch_size=4)
    assert profile.n_steps == 2
    assert [w.category for w in caught] == [TraceWarning]
    assert "s1" in str(caught[0].message) and "edge_2_grad" in str(caught[0].message)
    assert profile.meta["dropped_steps"][0]["source"] == "s1"


def test_no_step_pairs_is_an_error():
    with pytest.raises(GraphError, match="do not pair"):
        build_profile("g", small_graph(), [records(skip={"edge_1_read"})], batch_size=4)


def test_record_of_unknown_tensor_is_an_error():
    step = records()
    step.transfers.append(TransferRecord("edge_9_other", PS, WK, 8, 1_000_000, 10))
    with pytest.raises(GraphError, match=r"edge_9_other.*same run"):
        build_profile("g", small_graph(), [step], batch_size=4)


def test_unpaired_send_is_an_error():
    nodes = [n for n in small_graph() if n.name != "grad_S3"]
    nodes = [GraphNode(n.name, n.op, n.device, tuple(i for i in n.inputs if i != "grad_S3"), n.tensor_name,
                       n.send_device, n.recv_device) for n in nodes]
    with pytest.raises(GraphError, match=r"_Send of tensor 'edge_2_grad'.*no partner"):
        build_profile("g", nodes, [records()], batch_size=4)


def test_cycle_is_an_error():
    nodes = small_graph()
    nodes[4] = GraphNode("x", "Const", WK, ("^grad",))  # x -> matmul -> grad -> x
    with pytest.raises(GraphError, match="cycle"):
        build_profile("g", nodes, [records()], batch_size=4)


def test_input_that_is_not_a_node_is_an_error():
    nodes = small_graph() + [GraphNode("y", "Neg", WK, ("nonexistent",))]
    with pytest.raises(GraphError, match="nonexistent"):
        build_profile("g", nodes, [records()], batch_size=4)


def test_two_workers_are_refused():
    nodes = small_graph() + [GraphNode("z", "Const", "/job:worker/replica:0/task:1/device:CPU:0", ())]
    with pytest.raises(GraphError, match="1-worker"):
        build_profile("g", nodes, [records()], batch_size=4)


def test_client_terminated_and_local_pairs_are_computation():
    nodes = small_graph() + [
        GraphNode("fetch", "_Send", WK, ("matmul",), "loss", WK, "/job:localhost/replica:0/task:0/device:CPU:0",
                  client_terminated=True),
        send("cpu_send", "edge_7_m", WK, "/job:worker/replica:0/task:0/device:GPU:0", ["matmul"]),
        recv("gpu_recv", "edge_7_m", WK, "/job:worker/replica:0/task:0/device:GPU:0"),
        GraphNode("neg", "Neg", "/job:worker/replica:0/task:0/device:GPU:0", ("gpu_recv",)),
    ]
    g = build_profile("g", nodes, [records()], batch_size=4).graph
    assert g.resource[g.index["fetch"]] == Resource.WORKER
    local = g.index["edge_7_m"]
    assert g.resource[local] == Resource.WORKER and g.op_type[local] == "LocalTransfer"
    assert g.index["neg"] in g.successors(local)


def test_two_parameter_servers_keep_their_index():
    nodes = small_graph() + [
        GraphNode("v", "VarHandleOp", PS1, ()),
        GraphNode("read_v", "ReadVariableOp", PS1, ("v",)),
        send("rv_S", "edge_5_read_v", PS1, WK, ["read_v"]),
        recv("rv_R", "edge_5_read_v", PS1, WK),
        GraphNode("use_v", "Neg", WK, ("rv_R",)),
    ]
    step = records()
    step.transfers.append(TransferRecord("edge_5_read_v", PS1, WK, 16, 1_000_100, 10))
    g = build_profile("g", nodes, [step], batch_size=4).graph
    assert g.server[g.index["edge_5_read_v"]] == 1 and g.server[g.index["read_v"]] == 1
    assert g.n_servers == 2
