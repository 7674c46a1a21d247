"""Taking tracing's own cost out of a profile (simulate.untrace)."""

import numpy as np
import pytest

from simulate.cluster import ClusterModel
from simulate.config import Transfer
from simulate.untrace import fit_computation_scale, one_worker_step_s, scale_computation
from tfprofile.dag import Resource

CLUSTER = ClusterModel.from_bandwidth(1.25e9)  # 10 Gbit: computation is most of the step


def test_scaling_touches_computation_only(bundled_profile):
    profile = bundled_profile("tiny")
    scaled = scale_computation(profile, 0.5)
    compute = np.isin(profile.graph.resource, (Resource.WORKER, Resource.PS))
    assert np.array_equal(scaled.duration_s[:, compute], profile.duration_s[:, compute] * 0.5)
    assert np.array_equal(scaled.duration_s[:, ~compute], profile.duration_s[:, ~compute])
    assert scaled.meta["computation_scale"] == 0.5
    with pytest.raises(ValueError):
        scale_computation(profile, 1.5)


def test_the_fitted_scale_reproduces_the_untraced_step_time(bundled_profile):
    profile = bundled_profile("resnet50")
    traced = one_worker_step_s(profile, CLUSTER, Transfer.FIFO)
    target = 0.85 * traced
    factor = fit_computation_scale(profile, CLUSTER, target, transfer=Transfer.FIFO)
    assert 0 < factor < 1
    assert one_worker_step_s(scale_computation(profile, factor), CLUSTER, Transfer.FIFO) == pytest.approx(target,
                                                                                                         rel=1e-3)


def test_a_profile_already_fast_enough_is_left_alone(bundled_profile):
    profile = bundled_profile("tiny")
    traced = one_worker_step_s(profile, CLUSTER, Transfer.FIFO)
    assert fit_computation_scale(profile, CLUSTER, traced * 1.2, transfer=Transfer.FIFO) == 1.0
