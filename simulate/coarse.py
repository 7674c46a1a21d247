"""The coarse analytical baselines over a sweep of W, as a table beside the simulation.

Which baselines a comparison shows depends on the SGD mode: the asynchronous ones (Lin et
al., with and without the overlap correction; Cynthia and its halved-T_C variant) for
``async``, the synchronous closed forms (TPDS Eqs. 7-10) for ``sync``, ring all-reduce
(Eq. 11) for ``allreduce``. The PAI breakdown ignores contention (linear in W) and is
left out of the sweep; :func:`simulate.estimate.pai_from_parameters` gives it for what-ifs.
"""

from __future__ import annotations

from collections.abc import Iterable

from simulate.cluster import ClusterModel
from simulate.estimate import baseline_predictions, estimate_parameters
from tfbase.errors import UsageError
from tfprofile.dag import Profile

BASELINES_BY_MODE = {
    "async": ("lin-async", "lin-async-overlap", "cynthia", "cynthia-halved"),
    "sync": ("sync-ps", "sync-fcfs", "sync-hybrid", "sync-hybrid-overlap"),
    "allreduce": ("ring-allreduce",),
}
# Every model simulate.estimate.baseline_predictions computes (those of every mode, and PAI's).
MODELS = (*(model for models in BASELINES_BY_MODE.values() for model in models), "pai", "pai-overlap")


def baseline_parameters(profile: Profile, cluster: ClusterModel):
    """The coarse models' parameters of ``profile`` on ``cluster``; raises
    :class:`~tfbase.errors.UsageError` for a profile they cannot describe (call it before a
    long simulation whose results the baselines will join)."""
    return estimate_parameters(
        profile, bandwidth_down_Bps=cluster.downlink_Bps, bandwidth_up_Bps=cluster.uplink_Bps,
        alpha_s_per_byte=cluster.overhead_downlink.alpha_s_per_byte, beta_s=cluster.overhead_downlink.beta_s)


def baselines(profile: Profile, cluster: ClusterModel, workers: Iterable[int], mode: str = "async"):
    """A DataFrame with columns ``workers``, ``model``, ``throughput_eps``, ``step_time_s``.

    Raises :class:`~tfbase.errors.UsageError` naming ``profile`` for a profile the baselines
    cannot describe, among them one whose times make a model's step take no time (e.g. no
    forward or backward computation: ring all-reduce at W = 1 has no transfer either). Cheap
    (closed forms): call it before a long simulation whose results it will join."""
    import pandas as pd

    params = baseline_parameters(profile, cluster)
    wanted = BASELINES_BY_MODE[mode]
    rows = []
    for w in workers:
        try:
            predictions = baseline_predictions(params, int(w))
        except UsageError as err:
            if err.source not in MODELS:
                raise
            # Its times come from the profile (the cluster's bandwidth is finite): the profile is at fault.
            raise UsageError("profile", f"the {err.source} baseline at W = {int(w)}: {err.problem}") from None
        for prediction in predictions:
            if prediction.model in wanted:
                rows.append({"workers": int(w), "model": prediction.model,
                             "throughput_eps": prediction.throughput_eps, "step_time_s": prediction.step_time_s})
    return pd.DataFrame(rows, columns=["workers", "model", "throughput_eps", "step_time_s"])
