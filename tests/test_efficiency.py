"""TicTac's E and S of the profiled steps with dedicated times, and TAC's comparator's cycle."""

import os

import numpy as np
import pytest

import simulate
import tfprofile
from tfprofile.dag import Resource
from tfprofile.tictac import _comparator_minimum, dedicated_times, precedes, profile_efficiency

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
PROFILES = sorted(f for f in os.listdir(os.path.join(DATA, "profiles")) if f.endswith(".npz"))


@pytest.mark.parametrize("name", PROFILES)
def test_e_is_in_0_1_on_every_bundled_profile(name):
    profile = tfprofile.load_profile(os.path.join(DATA, "profiles", name))
    cluster = simulate.load_cluster(os.path.join(DATA, "clusters", "lab-1gbit.json"))
    for rates in ((cluster.downlink_Bps, cluster.uplink_Bps), None):
        result = profile_efficiency(profile, rates)
        shown = result.efficiency[np.isfinite(result.efficiency)]
        assert ((shown >= 0) & (shown <= 1)).all()
        assert result.steps_outside_bounds + len(shown) <= len(result.makespan_s)
        assert result.times == ("recorded" if rates is None else "dedicated")


def test_dedicated_times_put_every_transfer_alone_on_its_link():
    profile = tfprofile.load_profile(os.path.join(DATA, "profiles", "tiny.npz"))
    time_s = dedicated_times(profile, (1e8, 5e7))
    graph = profile.graph
    down, up = graph.resource == Resource.DOWNLINK, graph.resource == Resource.UPLINK
    assert time_s[:, down] == pytest.approx(np.broadcast_to(graph.size_bytes[down] / 1e8, time_s[:, down].shape))
    assert time_s[:, up] == pytest.approx(np.broadcast_to(graph.size_bytes[up] / 5e7, time_s[:, up].shape))
    compute = ~(down | up)
    assert (time_s[:, compute] == profile.duration_s[:, compute]).all()
    # L is the busier of the links' bytes/B and the computation: at 1 kB/s the downlink sets it.
    slow = profile_efficiency(profile, 1e3)
    assert all(label.split("/")[0] in ("DOWNLINK", "UPLINK") for label in slow.bottleneck)  # e.g. UPLINK/ps0
    assert slow.lower_s == pytest.approx(np.full(len(slow.lower_s), max(graph.size_bytes[down].sum(),
                                                                        graph.size_bytes[up].sum()) / 1e3))


def test_tac_comparator_cycle_and_the_lowest_index_rule():
    # (M, P, M+) = a (1, 1, 2), b (1, 2, 3), c (2, 1, 1): a ≺ b ≺ c ≺ a.
    a, b, c = (1, 1, 2), (1, 2, 3), (2, 1, 1)
    assert precedes(*a, *b) and precedes(*b, *c) and precedes(*c, *a)
    m, p, m_plus = (np.array(x, dtype=float) for x in zip(a, b, c))
    # Each is preceded by exactly one other: the lowest index wins, whatever the scan order.
    assert _comparator_minimum(m, p, m_plus) == 0
    order = [2, 0, 1]
    assert order[_comparator_minimum(m[order], p[order], m_plus[order])] == 2
