"""TicTac's heuristics (TIC, TAC), its efficiency metrics and ``tfsim order``.

The paper's own examples (Fig. 1a, Fig. 4a, Fig. 4b) as hand-made DAGs, properties on random
DAGs against a plain-Python transcription of Algorithms 1 and 3, the bundled real profiles,
TicTac's priority-file format, and the errors bad input gets.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfbase.errors import InputError, UsageError
from tfprofile import tictac
from tfprofile.dag import OpGraph, Profile, Resource, VariableTable, csr_from_edges
from tfprofile.profile_io import load_profile, save_profile
from tfsim.cli import order as order_cli

D, W, U, PS = Resource.DOWNLINK, Resource.WORKER, Resource.UPLINK, Resource.PS
PROFILES = Path(__file__).resolve().parent.parent / "data" / "profiles"
BUNDLED = ("tiny", "alexnet", "vgg11", "resnet50", "inception3")
HYPOTHESIS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------- building graphs

def make_graph(ops, edges) -> OpGraph:
    """``ops``: (name, resource[, server]) in topological order; ``edges``: (from name, to name)."""
    names = [op[0] for op in ops]
    resource = [op[1] for op in ops]
    server = [-1 if op[1] == W else (op[2] if len(op) > 2 else 0) for op in ops]
    size = [1000 * (i + 1) if r in (D, U) else 0 for i, r in enumerate(resource)]
    where = {name: i for i, name in enumerate(names)}
    src = np.array([where[a] for a, _ in edges], dtype=np.int64)
    dst = np.array([where[b] for _, b in edges], dtype=np.int64)
    data_ptr, data_idx = csr_from_edges(len(ops), src, dst)
    ctrl_ptr, ctrl_idx = csr_from_edges(len(ops), np.zeros(0, np.int64), np.zeros(0, np.int64))
    return OpGraph(name=names, op_type=["Op"] * len(ops), resource=resource, server=server, size_bytes=size,
                   variable=[-1] * len(ops), data_ptr=data_ptr, data_idx=data_idx, ctrl_ptr=ctrl_ptr,
                   ctrl_idx=ctrl_idx)


def with_sizes(graph: OpGraph, **by_name) -> OpGraph:
    """``graph`` with the named ops' sizes changed (0: a control transfer)."""
    size = graph.size_bytes.copy()
    for name, value in by_name.items():
        size[graph.index[name]] = value
    return OpGraph(name=graph.name, op_type=graph.op_type, resource=graph.resource, server=graph.server,
                   size_bytes=size, variable=graph.variable, data_ptr=graph.data_ptr, data_idx=graph.data_idx,
                   ctrl_ptr=graph.ctrl_ptr, ctrl_idx=graph.ctrl_idx)


def times(graph: OpGraph, **by_name) -> np.ndarray:
    out = np.zeros(graph.n_ops)
    for name, value in by_name.items():
        out[graph.index[name]] = value
    return out


def make_profile(graph: OpGraph, duration_s: np.ndarray, makespan_s: np.ndarray | None = None) -> Profile:
    duration_s = np.atleast_2d(duration_s)
    makespan_s = duration_s.sum(axis=1) if makespan_s is None else makespan_s
    return Profile(graph=graph, duration_s=duration_s, start_s=np.full(duration_s.shape, np.nan),
                   step_makespan_s=makespan_s, step_wall_s=np.zeros(0), batch_size=1,
                   variables=VariableTable.empty())


def random_graph(seed: int, n_ops: int, n_servers: int = 1, edge_p: float = 0.2) -> OpGraph:
    """A random DAG, acyclic by construction (edges only go to later ops); op 0 is always a recv."""
    rng = np.random.default_rng(seed)
    kinds = rng.choice([D, W, W, U, PS], size=n_ops)
    kinds[0] = D
    ops = [(f"op{i}", Resource(int(k)), int(rng.integers(n_servers))) for i, k in enumerate(kinds)]
    edges = [(f"op{i}", f"op{j}") for j in range(n_ops) for i in range(j) if rng.random() < edge_p]
    return make_graph(ops, edges)


# ---------------------------------------------------------------------------- the paper's examples

def fig_1a() -> OpGraph:
    """TicTac Fig. 1a: op1 needs recv1; op2 needs op1 and recv2."""
    return make_graph([("recv1", D), ("recv2", D), ("op1", W), ("op2", W)],
                      [("recv1", "op1"), ("op1", "op2"), ("recv2", "op2")])


def test_fig_1a_properties_as_in_section_4_1():
    graph = fig_1a()
    deps = tictac.comm_dependencies(graph)
    assert [graph.name[deps.recv[j]] for j in deps.members(graph.index["op2"])] == ["recv1", "recv2"]
    time = times(graph, recv1=2.0, recv2=3.0, op1=5.0, op2=7.0)
    props = tictac.update_properties(graph, deps, time)
    m = dict(zip(graph.name, props.m))
    assert m == {"recv1": 2.0, "recv2": 3.0, "op1": 2.0, "op2": 5.0}  # op1.M = T(recv1), op2.M = T(recv1)+T(recv2)
    assert props.p.tolist() == [5.0, 0.0]  # recv1.P = T(op1), recv2.P = 0
    assert props.m_plus.tolist() == [5.0, 5.0]  # both M+ = T(recv1) + T(recv2)


def test_fig_1a_properties_after_recv1_completes():
    graph = fig_1a()
    props = tictac.update_properties(graph, tictac.comm_dependencies(graph),
                                     times(graph, recv1=2.0, recv2=3.0, op1=5.0, op2=7.0), np.array([False, True]))
    assert props.m[graph.index["op2"]] == 3.0
    assert props.p.tolist() == [0.0, 7.0]  # op2 now waits on recv2 alone
    assert props.m_plus.tolist() == [math.inf, math.inf]


def test_fig_1a_tac_sends_recv1_first():
    graph = fig_1a()
    ordering = tictac.tac(graph, times(graph, recv1=1.0, recv2=1.0, op1=1.0, op2=1.0))
    assert ordering.as_mapping() == {"recv1": 0, "recv2": 1}


def test_fig_1a_tac_still_sends_recv1_first_when_it_is_the_larger_transfer():
    graph = fig_1a()
    ordering = tictac.tac(graph, times(graph, recv1=4.0, recv2=1.0, op1=3.0, op2=1.0))
    assert ordering.as_mapping() == {"recv1": 0, "recv2": 1}


def test_fig_1a_tic_ties_the_two_recvs():
    # Both recvs are needed together by op2 (M+ = 2 transfers each), and TIC ignores op1's time.
    assert tictac.tic(fig_1a()).as_mapping() == {"recv1": 0, "recv2": 0}


def fig_4a() -> OpGraph:
    """TicTac Fig. 4a (case 1): recvA -> op1 -> op3 <- op2 <- recvB."""
    return make_graph([("recvA", D), ("recvB", D), ("op1", W), ("op2", W), ("op3", W)],
                      [("recvA", "op1"), ("recvB", "op2"), ("op1", "op3"), ("op2", "op3")])


def two_machine_makespan(first_m, first_p, second_m, second_p) -> float:
    """Makespan(A -> B) of §4.3 case 1: M_A + max(P_A, M_B) + P_B."""
    return first_m + max(first_p, second_m) + second_p


@pytest.mark.parametrize("m_a, p_a, m_b, p_b, expected", [
    (1.0, 5.0, 5.0, 1.0, {"recvA": 0, "recvB": 1}),  # A: short transfer, long compute -> first
    (5.0, 1.0, 1.0, 5.0, {"recvA": 1, "recvB": 0}),
    (2.0, 9.0, 3.0, 4.0, {"recvA": 0, "recvB": 1}),  # Eq. 6: min(4, 2) = 2 < min(9, 3) = 3
    (3.0, 4.0, 2.0, 9.0, {"recvA": 1, "recvB": 0}),
])
def test_fig_4a_case_1_comparator(m_a, p_a, m_b, p_b, expected):
    graph = fig_4a()
    ordering = tictac.tac(graph, times(graph, recvA=m_a, recvB=m_b, op1=p_a, op2=p_b, op3=1.0))
    assert ordering.as_mapping() == expected
    first_is_a = expected["recvA"] == 0
    chosen = two_machine_makespan(m_a, p_a, m_b, p_b) if first_is_a else two_machine_makespan(m_b, p_b, m_a, p_a)
    other = two_machine_makespan(m_b, p_b, m_a, p_a) if first_is_a else two_machine_makespan(m_a, p_a, m_b, p_b)
    assert chosen < other


@HYPOTHESIS
@given(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20), st.integers(0, 20))
def test_fig_4a_tac_never_picks_the_longer_schedule(m_a, p_a, m_b, p_b):
    graph = fig_4a()
    ordering = tictac.tac(graph, times(graph, recvA=m_a, recvB=m_b, op1=p_a, op2=p_b, op3=1.0)).as_mapping()
    a_first = two_machine_makespan(m_a, p_a, m_b, p_b)
    b_first = two_machine_makespan(m_b, p_b, m_a, p_a)
    assert sorted(ordering.values()) == [0, 1]
    assert (a_first if ordering["recvA"] == 0 else b_first) <= min(a_first, b_first)


def test_comparator_values():
    # min(P_B, M_A) = min(1, 1) = 1 < min(P_A, M_B) = min(5, 5) = 5
    assert tictac.precedes(1.0, 5.0, 9.0, 5.0, 1.0, 0.0)
    assert not tictac.precedes(5.0, 1.0, 0.0, 1.0, 5.0, 9.0)
    # equal: M+ decides
    assert tictac.precedes(1.0, 0.0, 2.0, 1.0, 0.0, 3.0)
    assert not tictac.precedes(1.0, 0.0, 3.0, 1.0, 0.0, 2.0)
    assert not tictac.precedes(1.0, 0.0, 2.0, 1.0, 0.0, 2.0)


def test_minimum_when_the_comparator_cycles():
    # (M, P, M+): a precedes b, b precedes c, c precedes a; e is preceded by all three.
    e, a, b, c = (5.0, 0.0, 9.0), (1.0, 1.0, 2.0), (1.0, 2.0, 3.0), (2.0, 1.0, 1.0)
    assert tictac.precedes(*a, *b) and tictac.precedes(*b, *c) and tictac.precedes(*c, *a)
    m, p, m_plus = (np.array(column) for column in zip(e, a, b, c))
    # No candidate is minimal; each of a, b, c is preceded once, e three times: a, the lowest of those.
    assert tictac._comparator_minimum(m, p, m_plus) == 1


def fig_4b() -> OpGraph:
    """TicTac Fig. 4b (case 2): op1 needs A and B, op2 needs op1 and C, op3 needs op2 and D.

    The recvs are numbered D, C, B, A so that neither index order nor the tie-break alone
    would produce the expected order.
    """
    return make_graph(
        [("recvD", D), ("recvC", D), ("recvB", D), ("recvA", D), ("op1", W), ("op2", W), ("op3", W)],
        [("recvA", "op1"), ("recvB", "op1"), ("op1", "op2"), ("recvC", "op2"), ("op2", "op3"), ("recvD", "op3")],
    )


def test_fig_4b_case_2_m_plus_breaks_the_tie():
    graph = fig_4b()
    time = times(graph, recvA=1.0, recvB=2.0, recvC=1.0, recvD=1.0, op1=1.0, op2=1.0, op3=1.0)
    props = tictac.update_properties(graph, tictac.comm_dependencies(graph), time)
    m_plus = dict(zip(graph.name[tictac.recv_ops(graph)], props.m_plus))
    assert props.p.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert m_plus == {"recvA": 3.0, "recvB": 3.0, "recvC": 4.0, "recvD": 5.0}
    ordering = tictac.tac(graph, time)
    # A and B tie on both P and M+ at first; the lower op index (B) goes first, then A (now P_A > 0).
    assert ordering.as_mapping() == {"recvB": 0, "recvA": 1, "recvC": 2, "recvD": 3}


def test_fig_4b_tic():
    assert tictac.tic(fig_4b()).as_mapping() == {"recvA": 0, "recvB": 0, "recvC": 2, "recvD": 3}


# ---------------------------------------------------------------------------- a plain transcription

def reference_deps(graph: OpGraph) -> list[set[int]]:
    deps: list[set[int]] = []
    for op in range(graph.n_ops):
        dep = set().union(*(deps[p] for p in graph.predecessors(op)))
        if graph.resource[op] == D:
            dep.add(op)
        deps.append(dep)
    return deps


def reference_properties(graph, deps, time, outstanding: set[int]):
    """Alg. 1 with Python sets, over recv op indices."""
    recvs = [op for op in range(graph.n_ops) if graph.resource[op] == D]
    p = dict.fromkeys(recvs, 0.0)
    m_plus = dict.fromkeys(recvs, math.inf)
    for op in range(graph.n_ops):
        if graph.resource[op] == D:
            continue
        live = deps[op] & outstanding
        if len(live) == 1:
            p[next(iter(live))] += time[op]
        elif len(live) > 1:
            m = sum(time[r] for r in live)
            for r in live:
                m_plus[r] = min(m_plus[r], m)
    return p, m_plus


def reference_tac(graph: OpGraph, time: np.ndarray) -> dict[str, int]:
    """Alg. 3 with Python sets; the minimum is the recv fewest others precede, then the lowest index."""
    deps = reference_deps(graph)
    outstanding = {op for op in range(graph.n_ops) if graph.resource[op] == D}
    out = {}
    while outstanding:
        p, m_plus = reference_properties(graph, deps, time, outstanding)
        candidates = sorted(outstanding)

        def beaten(b, p=p, m_plus=m_plus, candidates=candidates):
            return sum(tictac.precedes(time[a], p[a], m_plus[a], time[b], p[b], m_plus[b])
                       for a in candidates if a != b)

        chosen = min(candidates, key=lambda b: (beaten(b), b))
        out[str(graph.name[chosen])] = len(out)
        outstanding.remove(chosen)
    return out


@HYPOTHESIS
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.sampled_from([0.05, 0.15, 0.4]))
def test_dependency_bitsets_match_sets(seed, n_ops, edge_p):
    graph = random_graph(seed, n_ops, edge_p=edge_p)
    deps = tictac.comm_dependencies(graph)
    expected = reference_deps(graph)
    matrix = deps.matrix()
    for op in range(graph.n_ops):
        assert set(deps.recv[matrix[op]].tolist()) == expected[op]


def test_dependency_bitsets_across_words():
    # 150 recvs (three 64-bit words), each feeding a chain op that also needs the previous one.
    n = 150
    ops = [(f"r{i}", D) for i in range(n)] + [(f"c{i}", W) for i in range(n)]
    edges = [(f"r{i}", f"c{i}") for i in range(n)] + [(f"c{i-1}", f"c{i}") for i in range(1, n)]
    graph = make_graph(ops, edges)
    deps = tictac.comm_dependencies(graph)
    assert deps.bits.shape == (2 * n, 3)
    for i in (0, 63, 64, 127, 128, 149):
        assert deps.members(graph.index[f"c{i}"]).tolist() == list(range(i + 1))
        assert deps.members(graph.index[f"r{i}"]).tolist() == [i]


@HYPOTHESIS
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 3))
def test_tac_matches_plain_transcription(seed, n_ops, n_servers):
    graph = random_graph(seed, n_ops, n_servers)
    # Integer times: sums are exact, so ties resolve the same in both implementations.
    time = np.random.default_rng(seed + 1).integers(0, 5, size=graph.n_ops).astype(float)
    global_order = reference_tac(graph, time)
    ordering = tictac.tac(graph, time)
    assert dict(zip(ordering.name.tolist(), ordering.key.astype(int).tolist())) == global_order
    # Per server, the priorities are the global removal order restricted to that server.
    for s in np.unique(ordering.server):
        mine = ordering.server == s
        names = ordering.name[mine][np.argsort(ordering.priority[mine])]
        assert names.tolist() == sorted(names.tolist(), key=global_order.__getitem__)


@HYPOTHESIS
@given(st.integers(0, 2**32 - 1), st.integers(1, 30))
def test_properties_match_plain_transcription(seed, n_ops):
    graph = random_graph(seed, n_ops)
    rng = np.random.default_rng(seed)
    time = rng.integers(0, 5, size=graph.n_ops).astype(float)
    deps = tictac.comm_dependencies(graph)
    outstanding = rng.random(deps.n_recv) < 0.6
    props = tictac.update_properties(graph, deps, time, outstanding)
    p, m_plus = reference_properties(graph, reference_deps(graph), time, set(deps.recv[outstanding].tolist()))
    assert props.p.tolist() == [p[r] for r in deps.recv]
    assert props.m_plus.tolist() == [m_plus[r] for r in deps.recv]


# ---------------------------------------------------------------------------- properties of the orderings

def assert_valid_ranks(ordering: tictac.Ordering, distinct: bool) -> None:
    """Per server: ranks 0..n_s-1 where equal keys share the lower rank (TicTac's numbering)."""
    for s in np.unique(ordering.server):
        mine = ordering.server == s
        prio, key = ordering.priority[mine], ordering.key[mine]
        for p, k in zip(prio, key):
            assert p == (key < k).sum()
        if distinct:
            assert sorted(prio.tolist()) == list(range(mine.sum()))


@HYPOTHESIS
@given(st.integers(0, 2**32 - 1), st.integers(1, 60), st.integers(1, 3))
def test_orderings_are_valid(seed, n_ops, n_servers):
    graph = random_graph(seed, n_ops, n_servers)
    time = np.random.default_rng(seed).exponential(1.0, size=graph.n_ops)
    recv = tictac.recv_ops(graph)
    tac = tictac.tac(graph, time)
    tic = tictac.tic(graph)
    for ordering in (tac, tic, tictac.reverse_tic(graph), tictac.random_order(graph, seed)):
        assert ordering.recv.tolist() == recv.tolist()
        assert (ordering.server == graph.server[recv]).all()
    assert sorted(tac.key.tolist()) == list(range(len(recv)))
    assert_valid_ranks(tac, distinct=True)
    assert_valid_ranks(tictac.random_order(graph, seed), distinct=True)
    assert_valid_ranks(tic, distinct=False)
    assert_valid_ranks(tictac.reverse_tic(graph), distinct=False)


@HYPOTHESIS
@given(st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_tic_depends_on_the_dag_only(seed, n_ops):
    graph = random_graph(seed, n_ops)
    rng = np.random.default_rng(seed)
    slow = make_profile(graph, rng.exponential(1.0, size=(3, graph.n_ops)))
    fast = make_profile(graph, rng.exponential(0.001, size=(2, graph.n_ops)))
    a = tictac.compute_ordering(slow, "tic")
    b = tictac.compute_ordering(fast, "tic", bandwidth_Bps=1e3)
    assert a.as_mapping() == b.as_mapping()
    # TAC does look at the durations, on the same graphs: its input really differs.
    assert tictac.time_oracle(slow).tolist() != tictac.time_oracle(fast).tolist()


@HYPOTHESIS
@given(st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_reverse_tic_reverses_tic(seed, n_ops):
    graph = random_graph(seed, n_ops)
    tic, rev = tictac.tic(graph), tictac.reverse_tic(graph)
    i, j = np.triu_indices(len(tic), k=1)
    assert ((tic.priority[i] < tic.priority[j]) == (rev.priority[i] > rev.priority[j])).all()
    assert ((tic.priority[i] == tic.priority[j]) == (rev.priority[i] == rev.priority[j])).all()


def chain_model(per_layer: list[int], extra_ops: int):
    """A sequential model: layer k computes from layer k-1 and its own recvs, then a backward
    chain in reverse with one uplink per layer (as a CNN without branches)."""
    ops, edges, layer_of = [], [], {}
    previous = None
    for k, n_recv in enumerate(per_layer):
        recvs = [f"r{k}_{i}" for i in range(n_recv)]
        for name in recvs:
            ops.append((name, D))
            layer_of[name] = k
        for e in range(1 + extra_ops):
            name = f"f{k}_{e}"
            ops.append((name, W))
            edges += [(previous, name)] if previous else []
            edges += [(r, name) for r in recvs] if e == 0 else []
            previous = name
    for k in reversed(range(len(per_layer))):
        ops += [(f"b{k}", W), (f"u{k}", U)]
        edges += [(previous, f"b{k}"), (f"b{k}", f"u{k}")]
        previous = f"b{k}"
    return make_graph(ops, edges), layer_of


@HYPOTHESIS
@given(st.lists(st.integers(1, 3), min_size=1, max_size=12), st.integers(0, 2))
def test_tic_follows_the_layer_order_of_a_chain(per_layer, extra_ops):
    graph, layer_of = chain_model(per_layer, extra_ops)
    prio = tictac.tic(graph).as_mapping()
    names = sorted(prio, key=lambda name: (layer_of[name], graph.index[name]))
    for a, b in zip(names, names[1:]):
        la, lb = layer_of[a], layer_of[b]
        if la == lb:
            assert prio[a] == prio[b]
        elif la == 0 and per_layer[0] == 1:
            # A lone first-layer recv is needed together with layer 1's: both have M+ = 1 + c_1.
            assert prio[a] == prio[b] == 0
        else:
            assert prio[a] < prio[b]
    assert sorted(set(prio.values())) == sorted({prio[n] for n in names})  # not a vacuous mapping
    assert prio[names[0]] == 0


def test_two_servers_number_their_recvs_separately():
    graph = make_graph(
        [("a0", D, 0), ("b1", D, 1), ("c0", D, 0), ("d1", D, 1), ("x", W), ("y", W), ("z", W)],
        [("a0", "x"), ("b1", "x"), ("x", "y"), ("c0", "y"), ("y", "z"), ("d1", "z")],
    )
    tic = tictac.tic(graph)
    assert tic.key.tolist() == [2.0, 2.0, 3.0, 4.0]  # M+ in transfers
    assert tic.as_mapping() == {"a0": 0, "c0": 1, "b1": 0, "d1": 1}
    tac = tictac.tac(graph, np.ones(graph.n_ops))
    assert tac.as_mapping() == {"a0": 0, "b1": 0, "c0": 1, "d1": 1}
    assert sorted(tac.key.tolist()) == [0, 1, 2, 3]


def test_rank_per_server():
    key = np.array([5.0, 5.0, 7.0, 1.0, np.inf, 3.0, np.inf])
    server = np.array([0, 0, 0, 0, 1, 1, 1])
    assert tictac.rank_per_server(key, server).tolist() == [1, 1, 3, 0, 1, 0, 1]


def test_random_order_is_seeded():
    graph = random_graph(7, 60)
    a, b, c = (tictac.random_order(graph, seed) for seed in (3, 3, 4))
    assert a.priority.tolist() == b.priority.tolist()
    assert a.priority.tolist() != c.priority.tolist()
    assert sorted(a.priority.tolist()) == list(range(len(a)))


# ---------------------------------------------------------------------------- Eqs. 1-4

def test_efficiency_by_hand():
    graph = fig_1a()
    time = times(graph, recv1=2.0, recv2=3.0, op1=4.0, op2=1.0)
    result = tictac.scheduling_efficiency(graph, time, 7.0)
    assert (result.upper_s, result.lower_s) == (10.0, 5.0)
    assert result.efficiency == pytest.approx(0.6)  # (10 - 7) / (10 - 5)
    assert result.speedup == pytest.approx(1.0)  # (10 - 5) / 5
    assert result.bottleneck in ("DOWNLINK/ps0", "WORKER")


def test_lower_bound_separates_servers():
    graph = make_graph([("a", D, 0), ("b", D, 1), ("x", W), ("u", U, 1), ("p", PS, 1)],
                       [("a", "x"), ("b", "x"), ("x", "u"), ("u", "p")])
    ids, labels = tictac.resource_classes(graph)
    assert sorted(labels) == ["DOWNLINK/ps0", "DOWNLINK/ps1", "PS/ps1", "UPLINK/ps1", "WORKER"]
    assert len(set(ids.tolist())) == 5
    upper, lower = tictac.makespan_bounds(graph, times(graph, a=4.0, b=3.0, x=2.0, u=1.0, p=0.5))
    assert (float(upper), float(lower)) == (10.5, 4.0)


def test_efficiency_undefined_cases_are_nan():
    assert math.isnan(float(tictac.efficiency(3.0, 3.0, 3.0)))
    assert math.isnan(float(tictac.speedup(0.0, 0.0)))
    assert float(tictac.efficiency(10.0, 4.0, 4.0)) == 1.0
    assert float(tictac.efficiency(10.0, 4.0, 10.0)) == 0.0


def list_schedule(graph: OpGraph, time: np.ndarray) -> float:
    """Makespan of a feasible schedule: ops in index order, each on its resource, one at a time."""
    ids, _ = tictac.resource_classes(graph)
    free: dict[int, float] = defaultdict(float)
    finish = np.zeros(graph.n_ops)
    for op in range(graph.n_ops):
        ready = max((finish[p] for p in graph.predecessors(op)), default=0.0)
        finish[op] = max(ready, free[ids[op]]) + time[op]
        free[ids[op]] = finish[op]
    return float(finish.max()) if graph.n_ops else 0.0


@HYPOTHESIS
@given(st.integers(0, 2**32 - 1), st.integers(2, 50), st.integers(1, 3))
def test_efficiency_lies_in_unit_interval_for_feasible_schedules(seed, n_ops, n_servers):
    graph = random_graph(seed, n_ops, n_servers)
    time = np.random.default_rng(seed).exponential(1.0, size=graph.n_ops)
    makespan = list_schedule(graph, time)
    upper, lower = tictac.makespan_bounds(graph, time)
    assert lower * (1 - 1e-12) <= makespan <= upper * (1 + 1e-12)
    e = float(tictac.efficiency(upper, lower, makespan))
    if upper == lower:  # every op on one resource: no schedule is better than another
        assert math.isnan(e) and makespan == pytest.approx(float(upper))
        return
    assert -1e-9 <= e <= 1 + 1e-9
    result = tictac.scheduling_efficiency(graph, time, makespan)
    assert result.efficiency == pytest.approx(e, nan_ok=True)


def test_profile_efficiency_per_step():
    graph = fig_1a()
    steps = np.array([times(graph, recv1=2.0, recv2=3.0, op1=4.0, op2=1.0),
                      times(graph, recv1=1.0, recv2=1.0, op1=6.0, op2=2.0)])
    result = tictac.profile_efficiency(make_profile(graph, steps, np.array([7.0, 8.0])))
    assert result.upper_s.tolist() == [10.0, 10.0]
    assert result.lower_s.tolist() == [5.0, 8.0]
    assert result.efficiency.tolist() == pytest.approx([0.6, 1.0])
    assert result.speedup.tolist() == pytest.approx([1.0, 0.25])
    summary = result.summary()
    assert summary["efficiency"] == pytest.approx({"mean": 0.8, "median": 0.8})
    assert summary["steps"] == 2 and summary["steps_lower_above_makespan"] == 0


# ---------------------------------------------------------------------------- the bundled profiles

def bundled(name: str) -> Profile:
    path = PROFILES / f"{name}.npz"
    if not path.exists():
        pytest.skip(f"{path} is not there (being regenerated?)")
    return load_profile(path)


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_profile_orderings(name, tmp_path):
    profile = bundled(name)
    graph = profile.graph
    recv = tictac.recv_ops(graph)
    assert len(recv) > 0
    tic = tictac.compute_ordering(profile, "tic")
    tac = tictac.compute_ordering(profile, "tac")
    tac_bw = tictac.compute_ordering(profile, "tac", bandwidth_Bps=1.25e9)
    for ordering in (tic, tac, tac_bw):
        assert ordering.recv.tolist() == recv.tolist()
    assert_valid_ranks(tac, distinct=True)
    assert_valid_ranks(tac_bw, distinct=True)
    assert_valid_ranks(tic, distinct=False)
    assert tic.priority.min() == 0 and len(set(tic.priority.tolist())) > 1
    for ordering in (tic, tac):
        path = tmp_path / f"{ordering.policy}.tsv"
        tictac.write_priorities(path, ordering)
        lines = path.read_text().splitlines()
        controls = tictac.control_transfers(graph)
        assert len(lines) == len(recv) + len(controls)  # every control transfer inherits a priority here
        assert all(line.count("\t") == 1 and line.startswith("edge_") for line in lines)
        listed = [graph.index[line.split("\t")[0]] for line in lines]
        assert set(listed[:len(recv)]) == set(recv.tolist()) and set(listed[len(recv):]) == set(controls.tolist())
        back = tictac.read_priorities(path, graph)
        assert back.as_mapping() == ordering.as_mapping()
        assert back.recv.tolist() == ordering.recv.tolist()


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_profile_efficiency(name):
    profile = bundled(name)
    result = tictac.profile_efficiency(profile)
    assert result.upper_s.shape == (profile.n_steps,)
    assert (result.upper_s >= result.lower_s).all() and (result.lower_s > 0).all()
    expected_u = profile.duration_s.sum(axis=1)
    assert result.upper_s == pytest.approx(expected_u)
    assert np.isfinite(result.speedup).all()


# ---------------------------------------------------------------------------- the priority file

def test_priority_file_format(tmp_path):
    graph = fig_4b()
    path = tmp_path / "p.tsv"
    tictac.write_priorities(path, tictac.tic(graph))
    assert path.read_text() == "recvA\t0\nrecvB\t0\nrecvC\t2\nrecvD\t3\n"
    assert not list(tmp_path.glob(".*.tmp"))


def test_priority_file_may_list_some_recvs(tmp_path):
    graph = fig_4b()
    path = tmp_path / "p.tsv"
    path.write_text("recvC\t1\r\n\nrecvA\t0\n")
    ordering = tictac.read_priorities(path, graph)
    assert ordering.as_mapping() == {"recvC": 1, "recvA": 0}
    assert ordering.policy == "file"
    assert tictac.priority_per_op(graph, ordering).tolist() == [math.inf, 1.0, math.inf, 0.0, math.inf, math.inf,
                                                                math.inf]


@pytest.mark.parametrize("text, line, words", [
    ("recvA 0\n", 1, "expected 'name<TAB>priority'"),
    ("recvA\t0\nrecvB\t1\textra\n", 2, "expected 'name<TAB>priority'"),
    ("recvA\t1.5\n", 1, "not a non-negative integer"),
    ("recvA\t-1\n", 1, "not a non-negative integer"),
    ("recvA\t\n", 1, "not a non-negative integer"),
    ("recvA\tfirst\n", 1, "not a non-negative integer"),
    ("recvA\t0\nrecvB\t" + "9" * 19 + "\n", 2, "at most 18 digits"),
    ("recvA\t0\nrecvB\t1\nrecvA\t2\n", 3, "listed twice (first on line 1)"),
    ("recvA\t0\nedge_9_nope\t1\n", 2, "not an op of this profile"),
    ("op1\t0\n", 1, "not a recv (DOWNLINK) op"),
])
def test_malformed_priority_files(tmp_path, text, line, words):
    path = tmp_path / "bad.tsv"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        tictac.read_priorities(path, fig_4b())
    message = str(err.value)
    assert message.startswith(f"{path}: line {line}: ")
    assert words in message
    assert "\n" not in message


@pytest.mark.parametrize("content, words", [(b"", "lists no priorities"), (b"\n\n", "lists no priorities"),
                                            (b"recvA\t\xff\xfe\n", "not a text (UTF-8) priority file")])
def test_priority_files_without_priorities(tmp_path, content, words):
    path = tmp_path / "bad.tsv"
    path.write_bytes(content)
    with pytest.raises(InputError, match=re.escape(words)):
        tictac.read_priorities(path, fig_4b())


def test_missing_priority_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        tictac.read_priorities(tmp_path / "absent.tsv", fig_4b())


# ---------------------------------------------------------------------------- bad input

def no_recv_graph() -> OpGraph:
    return make_graph([("x", W), ("u", U), ("p", PS)], [("x", "u"), ("u", "p")])


def no_recv_graph_but_tokens() -> OpGraph:
    return make_graph([("p", PS), ("token", D), ("x", W)], [("p", "token"), ("token", "x")])


@pytest.mark.parametrize("policy", tictac.POLICIES)
@pytest.mark.parametrize("graph", [no_recv_graph(), with_sizes(no_recv_graph_but_tokens(), token=0)],
                         ids=["no downlinks", "only control transfers"])
def test_profile_without_recvs(policy, graph):
    profile = make_profile(graph, np.ones((2, graph.n_ops)))
    with pytest.raises(InputError, match="no parameter transfers \\(recv ops of nonzero size\\)"):
        tictac.compute_ordering(profile, policy)


def test_unknown_policy():
    profile = make_profile(fig_1a(), np.ones((1, 4)))
    with pytest.raises(UsageError, match="unknown policy 'fifo'; choose one of tic, tac, reverse_tic, random"):
        tictac.compute_ordering(profile, "fifo")


@pytest.mark.parametrize("bandwidth", [0.0, -1.0, math.inf, math.nan])
def test_bad_bandwidth(bandwidth):
    profile = make_profile(fig_1a(), np.ones((1, 4)))
    with pytest.raises(UsageError, match="bandwidth_Bps"):
        tictac.compute_ordering(profile, "tac", bandwidth_Bps=bandwidth)


def test_bad_oracle():
    graph = fig_1a()
    with pytest.raises(UsageError, match="one time per op"):
        tictac.tac(graph, np.ones(3))
    with pytest.raises(UsageError, match="finite and non-negative"):
        tictac.tac(graph, np.array([1.0, -1.0, 1.0, 1.0]))


def test_bandwidth_oracle():
    graph = fig_1a()  # sizes 1000, 2000 bytes for the two recvs
    profile = make_profile(graph, np.array([[5.0, 5.0, 1.0, 2.0], [4.0, 6.0, 3.0, 1.0]]))
    assert tictac.time_oracle(profile).tolist() == [4.0, 5.0, 1.0, 1.0]
    assert tictac.time_oracle(profile, 1000.0).tolist() == [1.0, 2.0, 1.0, 1.0]


# ---------------------------------------------------------------------------- tfsim order

def run_order(argv: list[str], capsys) -> tuple[int, str, str]:
    """A stand-in for ``tfsim.cli.main`` with only the ``order`` subcommand."""
    from tfsim.cli.options import Parser as _Parser

    parser = _Parser(prog="tfsim")
    order_cli.register(parser.add_subparsers(dest="command", parser_class=_Parser))
    try:
        args = parser.parse_args(argv)
        status = args.handler(args)
    except SystemExit as exit_:
        status = exit_.code
    except InputError as err:
        print(f"tfsim: error: {err}", file=sys.stderr)
        status = 2
    out, errors = capsys.readouterr()
    return status, out, errors


def test_order_cli_json(tmp_path, capsys):
    profile_path = PROFILES / "tiny.npz"
    if not profile_path.exists():
        pytest.skip("tiny profile is being regenerated")
    out_path = tmp_path / "tiny.tsv"
    status, out, _ = run_order(["order", str(profile_path), "--policy", "tac", "-o", str(out_path), "--json"], capsys)
    assert status == 0
    report = json.loads(out)
    profile = load_profile(profile_path)
    summary = tictac.profile_efficiency(profile).summary()
    assert report["policy"] == "tac" and report["recvs"] == len(tictac.recv_ops(profile.graph))
    assert report["efficiency"] == pytest.approx(summary["efficiency"])
    assert report["speedup"] == pytest.approx(summary["speedup"])
    assert tictac.read_priorities(out_path, profile.graph).as_mapping() == \
        tictac.compute_ordering(profile, "tac").as_mapping()


def test_order_cli_text(tmp_path, capsys):
    graph = fig_4b()
    profile_path = tmp_path / "fig4b.npz"
    save_profile(make_profile(graph, np.ones((3, graph.n_ops)), np.full(3, 5.0)), profile_path)
    out_path = tmp_path / "out" / "fig4b.tsv"
    status, out, errors = run_order(["order", str(profile_path), "--policy", "tic", "-o", str(out_path)], capsys)
    assert status == 0 and errors == ""
    assert out.splitlines()[0] == f"wrote 4 tic priorities (1 parameter server) to {out_path}"
    # U = 7, L = 4 (downlink), m = 5: E = (7 - 5) / (7 - 4), S = (7 - 4) / 4
    assert "mean 0.667, median 0.667" in out.splitlines()[1]
    assert "mean 0.75, median 0.75" in out.splitlines()[2]
    assert out_path.read_text() == "recvA\t0\nrecvB\t0\nrecvC\t2\nrecvD\t3\n"


def test_order_cli_errors(tmp_path, capsys):
    empty = tmp_path / "norecv.npz"
    save_profile(make_profile(no_recv_graph(), np.ones((1, 3))), empty)
    status, out, errors = run_order(["order", str(empty), "--policy", "tac", "-o", str(tmp_path / "x.tsv")], capsys)
    assert status == 2 and out == ""
    assert errors == (f"tfsim: error: {empty}: has no parameter transfers (recv ops of nonzero size): there is "
                      "nothing to order\n")
    assert not (tmp_path / "x.tsv").exists()

    status, _, errors = run_order(["order", str(empty), "--policy", "fifo", "-o", "x.tsv"], capsys)
    assert status == 2 and "invalid choice: 'fifo'" in errors and errors.count("\n") == 1

    status, _, errors = run_order(["order", str(empty), "--policy", "tac", "-o", "x.tsv", "--bandwidth", "0"], capsys)
    assert status == 2 and "--bandwidth" in errors and errors.count("\n") == 1

    status, _, errors = run_order(["order", str(tmp_path / "none.npz"), "--policy", "tic", "-o", "x.tsv"], capsys)
    assert status == 2 and "no such file" in errors


def test_order_cli_help(capsys):
    status, out, _ = run_order(["order", "--help"], capsys)
    assert status == 0
    for words in ("name<TAB>priority", "tic", "tac", "--bandwidth BYTES_PER_S", "E = (U - m)/(U - L)"):
        assert words in out


# ---------------------------------------------------------------------------- control transfers (issue 17, item 3)

def fig_1a_with_tokens() -> OpGraph:
    """Fig. 1a with the variable reads on the PS: ``read1`` sends recv1 and, through ``ctl1``, a
    0-byte control token ``token1`` that op2 also waits for; ``read2`` sends recv2; ``ctl0``
    sends ``token0`` from a PS op that sends no parameter."""
    return with_sizes(make_graph(
        [("read1", PS), ("read2", PS), ("ctl0", PS), ("ctl1", PS), ("recv1", D), ("recv2", D), ("token0", D),
         ("token1", D), ("op1", W), ("op2", W)],
        [("read1", "recv1"), ("read1", "ctl1"), ("ctl1", "token1"), ("read2", "recv2"), ("ctl0", "token0"),
         ("recv1", "op1"), ("op1", "op2"), ("recv2", "op2"), ("token1", "op2"), ("token0", "op1")]),
        token0=0, token1=0)


def test_control_transfers_are_not_ranked_and_inherit_their_reads_priority():
    graph = fig_1a_with_tokens()
    assert [graph.name[op] for op in tictac.recv_ops(graph)] == ["recv1", "recv2"]
    assert [graph.name[op] for op in tictac.control_transfers(graph)] == ["token0", "token1"]
    duration = times(graph, recv1=1.0, recv2=1.0, op1=5.0, op2=1.0, token0=3.0, token1=3.0)
    profile = make_profile(graph, duration)
    # Were the tokens recvs, op2's dep would be {recv1, recv2, token1} and TIC's M+ would count them.
    tic = tictac.compute_ordering(profile, "tic")
    assert tic.key.tolist() == [2.0, 2.0]  # op2 needs two parameter transfers
    tac = tictac.compute_ordering(profile, "tac")
    assert tac.name.tolist() == ["recv1", "recv2"] and tac.priority.tolist() == [0, 1]  # recv1 unblocks op1
    for ordering in (tic, tac, tictac.compute_ordering(profile, "reverse_tic")):
        # token1 is cut from read1, which sends recv1; token0's PS op sends no parameter: no priority.
        assert ordering.control_name.tolist() == ["token0", "token1"]
        assert ordering.control_source.tolist() == [-1, graph.index["recv1"]]
        assert ordering.control_priority[0] == math.inf
        assert ordering.control_priority[1] == ordering.priority[0]
        assert ordering.as_mapping() == {"recv1": ordering.priority[0], "recv2": ordering.priority[1],
                                         "token1": ordering.priority[0]}


def test_priority_file_lists_control_transfers_apart(tmp_path):
    graph = fig_1a_with_tokens()
    ordering = tictac.tac(graph, times(graph, recv1=1.0, recv2=1.0, op1=5.0, op2=1.0))
    path = tmp_path / "p.tsv"
    tictac.write_priorities(path, ordering)
    assert path.read_text() == "recv1\t0\nrecv2\t1\ntoken1\t0\n"
    back = tictac.read_priorities(path, graph)
    assert back.name.tolist() == ["recv1", "recv2"] and back.control_name.tolist() == ["token1"]
    assert back.control_priority.tolist() == [0.0] and back.control_source.tolist() == [-1]
    assert back.as_mapping() == ordering.as_mapping()


@pytest.mark.parametrize("name, recvs, controls", [("tiny", 8, 2), ("alexnet", 16, 5), ("vgg11", 22, 8),
                                                   ("resnet50", 161, 53), ("inception3", 284, 94)])
def test_bundled_control_transfers_inherit_from_the_read_of_the_same_ps_op(name, recvs, controls):
    graph = bundled(name).graph
    ordering = tictac.compute_ordering(bundled(name), "tac")
    assert len(ordering) == recvs and len(ordering.control) == controls
    assert (graph.size_bytes[ordering.recv] > 0).all() and (graph.size_bytes[ordering.control] == 0).all()
    assert sorted(ordering.priority.tolist()) == list(range(recvs))  # parameters alone are ranked
    priority_of = dict(zip(ordering.recv.tolist(), ordering.priority.tolist()))
    for token, source, priority in zip(ordering.control, ordering.control_source, ordering.control_priority):
        assert source >= 0 and priority == priority_of[int(source)]
        # TensorFlow cuts both from one PS op (e.g. conv0/Conv2D/ReadVariableOp): same tensor name
        assert str(graph.name[token]).split("_", 2)[2] == str(graph.name[source]).split("_", 2)[2]


def test_order_cli_lists_control_transfers(tmp_path, capsys):
    profile_path = PROFILES / "resnet50.npz"
    out_path = tmp_path / "r.tsv"
    status, out, _ = run_order(["order", str(profile_path), "--policy", "tic", "-o", str(out_path), "--json"], capsys)
    assert status == 0
    report = json.loads(out)
    assert report["recvs"] == 161 and len(report["control_transfers"]) == 53
    first = report["control_transfers"][0]
    assert first == {"name": "edge_170_conv0/Conv2D/ReadVariableOp", "priority": 0,
                     "inherited_from": "edge_169_conv0/Conv2D/ReadVariableOp"}
    lines = out_path.read_text().splitlines()
    assert lines[161:] == [f"{c['name']}\t{c['priority']}" for c in
                           sorted(report["control_transfers"], key=lambda c: (c["priority"], c["name"]))]
    status, out, _ = run_order(["order", str(profile_path), "--policy", "tic", "-o", str(out_path)], capsys)
    text = out.splitlines()
    assert text[1] == ("53 control transfers (0 bytes) not ranked, listed after them with the priority of the "
                       "parameter read each is cut from:")
    assert text[2] == "  edge_170_conv0/Conv2D/ReadVariableOp\t0\t(from edge_169_conv0/Conv2D/ReadVariableOp)"


# ---------------------------------------------------------------------------- the recorded order (issue 17, item 1)

def test_recorded_order_by_median_start():
    graph = fig_4b()  # recvD, recvC, recvB, recvA
    starts = np.full((3, graph.n_ops), np.nan)
    starts[:, 0] = [0.5, 0.1, 0.4]       # recvD: median 0.4
    starts[:, 1] = [0.2, np.nan, 0.2]    # recvC: median 0.2 over the two steps that recorded it
    starts[:, 2] = [0.3, 0.1, 0.2]       # recvB: median 0.2, ties with recvC
    # recvA: recorded in no step, goes last
    profile = dataclasses.replace(make_profile(graph, np.ones((3, graph.n_ops))), start_s=starts)
    order = tictac.compute_ordering(profile, tictac.Policy.RECORDED)
    assert order.policy == "recorded"
    assert order.key.tolist() == [0.4, 0.2, 0.2, math.inf]
    assert order.priority.tolist() == [2, 0, 0, 3]  # equal medians share a number


def test_recorded_order_needs_recorded_starts():
    profile = make_profile(fig_4b(), np.ones((2, 7)))  # start_s all NaN
    with pytest.raises(InputError, match="records no start time for any parameter transfer"):
        tictac.compute_ordering(profile, "recorded")


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_profiles_have_a_recorded_order(name):
    profile = bundled(name)
    order = tictac.compute_ordering(profile, "recorded")
    assert np.isfinite(order.key).all()  # every parameter transfer was recorded in some step
    starts = np.median(profile.start_s[:, order.recv], axis=0)
    assert order.order().tolist() == order.recv[np.argsort(starts, kind="stable")].tolist()
