"""Taking tracing's own cost out of a profile (simulate.untrace)."""

import numpy as np
import pytest

from simulate.cluster import ClusterModel
from simulate.config import Transfer
from simulate.untrace import MAX_SCALE, fit_computation_scale, one_worker_step_s, scale_computation
from tfprofile.dag import Resource

CLUSTER = ClusterModel.from_bandwidth(1.25e9)  # 10 Gbit: computation is most of the step


def test_scaling_touches_the_workers_computation_only(bundled_profile):
    profile = bundled_profile("tiny")
    scaled = scale_computation(profile, 0.5)
    compute = profile.graph.resource == Resource.WORKER
    assert np.array_equal(scaled.duration_s[:, compute], profile.duration_s[:, compute] * 0.5)
    assert np.array_equal(scaled.duration_s[:, ~compute], profile.duration_s[:, ~compute])
    assert scaled.meta["computation_scale"] == 0.5
    with pytest.raises(ValueError):
        scale_computation(profile, 0.0)
    with pytest.raises(ValueError):
        scale_computation(profile, 5.0)


def test_the_fitted_scale_reproduces_the_untraced_step_time(bundled_profile):
    profile = bundled_profile("resnet50")
    traced = one_worker_step_s(profile, CLUSTER, Transfer.FIFO)
    target = 0.85 * traced
    factor = fit_computation_scale(profile, CLUSTER, target, transfer=Transfer.FIFO)
    assert 0 < factor < 1
    assert one_worker_step_s(scale_computation(profile, factor), CLUSTER, Transfer.FIFO) == pytest.approx(target,
                                                                                                         rel=1e-3)


def test_a_profile_faster_than_the_run_is_scaled_up(bundled_profile):
    """The correction goes both ways: a one-worker model faster than the untraced run puts the
    missing time back on the computation."""
    profile = bundled_profile("tiny")
    traced = one_worker_step_s(profile, CLUSTER, Transfer.FIFO)
    factor = fit_computation_scale(profile, CLUSTER, traced * 1.2, transfer=Transfer.FIFO)
    assert 1 < factor < MAX_SCALE
    assert one_worker_step_s(scale_computation(profile, factor), CLUSTER, Transfer.FIFO) == pytest.approx(
        traced * 1.2, rel=1e-3)
    # beyond what computation can explain, the factor stops at its bound
    assert fit_computation_scale(profile, CLUSTER, traced * 100, transfer=Transfer.FIFO) == MAX_SCALE
