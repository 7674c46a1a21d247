"""Hardware what-ifs on a profile: faster or slower computation (docs/model.md §11).

A what-if keeps the DAG, every transfer's size and the cluster's calibration (bandwidth,
windows, parsing overhead α·size + β, RPC latencies) as they are, and scales only the
recorded computation times: a faster accelerator for the workers, or a smaller PS host, is
then a prediction from the same profile.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tfbase.errors import UsageError
from tfprofile.dag import Profile, Resource

MAX_COMPUTE_SCALE = 1000.0  # a thousandfold slower host is a different job, not a what-if


def check_compute_scale(value: float, parameter: str = "compute_scale") -> None:
    """Refuse a computation scale that is not a factor in (0, MAX_COMPUTE_SCALE], naming ``parameter``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and 0 < value <= MAX_COMPUTE_SCALE):
        raise UsageError(parameter, f"must be a factor above 0 and at most {MAX_COMPUTE_SCALE:g}, not {value!r}")


def scale_compute(profile: Profile, *, worker: float = 1.0, ps: float = 1.0) -> Profile:
    """``profile`` with the workers' computation times multiplied by ``worker`` and the
    parameter servers' by ``ps`` (0.5: twice as fast).

    Examples
    --------
    >>> import tfprofile
    >>> profile = tfprofile.load_profile("data/profiles/tiny.npz")
    >>> faster = scale_compute(profile, worker=0.5)
    >>> bool(faster.duration_s.sum() < profile.duration_s.sum())
    True
    """
    check_compute_scale(worker, "compute_scale")
    check_compute_scale(ps, "ps_compute_scale")
    if worker == 1.0 and ps == 1.0:
        return profile
    duration = profile.duration_s.copy()
    duration[:, profile.graph.resource == Resource.WORKER] *= worker
    duration[:, profile.graph.resource == Resource.PS] *= ps
    meta = {**profile.meta, "what_if": {"worker_compute_scale": worker, "ps_compute_scale": ps}}
    return dataclasses.replace(profile, duration_s=np.ascontiguousarray(duration), meta=meta)
