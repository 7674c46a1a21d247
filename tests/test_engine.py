"""The compiled engine against the literal Alg. 3.1 reference, and the model's properties.

docs/model.md §7.1-7.2: with several workers under ps
sharing the trajectory is chaotic, so exact agreement (1e-9) is required on short runs for
every configuration, on long runs where the dynamics are not chaotic (one worker, sync,
fcfs), and against exact rational arithmetic on small cases.
"""

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_sim import reference_run

from simulate.cluster import ClusterModel, FlowControl, Overhead, OverheadPlacement, RpcChain, TokenBucket
from simulate.config import Colocation, Mode, Sharing, SimConfig, Transfer
from simulate.engine import run
from simulate.prepare import KIND_COMPUTE, KIND_LATENCY, KIND_TRANSFER, prepare
from simulate.results import throughput_eps
from tfbase.errors import UsageError
from tfprofile.dag import OpGraph, Profile, Resource, VariableTable, csr_from_edges

# Bandwidths, overheads and delays are dyadic, so that every time in a run is a sum of exact
# binary fractions: two workers that reach the same instant along different paths (the same
# terms added in another order) tie exactly in float as in Fraction. With decimal constants
# such a tie is a near-tie, which either implementation may break either way, and then the
# runs diverge (docs/model.md §7.2) for reasons that say nothing about either implementation.
# The transfer models the flow engine runs (packet is ns-3's, tests/test_packet.py; auto picks
# one of the others per configuration).
FLOW_TRANSFERS = [transfer for transfer in Transfer if transfer not in (Transfer.PACKET, Transfer.AUTO)]
CLUSTER = ClusterModel(2.0 ** 27, 2.0 ** 26, win_bytes=300_000, overhead_downlink=Overhead(2.0 ** -29, 2.0 ** -13),
                       overhead_uplink=Overhead(2.0 ** -30, 2.0 ** -14),
                       # grpc: windows smaller than many streams, raised once, so that streams pause,
                       # connections run out of window, and returns interleave with chunk ends.
                       flow_downlink=FlowControl(((0.0, 400_000), (2.0 ** -7, 900_000)), 2.0 ** -10),
                       flow_uplink=FlowControl(((0.0, 300_000),), 2.0 ** -11))


def make_profile(resource, server, size, durations, edges, batch=4):
    n = len(resource)
    src = np.array([a for a, b in edges], dtype=np.int64)
    dst = np.array([b for a, b in edges], dtype=np.int64)
    ptr, idx = csr_from_edges(n, src, dst)
    empty_ptr, empty_idx = csr_from_edges(n, np.array([], np.int64), np.array([], np.int64))
    graph = OpGraph(name=np.array([f"op{i}" for i in range(n)]), op_type=np.array(["X"] * n),
                    resource=np.array(resource), server=np.array(server), size_bytes=np.array(size),
                    variable=np.full(n, -1), data_ptr=ptr, data_idx=idx, ctrl_ptr=empty_ptr, ctrl_idx=empty_idx)
    durations = np.atleast_2d(np.array(durations, dtype=float))
    return Profile(graph=graph, duration_s=durations, start_s=np.full(durations.shape, np.nan),
                   step_makespan_s=durations.sum(axis=1), step_wall_s=np.array([]), batch_size=batch,
                   variables=VariableTable.empty())


@st.composite
def random_profiles(draw, max_ops=14, servers=1):
    """Random step DAGs, acyclic by construction (edges only go forward)."""
    n = draw(st.integers(2, max_ops))
    resource, server, size = [], [], []
    for _ in range(n):
        r = draw(st.sampled_from([Resource.DOWNLINK, Resource.WORKER, Resource.UPLINK, Resource.PS]))
        resource.append(int(r))
        server.append(-1 if r == Resource.WORKER else draw(st.integers(0, servers - 1)))
        size.append(draw(st.integers(0, 2_000_000)) if r in (Resource.DOWNLINK, Resource.UPLINK) else 0)
    edges = [(a, b) for b in range(n) for a in range(b) if draw(st.booleans()) and draw(st.booleans())]
    steps = draw(st.integers(1, 3))
    # Durations are multiples of 2^-12 s, like every constant of CLUSTER: two workers that
    # replay the same steps reach the same instants along different paths, and only exact
    # binary sums make those ties exact in float too (see CLUSTER).
    durations = [[0.0 if resource[i] in (0, 2) or draw(st.integers(0, 3)) == 0
                  else draw(st.integers(1, 80)) * 2.0 ** -12 for i in range(n)] for _ in range(steps)]
    if servers > 1:  # every server index must exist for the graph to have M servers
        server[0], resource[0], size[0] = servers - 1, int(Resource.PS), 0
        for row in durations:
            row[0] = 5 * 2.0 ** -12  # dyadic, as every other duration (a non-dyadic one: see below)
    return make_profile(resource, server, size, durations, edges)


def engine_vs_reference(profile, config, cluster=CLUSTER, servers=None, priorities=None, exact_arbiter=True):
    """Largest relative difference of step end times between the engine and the reference.

    Two float implementations may order a near-tie (two times equal in exact arithmetic,
    reached by different float operations) differently, and then diverge (docs/model.md §7.2). Where
    they disagree, the exact rational-arithmetic reference decides: the engine must match it.
    """
    graph = prepare(profile, cluster, workers=config.workers, mode=config.mode, servers=servers,
                    priorities=priorities)
    fast = run(graph, cluster, config)
    _, ref_end = reference_run(graph, cluster, config)
    ref_end = np.array(ref_end, dtype=float)
    error = float(np.max(np.abs(fast.step_end_s - ref_end) / np.maximum(np.abs(ref_end), 1e-12)))
    if error >= 1e-9 and exact_arbiter:
        _, exact = reference_run(graph, cluster, config, numeric=Fraction)
        exact = np.array([[float(x) for x in row] for row in exact])
        error = float(np.max(np.abs(fast.step_end_s - exact) / np.maximum(np.abs(exact), 1e-12)))
    return error


CONFIG_SPACE = st.builds(
    lambda w, mode, sharing, transfer, seed, stagger: SimConfig(
        workers=w, mode=mode, sharing=sharing, transfer=transfer, steps=6, warmup=1, seed=seed,
        flow_cap_Bps=4e7 if sharing is Sharing.FLOW_CAP else None,
        # delayed first steps, in multiples of 2^-9 s (exact, like every other time here)
        start_offsets_s=tuple(k * stagger * 2.0 ** -9 for k in range(w)) if stagger else None),
    st.integers(1, 4), st.sampled_from(list(Mode)), st.sampled_from([Sharing.PS, Sharing.FCFS, Sharing.FLOW_CAP]),
    st.sampled_from(FLOW_TRANSFERS), st.integers(0, 3), st.integers(0, 3))


# The network terms of docs/model.md §4.4-4.5: links that burst at their peak and sustain half
# of it, and FIFOs of window-limited connections; dyadic like every other constant.
NETWORK = dataclasses.replace(CLUSTER, bucket_downlink=TokenBucket(2.0 ** 26, 2.0 ** 17),
                              bucket_uplink=TokenBucket(2.0 ** 25, 2.0 ** 16),
                              queue_window_downlink_bytes=2.0 ** 16, queue_window_uplink_bytes=2.0 ** 15)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_profiles(), CONFIG_SPACE, st.randoms(use_true_random=False))
def test_engine_matches_reference_on_random_dags(profile, config, rnd):
    priorities = np.array([rnd.random() for _ in range(profile.graph.n_ops)])
    assert engine_vs_reference(profile, config, priorities=priorities) < 1e-9


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# At most 2 workers: with 2 servers, at most 4 tasks share the 1.5 cores, so every share
# (1, 0.75, 0.5, 0.375) is an exact binary fraction, like every other number here.
@given(random_profiles(servers=2), st.integers(1, 2), st.sampled_from([Sharing.PS, Sharing.FCFS]),
       st.booleans(), st.sampled_from(list(OverheadPlacement)))
def test_engine_matches_reference_with_two_servers_colocation_and_parse_placement(profile, workers, sharing,
                                                                                  colocated, placement):
    colocation = Colocation.single_host(workers, 2, 1.5) if colocated else None
    config = SimConfig(workers=workers, sharing=sharing, steps=5, warmup=1, colocation=colocation)
    cluster = dataclasses.replace(CLUSTER, overhead_placement=placement)
    assert engine_vs_reference(profile, config, cluster=cluster) < 1e-9


@pytest.mark.parametrize("name", ["tiny", "vgg11", "resnet50"])
@pytest.mark.parametrize("transfer", FLOW_TRANSFERS)
def test_engine_matches_reference_on_bundled_profiles(bundled_profile, name, transfer):
    profile = bundled_profile(name)
    priorities = np.random.default_rng(3).permutation(profile.graph.n_ops).astype(float)
    # grpc's window returns multiply the events, and with them the near-ties that make a
    # chaotic run diverge between two float implementations (docs/model.md §7.2): fewer steps.
    steps = 4 if name == "resnet50" or transfer is Transfer.GRPC else 8
    config = SimConfig(workers=3, transfer=transfer, steps=steps, warmup=1)
    assert engine_vs_reference(profile, config, priorities=priorities, exact_arbiter=False) < 1e-9


@pytest.mark.parametrize("config", [
    SimConfig(workers=1, steps=300, warmup=10),
    SimConfig(workers=4, mode=Mode.SYNC, steps=120, warmup=10),
    SimConfig(workers=4, sharing=Sharing.FCFS, steps=120, warmup=10),
    SimConfig(workers=3, mode=Mode.ALLREDUCE, steps=120, warmup=10),
], ids=["one-worker", "sync", "fcfs", "allreduce"])
def test_long_runs_agree_where_dynamics_are_not_chaotic(bundled_profile, config):
    assert engine_vs_reference(bundled_profile("tiny"), config, exact_arbiter=False) < 1e-9


def test_exact_rational_reference_on_a_small_case():
    # downlinks feed computations that feed uplinks; two workers share the links under ps.
    profile = make_profile(
        resource=[0, 0, 1, 1, 2, 2, 3],
        server=[0, 0, -1, -1, 0, 0, 0],
        size=[300_000, 700_000, 0, 0, 500_000, 100_000, 0],
        durations=[[0, 0, 2e-3, 5e-3, 0, 0, 1e-3], [0, 0, 3e-3, 4e-3, 0, 0, 2e-3]],
        edges=[(0, 2), (1, 3), (2, 3), (2, 4), (3, 5), (4, 6), (5, 6)])
    cluster = ClusterModel(1e8, 8e7, win_bytes=250_000)
    for transfer in (Transfer.HTTP2, Transfer.FIFO):
        config = SimConfig(workers=3, transfer=transfer, steps=12, warmup=1, seed=5)
        graph = prepare(profile, cluster, workers=3)
        fast = run(graph, cluster, config)
        _, exact = reference_run(graph, cluster, config, numeric=Fraction)
        exact = np.array([[float(x) for x in row] for row in exact])
        assert np.max(np.abs(fast.step_end_s - exact) / exact) < 1e-12


@pytest.mark.parametrize("transfer", [Transfer.HTTP2, Transfer.GRPC])
def test_a_link_clock_moved_back_past_its_limit_keeps_every_end(transfer):
    """A link's virtual clock (docs/model.md §7.4) is moved back to 0 once it passes 2^30 bytes
    while chunks are on it: here worker 0 alone moves 1.34e9 bytes before worker 1 joins, and
    the link is never idle until the last end. Every step ends as the reference's."""
    gib = 2 ** 30
    profile = make_profile(resource=[0, 1, 2, 3], server=[0, -1, 0, 0], size=[gib + gib // 2, 0, gib // 4, 0],
                           durations=[[0, 2.0 ** -3, 0, 2.0 ** -4]], edges=[(0, 1), (1, 2), (2, 3)])
    config = SimConfig(workers=3, transfer=transfer, steps=2, warmup=0, start_offsets_s=(0.0, 10.0, 10.5))
    assert engine_vs_reference(profile, config, cluster=ClusterModel(2.0 ** 27, 2.0 ** 27, win_bytes=2 ** 22)) < 1e-9


def chain(size_bytes, compute_s, update_s):
    """downlink -> compute -> uplink -> update: the four phases of TPDS's sync model."""
    return make_profile(resource=[0, 1, 2, 3], server=[0, -1, 0, 0], size=[size_bytes, 0, size_bytes, 0],
                        durations=[[0, compute_s, 0, update_s]], edges=[(0, 1), (1, 2), (2, 3)])


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_sync_ps_step_time_is_the_closed_form(workers):
    size, compute, update, bandwidth = 4_000_000, 0.05, 0.002, 1e8
    cluster = ClusterModel.from_bandwidth(bandwidth)
    graph = prepare(chain(size, compute, update), cluster, workers=workers, mode=Mode.SYNC)
    result = run(graph, cluster, SimConfig(workers=workers, mode=Mode.SYNC, steps=5, warmup=1))
    # TPDS Eq. 7: all workers transfer at once, each at B/W; the analytical baseline says the same.
    from simulate.analytic import sync_ps

    expected = sync_ps(workers, 4, compute, 0.0, size / bandwidth, size / bandwidth, update).step_time_s
    assert expected == pytest.approx(workers * size / bandwidth + compute + workers * size / bandwidth + update)
    assert np.allclose(np.diff(result.step_end_s[0]), expected, rtol=1e-12)
    assert np.allclose(result.step_end_s[:, -1], result.step_end_s[0, -1], rtol=1e-12)


@pytest.mark.parametrize("workers", [2, 4])
def test_sync_fcfs_last_worker_waits_for_everyone(workers):
    size, compute, update, bandwidth = 4_000_000, 0.05, 0.002, 1e8
    cluster = ClusterModel.from_bandwidth(bandwidth)
    graph = prepare(chain(size, compute, update), cluster, workers=workers, mode=Mode.SYNC)
    result = run(graph, cluster, SimConfig(workers=workers, mode=Mode.SYNC, sharing=Sharing.FCFS, steps=3, warmup=1))
    t = size / bandwidth
    # FCFS: worker k's download ends at (k+1)t; uploads then queue behind each other.
    finish = []
    link_free = 0.0
    for k in range(workers):
        ready = (k + 1) * t + compute
        link_free = max(link_free, ready) + t
        finish.append(link_free + update)
    assert result.step_end_s[:, 0] == pytest.approx(finish, rel=1e-12)
    assert result.step_start_s[:, 1] == pytest.approx([max(finish)] * workers, rel=1e-12)  # the barrier


@pytest.mark.parametrize("workers", [2, 3, 8])
def test_allreduce_step_time_is_the_closed_form(workers):
    size, compute, update, bandwidth = 4_000_000, 0.05, 0.002, 1e8
    cluster = ClusterModel.from_bandwidth(bandwidth)
    graph = prepare(chain(size, compute, update), cluster, workers=workers, mode=Mode.ALLREDUCE)
    result = run(graph, cluster, SimConfig(workers=workers, mode=Mode.ALLREDUCE, steps=4, warmup=1))
    expected = compute + 2 * (workers - 1) / workers * size / bandwidth + update  # TPDS Eq. 11
    assert np.allclose(np.diff(result.step_end_s[0]), expected, rtol=1e-12)
    from simulate.analytic import ring_allreduce

    # Eq. 11 has no update term: the simulation's step is the closed form plus the update.
    closed = ring_allreduce(workers, 4, compute, 0.0, size / bandwidth).step_time_s
    assert closed + update == pytest.approx(expected, rel=1e-12)


def test_overhead_split_adds_parse_ops_on_the_receiver():
    cluster = ClusterModel(1e8, 1e8, overhead_downlink=Overhead(1e-9, 2e-4), overhead_uplink=Overhead(3e-9, 0))
    graph = prepare(chain(1_000_000, 0.01, 0.001), cluster)
    assert list(graph.resource) == [0, 1, 1, 2, 3, 3]
    assert list(graph.kind) == [1, 2, 0, 1, 2, 0]
    assert graph.work[0, 1] == pytest.approx(1e-9 * 1e6 + 2e-4)
    assert graph.work[0, 4] == pytest.approx(3e-9 * 1e6)
    # One worker, no contention: the step is the sum of every phase.
    result = run(graph, cluster, SimConfig(workers=1, steps=3, warmup=1))
    expected = 1e6 / 1e8 + 1.2e-3 + 0.01 + 1e6 / 1e8 + 3e-3 + 0.001
    assert np.allclose(np.diff(result.step_end_s[0]), expected, rtol=1e-12)


def test_http2_cuts_a_stream_at_most_once():
    # C occupies the link while A (5 windows) and B (1 window) wait. A's first service sends
    # one window and puts A behind B; A's second service sends the rest (ICPE Fig. 12).
    profile = make_profile(resource=[0, 0, 0, 1], server=[0, 0, 0, -1], size=[100, 500, 100, 0],
                           durations=[[0, 0, 0, 0.0]], edges=[(0, 3), (1, 3), (2, 3)])
    cluster = ClusterModel(100.0, 100.0, win_bytes=100)
    graph = prepare(profile, cluster)
    result = run(graph, cluster, SimConfig(workers=1, steps=1, warmup=0, trace_steps=1))
    trace = result.trace
    links = trace["slot"] == 0
    order = [(int(o), s, e) for o, s, e in zip(trace["op"][links], trace["start_s"][links], trace["end_s"][links])]
    assert order == [(0, 0.0, 1.0), (1, 1.0, 2.0), (2, 2.0, 3.0), (1, 3.0, 7.0)]


def test_link_capacity_and_bytes_are_conserved(bundled_profile):
    profile = bundled_profile("vgg11")
    cluster = ClusterModel(1.25e8, 1.25e8, win_bytes=4 * 2**20)
    graph = prepare(profile, cluster, workers=4)
    result = run(graph, cluster, SimConfig(workers=4, steps=3, warmup=0, trace_steps=3))
    t = result.trace
    is_link = np.isin(graph.resource[t["op"]], [Resource.DOWNLINK, Resource.UPLINK])
    win = cluster.win_bytes
    # Each chunk's bytes, in the order chunks start: a stream above WIN is sent as WIN, then the rest.
    chunk_bytes = np.zeros(len(t["op"]))
    moved: dict[tuple, float] = {}
    for i in np.flatnonzero(is_link)[np.argsort(t["start_s"][is_link], kind="stable")]:
        key = (int(t["worker"][i]), int(t["step"][i]), int(t["op"][i]))
        size = graph.work[0, t["op"][i]]
        chunk_bytes[i] = size - win if key in moved else min(size, win)
        moved[key] = moved.get(key, 0.0) + chunk_bytes[i]
    for (_w, _k, op), total in moved.items():  # bytes are conserved
        assert total == pytest.approx(graph.work[0, op])
    # Capacity: the chunks inside any chunk's interval never carry more than B times its length.
    for slot in (0, 2):
        mask = is_link & (t["slot"] == slot)
        starts, ends, sizes = t["start_s"][mask], t["end_s"][mask], chunk_bytes[mask]
        for a, b in zip(starts, ends):
            inside = (starts >= a) & (ends <= b)
            assert sizes[inside].sum() <= 1.25e8 * (b - a) * (1 + 1e-9) + 1e-6


@pytest.mark.parametrize("name", ["tiny", "alexnet", "resnet50"])
def test_throughput_does_not_fall_as_bandwidth_rises_under_ps(bundled_profile, name):
    profile = bundled_profile(name)
    for workers in (1, 2, 4):
        previous = 0.0
        for mbit in (50, 100, 200, 400, 800, 1600, 3200):
            cluster = ClusterModel.from_bandwidth(mbit * 1e6 / 8)
            graph = prepare(profile, cluster, workers=workers)
            value = throughput_eps(run(graph, cluster, SimConfig(workers=workers, steps=120, warmup=20)))
            assert value >= previous, (workers, mbit, value, previous)
            previous = value


def test_results_are_deterministic_for_a_seed(bundled_profile):
    profile = bundled_profile("tiny")
    graph = prepare(profile, CLUSTER, workers=3)
    a = run(graph, CLUSTER, SimConfig(workers=3, steps=50, warmup=5, seed=11))
    b = run(graph, CLUSTER, SimConfig(workers=3, steps=50, warmup=5, seed=11))
    c = run(graph, CLUSTER, SimConfig(workers=3, steps=50, warmup=5, seed=12))
    assert np.array_equal(a.step_end_s, b.step_end_s)
    assert not np.array_equal(a.step_end_s, c.step_end_s)


def test_steps_of_empty_grpc_chunks_do_not_overflow_the_window_returns():
    """Found by hypothesis: all-reduce makes every downlink take nothing, so a step of empty
    grpc chunks ends at once, again and again; each chunk used to leave a return of 0 bytes
    behind, until the buffer overflowed. An empty last chunk returns nothing."""
    profile = make_profile([Resource.DOWNLINK] * 6, [0] * 6, [0] * 6, [[0.0] * 6], edges=[])
    config = SimConfig(workers=1, mode=Mode.ALLREDUCE, transfer=Transfer.GRPC, steps=6, warmup=1)
    assert engine_vs_reference(profile, config) < 1e-9


def test_a_grpc_trace_holds_every_chunk_of_the_traced_steps(bundled_profile):
    """grpc cuts a stream at every window edge: the trace grows until every chunk fits."""
    profile = bundled_profile("alexnet")
    cluster = dataclasses.replace(CLUSTER, flow_downlink=FlowControl(((0.0, 65_536),), 2.0 ** -12),
                                  flow_uplink=FlowControl(((0.0, 65_536),), 2.0 ** -12))
    config = SimConfig(workers=2, transfer=Transfer.GRPC, steps=4, warmup=1, trace_steps=2)
    result = run(prepare(profile, cluster, workers=2), cluster, config)
    graph = result.graph
    traced = result.trace
    # every op of each worker's first two steps ends in the trace exactly once, as its last chunk
    for w in range(2):
        for k in range(2):
            mine = (traced["worker"] == w) & (traced["step"] == k)
            assert set(traced["op"][mine].tolist()) == set(range(graph.n_ops))
    big = np.flatnonzero((graph.kind == KIND_TRANSFER) & (graph.work.max(axis=0) > 4 * 65_536))
    # each big stream was cut at several window edges: more than the two rows per op of the old room
    assert np.isin(traced["op"], big).sum() > 2 * 2 * 2 * len(big)


def test_the_kernel_runs_without_reference_counting_where_numba_allows():
    """The loop is 2-3x faster without numba's reference counting (simulate/kernel.py); this says
    which build ran, so that a numba without the option shows up as a failing test, not as a
    silent slow-down."""
    import numba
    from numba.core.cpu import CPUTargetOptions

    from simulate.kernel import NRT_OFF

    assert NRT_OFF == ({"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {})
    assert NRT_OFF, f"numba {numba.__version__} has no _nrt option: the event loop runs with reference counting"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_profiles(), CONFIG_SPACE)
def test_engine_matches_reference_with_token_buckets_and_fifo_waits(profile, config):
    assert engine_vs_reference(profile, config, cluster=NETWORK) < 1e-9


@pytest.mark.parametrize("name", ["tiny", "alexnet"])
@pytest.mark.parametrize("transfer", [Transfer.GRPC, Transfer.FIFO])
def test_network_terms_match_reference_on_bundled_profiles(bundled_profile, name, transfer):
    config = SimConfig(workers=3, transfer=transfer, steps=4, warmup=1, seed=2,
                       start_offsets_s=(0.0, 2.0 ** -8, 2.0 ** -7))
    assert engine_vs_reference(bundled_profile(name), config, cluster=NETWORK) < 1e-9


def test_a_token_bucket_bursts_then_sustains():
    """One worker, one big transfer on an idle link: the first bucket of bytes (over what the
    sustained rate pays for) goes at the peak, the rest at the sustained rate."""
    size = 2.0 ** 24
    profile = make_profile([Resource.DOWNLINK], [0], [int(size)], [[0.0]], edges=[])
    cluster = ClusterModel(2.0 ** 27, 2.0 ** 27, bucket_downlink=TokenBucket(2.0 ** 26, 2.0 ** 22))
    config = SimConfig(workers=1, transfer=Transfer.FIFO, steps=1, warmup=0)
    end = run(prepare(profile, cluster), cluster, config).step_end_s[0, 0]
    # at the peak P until the bucket b is spent: t1 = b / (P - R); then the rest at R
    t1 = 2.0 ** 22 / (2.0 ** 27 - 2.0 ** 26)
    assert end == pytest.approx(t1 + (size - 2.0 ** 27 * t1) / 2.0 ** 26, rel=1e-12)
    # without the bucket the peak is sustained
    plain = ClusterModel(2.0 ** 27, 2.0 ** 27)
    assert run(prepare(profile, plain), plain, config).step_end_s[0, 0] == pytest.approx(size / 2.0 ** 27)


def test_a_light_direction_waits_for_its_acknowledgements():
    """docs/model.md §4.5: worker 0 uploads 1 MiB while workers 1 and 2 download; the upload's
    acknowledgements wait behind their two windows, so it sends a window per 2 windows' worth
    of the downlink: half the link. Without queue windows it gets the whole link."""
    B, window = 2.0 ** 27, 2.0 ** 17
    profile = make_profile([Resource.DOWNLINK, Resource.WORKER, Resource.UPLINK], [0, -1, 0],
                           [2 ** 24, 0, 2 ** 20], [[0.0, 2.0 ** -12, 0.0]], edges=[(0, 1), (1, 2)])
    config = SimConfig(workers=3, transfer=Transfer.FIFO, steps=1, warmup=0, trace_steps=1,
                       start_offsets_s=(0.0, 2.0 ** -4, 2.0 ** -4))

    def upload_of_worker_0(cluster):
        trace = run(prepare(profile, cluster, workers=3), cluster, config).trace
        mine = (trace["worker"] == 0) & (trace["op"] == 2)
        return float((trace["end_s"] - trace["start_s"])[mine][0])

    fifo = ClusterModel(B, B, queue_window_downlink_bytes=window, queue_window_uplink_bytes=window)
    assert upload_of_worker_0(fifo) == pytest.approx(2 * 2.0 ** 20 / B, rel=1e-12)
    assert upload_of_worker_0(ClusterModel(B, B)) == pytest.approx(2.0 ** 20 / B, rel=1e-12)


def test_a_message_waits_behind_the_queued_windows():
    """A RunGraph request (a message on the uplink) that starts while another worker uploads
    waits behind that connection's queued window."""
    B, window = 2.0 ** 27, 2.0 ** 17
    profile = make_profile([Resource.UPLINK, Resource.PS], [0, 0], [2 ** 24, 0], [[0.0, 2.0 ** -12]],
                           edges=[(0, 1)])
    rpc = RpcChain(rungraph_s=2.0 ** -12)
    fifo = ClusterModel(B, B, queue_window_uplink_bytes=window, rpc=rpc)
    plain = ClusterModel(B, B, rpc=rpc)
    start_1 = 2.0 ** -8
    config = SimConfig(workers=2, transfer=Transfer.FIFO, steps=1, warmup=0, start_offsets_s=(0.0, start_1),
                       trace_steps=1)

    def rungraph_end_of_worker_1(cluster):
        graph = prepare(profile, cluster, workers=2)
        trace = run(graph, cluster, config).trace
        rungraph = int(np.flatnonzero(graph.names == "RunGraph")[0])
        mine = (trace["worker"] == 1) & (trace["op"] == rungraph)
        return float(trace["end_s"][mine][0])

    assert rungraph_end_of_worker_1(plain) == pytest.approx(start_1 + 2.0 ** -12, rel=1e-12)
    assert rungraph_end_of_worker_1(fifo) == pytest.approx(start_1 + 2.0 ** -12 + window / B, rel=1e-12)

def test_a_message_waits_behind_no_more_than_the_links_buffer():
    """docs/model.md §4.5: the queue a message waits behind is at most the link's buffer; what
    the windows would queue beyond it waits at the senders."""
    B, window = 2.0 ** 27, 2.0 ** 17
    profile = make_profile([Resource.UPLINK, Resource.PS], [0, 0], [2 ** 24, 0], [[0.0, 2.0 ** -12]],
                           edges=[(0, 1)])
    rpc = RpcChain(rungraph_s=2.0 ** -12)
    start_2 = 2.0 ** -8
    config = SimConfig(workers=3, transfer=Transfer.FIFO, steps=1, warmup=0, start_offsets_s=(0.0, 0.0, start_2),
                       trace_steps=1)

    def rungraph_end_of_worker_2(buffer):
        cluster = ClusterModel(B, B, queue_window_uplink_bytes=window, rpc=rpc, buffer_uplink_bytes=buffer)
        graph = prepare(profile, cluster, workers=3)
        trace = run(graph, cluster, config).trace
        rungraph = int(np.flatnonzero(graph.names == "RunGraph")[0])
        mine = (trace["worker"] == 2) & (trace["op"] == rungraph)
        return float(trace["end_s"][mine][0])

    # two uploads keep a window each queued: unbounded, the message waits behind both ...
    assert rungraph_end_of_worker_2(math.inf) == pytest.approx(start_2 + 2.0 ** -12 + 2 * window / B, rel=1e-12)
    # ... a buffer of 1.5 windows holds only that much; one larger than both changes nothing
    assert rungraph_end_of_worker_2(1.5 * window) == pytest.approx(start_2 + 2.0 ** -12 + 1.5 * window / B,
                                                                   rel=1e-12)
    assert rungraph_end_of_worker_2(4 * window) == rungraph_end_of_worker_2(math.inf)


def test_a_links_buffer_must_be_positive():
    with pytest.raises(UsageError, match="buffer_uplink_bytes"):
        ClusterModel(1e8, 1e8, buffer_uplink_bytes=0.0)


# Buffers that hold two downlink windows and one and a half uplink windows (dyadic, as above).
BUFFERED = dataclasses.replace(NETWORK, buffer_downlink_bytes=2.0 ** 17, buffer_uplink_bytes=3 * 2.0 ** 14)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_profiles(servers=2), CONFIG_SPACE)
def test_engine_matches_reference_with_bounded_buffers(profile, config):
    cluster = dataclasses.replace(BUFFERED, rpc=RpcChain(2.0 ** -12, 2.0 ** -13, 2.0 ** -11, 2.0 ** -12))
    assert engine_vs_reference(profile, config, cluster=cluster) < 1e-9


RPC = dataclasses.replace(NETWORK, rpc=RpcChain(2.0 ** -12, 2.0 ** -13, 2.0 ** -11, 2.0 ** -12))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_profiles(servers=2), CONFIG_SPACE)
def test_engine_matches_reference_with_the_rpc_chain(profile, config):
    assert engine_vs_reference(profile, config, cluster=RPC) < 1e-9


def test_the_rpc_chain_frames_each_step():
    """With one worker and an idle network, a step is the RunGraph request's delay, the traced
    ops, and the response's delay: the chain's messages add their latencies in sequence."""
    # a PS op (the read), the parameter's downlink, a worker op, the gradient's uplink, the PS's update
    profile = make_profile([Resource.PS, Resource.DOWNLINK, Resource.WORKER, Resource.UPLINK, Resource.PS],
                           [0, 0, -1, 0, 0], [0, 2 ** 20, 0, 2 ** 20, 0],
                           [[2.0 ** -10, 0.0, 2.0 ** -8, 0.0, 2.0 ** -10]], edges=[(0, 1), (1, 2), (2, 3), (3, 4)])
    plain = ClusterModel(2.0 ** 27, 2.0 ** 27)
    chain = dataclasses.replace(plain, rpc=RpcChain(2.0 ** -11, 2.0 ** -12, 2.0 ** -12, 2.0 ** -11))
    config = SimConfig(workers=1, transfer=Transfer.FIFO, steps=1, warmup=0)
    base = run(prepare(profile, plain), plain, config).step_end_s[0, 0]
    framed = run(prepare(profile, chain), chain, config).step_end_s[0, 0]
    # RunGraph before the read, the response after the update; the requests overlap the read
    assert framed == pytest.approx(base + 2.0 ** -11 + 2.0 ** -11, rel=1e-12)


# Stragglers (docs/model.md §4.6): each worker's computation and parsing at its own speed; the
# factors are powers of two, so that every time stays exact.
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_profiles(servers=2), CONFIG_SPACE, st.lists(st.sampled_from([0.25, 0.5, 1.0, 2.0]), min_size=4,
                                                          max_size=4))
def test_engine_matches_reference_with_stragglers(profile, config, speeds):
    config = dataclasses.replace(config, worker_speed=tuple(speeds[:config.workers]))
    assert engine_vs_reference(profile, config, cluster=NETWORK) < 1e-9


def test_a_transfer_ending_as_its_coupled_share_falls_to_zero_ends_then():
    # Workers 0 and 2 finish op 2 at one instant in exact arithmetic; in float worker 2's chunk
    # kept a residue of 4e-11 bytes, and the share of its link fell to 0 (flow_cap over two
    # servers: its other link got busier), so it waited 0.17 ms for bandwidth it did not need.
    profile = make_profile(resource=[3, 1, 0, 1, 0, 0, 2, 2, 0, 1], server=[1, -1, 1, -1, 0, 0, 0, 0, 0, -1],
                           size=[0, 0, 114464, 0, 474183, 497371, 205, 447604, 0, 0],
                           durations=[[0.001234, 2.0 ** -12, 0, 2.0 ** -6, 0, 0, 0, 0, 0, 0]],
                           edges=[(0, 1), (1, 2), (1, 4), (2, 5), (2, 6), (4, 7), (6, 7)])
    config = SimConfig(workers=4, sharing=Sharing.FLOW_CAP, transfer=Transfer.FIFO, steps=6, warmup=1,
                       flow_cap_Bps=4e7, start_offsets_s=(0.0, 0.005859375, 0.01171875, 0.017578125),
                       worker_speed=(2.0, 0.25, 2.0, 0.25))
    assert engine_vs_reference(profile, config, cluster=NETWORK) < 1e-9


def test_a_straggler_slows_its_own_steps_in_async_and_everyone_in_sync():
    profile = make_profile(resource=[1, 0, 1, 2], server=[-1, 0, -1, 0], size=[0, 2**16, 0, 2**16],
                           durations=[[2.0 ** -6, 0, 2.0 ** -6, 0]], edges=[(0, 1), (1, 2), (2, 3)])
    cluster = dataclasses.replace(CLUSTER, overhead_downlink=Overhead(0.0, 0.0), overhead_uplink=Overhead(0.0, 0.0))

    def step_times(mode, speed):
        config = SimConfig(workers=2, mode=mode, steps=20, warmup=0, worker_speed=speed)
        return np.diff(run(prepare(profile, cluster, workers=2, mode=mode), cluster, config).step_end_s, axis=1)

    even, slow = step_times(Mode.ASYNC, (1.0, 1.0)), step_times(Mode.ASYNC, (1.0, 0.5))
    assert np.median(slow[1]) > 1.5 * np.median(even[1])  # its computation takes twice as long
    assert np.median(slow[0]) <= np.median(even[0]) * 1.01  # the other does not wait for it
    sync_slow = step_times(Mode.SYNC, (1.0, 0.5))
    assert np.median(sync_slow[0]) == pytest.approx(np.median(sync_slow[1]))  # a barrier: everyone waits
    assert np.median(sync_slow[0]) > 1.5 * np.median(step_times(Mode.SYNC, (1.0, 1.0))[0])


# A what-if link latency (docs/model.md §11.2): a pure delay after every transfer, on every
# message, and on grpc's window updates; dyadic, like every other constant here.
LATENCY = dataclasses.replace(RPC, overhead_placement=OverheadPlacement.LANE).with_latency(2.0 ** -11, 2.0 ** -12)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_profiles(servers=2), CONFIG_SPACE, st.booleans())
def test_engine_matches_reference_with_link_latency(profile, config, with_rpc):
    cluster = LATENCY if with_rpc else dataclasses.replace(LATENCY, rpc=None)
    assert engine_vs_reference(profile, config, cluster=cluster) < 1e-9


@pytest.mark.xfail(strict=True, reason="a known divergence, to be explained: with one non-dyadic duration "
                   "(1.234e-3 s) the engine parts from the exact reference by 1.9e-7 on 6 steps (fcfs, http2, "
                   "latency, RPC chain); with a dyadic one it matches exactly")
def test_engine_matches_the_exact_reference_with_a_non_dyadic_duration():
    """Found by the property test above when its forced duration was 1.234e-3 s."""
    config = SimConfig(workers=2, mode=Mode.ASYNC, sharing=Sharing.FCFS, transfer=Transfer.HTTP2, steps=6, warmup=1,
                       seed=0)
    profile = make_profile([3, 0, 0, 1, 0, 3, 0, 2], [1, 0, 0, -1, 0, 0, 0, 0], [0, 0, 0, 0, 262145, 0, 0, 131073],
                           [[1.234e-3, 0, 0, 0, 0, 0, 0, 0]], [(0, 4), (0, 7)])
    assert engine_vs_reference(profile, config, cluster=LATENCY) < 1e-9


def _chain_profile():
    # a PS op (the read), the parameter's downlink, a worker op, the gradient's uplink, the PS's update
    return make_profile([Resource.PS, Resource.DOWNLINK, Resource.WORKER, Resource.UPLINK, Resource.PS],
                        [0, 0, -1, 0, 0], [0, 2 ** 20, 0, 2 ** 20, 0],
                        [[2.0 ** -10, 0.0, 2.0 ** -8, 0.0, 2.0 ** -10]], edges=[(0, 1), (1, 2), (2, 3), (3, 4)])


def _step_s(profile, cluster, transfer=Transfer.FIFO):
    config = SimConfig(workers=1, transfer=transfer, steps=3, warmup=0)
    return np.diff(run(prepare(profile, cluster), cluster, config).step_end_s[0], prepend=0.0)


def test_link_latency_adds_its_delay_to_each_dependent_transfer():
    """One worker, an idle network: the step crosses one downlink and one uplink, each arriving its
    direction's latency later; a step framed by the RPC chain crosses the links twice more."""
    profile = _chain_profile()
    down, up = 2.0 ** -9, 2.0 ** -8
    plain = ClusterModel(2.0 ** 27, 2.0 ** 27)
    base = _step_s(profile, plain)
    # 2^-10 read + 2^20 B at 2^27 B/s + 2^-8 compute + 2^20 B again + 2^-10 update, every step
    np.testing.assert_array_equal(base, [2.0 ** -10 + 2.0 ** -7 + 2.0 ** -8 + 2.0 ** -7 + 2.0 ** -10] * 3)
    np.testing.assert_array_equal(_step_s(profile, plain.with_latency(down, up)), base + down + up)
    chain = dataclasses.replace(plain, rpc=RpcChain(2.0 ** -11, 2.0 ** -12, 2.0 ** -12, 2.0 ** -11))
    # the RunGraph request goes up, the response comes down: two more crossings
    np.testing.assert_array_equal(_step_s(profile, chain.with_latency(down, up)),
                                  _step_s(profile, chain) + 2 * (down + up))
    # grpc: a 2^18-byte window cuts the downlink into four chunks, and each of the three that wait
    # for a WINDOW_UPDATE waits a round trip more (the bytes go down, the update comes up)
    windowed = dataclasses.replace(plain, flow_downlink=FlowControl(((0.0, 2.0 ** 18),), 2.0 ** -12))
    np.testing.assert_array_equal(_step_s(profile, windowed.with_latency(down, up), Transfer.GRPC),
                                  _step_s(profile, windowed, Transfer.GRPC) + down + up + 3 * (down + up))


def test_no_latency_leaves_the_graph_as_it_is_and_bad_latencies_name_the_parameter():
    profile = _chain_profile()
    plain = ClusterModel(2.0 ** 27, 2.0 ** 27)
    graph = prepare(profile, plain)
    same = prepare(profile, plain.with_latency(0.0))
    assert same.n_ops == graph.n_ops and np.array_equal(same.work, graph.work)
    far = prepare(profile, plain.with_latency(2.0 ** -9))
    # numbered right after its transfer, on the receiving side (the worker, then the PS)
    assert list(far.names) == ["op0", "op1", "op1/latency", "op2", "op3", "op3/latency", "op4"]
    assert list(far.kind) == [KIND_COMPUTE, KIND_TRANSFER, KIND_LATENCY, KIND_COMPUTE, KIND_TRANSFER, KIND_LATENCY,
                              KIND_COMPUTE]
    assert list(far.resource[far.kind == KIND_LATENCY]) == [Resource.WORKER, Resource.PS]
    for bad in (-1e-3, float("nan"), float("inf"), 11.0, "fast"):
        with pytest.raises(UsageError) as err:
            plain.with_latency(bad)
        assert err.value.source == "latency_s"
    with pytest.raises(UsageError) as err:
        ClusterModel(1e8, 1e8, latency_uplink_s=-1.0)
    assert err.value.source == "latency_uplink_s"


# A connection's own rate (docs/model.md §4.8): caps below the links' rates (dyadic, as above),
# one per direction, on a cluster with every network term.
CAPPED = dataclasses.replace(RPC, connection_cap_downlink_Bps=2.0 ** 25, connection_cap_uplink_Bps=2.0 ** 23)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_profiles(servers=2), CONFIG_SPACE)
def test_engine_matches_reference_with_connection_caps(profile, config):
    assert engine_vs_reference(profile, config, cluster=CAPPED) < 1e-9


def test_a_connection_cap_holds_each_worker_not_the_link():
    # One upload per step, nothing else: a worker alone moves at its cap, not the link's rate,
    # and two workers each keep their cap while the link has room for both.
    B, cap, size = 2.0 ** 27, 2.0 ** 24, 2.0 ** 20
    profile = make_profile([Resource.WORKER, Resource.UPLINK], [-1, 0], [0, size], [[2.0 ** -12, 0.0]],
                           edges=[(0, 1)])
    capped = ClusterModel(B, B, connection_cap_uplink_Bps=cap)
    config = SimConfig(workers=2, transfer=Transfer.FIFO, steps=4, warmup=0, start_offsets_s=(0.0, 0.0),
                       trace_steps=4)
    graph = prepare(profile, capped, workers=2)
    trace = run(graph, capped, config).trace
    uploads = trace["op"] == int(np.flatnonzero(graph.names == "op1")[0])
    durations = trace["end_s"][uploads] - trace["start_s"][uploads]
    assert len(durations) == 8
    assert durations == pytest.approx(np.full(durations.shape, size / cap), rel=1e-12)
    # shared at B / 2 each, the same two uploads would have taken half as long as they did
    assert size / (B / 2) < size / cap
    with pytest.raises(UsageError, match="connection_cap_uplink_Bps"):
        ClusterModel(B, B, connection_cap_uplink_Bps=0.0)
