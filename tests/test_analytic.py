"""The coarse analytical baselines (docs/model.md §9) and their parameters from a profile.

Formulas against numbers worked out by hand; exact MVA against a brute-force solution
of the same closed network as a continuous-time Markov chain; the forward/backward
rule on every bundled profile; and bad input against the documented error.
"""

import math
from pathlib import Path

import numpy as np
import pytest

from simulate import analytic, estimate
from tfbase.errors import UsageError
from tfprofile.dag import OpGraph, Profile, Resource, VariableTable, csr_from_edges
from tfprofile.profile_io import load_profile

PROFILES = Path(__file__).resolve().parent.parent / "data" / "profiles"
BUNDLED = ("tiny", "alexnet", "vgg11", "resnet50", "inception3")
LIN_STATIONS_FCFS = ("delay", "fcfs", "ps", "fcfs")  # worker, uplink, PS update, downlink


# ---------------------------------------------------------------------------
# Brute force: the closed network as a CTMC with exponential service


def ctmc_solution(service: np.ndarray, kinds: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per-class throughput (K,) and mean queue lengths (K, L) from global balance.

    A state lists the customers at each station: in arrival order at FCFS stations,
    sorted elsewhere (order does not matter there). Customers cycle 0 -> 1 -> ... -> L-1 -> 0.
    """
    n_classes, n_stations = service.shape
    start = tuple(tuple(range(n_classes)) if l == 0 else () for l in range(n_stations))
    index, states, moves = {start: 0}, [start], []
    pos = 0
    while pos < len(states):
        state = states[pos]
        for l, queue in enumerate(state):
            if not queue:
                continue
            if kinds[l] == "fcfs":
                leaving = [(queue[0], 1.0 / service[queue[0], l])]
            elif kinds[l] == "ps":
                leaving = [(k, 1.0 / (len(queue) * service[k, l])) for k in queue]
            else:
                leaving = [(k, 1.0 / service[k, l]) for k in queue]
            for k, rate in leaving:
                nxt = list(state)
                nxt[l] = tuple(c for c in queue if c != k)
                dest = (l + 1) % n_stations
                arrived = nxt[dest] + (k,)
                nxt[dest] = arrived if kinds[dest] == "fcfs" else tuple(sorted(arrived))
                nxt = tuple(nxt)
                if nxt not in index:
                    index[nxt] = len(states)
                    states.append(nxt)
                moves.append((pos, index[nxt], rate, k, l))
        pos += 1
    n = len(states)
    generator = np.zeros((n, n))
    for a, b, rate, _, _ in moves:
        generator[a, b] += rate
        generator[a, a] -= rate
    system = np.vstack([generator.T, np.ones(n)])
    rhs = np.zeros(n + 1)
    rhs[-1] = 1.0
    pi = np.linalg.lstsq(system, rhs, rcond=None)[0]
    throughput = np.zeros(n_classes)
    for a, _, rate, k, l in moves:
        if l == 0:
            throughput[k] += pi[a] * rate
    queue = np.zeros((n_classes, n_stations))
    for p, state in zip(pi, states):
        for l, customers in enumerate(state):
            for k in customers:
                queue[k, l] += p
    return throughput, queue


def random_service(rng, workers, fcfs_shared=True):
    service = rng.uniform(0.2, 3.0, size=(workers, 4))
    if fcfs_shared:  # S_D and S_U the same for every worker, as in TPDS §2.1.2
        service[:, 1] = service[0, 1]
        service[:, 3] = service[0, 3]
    return service


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mva_ps_stations_match_ctmc(workers, seed):
    # processor sharing and delay stations are product form for any per-class service times
    service = random_service(np.random.default_rng(seed), workers, fcfs_shared=False)
    kinds = ("delay", "ps", "ps", "ps")
    solution = analytic.mva_closed(service, kinds)
    throughput, queue = ctmc_solution(service, kinds)
    np.testing.assert_allclose(solution.throughput_per_s, throughput, rtol=1e-10)
    np.testing.assert_allclose(solution.queue_length, queue, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [3, 4])
def test_mva_fcfs_stations_match_ctmc_for_exponential_service(workers, seed):
    # with c² = 1 the FCFS recursion is exact for class-independent service (BCMP)
    service = random_service(np.random.default_rng(seed), workers)
    solution = analytic.mva_closed(service, LIN_STATIONS_FCFS, fcfs_scv=1.0)
    throughput, queue = ctmc_solution(service, LIN_STATIONS_FCFS)
    np.testing.assert_allclose(solution.throughput_per_s, throughput, rtol=1e-10)
    np.testing.assert_allclose(solution.queue_length, queue, rtol=1e-9, atol=1e-12)


def test_lin_ps_model_matches_ctmc():
    # Eq. 4 of lin_async is the MVA of the network the CTMC describes
    compute, down, up, update = [0.7, 1.9, 2.6], 0.45, 0.8, 0.3
    result = analytic.lin_async(3, 10, compute, down, up, update, rho_threshold=0.0)
    service = np.array([[c, up, update, down] for c in compute])
    throughput, _ = ctmc_solution(service, ("delay", "ps", "ps", "ps"))
    assert result.link_discipline == "ps"
    assert result.throughput_eps == pytest.approx(10 * throughput.sum(), rel=1e-10)
    assert result.throughput_ps_eps == pytest.approx(result.throughput_eps, rel=1e-15)


def test_eq2_waits_less_than_exponential_fcfs():
    # Eq. 2 charges half a service for the customer in service; exponential charges a whole one
    service = random_service(np.random.default_rng(7), 4)
    eq2 = analytic.mva_closed(service, LIN_STATIONS_FCFS).throughput_per_s.sum()
    expo = analytic.mva_closed(service, LIN_STATIONS_FCFS, fcfs_scv=1.0).throughput_per_s.sum()
    assert eq2 > expo


@pytest.mark.parametrize("kinds", [LIN_STATIONS_FCFS, ("delay", "ps", "ps", "ps")])
def test_merging_identical_workers_changes_nothing(kinds):
    rng = np.random.default_rng(11)
    two_types = np.vstack([np.tile(random_service(rng, 1), (5, 1)), np.tile(random_service(rng, 1), (4, 1))])
    two_types[:, 1], two_types[:, 3] = 0.6, 0.9
    rng.shuffle(two_types)
    merged = analytic.mva_closed(two_types, kinds)
    literal = analytic.mva_closed(two_types, kinds, merge_identical=False)
    np.testing.assert_allclose(merged.response_s, literal.response_s, rtol=1e-12)
    np.testing.assert_allclose(merged.throughput_per_s, literal.throughput_per_s, rtol=1e-12)
    np.testing.assert_allclose(merged.utilization, literal.utilization, rtol=1e-12)


def test_mva_results_are_read_only():
    solution = analytic.mva_closed([[1.0, 1.0]], ("delay", "ps"))
    with pytest.raises(ValueError):
        solution.response_s[0, 0] = 2.0


def test_many_identical_workers_are_cheap():
    # 1000 identical workers merge into one class of 1000 customers: 1001 populations
    result = analytic.lin_async(1000, 1, 1.0, 0.1, 0.1, 0.0)
    assert result.link_utilization <= 1.0
    assert result.throughput_eps == pytest.approx(10.0, rel=0.01)  # the downlink is saturated


# ---------------------------------------------------------------------------
# Lin et al. (TPDS Eqs. 1-6), by hand


@pytest.mark.parametrize("rho_threshold", [0.0, 0.5, 1.0])
def test_lin_one_worker_is_the_sum_of_the_phases(rho_threshold):
    result = analytic.lin_async(1, 32, 2.0, 0.5, 0.25, 0.25, rho_threshold=rho_threshold)
    assert result.throughput_eps == pytest.approx(32 / 3.0)
    assert result.step_time_s == pytest.approx(3.0)
    assert result.downlink_response_s == (0.5,) and result.uplink_response_s == (0.25,)


def test_lin_two_identical_workers_by_hand():
    # S_W = 2, S_U = S_D = 1, S_S = 0. One worker: cycle 4, so N^U = 1/4, ρ^U = 1/4.
    # Eq. 1: T^U = 1·(1 + 1/4) = 1.25, cycle 4.5, X = 2/4.5.
    # Eq. 2: T^U = 1 + 1·(1/4 − 1/8) = 1.125, cycle 4.25, X = 2/4.25; ρ^FCFS = 2/4.25 ≈ 0.4706.
    light = analytic.lin_async(2, 1, 2.0, 1.0, 1.0, 0.0, rho_threshold=0.5)
    assert light.throughput_fcfs_eps == pytest.approx(2 / 4.25, rel=1e-14)
    assert light.throughput_ps_eps == pytest.approx(2 / 4.5, rel=1e-14)
    assert light.link_utilization == pytest.approx(2 / 4.25, rel=1e-14)
    assert light.link_discipline == "fcfs" and light.throughput_eps == light.throughput_fcfs_eps
    assert light.downlink_response_s == pytest.approx((1.125, 1.125))
    assert light.step_time_s == pytest.approx(4.25)
    heavy = analytic.lin_async(2, 1, 2.0, 1.0, 1.0, 0.0, rho_threshold=0.47)
    assert heavy.link_discipline == "ps" and heavy.throughput_eps == pytest.approx(2 / 4.5, rel=1e-14)
    assert heavy.uplink_response_s == pytest.approx((1.25, 1.25))
    # Eq. 5 uses FCFS when ρ^FCFS is at most the threshold
    boundary = analytic.lin_async(2, 1, 2.0, 1.0, 1.0, 0.0, rho_threshold=light.link_utilization)
    assert boundary.link_discipline == "fcfs"


def test_lin_heterogeneous_workers_by_hand():
    # S_W = (1, 3), S_U = S_D = 1, S_S = 0; one worker alone: cycles 3 and 5.
    # Eq. 1: T_1^U = 1 + 1/5 = 1.2, cycle 3.4; T_2^U = 1 + 1/3, cycle 17/3; X = 5/17 + 3/17 = 8/17.
    # Eq. 2: T_1^U = 1 + (1/5 − 1/10) = 1.1, cycle 3.2; T_2^U = 1 + (1/3 − 1/6), cycle 16/3;
    #        X = 5/16 + 3/16 = 1/2, so ρ^FCFS = 0.5.
    result = analytic.lin_async(2, 4, [1.0, 3.0], 1.0, 1.0, 0.0, rho_threshold=0.5)
    assert result.throughput_ps_eps == pytest.approx(4 * 8 / 17, rel=1e-14)
    assert result.throughput_fcfs_eps == pytest.approx(4 * 0.5, rel=1e-14)
    assert result.link_utilization == pytest.approx(0.5, rel=1e-14)
    assert result.link_discipline == "fcfs"
    assert result.uplink_response_s == pytest.approx((1.1, 7 / 6), rel=1e-14)
    assert result.step_time_s == pytest.approx((3.2 + 16 / 3) / 2, rel=1e-14)


def test_lin_overlap_by_hand():
    # One worker: T^D = T^U = 2, S_W = max(0, 1 − 2) + max(0, 3 − 2) = 1, cycle 1 + 2 + 0.5 + 2.
    one = analytic.lin_async_overlap(1, 1, 1.0, 3.0, 2.0, 2.0, 0.5)
    assert one.model == "lin-async-overlap"
    assert one.compute_s == (1.0,)
    assert one.throughput_eps == pytest.approx(1 / 5.5)
    # Two workers, F = 1, B = 3, S_D = S_U = 1, S_S = 0. First pass (S_W = 4): cycle 6 alone,
    # T^U = 1 + (1/6 − 1/12) = 13/12, X = 2/(4 + 13/6) ≈ 0.324 ≤ 0.5: FCFS.
    # Eq. 6: S_W = 0 + (3 − 13/12) = 23/12. Second pass: cycle alone 47/12, T^U = 1 + 6/47,
    # cycle 23/12 + 106/47 = 2353/564, X = 1128/2353 ≈ 0.479 ≤ 0.5: FCFS again.
    two = analytic.lin_async_overlap(2, 1, 1.0, 3.0, 1.0, 1.0, 0.0, rho_threshold=0.5)
    assert two.compute_s == pytest.approx((23 / 12, 23 / 12), rel=1e-14)
    assert two.throughput_eps == pytest.approx(1128 / 2353, rel=1e-14)
    assert two.link_discipline == "fcfs"
    assert two.downlink_response_s == pytest.approx((53 / 47, 53 / 47), rel=1e-14)


def test_lin_overlap_never_predicts_less():
    for workers in (1, 2, 4, 8, 16):
        plain = analytic.lin_async(workers, 8, 0.9, 0.2, 0.2, 0.05)
        corrected = analytic.lin_async_overlap(workers, 8, 0.3, 0.6, 0.2, 0.2, 0.05)
        assert corrected.throughput_eps >= plain.throughput_eps


def test_lin_throughput_grows_and_saturates():
    throughputs = [analytic.lin_async(k, 1, 1.0, 0.1, 0.1, 0.02).throughput_eps for k in range(1, 25)]
    assert all(b >= a - 1e-12 for a, b in zip(throughputs, throughputs[1:]))
    assert throughputs[-1] <= 1 / 0.1 + 1e-9  # a link serves at most 1/S_D steps per second


# ---------------------------------------------------------------------------
# Cynthia (ICPE §1, §4.4), by hand


def test_cynthia_by_hand():
    # W = 4, K = 32, T_p = 3, T_C = 1: U_1 = 2/(3 + 2) = 0.4, W·U_1 = 1.6, step 3·1.6 + 2 = 6.8
    result = analytic.cynthia(4, 32, 3.0, 1.0)
    assert result.model == "cynthia"
    assert result.step_time_s == pytest.approx(6.8)
    assert result.throughput_eps == pytest.approx(128 / 6.8)
    # below saturation the max(1, ·) keeps T_p: step 3 + 2
    assert analytic.cynthia(2, 32, 3.0, 1.0).throughput_eps == pytest.approx(64 / 5.0)
    # a measured U_1 replaces the derived one
    assert analytic.cynthia(4, 32, 3.0, 1.0, utilization=0.1).throughput_eps == pytest.approx(128 / 5.0)


def test_cynthia_halved_by_hand():
    # T_C = 0.5: U_1 = 1/(3 + 1) = 0.25, W·U_1 = 1, step 3 + 1
    result = analytic.cynthia_halved(4, 32, 3.0, 1.0)
    assert result.model == "cynthia-halved"
    assert result.step_time_s == pytest.approx(4.0)
    assert result.throughput_eps == pytest.approx(32.0)


# ---------------------------------------------------------------------------
# Synchronous SGD (TPDS Eqs. 7-11), by hand

SYNC = dict(workers=4, batch_size=8, forward_s=2.0, backward_s=3.0, downlink_s=1.0, uplink_s=1.0, update_s=0.5)


@pytest.mark.parametrize("function, step_s", [
    (analytic.sync_ps, 4 + 5 + 4 + 0.5),                 # Eq. 7
    (analytic.sync_fcfs, 4 + 5 + 1 + 0.5),               # Eq. 8
    (analytic.sync_hybrid, 4 + 5 + 2.5 + 0.5),           # Eq. 9
    (analytic.sync_hybrid_overlap, 4 + 3 + 0.5),         # Eq. 10: max(4, 2) + max(2.5, 3) + 0.5
])
def test_sync_closed_forms_by_hand(function, step_s):
    result = function(**SYNC)
    assert result.step_time_s == pytest.approx(step_s)
    assert result.throughput_eps == pytest.approx(4 * 8 / step_s)
    assert result.workers == 4


def test_sync_hybrid_averages_step_times():
    ps, fcfs, hybrid = analytic.sync_ps(**SYNC), analytic.sync_fcfs(**SYNC), analytic.sync_hybrid(**SYNC)
    assert hybrid.step_time_s == pytest.approx((ps.step_time_s + fcfs.step_time_s) / 2)
    assert ps.throughput_eps < hybrid.throughput_eps < fcfs.throughput_eps


def test_sync_separate_directions():
    # downlink 2, uplink 1, K = 3: Eq. 9 is 3·2 + 5 + (4/2)·1 + 0.5
    result = analytic.sync_hybrid(3, 1, 2.0, 3.0, 2.0, 1.0, 0.5)
    assert result.step_time_s == pytest.approx(13.5)


def test_ring_allreduce_by_hand():
    assert analytic.ring_allreduce(4, 8, 2.0, 3.0, 1.0).step_time_s == pytest.approx(5 + 2 * 3 / 4)  # Eq. 11
    one = analytic.ring_allreduce(1, 8, 2.0, 3.0, 1.0)  # a ring of one sends nothing
    assert one.step_time_s == pytest.approx(5.0) and one.throughput_eps == pytest.approx(8 / 5)


# ---------------------------------------------------------------------------
# PAI (PAI §II-B, §III-C, §V-B), by hand


def test_pai_breakdown_and_whatif_by_hand():
    # 7e6 bytes at 70% of 1e8 B/s: T_w = 0.1 s
    breakdown = analytic.pai_breakdown(0.1, 7e6, 1e8)
    assert (breakdown.input_s, breakdown.compute_s) == (0.0, 0.1)
    assert breakdown.weight_s == pytest.approx(0.1)
    assert breakdown.total_s == pytest.approx(0.2)
    assert breakdown.fraction("weight") == pytest.approx(0.5)
    faster = analytic.pai_bandwidth_whatif(breakdown, 4.0)  # e.g. 25 -> 100 Gbps
    assert faster.weight_s == pytest.approx(0.025)
    assert breakdown.total_s / faster.total_s == pytest.approx(1.6)
    assert analytic.pai_prediction(faster, 2, 16).throughput_eps == pytest.approx(32 / 0.125)
    overlapped = analytic.pai_prediction(breakdown, 1, 16, overlap=True)
    assert overlapped.model == "pai-overlap" and overlapped.step_time_s == pytest.approx(0.1)


def test_pai_sums_media_and_input():
    breakdown = analytic.pai_breakdown(0.05, [1e6, 2e6], [1e7, 1e7], input_bytes=5e5, input_bandwidth_Bps=1e7,
                                       efficiency=1.0)
    assert breakdown.weight_s == pytest.approx(0.3)
    assert breakdown.input_s == pytest.approx(0.05)
    assert breakdown.total_s == pytest.approx(0.4)
    assert analytic.pai_bandwidth_whatif(breakdown, 2.0).input_s == breakdown.input_s


# ---------------------------------------------------------------------------
# Bad input: UsageError naming the argument, on one line


def _all_models(**override):
    """Call every model with SYNC-like arguments, some replaced."""
    args = dict(SYNC, **override)
    k, b = args["workers"], args["batch_size"]
    f, bw, d, u, s = args["forward_s"], args["backward_s"], args["downlink_s"], args["uplink_s"], args["update_s"]
    rho = args.get("rho_threshold", 0.5)
    return [
        lambda: analytic.lin_async(k, b, f + bw, d, u, s, rho_threshold=rho),
        lambda: analytic.lin_async_overlap(k, b, f, bw, d, u, s, rho_threshold=rho),
        lambda: analytic.cynthia(k, b, f + bw + s, (d + u) / 2),
        lambda: analytic.cynthia_halved(k, b, f + bw + s, (d + u) / 2),
        lambda: analytic.sync_ps(k, b, f, bw, d, u, s),
        lambda: analytic.sync_fcfs(k, b, f, bw, d, u, s),
        lambda: analytic.sync_hybrid(k, b, f, bw, d, u, s),
        lambda: analytic.sync_hybrid_overlap(k, b, f, bw, d, u, s),
        lambda: analytic.ring_allreduce(k, b, f, bw, u),
    ]


def _expect_usage_error(call, source):
    with pytest.raises(UsageError) as info:
        call()
    assert info.value.source == source
    assert "\n" not in str(info.value) and str(info.value).startswith(f"{source}: ")


@pytest.mark.parametrize("workers", [0, -3, 1.5, True, "4"])
def test_bad_worker_count(workers):
    for call in _all_models(workers=workers):
        _expect_usage_error(call, "workers")


@pytest.mark.parametrize("batch_size", [0, -1, 2.5])
def test_bad_batch_size(batch_size):
    for call in _all_models(batch_size=batch_size):
        _expect_usage_error(call, "batch_size")


@pytest.mark.parametrize("value", [-0.1, math.nan, math.inf])
def test_bad_times(value):
    _expect_usage_error(lambda: analytic.lin_async(2, 1, value, 1.0, 1.0, 0.0), "compute_s")
    _expect_usage_error(lambda: analytic.lin_async(2, 1, 1.0, value, 1.0, 0.0), "downlink_s")
    _expect_usage_error(lambda: analytic.lin_async(2, 1, [1.0, value], 1.0, 1.0, 0.0), "compute_s")
    _expect_usage_error(lambda: analytic.lin_async_overlap(2, 1, 1.0, value, 1.0, 1.0, 0.0), "backward_s")
    _expect_usage_error(lambda: analytic.cynthia(2, 1, 1.0, value), "transfer_s")
    _expect_usage_error(lambda: analytic.sync_hybrid(2, 1, 1.0, 1.0, 1.0, 1.0, value), "update_s")
    _expect_usage_error(lambda: analytic.ring_allreduce(2, 1, value, 1.0, 1.0), "forward_s")
    _expect_usage_error(lambda: analytic.pai_breakdown(value, 1.0, 1.0), "compute_s")


@pytest.mark.parametrize("rho", [-0.01, 1.01, math.nan])
def test_bad_rho_threshold(rho):
    _expect_usage_error(lambda: analytic.lin_async(2, 1, 1.0, 1.0, 1.0, 0.0, rho_threshold=rho), "rho_threshold")
    _expect_usage_error(lambda: analytic.lin_async_overlap(2, 1, 1.0, 1.0, 1.0, 1.0, 0.0, rho_threshold=rho),
                        "rho_threshold")


def test_other_bad_arguments():
    _expect_usage_error(lambda: analytic.lin_async(3, 1, [1.0, 2.0], 1.0, 1.0, 0.0), "compute_s")
    _expect_usage_error(lambda: analytic.lin_async(2, 1, 0.0, 0.0, 0.0, 0.0), "lin-async")
    _expect_usage_error(lambda: analytic.sync_ps(2, 1, 0.0, 0.0, 0.0, 0.0, 0.0), "sync-ps")
    _expect_usage_error(lambda: analytic.cynthia(2, 1, 1.0, 1.0, utilization=1.5), "utilization")
    _expect_usage_error(lambda: analytic.cynthia_halved(2, 1, 0.0, 0.0), "cynthia-halved")
    _expect_usage_error(lambda: analytic.mva_closed([[1.0, 1.0]], ("delay", "lifo")), "disciplines")
    _expect_usage_error(lambda: analytic.mva_closed([[1.0, 1.0]], ("delay",)), "disciplines")
    _expect_usage_error(lambda: analytic.mva_closed([1.0, 1.0], ("delay", "ps")), "service_s")
    _expect_usage_error(lambda: analytic.mva_closed([[1.0, -1.0]], ("delay", "ps")), "service_s")
    _expect_usage_error(lambda: analytic.mva_closed([[0.0, 0.0]], ("delay", "ps")), "service_s")
    _expect_usage_error(lambda: analytic.mva_closed([[1.0, 1.0]], ("delay", "fcfs"), fcfs_scv=2.0), "fcfs_scv")
    distinct = np.column_stack([np.linspace(1, 2, 19), np.ones(19)])  # 2^19 populations
    _expect_usage_error(lambda: analytic.mva_closed(distinct, ("delay", "ps")), "service_s")
    _expect_usage_error(lambda: analytic.lin_async(19, 1, np.linspace(1, 2, 19), 1.0, 1.0, 0.0), "compute_s")
    _expect_usage_error(lambda: analytic.pai_breakdown(0.1, 1.0, 0.0), "weight_bandwidth_Bps")
    _expect_usage_error(lambda: analytic.pai_breakdown(0.1, [1.0, 2.0], [1.0]), "weight_bandwidth_Bps")
    _expect_usage_error(lambda: analytic.pai_breakdown(0.1, -1.0, 1.0), "weight_bytes")
    _expect_usage_error(lambda: analytic.pai_breakdown(0.1, 1.0, 1.0, efficiency=0.0), "efficiency")
    breakdown = analytic.pai_breakdown(0.1, 1.0, 1.0)
    _expect_usage_error(lambda: analytic.pai_bandwidth_whatif(breakdown, 0.0), "bandwidth_factor")
    _expect_usage_error(lambda: breakdown.fraction("network"), "part")


# ---------------------------------------------------------------------------
# Estimation from a profile


def _synthetic_profile(names=None):
    """Nine ops, two steps; durations chosen so that every sum is easy to check."""
    ops = [  # (name, resource, size)
        ("edge_1_w", Resource.DOWNLINK, 1000),
        ("fc/MatMul", Resource.WORKER, 0),
        ("loss", Resource.WORKER, 0),
        ("gradients/fc/MatMul_grad/MatMul", Resource.WORKER, 0),
        ("tower_0/gradients_1/fc/x", Resource.WORKER, 0),
        ("ConstantFolding/gradients/fc/shape", Resource.WORKER, 0),
        ("edge_2_grad", Resource.UPLINK, 800),
        ("GradientDescent/update_fc/w", Resource.PS, 0),
        ("my_gradients_helper/x", Resource.WORKER, 0),  # not the gradients scope
    ]
    if names is not None:
        ops = [(name, res, size) for name, (_, res, size) in zip(names, ops)]
    src, dst = [0, 1, 2, 2, 3, 4, 5, 6], [1, 2, 3, 4, 6, 6, 6, 7]
    ptr, idx = csr_from_edges(len(ops), np.array(src), np.array(dst))
    empty_ptr, empty_idx = csr_from_edges(len(ops), np.array([], int), np.array([], int))
    graph = OpGraph(
        name=[o[0] for o in ops], op_type=["Transfer" if o[1].is_link else "Op" for o in ops],
        resource=[int(o[1]) for o in ops], server=[-1 if o[1] == Resource.WORKER else 0 for o in ops],
        size_bytes=[o[2] for o in ops], variable=[-1] * len(ops),
        data_ptr=ptr, data_idx=idx, ctrl_ptr=empty_ptr, ctrl_idx=empty_idx)
    durations = np.array([
        [0.010, 0.100, 0.020, 0.200, 0.050, 0.001, 0.010, 0.030, 0.004],
        [0.012, 0.120, 0.040, 0.240, 0.070, 0.003, 0.012, 0.050, 0.006],
    ])
    return Profile(graph=graph, duration_s=durations, start_s=np.full(durations.shape, np.nan),
                   step_makespan_s=np.array([0.5, 0.6]), step_wall_s=np.array([]), batch_size=16,
                   variables=VariableTable.empty())


def test_estimate_by_hand():
    profile = _synthetic_profile()
    backward = estimate.backward_mask(profile.graph)
    assert np.flatnonzero(backward).tolist() == [3, 4, 5]
    assert np.flatnonzero(estimate.forward_mask(profile.graph)).tolist() == [1, 2, 8]
    params = estimate.estimate_parameters(profile, bandwidth_down_Bps=1e4, bandwidth_up_Bps=4e3,
                                          alpha_s_per_byte=1e-6, beta_s=1e-3)
    assert params.forward_compute_s == pytest.approx((0.124 + 0.166) / 2)   # ops 1, 2, 8
    assert params.backward_s == pytest.approx((0.251 + 0.313) / 2)          # ops 3, 4, 5
    assert params.ps_compute_s == pytest.approx(0.04)
    assert params.downlink_parse_s == pytest.approx(1e-6 * 1000 + 1e-3)
    assert params.uplink_parse_s == pytest.approx(1e-6 * 800 + 1e-3)
    assert params.forward_s == pytest.approx(0.145 + 0.002)
    assert params.update_s == pytest.approx(0.04 + 0.0018)
    assert params.downlink_s == pytest.approx(0.1) and params.uplink_s == pytest.approx(0.2)
    assert params.allreduce_transfer_s == pytest.approx(800 / 4e3)
    assert (params.batch_size, params.n_steps, params.n_downlinks, params.n_uplinks) == (16, 2, 1, 1)


def test_estimate_without_overheads_gives_the_papers_parameters():
    params = estimate.estimate_parameters(_synthetic_profile(), bandwidth_down_Bps=1e4, bandwidth_up_Bps=1e4)
    assert params.forward_s == params.forward_compute_s
    assert params.update_s == params.ps_compute_s
    assert params.downlink_s == pytest.approx(0.1) and params.uplink_s == pytest.approx(0.08)


def test_estimate_needs_a_backward_pass():
    names = ["edge_1_w", "a", "b", "c", "d", "e", "edge_2_grad", "apply", "f"]
    with pytest.raises(UsageError) as info:
        estimate.estimate_parameters(_synthetic_profile(names), bandwidth_down_Bps=1e4, bandwidth_up_Bps=1e4)
    assert info.value.source == "profile"


@pytest.mark.parametrize("kwargs, source", [
    (dict(bandwidth_down_Bps=0.0, bandwidth_up_Bps=1e4), "bandwidth_down_Bps"),
    (dict(bandwidth_down_Bps=1e4, bandwidth_up_Bps=math.inf), "bandwidth_up_Bps"),
    (dict(bandwidth_down_Bps=1e4, bandwidth_up_Bps="fast"), "bandwidth_up_Bps"),
    (dict(bandwidth_down_Bps=1e4, bandwidth_up_Bps=1e4, alpha_s_per_byte=-1e-9), "alpha_s_per_byte"),
    (dict(bandwidth_down_Bps=1e4, bandwidth_up_Bps=1e4, beta_s=math.nan), "beta_s"),
])
def test_estimate_bad_numbers(kwargs, source):
    _expect_usage_error(lambda: estimate.estimate_parameters(_synthetic_profile(), **kwargs), source)


@pytest.fixture(scope="module", params=BUNDLED)
def bundled(request):
    return request.param, load_profile(PROFILES / f"{request.param}.npz")


def test_forward_backward_rule_on_bundled_profiles(bundled):
    name, profile = bundled
    graph = profile.graph
    forward, backward = estimate.forward_mask(graph), estimate.backward_mask(graph)
    worker = graph.resource == Resource.WORKER
    assert forward.any() and backward.any()
    assert not (forward & backward).any() and ((forward | backward) == worker).all()
    params = estimate.estimate_parameters(profile, bandwidth_down_Bps=1.25e8, bandwidth_up_Bps=1.25e8)
    total_worker_s = profile.duration_s[:, worker].sum(axis=1).mean()
    assert params.forward_compute_s + params.backward_s == pytest.approx(total_worker_s, rel=1e-12)
    assert params.backward_s > params.forward_compute_s > 0  # CNNs: backward costs more than forward
    # every weight gradient is computed in the backward pass: what feeds an uplink
    # (apart from the optimizer's learning rate) is a gradient op
    for op in np.flatnonzero(graph.resource == Resource.UPLINK):
        feeders = [p for p in graph.predecessors(op) if worker[p]]
        assert all(backward[p] for p in feeders if "learning_rate" not in str(graph.name[p])), name


def test_bundled_profile_parameters(bundled):
    _, profile = bundled
    params = estimate.estimate_parameters(profile, bandwidth_down_Bps=1.25e8, bandwidth_up_Bps=1e8,
                                          alpha_s_per_byte=2e-10, beta_s=1e-5)
    assert params.downlink_bytes == profile.bytes_per_step(Resource.DOWNLINK) > 0
    assert params.uplink_bytes == profile.bytes_per_step(Resource.UPLINK) > 0
    assert params.downlink_s == pytest.approx(params.downlink_bytes / 1.25e8)
    assert params.ps_compute_s == pytest.approx(profile.duration_s[:, profile.graph.resource == Resource.PS]
                                                .sum(axis=1).mean())
    assert params.batch_size == profile.batch_size


def test_baselines_agree_for_one_worker(bundled):
    # with one worker and no overlap, every parameter-server model is the sum of the phases
    _, profile = bundled
    params = estimate.estimate_parameters(profile, bandwidth_down_Bps=1.25e8, bandwidth_up_Bps=1.25e8,
                                          alpha_s_per_byte=1e-9, beta_s=2e-5)
    sequential_s = params.compute_s + params.update_s + params.downlink_s + params.uplink_s
    results = {r.model: r for r in estimate.baseline_predictions(params, 1)}
    assert list(results) == ["lin-async", "lin-async-overlap", "cynthia", "cynthia-halved", "sync-ps",
                             "sync-fcfs", "sync-hybrid", "sync-hybrid-overlap", "ring-allreduce", "pai",
                             "pai-overlap"]
    for model in ("lin-async", "cynthia", "sync-ps", "sync-fcfs", "sync-hybrid", "pai"):
        assert results[model].throughput_eps == pytest.approx(params.batch_size / sequential_s, rel=1e-12), model
    assert results["ring-allreduce"].step_time_s == pytest.approx(params.forward_compute_s + params.backward_s)
    for model in ("lin-async-overlap", "sync-hybrid-overlap", "cynthia-halved", "pai-overlap"):
        assert results[model].throughput_eps > results["lin-async"].throughput_eps, model


def test_baselines_scale_sensibly(bundled):
    _, profile = bundled
    params = estimate.estimate_parameters(profile, bandwidth_down_Bps=1.25e8, bandwidth_up_Bps=1.25e8)
    previous = None
    for workers in (1, 2, 4, 8, 16):
        results = {r.model: r for r in estimate.baseline_predictions(params, workers, rho_threshold=0.6)}
        assert all(r.workers == workers and r.throughput_eps > 0 for r in results.values())
        assert results["sync-ps"].throughput_eps <= results["sync-hybrid"].throughput_eps
        assert results["sync-hybrid"].throughput_eps <= results["sync-fcfs"].throughput_eps
        # asynchronous throughput cannot pass the links' capacity
        assert results["lin-async"].throughput_eps <= params.batch_size / params.downlink_s * (1 + 1e-9)
        if previous is not None:
            assert results["lin-async"].throughput_eps >= previous["lin-async"].throughput_eps
        previous = results


def test_baselines_blame_the_profile_for_a_step_that_takes_no_time():
    """A profile without computation time: ring all-reduce at W = 1 has no transfer either, so the
    coarse baselines refuse the profile (naming it), not one of their models."""
    import dataclasses

    from simulate import load_cluster
    from simulate.coarse import baselines

    data = Path(__file__).resolve().parents[1] / "data"
    profile = load_profile(data / "profiles" / "tiny.npz")
    cluster = load_cluster(data / "clusters" / "lab-1gbit.json")
    assert len(baselines(profile, cluster, [1, 2])) == 8  # the four async models at each W
    idle = dataclasses.replace(profile, duration_s=np.zeros_like(profile.duration_s))
    with pytest.raises(UsageError) as caught:
        baselines(idle, cluster, [2, 1])
    assert caught.value.source == "profile"
    assert caught.value.problem.startswith("the ring-allreduce baseline at W = 1: every time is zero")
