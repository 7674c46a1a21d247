"""Taking tracing's own cost out of a profile (simulate.untrace)."""

import numpy as np
import pytest

from simulate.cluster import ClusterModel
from simulate.config import Transfer
from simulate.untrace import MAX_SCALE, MIN_SCALE, fit_computation_scale, one_worker_step_s, scale_computation
from tfbase.errors import UsageError
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


def test_the_fit_matches_the_run_it_is_given_and_leaves_the_dispatch_alone(bundled_profile):
    """A tf2-pss profile: the coordinator's dispatch (op 0) is not scaled, and the fit matches the
    mean over the simulated run it is told to (``steps``), not the default 80 steps'."""
    from tfprofile.dag import DISPATCH_OP

    profile = bundled_profile("tiny_tf2pss")
    assert profile.graph.op_type[0] == DISPATCH_OP
    scaled = scale_computation(profile, 0.5)
    np.testing.assert_array_equal(scaled.duration_s[:, 0], profile.duration_s[:, 0])
    target = 0.9 * one_worker_step_s(profile, CLUSTER, Transfer.GRPC, steps=200, warmup=20, statistic="mean")
    factor = fit_computation_scale(profile, CLUSTER, target, transfer=Transfer.GRPC, statistic="mean", steps=200,
                                   warmup=20)
    assert one_worker_step_s(scale_computation(profile, factor), CLUSTER, Transfer.GRPC, steps=200, warmup=20,
                             statistic="mean") == pytest.approx(target, rel=1e-3)


def test_the_fit_over_replicas_matches_the_mean_throughput_of_the_seeds(bundled_profile):
    """With replicas, the fitted model's one-worker throughput, averaged over seeds 0..K-1 as
    the prediction averages it, is the untraced step's; one seed's alone is not."""
    from simulate.sweep import predict

    profile = bundled_profile("tiny_tf2pss")
    options = {"transfer": Transfer.GRPC, "statistic": "mean", "steps": 60, "warmup": 10}
    target = 0.9 * one_worker_step_s(profile, CLUSTER, **options)
    factor = fit_computation_scale(profile, CLUSTER, target, replicas=3, **options)
    fitted = scale_computation(profile, factor)
    frame = predict(fitted, CLUSTER, workers=[1], transfer="grpc", steps=60, warmup=10, replicas=3, jobs=1)
    assert float(frame["throughput_eps"].iloc[0]) == pytest.approx(profile.batch_size / target, rel=2e-3)
    assert one_worker_step_s(fitted, CLUSTER, **options, replicas=3) == pytest.approx(target, rel=1e-3)
    assert one_worker_step_s(fitted, CLUSTER, **options, replicas=1) != pytest.approx(target, rel=1e-3)
    with pytest.raises(UsageError, match="replicas"):
        one_worker_step_s(profile, CLUSTER, Transfer.GRPC, replicas=0)


def test_a_run_faster_than_the_models_transfers_alone_stops_at_the_least_scale_and_the_lab_says_why(bundled_profile):
    """On a slow link the transfers alone can take longer than the untraced step (computation
    hidden behind them, or transfer costs overstated): the factor stops at MIN_SCALE, and the
    lab's message says so rather than blaming tracing."""
    from tfsim.lab.validate import correction_reason

    profile = bundled_profile("tiny")
    slow = ClusterModel.from_bandwidth(1.25e6)  # 10 Mbit/s: the transfers are most of the step
    bare = one_worker_step_s(scale_computation(profile, MIN_SCALE), slow, Transfer.FIFO)
    assert fit_computation_scale(profile, slow, 0.9 * bare, transfer=Transfer.FIFO) == MIN_SCALE
    assert "without computation" in correction_reason(MIN_SCALE)
    assert correction_reason(0.5) == "tracing's own cost taken out"
    assert "put back" in correction_reason(1.5)
