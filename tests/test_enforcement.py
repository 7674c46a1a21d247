"""Strict enforcement of the priority scheduler (docs/model.md §3.3; TicTac §5.1): a transfer
starts only after every lower-numbered transfer of its worker and link has started."""

import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_sim import reference_run
from test_engine import CLUSTER, engine_vs_reference, make_profile, random_profiles

import simulate
from simulate.cluster import ClusterModel
from simulate.config import Enforcement, Mode, Sharing, SimConfig, Transfer
from simulate.engine import run
from simulate.orderings import ordering_priorities
from simulate.prepare import prepare
from tfbase.errors import TfsimWarning, UsageError
from tfprofile import load_profile
from tfprofile.dag import Resource

D, WK = int(Resource.DOWNLINK), int(Resource.WORKER)
MB = 2 ** 20
LINK = ClusterModel(float(MB), float(MB))  # 1 MiB/s, no parsing: a 1 MiB transfer takes 1 s


def late_first_profile():
    """op0: 0.5 s of computation, then op1 (1 MiB down); op2 (1 MiB down) is ready at once."""
    return make_profile([WK, D, D], [-1, 0, 0], [0, MB, MB], [[0.5, 0.0, 0.0]], [(0, 1)])


def link_spans(priorities, enforcement):
    """Each downlink op's (start, end) in the first step, and the step's end."""
    graph = prepare(late_first_profile(), LINK, priorities=np.array(priorities))
    result = run(graph, LINK, SimConfig(workers=1, transfer=Transfer.PRIORITY, steps=1, warmup=0, trace_steps=1,
                                        enforcement=enforcement))
    trace = result.trace
    spans = {int(op): (float(a), float(b)) for op, a, b in zip(trace["op"], trace["start_s"], trace["end_s"])
             if op in (1, 2)}
    return spans, float(result.step_end_s[0, 0])


def test_work_conserving_starts_the_ready_transfer_without_waiting():
    spans, end = link_spans([math.inf, 0.0, 1.0], Enforcement.WORK_CONSERVING)
    # op2 (number 1) is alone on the idle link at 0 and goes; op1 (number 0) waits for it.
    assert spans == {2: (0.0, 1.0), 1: (1.0, 2.0)}
    assert end == 2.0


@pytest.mark.parametrize("later", [1.0, math.inf], ids=["numbered", "control"])
def test_strict_holds_a_transfer_back_until_the_lower_number_starts(later):
    spans, end = link_spans([math.inf, 0.0, later], Enforcement.STRICT)
    # op2 waits for op1, which is ready only at 0.5 s; a transfer without a number waits for
    # every numbered one.
    assert spans == {1: (0.5, 1.5), 2: (1.5, 2.5)}
    assert end == 2.5


def test_strict_does_not_order_equal_numbers():
    spans, end = link_spans([math.inf, 0.0, 0.0], Enforcement.STRICT)
    assert spans == {2: (0.0, 1.0), 1: (1.0, 2.0)}
    assert end == 2.0


def test_strict_waits_again_in_every_step():
    graph = prepare(late_first_profile(), LINK, priorities=np.array([math.inf, 0.0, 1.0]))
    result = run(graph, LINK, SimConfig(workers=1, transfer=Transfer.PRIORITY, steps=3, warmup=0,
                                        enforcement=Enforcement.STRICT))
    assert result.step_start_s[0].tolist() == [0.0, 2.5, 5.0]
    assert result.step_end_s[0].tolist() == [2.5, 5.0, 7.5]


def test_strict_leaves_the_other_schedulers_alone():
    graph = prepare(late_first_profile(), LINK, priorities=np.array([math.inf, 0.0, 1.0]))
    ends = [run(graph, LINK, SimConfig(workers=1, transfer=Transfer.FIFO, steps=2, warmup=0,
                                       enforcement=e)).step_end_s.tolist() for e in Enforcement]
    assert ends[0] == ends[1] == [[2.0, 4.0]]


def test_a_deadlocking_order_is_refused_naming_the_parameter():
    # op2 (number 0) depends on op1 (number 1) of the same link: under strict, op1 waits for op2.
    profile = make_profile([WK, D, D], [-1, 0, 0], [0, MB, MB], [[0.5, 0.0, 0.0]], [(1, 2)])
    graph = prepare(profile, LINK, priorities=np.array([math.inf, 1.0, 0.0]))
    config = SimConfig(workers=1, transfer=Transfer.PRIORITY, steps=2, warmup=0, enforcement=Enforcement.STRICT)
    with pytest.raises(UsageError) as err:
        run(graph, LINK, config)
    assert err.value.source == "priorities"
    assert "'op2' (priority 0) depends on 'op1' (priority 1)" in err.value.problem
    # Work-conserving, the same order runs: op1, then op2.
    wc = run(graph, LINK, SimConfig(workers=1, transfer=Transfer.PRIORITY, steps=1, warmup=0))
    assert wc.step_end_s.tolist() == [[2.0]]


def test_the_reference_deadlocks_where_the_order_is_refused():
    profile = make_profile([WK, D, D], [-1, 0, 0], [0, MB, MB], [[0.5, 0.0, 0.0]], [(1, 2)])
    graph = prepare(profile, LINK, priorities=np.array([math.inf, 1.0, 0.0]))
    config = SimConfig(workers=1, transfer=Transfer.PRIORITY, steps=1, warmup=0, enforcement=Enforcement.STRICT)
    _, end = reference_run(graph, LINK, config)
    assert end == [[None]]


def test_enforcement_must_be_an_enforcement():
    with pytest.raises(UsageError) as err:
        SimConfig(workers=1, enforcement="strict")
    assert err.value.source == "enforcement"


@st.composite
def orders(draw, n):
    """Priorities that strict enforcement can mostly carry out: numbers that grow with the op
    index (edges go forward), with ties and ops without a number, or now and then any order."""
    if draw(st.integers(0, 4)) == 0:
        return np.array([draw(st.sampled_from([0.0, 1.0, 2.0, 3.0, math.inf])) for _ in range(n)])
    out, level = [], 0.0
    for _ in range(n):
        level += draw(st.sampled_from([0.0, 1.0]))
        out.append(level)
    tail = draw(st.integers(0, n))  # the last ops get no number (control transfers come last)
    return np.array(out[:n - tail] + [math.inf] * tail)


STRICT_CONFIGS = st.builds(
    lambda w, mode, sharing, seed, stagger: SimConfig(
        workers=w, mode=mode, sharing=sharing, transfer=Transfer.PRIORITY, steps=6, warmup=1, seed=seed,
        flow_cap_Bps=4e7 if sharing is Sharing.FLOW_CAP else None, enforcement=Enforcement.STRICT,
        start_offsets_s=tuple(k * stagger * 2.0 ** -9 for k in range(w)) if stagger else None),
    st.integers(1, 4), st.sampled_from([Mode.ASYNC, Mode.SYNC]),
    st.sampled_from([Sharing.PS, Sharing.FCFS, Sharing.FLOW_CAP]), st.integers(0, 3), st.integers(0, 3))


# About one example in ten is refused and one in ten runs otherwise than work-conserving.
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_profiles(), STRICT_CONFIGS, st.data())
def test_engine_matches_reference_under_strict_enforcement(profile, config, data):
    priorities = data.draw(orders(profile.graph.n_ops))
    try:
        error = engine_vs_reference(profile, config, priorities=priorities)
    except UsageError as exc:
        # Refused: then the reference, which checks nothing, never finishes a step.
        assert exc.source == "priorities"
        graph = prepare(profile, CLUSTER, workers=config.workers, mode=config.mode, priorities=priorities)
        _, end = reference_run(graph, CLUSTER, config)
        assert any(x is None for row in end for x in row)
        return
    assert error < 1e-9


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_profiles(servers=2), st.integers(1, 2), st.data())
def test_engine_matches_reference_under_strict_enforcement_with_two_servers(profile, workers, data):
    priorities = data.draw(orders(profile.graph.n_ops))
    config = SimConfig(workers=workers, transfer=Transfer.PRIORITY, steps=5, warmup=1,
                       enforcement=Enforcement.STRICT)
    try:
        error = engine_vs_reference(profile, config, priorities=priorities)
    except UsageError as exc:
        assert exc.source == "priorities"
        return
    assert error < 1e-9


def test_the_cli_flag_enforces_strictly_and_says_so(data_dir, tmp_path, capsys):
    from cli_runner import run as cli

    def predict(*extra):
        out_json = tmp_path / "p.json"
        code, out, err = cli(["predict", data_dir / "profiles" / "tiny.npz", "--bandwidth", "100mbit", "--workers",
                              "2", "--transfer", "tic", "--steps", "60", "--warmup", "5", "--jobs", "1",
                              "--no-progress", "--json", out_json, *extra], capsys)
        assert code == 0, err
        return json.loads(out_json.read_text()), out

    default, _ = predict()
    work_conserving, _ = predict("--enforcement", "work-conserving")
    strict, out = predict("--enforcement", "strict")
    assert work_conserving == default and "enforcement" not in default
    assert strict["enforcement"] == "strict" and "enforced strictly" in out
    # The same order and seed, enforced otherwise: another prediction, and the library's own.
    profile = load_profile(data_dir / "profiles" / "tiny.npz")
    priorities = ordering_priorities(profile, ["tic"], bandwidth_Bps=12.5e6, seed=0)
    with pytest.warns(TfsimWarning, match="no calibration"):
        table = simulate.predict(profile, bandwidth_Bps=12.5e6, workers=2, transfer="tic", priorities=priorities,
                                 steps=60, warmup=5, enforcement="strict")
    assert strict["rows"][0]["throughput_eps"] == pytest.approx(float(table["throughput_eps"].iloc[0]), rel=1e-12)
    assert strict["rows"][0]["throughput_eps"] != default["rows"][0]["throughput_eps"]


def test_a_bad_enforcement_exits_2_and_the_library_names_the_parameter(data_dir, capsys):
    from cli_runner import run as cli

    code, _, err = cli(["predict", data_dir / "profiles" / "tiny.npz", "--bandwidth", "1gbit", "--enforcement",
                        "lax", "--no-progress"], capsys)
    assert code == 2 and "--enforcement" in err and "'lax'" in err
    with pytest.raises(UsageError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", TfsimWarning)
        simulate.predict(load_profile(data_dir / "profiles" / "tiny.npz"), bandwidth_Bps=1e8, enforcement="lax")
    assert info.value.source == "enforcement"
