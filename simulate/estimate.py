"""Parameters of the coarse analytical baselines, estimated from a 1-PS/1-worker profile.

The coarse models (:mod:`simulate.analytic`) see a step as sequential phases with mean
durations. This module measures those durations on a :class:`~tfprofile.dag.Profile`
and the cluster's numbers (bandwidth per direction, parsing overhead ``α·size + β``),
and evaluates every baseline for a number of workers.

Choices, where the papers leave them open:

- **Per-step sums, then the mean over profiled steps.** A phase's duration in a step
  is the sum of its ops' recorded durations in that step: computation ops run one at
  a time on their resource, as in the fine-grained simulator (docs/model.md §2.4), so the sum is
  the time the resource is busy. MVA needs mean service times, hence the mean.
- **Forward vs backward** (S_F, S_B of TPDS §2.1.1; T_F, T_B of Eqs. 7-11): a WORKER op
  is backward if a component of its name, split at ``/``, is ``gradients`` or
  ``gradient_tape``, optionally with a ``_N`` suffix. These are the name scopes
  TensorFlow gives gradient ops (``tf.gradients``/``Optimizer.minimize`` in graph
  mode, ``GradientTape`` in TF 2.x, uniquified as ``gradients_1`` when a graph calls
  them twice), wherever they sit: under a tower scope (``tower_0/gradients/...``) or
  below a Grappler prefix (``ConstantFolding/gradients/...``, the folded shape
  constants of gradient ops, which a bare ``startswith("gradients/")`` would miss).
  Every other WORKER op is forward, including input generation and the received
  tensors' ``Identity`` copies, so forward + backward is all WORKER time.
- **Transfers**: S_D = M_down/B_down and S_U = M_up/B_up (TPDS §2.1.2), with M the
  bytes the profile's DOWNLINK and UPLINK transfers carry in a step (the model and
  the gradients; they differ slightly, e.g. by a learning-rate scalar), B per direction.
- **Parsing overhead** (ICPE §3.2.1; docs/model.md §2.1, §9.1): receiving a tensor costs ``α·size + β``
  of the receiver's computation. The papers' coarse models have no such term; here
  downlink parsing is added to the forward time (the worker parses parameters before
  its forward pass uses them) and uplink parsing to the update time at the PS. With
  α = β = 0 (the default) the parameters are exactly the papers'.
- **Update** S_S, T_S: all PS computation of a step plus uplink parsing.
- **Cynthia**: T_p is all computation of a step, worker and PS (a one-worker step with
  Cynthia's two phases must add up to compute + transfers); T_C is the mean of the
  two directions' transfer times, so that ``2·T_C = S_D + S_U``.
- **Ring all-reduce** (Eq. 11): M is the gradient bytes (uplink), B the slower
  direction, since every ring step both sends and receives; T_F excludes downlink
  parsing, as there are no downlinks.
- **PAI**: T_c is all computation (as Cynthia's T_p), T_w the downlink plus uplink
  bytes, each over its own direction's bandwidth; T_d is 0 unless input bytes and
  bandwidth are given (synthetic inputs are generated on the worker, and that time
  is computation). The bandwidths are measured rates, so efficiency defaults to 1.

Everything here depends on :mod:`tfprofile.dag` data types only.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from simulate import analytic
from simulate.cluster import check_non_negative, check_rate
from tfbase.errors import UsageError
from tfprofile.dag import OpGraph, Profile, Resource

BACKWARD_SCOPE = re.compile(r"^(gradients|gradient_tape)(_\d+)?$")
"""A name component that marks an op as part of the backward pass."""


@dataclasses.dataclass(frozen=True)
class CoarseParameters:
    """Mean per-step durations and sizes of one worker's step, for the coarse models.

    Attributes:
        batch_size: examples per step and worker.
        forward_compute_s: WORKER forward computation (recorded durations).
        backward_s: WORKER backward computation, S_B / T_B.
        ps_compute_s: PS computation.
        downlink_parse_s: α·(downlink bytes) + β·(downlink transfers).
        uplink_parse_s: α·(uplink bytes) + β·(uplink transfers).
        downlink_bytes, uplink_bytes: bytes moved per step in each direction.
        n_downlinks, n_uplinks: transfers per step in each direction.
        bandwidth_down_Bps, bandwidth_up_Bps: link bandwidth per direction.
        n_steps: profiled steps the means are over.
    """

    batch_size: int
    forward_compute_s: float
    backward_s: float
    ps_compute_s: float
    downlink_parse_s: float
    uplink_parse_s: float
    downlink_bytes: int
    uplink_bytes: int
    n_downlinks: int
    n_uplinks: int
    bandwidth_down_Bps: float
    bandwidth_up_Bps: float
    n_steps: int

    @property
    def forward_s(self) -> float:
        """S_F / T_F: forward computation plus parsing of the received parameters."""
        return self.forward_compute_s + self.downlink_parse_s

    @property
    def compute_s(self) -> float:
        """S_W = S_F + S_B: the worker's computation per step."""
        return self.forward_s + self.backward_s

    @property
    def update_s(self) -> float:
        """S_S / T_S: the PS's computation per step plus parsing of the gradients."""
        return self.ps_compute_s + self.uplink_parse_s

    @property
    def downlink_s(self) -> float:
        """S_D = M_down / B_down."""
        return self.downlink_bytes / self.bandwidth_down_Bps

    @property
    def uplink_s(self) -> float:
        """S_U = M_up / B_up."""
        return self.uplink_bytes / self.bandwidth_up_Bps

    @property
    def total_compute_s(self) -> float:
        """All computation of a step, worker and PS: Cynthia's T_p, PAI's T_c."""
        return self.compute_s + self.update_s

    @property
    def allreduce_transfer_s(self) -> float:
        """M/B of Eq. 11: gradient bytes over the slower direction."""
        return self.uplink_bytes / min(self.bandwidth_down_Bps, self.bandwidth_up_Bps)


def backward_mask(graph: OpGraph) -> np.ndarray:
    """Boolean mask of the WORKER ops that belong to the backward pass.

    An op is backward if some ``/``-separated component of its name matches
    :data:`BACKWARD_SCOPE` (``gradients``, ``gradients_1``, ``gradient_tape``, ...).
    """
    worker = graph.resource == Resource.WORKER
    in_scope = np.fromiter((any(BACKWARD_SCOPE.match(part) for part in str(name).split("/"))
                            for name in graph.name), dtype=bool, count=graph.n_ops)
    return worker & in_scope


def forward_mask(graph: OpGraph) -> np.ndarray:
    """Boolean mask of the WORKER ops that are not backward (:func:`backward_mask`)."""
    return (graph.resource == Resource.WORKER) & ~backward_mask(graph)


def estimate_parameters(profile: Profile, *, bandwidth_down_Bps: float, bandwidth_up_Bps: float,
                        alpha_s_per_byte: float = 0.0, beta_s: float = 0.0) -> CoarseParameters:
    """Estimate the coarse models' parameters from a profile (see the module docstring).

    Parameters:
        profile: a 1-PS/1-worker profile.
        bandwidth_down_Bps: PS → worker bandwidth, bytes/s.
        bandwidth_up_Bps: worker → PS bandwidth, bytes/s.
        alpha_s_per_byte, beta_s: parsing overhead ``α·size + β`` per received tensor.

    Returns:
        :class:`CoarseParameters`.

    Raises:
        UsageError: a bandwidth that is not positive and finite, a negative overhead, or
            a profile with WORKER computation but no backward op by the naming rule
            (forward and backward could not be told apart).
    """
    down_Bps = check_rate(bandwidth_down_Bps, "bandwidth_down_Bps")
    up_Bps = check_rate(bandwidth_up_Bps, "bandwidth_up_Bps")
    alpha = check_non_negative(alpha_s_per_byte, "alpha_s_per_byte")
    beta = check_non_negative(beta_s, "beta_s")
    graph = profile.graph
    backward = backward_mask(graph)
    forward = forward_mask(graph)
    if forward.any() and not backward.any():
        raise UsageError("profile", "no WORKER op is in a gradients/ or gradient_tape/ name scope, "
                         "so the forward pass cannot be told from the backward pass")
    durations = profile.duration_s

    def mean_step(mask: np.ndarray) -> float:
        return float(durations[:, mask].sum(axis=1).mean())

    down = graph.resource == Resource.DOWNLINK
    up = graph.resource == Resource.UPLINK
    down_bytes = int(graph.size_bytes[down].sum())
    up_bytes = int(graph.size_bytes[up].sum())
    return CoarseParameters(
        batch_size=int(profile.batch_size),
        forward_compute_s=mean_step(forward),
        backward_s=mean_step(backward),
        ps_compute_s=mean_step(graph.resource == Resource.PS),
        downlink_parse_s=alpha * down_bytes + beta * int(down.sum()),
        uplink_parse_s=alpha * up_bytes + beta * int(up.sum()),
        downlink_bytes=down_bytes,
        uplink_bytes=up_bytes,
        n_downlinks=int(down.sum()),
        n_uplinks=int(up.sum()),
        bandwidth_down_Bps=down_Bps,
        bandwidth_up_Bps=up_Bps,
        n_steps=profile.n_steps,
    )


def pai_from_parameters(params: CoarseParameters, *, input_bytes: float = 0.0,
                        input_bandwidth_Bps: float = math.inf, efficiency: float = 1.0) -> analytic.PaiBreakdown:
    """PAI's breakdown (PAI §II-B) of the profiled step; see the module docstring for the choices."""
    return analytic.pai_breakdown(
        params.total_compute_s,
        [params.downlink_bytes, params.uplink_bytes],
        [params.bandwidth_down_Bps, params.bandwidth_up_Bps],
        input_bytes=input_bytes, input_bandwidth_Bps=input_bandwidth_Bps, efficiency=efficiency)


def baseline_predictions(params: CoarseParameters, workers: int, *,
                         rho_threshold: float = analytic.DEFAULT_RHO_THRESHOLD,
                         ) -> tuple[analytic.Prediction | analytic.AsyncPrediction, ...]:
    """Every coarse baseline of docs/model.md §9 for ``workers`` workers, from one set of parameters.

    Returns, in this order: ``lin-async``, ``lin-async-overlap`` (asynchronous SGD);
    ``cynthia``, ``cynthia-halved``; ``sync-ps``, ``sync-fcfs``, ``sync-hybrid``,
    ``sync-hybrid-overlap``, ``ring-allreduce`` (synchronous SGD); ``pai``,
    ``pai-overlap`` (no contention: linear in the number of workers).
    """
    p = params
    sync_args = (workers, p.batch_size, p.forward_s, p.backward_s, p.downlink_s, p.uplink_s, p.update_s)
    pai = pai_from_parameters(p)
    return (
        analytic.lin_async(workers, p.batch_size, p.compute_s, p.downlink_s, p.uplink_s, p.update_s,
                           rho_threshold=rho_threshold),
        analytic.lin_async_overlap(workers, p.batch_size, p.forward_s, p.backward_s, p.downlink_s, p.uplink_s,
                                   p.update_s, rho_threshold=rho_threshold),
        analytic.cynthia(workers, p.batch_size, p.total_compute_s, (p.downlink_s + p.uplink_s) / 2),
        analytic.cynthia_halved(workers, p.batch_size, p.total_compute_s, (p.downlink_s + p.uplink_s) / 2),
        analytic.sync_ps(*sync_args),
        analytic.sync_fcfs(*sync_args),
        analytic.sync_hybrid(*sync_args),
        analytic.sync_hybrid_overlap(*sync_args),
        analytic.ring_allreduce(workers, p.batch_size, p.forward_compute_s, p.backward_s, p.allreduce_transfer_s),
        analytic.pai_prediction(pai, workers, p.batch_size),
        analytic.pai_prediction(pai, workers, p.batch_size, overlap=True),
    )
