"""Coarse-grained analytical throughput models: the baselines of docs/model.md §9.

Every model here sees an SGD step as a few sequential phases with mean durations,
and predicts throughput in examples/s summed over workers:

- :func:`lin_async`, :func:`lin_async_overlap`: Lin et al.'s closed queueing network
  for asynchronous SGD, solved by exact mean value analysis (TPDS §2.1, Eqs. 1-6);
  :func:`mva_closed` is that solver on its own.
- :func:`cynthia`, :func:`cynthia_halved`: Cynthia's one-line model (ICPE §1) and the
  variant with halved communication time that ICPE §4.4 tried.
- :func:`sync_ps`, :func:`sync_fcfs`, :func:`sync_hybrid`, :func:`sync_hybrid_overlap`,
  :func:`ring_allreduce`: closed forms for synchronous SGD (TPDS §3.1, Eqs. 7-11).
- :func:`pai_breakdown`, :func:`pai_bandwidth_whatif`, :func:`pai_prediction`: the
  step-time breakdown ``T = T_d + T_c + T_w`` of Wang et al. (PAI §II-B) and its
  what-if on network bandwidth (PAI §III-C).

Inputs are plain numbers in seconds and bytes; :mod:`simulate.estimate` derives them
from a tfsim profile. Transfer times are those of the whole model at the full
bandwidth of one link, ``M/B``; the papers use one ``M/B`` for both directions, and
here the downlink and uplink may differ (equal values give the papers' formulas).

Bad arguments raise :class:`tfbase.errors.UsageError` naming the argument.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence

import numpy as np

from tfbase.errors import UsageError

DEFAULT_RHO_THRESHOLD = 0.5
"""ρ_T of Eq. 5. TPDS §4.2.1 picked 0.5 for its CPU cluster and 0.6 for AWS GPU
clusters (from a one-time sweep of 1-7 workers); tfsim's clusters are CPU hosts."""

MAX_MVA_POPULATIONS = 1 << 18
"""Largest number of population vectors :func:`mva_closed` will visit (about a second
of work): 18 workers that all differ, or any number of identical ones."""

DISCIPLINES = ("delay", "ps", "fcfs")


# ---------------------------------------------------------------------------
# Results


@dataclasses.dataclass(frozen=True)
class Prediction:
    """A closed-form model's prediction for one number of workers.

    Attributes:
        model: name of the model (``"cynthia"``, ``"sync-hybrid"``, ...).
        workers: number of workers.
        throughput_eps: examples per second, summed over workers.
        step_time_s: duration of one worker's SGD step.
    """

    model: str
    workers: int
    throughput_eps: float
    step_time_s: float


@dataclasses.dataclass(frozen=True)
class AsyncPrediction:
    """The prediction of Lin et al.'s queueing model (TPDS Eqs. 3-6) for one number of workers.

    Attributes:
        model: ``"lin-async"`` (Eq. 5) or ``"lin-async-overlap"`` (Eq. 6).
        workers: number of workers K.
        throughput_eps: examples per second, summed over workers: Eq. 5.
        step_time_s: mean over workers of a worker's cycle time (one SGD step).
        link_discipline: ``"fcfs"`` or ``"ps"``, the solution Eq. 5 picked.
        link_utilization: ρ^FCFS, the busier link's utilization in the FCFS solution.
        throughput_fcfs_eps: Eq. 3 times the batch size.
        throughput_ps_eps: Eq. 4 times the batch size.
        compute_s: per worker, the computation service time S_k^W the final solution
            used (after the Eq. 6 correction for ``lin-async-overlap``).
        downlink_response_s, uplink_response_s: per worker, the mean response times
            T_k^D and T_k^U of the final solution.
    """

    model: str
    workers: int
    throughput_eps: float
    step_time_s: float
    link_discipline: str
    link_utilization: float
    throughput_fcfs_eps: float
    throughput_ps_eps: float
    compute_s: tuple[float, ...]
    downlink_response_s: tuple[float, ...]
    uplink_response_s: tuple[float, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class MvaSolution:
    """Mean values of a closed multi-class network with one customer per class.

    Arrays are read-only; ``K`` classes (rows) by ``L`` stations (columns).

    Attributes:
        response_s: (K, L) mean response time T_k^l per visit.
        throughput_per_s: (K,) cycles per second X_k of each class.
        queue_length: (K, L) mean number N_k^l of class-k customers at station l.
        utilization: (K, L) class-k utilization ρ_k^l = X_k·S_k^l.
    """

    response_s: np.ndarray
    throughput_per_s: np.ndarray
    queue_length: np.ndarray
    utilization: np.ndarray

    def __post_init__(self) -> None:
        for field in ("response_s", "throughput_per_s", "queue_length", "utilization"):
            array = np.array(getattr(self, field), dtype=np.float64)
            array.setflags(write=False)
            object.__setattr__(self, field, array)


@dataclasses.dataclass(frozen=True)
class PaiBreakdown:
    """One worker's step time split as in PAI §II-B: ``T = T_d + T_c + T_w``.

    Attributes:
        input_s: T_d, input data I/O time.
        compute_s: T_c, computation time.
        weight_s: T_w, weight/gradient communication time.
    """

    input_s: float
    compute_s: float
    weight_s: float

    @property
    def total_s(self) -> float:
        """T_total = T_d + T_c + T_w: no overlap, the assumption of PAI §II-B."""
        return self.input_s + self.compute_s + self.weight_s

    @property
    def overlapped_s(self) -> float:
        """max(T_d, T_c, T_w): the ideal-overlap case of PAI §V-B."""
        return max(self.input_s, self.compute_s, self.weight_s)

    def fraction(self, part: str) -> float:
        """Share of ``part`` (``"input"``, ``"compute"`` or ``"weight"``) in :attr:`total_s`."""
        if part not in ("input", "compute", "weight"):
            raise UsageError("part", f"choose from input, compute, weight, not {part!r}")
        total = self.total_s
        return getattr(self, f"{part}_s") / total if total > 0 else 0.0


# ---------------------------------------------------------------------------
# Input checks


def _check_workers(workers) -> int:
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral):
        raise UsageError("workers", f"must be a whole number, not {workers!r}")
    if workers < 1:
        raise UsageError("workers", f"must be at least 1, not {workers}")
    return int(workers)


def _check_batch(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
        raise UsageError("batch_size", f"must be a whole number, not {batch_size!r}")
    if batch_size < 1:
        raise UsageError("batch_size", f"must be at least 1, not {batch_size}")
    return int(batch_size)


def _check_amount(name: str, value, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(name, f"must be a number of {unit}, not {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise UsageError(name, f"must be finite and non-negative, not {value}")
    return value


def _check_time(name: str, value) -> float:
    return _check_amount(name, value, "seconds")


def _check_times(name: str, value, workers: int) -> tuple[float, ...]:
    """A time per worker: one number for all of them, or a sequence of ``workers`` numbers."""
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, str):
        values = list(np.ravel(np.asarray(value, dtype=object)))
        if len(values) != workers:
            raise UsageError(name, f"needs one value per worker ({workers}), not {len(values)}")
        return tuple(_check_time(name, v) for v in values)
    return (_check_time(name, value),) * workers


def _check_positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(name, f"must be a number, not {value!r}")
    value = float(value)
    if not value > 0:  # also rejects NaN
        raise UsageError(name, f"must be positive, not {value}")
    return value


def _check_fraction(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(name, f"must be a number in [0, 1], not {value!r}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise UsageError(name, f"must be in [0, 1], not {value}")
    return value


def _step_prediction(model: str, workers: int, batch_size: int, step_time_s: float) -> Prediction:
    """All workers step in ``step_time_s`` each: throughput ``workers·batch/step_time_s``."""
    if step_time_s <= 0:
        raise UsageError(model, "every time is zero, so a step takes no time and throughput is unbounded")
    return Prediction(model, workers, workers * batch_size / step_time_s, step_time_s)


# ---------------------------------------------------------------------------
# Exact mean value analysis (TPDS §2.1, Eqs. 1-2)


def mva_closed(service_s, disciplines: Sequence[str], *, fcfs_scv: float = 0.0,
               merge_identical: bool = True) -> MvaSolution:
    """Solve a closed network with one customer per class by exact MVA (TPDS Eqs. 1-2).

    Each class k (a worker) has exactly one customer that visits every station l once
    per cycle, with mean service time ``service_s[k][l]`` (0 for a station the class
    skips). The recursion runs over population vectors n in {0,1}^K, from the empty
    network up to n = (1, ..., 1); from Little's law, ``N_k^l(n) = X_k(n)·T_k^l(n)``,
    ``ρ_k^l(n) = X_k(n)·S_k^l`` and ``X_k(n) = n_k / Σ_l T_k^l(n)``. Response times:

    - ``"delay"`` (G/G/∞, e.g. a worker's own computation): ``T_k = S_k``.
    - ``"ps"`` (processor sharing), Eq. 1: ``T_k(n) = S_k (1 + Σ_j N_j(n − e_k))``.
    - ``"fcfs"``, Eq. 2: ``T_k(n) = S_k + Σ_j S_j (N_j(n − e_k) − ½ ρ_j(n − e_k))``.

    Eq. 2 charges the customer found in service half a service time, the mean
    residual of a deterministic service. ``fcfs_scv`` generalises it to services with
    squared coefficient of variation c²: the residual is ``(1 + c²)/2`` of a service,
    so the ½ becomes ``(1 − c²)/2``. The default 0 is Eq. 2; 1 (exponential service)
    makes the recursion exact for FCFS stations whose service time is the same for
    every class (the BCMP condition), and so comparable with a Markov chain.

    Classes with identical service times are exchangeable, so the solver merges them
    into one class of population c_t and recurses over (n_1, ..., n_T) with
    0 ≤ n_t ≤ c_t: the same recursion and the same values (up to rounding) as over {0,1}^K, with
    Π(c_t + 1) populations instead of 2^K. ``merge_identical=False`` runs the
    recursion over {0,1}^K literally.

    Parameters:
        service_s: (K, L) mean service times in seconds, K ≥ 1 classes, L ≥ 1 stations.
        disciplines: L names from ``"delay"``, ``"ps"``, ``"fcfs"``.
        fcfs_scv: c² of service at FCFS stations, in [0, 1].
        merge_identical: merge classes with identical rows (exact; faster).

    Returns:
        :class:`MvaSolution` at the full population (every class present).

    Raises:
        UsageError: on a bad shape, a negative or non-finite time, a class whose
            service times are all 0, an unknown discipline, ``fcfs_scv`` outside
            [0, 1], or more than ``MAX_MVA_POPULATIONS`` populations to visit.
    """
    try:
        service = np.array(service_s, dtype=np.float64)
    except (TypeError, ValueError):
        raise UsageError("service_s", "must be a K x L array of seconds") from None
    if service.ndim != 2 or service.shape[0] < 1 or service.shape[1] < 1:
        raise UsageError("service_s", f"must be a K x L array with K, L >= 1, not shape {service.shape}")
    if not np.isfinite(service).all() or (service < 0).any():
        raise UsageError("service_s", "service times must be finite and non-negative")
    if (service.sum(axis=1) <= 0).any():
        raise UsageError("service_s", "a class has zero total service time, so its throughput is unbounded")
    kinds = tuple(disciplines)
    if len(kinds) != service.shape[1]:
        raise UsageError("disciplines", f"need one per station ({service.shape[1]}), not {len(kinds)}")
    for kind in kinds:
        if kind not in DISCIPLINES:
            raise UsageError("disciplines", f"unknown discipline {kind!r}; choose from {', '.join(DISCIPLINES)}")
    scv = _check_fraction("fcfs_scv", fcfs_scv)

    if merge_identical:
        rows, type_of = np.unique(service, axis=0, return_inverse=True)
        type_of = np.asarray(type_of).ravel()
        counts = np.bincount(type_of, minlength=len(rows))
    else:
        rows, type_of, counts = service, np.arange(service.shape[0]), np.ones(service.shape[0], dtype=np.int64)
    n_populations = int(np.prod(counts + 1, dtype=object))
    if n_populations > MAX_MVA_POPULATIONS:
        raise UsageError("service_s", f"exact MVA would visit {n_populations} populations "
                         f"(limit {MAX_MVA_POPULATIONS}); use fewer workers or fewer distinct service times")
    response, per_customer_x = _mva_types(rows, counts, kinds, residual_weight=(1.0 - scv) / 2.0)
    response = response[type_of]
    x = per_customer_x[type_of]
    return MvaSolution(response, x, x[:, None] * response, x[:, None] * service)


def _mva_types(rows: np.ndarray, counts: np.ndarray, kinds: tuple[str, ...],
               residual_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """Multi-class exact MVA with c_t customers of type t; returns (T_t^l, X per customer).

    Populations are numbered in mixed radix (digit t in 0..c_t) and solved level by
    level (total population 1, 2, ...), since n − e_t is always one level down; each
    level is one vectorised pass. Per population, only the per-station sums the
    equations need are kept: ``A^l = Σ_j N_j^l`` (Eq. 1) and
    ``G^l = Σ_j S_j^l (N_j^l − w ρ_j^l)`` (Eq. 2, w = ½).
    """
    n_types, n_stations = rows.shape
    radix = counts + 1
    strides = np.concatenate([[1], np.cumprod(radix[:-1])]).astype(np.int64)
    total = int(np.prod(radix))
    index = np.arange(total, dtype=np.int64)
    digits = (index[:, None] // strides[None, :]) % radix[None, :]
    level = digits.sum(axis=1)
    sum_n = np.zeros((total, n_stations))  # A^l(n)
    sum_g = np.zeros((total, n_stations))  # G^l(n)
    is_ps = np.array([k == "ps" for k in kinds])
    is_fcfs = np.array([k == "fcfs" for k in kinds])
    response = np.zeros((1, n_types, n_stations))
    cycle = np.ones((1, n_types))
    chunk = max(1, (1 << 22) // max(1, n_types * n_stations))  # bounds the temporaries
    for lvl in range(1, int(level.max()) + 1):
        at_level = np.flatnonzero(level == lvl)
        for start in range(0, len(at_level), chunk):
            pops = at_level[start:start + chunk]
            n = digits[pops]                                          # (P, T)
            present = n > 0
            # n − e_t; for absent types any valid index will do, the result is masked out
            prev = np.where(present, pops[:, None] - strides[None, :], pops[:, None])
            a_prev = sum_n[prev]                                      # (P, T, L)
            g_prev = sum_g[prev]
            response = np.broadcast_to(rows[None], a_prev.shape).copy()   # delay: T = S
            response[..., is_ps] = rows[None][..., is_ps] * (1.0 + a_prev[..., is_ps])
            response[..., is_fcfs] = rows[None][..., is_fcfs] + g_prev[..., is_fcfs]
            cycle = response.sum(axis=2)                              # (P, T); > 0, checked
            x_type = n / cycle                                        # X of all n_t customers
            queue = x_type[..., None] * response                      # Σ over type-t customers of N
            util = x_type[..., None] * rows[None]
            sum_n[pops] = queue.sum(axis=1)
            sum_g[pops] = (rows[None] * (queue - residual_weight * util)).sum(axis=1)
    # the last level holds exactly one population: everybody present
    return response[-1], 1.0 / cycle[-1]


# ---------------------------------------------------------------------------
# Lin et al.'s asynchronous model (TPDS §2.1)


def _lin_solve(workers: int, batch_size: int, compute_s: tuple[float, ...], downlink_s: float,
               uplink_s: float, update_s: float, rho_threshold: float, model: str) -> AsyncPrediction:
    """Eqs. 3-5 for given per-worker computation times."""
    # stations: the worker's own computation, uplink, update at the PS, downlink (TPDS Fig. 5)
    service = np.empty((workers, 4))
    service[:, 0] = compute_s
    service[:, 1] = uplink_s
    service[:, 2] = update_s
    service[:, 3] = downlink_s
    if (service.sum(axis=1) <= 0).any():
        raise UsageError(model, "every time is zero, so a step takes no time and throughput is unbounded")
    try:
        solutions = {
            "fcfs": mva_closed(service, ("delay", "fcfs", "ps", "fcfs")),  # Eq. 3
            "ps": mva_closed(service, ("delay", "ps", "ps", "ps")),        # Eq. 4
        }
    except UsageError as err:  # only the population limit can fail here; it is about the workers' times
        raise UsageError("compute_s", err.problem) from None
    fcfs = solutions["fcfs"]
    x_fcfs = float(fcfs.throughput_per_s.sum())
    # ρ^FCFS: with S_D = S_U both links are equally busy; when they differ, the busier decides.
    # A saturated link's sum can round to 1 + ulp; a utilization is at most 1, and ρ_T = 1
    # must mean "always FCFS".
    rho_fcfs = min(1.0, float(max(fcfs.utilization[:, 1].sum(), fcfs.utilization[:, 3].sum())))
    chosen = "fcfs" if rho_fcfs <= rho_threshold else "ps"  # Eq. 5
    solution = solutions[chosen]
    x_job = float(solution.throughput_per_s.sum())
    return AsyncPrediction(
        model=model,
        workers=workers,
        throughput_eps=batch_size * x_job,
        step_time_s=float(np.mean(1.0 / solution.throughput_per_s)),
        link_discipline=chosen,
        link_utilization=rho_fcfs,
        throughput_fcfs_eps=batch_size * x_fcfs,
        throughput_ps_eps=batch_size * float(solutions["ps"].throughput_per_s.sum()),
        compute_s=tuple(float(v) for v in compute_s),
        downlink_response_s=tuple(float(v) for v in solution.response_s[:, 3]),
        uplink_response_s=tuple(float(v) for v in solution.response_s[:, 1]),
    )


def lin_async(workers: int, batch_size: int, compute_s, downlink_s: float, uplink_s: float,
              update_s: float, *, rho_threshold: float = DEFAULT_RHO_THRESHOLD) -> AsyncPrediction:
    """Throughput of asynchronous SGD by Lin et al.'s queueing model (TPDS §2.1, Eqs. 1-5).

    Each of the K workers has one task circulating through its own computation station
    (G/G/∞, service S_k^W), then the uplink (S^U), the update at the parameter server
    (processor sharing, S^S) and the downlink (S^D), the last three shared by all
    workers. The network is solved by exact MVA (:func:`mva_closed`) twice: with FCFS
    links (Eq. 2), giving X^FCFS (Eq. 3), and with processor-sharing links (Eq. 1),
    giving X^PS (Eq. 4). Eq. 5 picks X^FCFS if the FCFS solution's link utilization
    ρ^FCFS = Σ_k X_k·S^D is at most ``rho_threshold`` (light load: transfers of
    different workers interleave), X^PS otherwise (heavy load: they share the link).

    Parameters:
        workers: K ≥ 1.
        batch_size: examples per step and worker.
        compute_s: S^W, the worker's computation per step in seconds: one number for
            all workers, or one per worker (heterogeneous workers).
        downlink_s: S^D = M/B, the model's transfer time from the PS at full bandwidth.
        uplink_s: S^U = M/B, the gradients' transfer time to the PS at full bandwidth.
        update_s: S^S, the PS's computation per step (applying one worker's update).
        rho_threshold: ρ_T of Eq. 5, in [0, 1].

    Returns:
        :class:`AsyncPrediction` with ``model="lin-async"``.

    Raises:
        UsageError: workers < 1, batch_size < 1, a negative or non-finite time, all
            times zero, or ρ_T outside [0, 1].
    """
    workers = _check_workers(workers)
    batch_size = _check_batch(batch_size)
    compute = _check_times("compute_s", compute_s, workers)
    rho_threshold = _check_fraction("rho_threshold", rho_threshold)
    return _lin_solve(workers, batch_size, compute, _check_time("downlink_s", downlink_s),
                      _check_time("uplink_s", uplink_s), _check_time("update_s", update_s),
                      rho_threshold, "lin-async")


def lin_async_overlap(workers: int, batch_size: int, forward_s, backward_s, downlink_s: float,
                      uplink_s: float, update_s: float, *,
                      rho_threshold: float = DEFAULT_RHO_THRESHOLD) -> AsyncPrediction:
    """Lin et al.'s model with the overlap correction of TPDS §2.1.1 (Eq. 6).

    Solves :func:`lin_async` with ``S_k^W = S_k^F + S_k^B``, takes the response times
    T_k^D and T_k^U of the downlink and uplink from that (Eq. 5) solution, replaces the
    computation time by

        S_k^W = max(0, S_k^F − T_k^D) + max(0, S_k^B − T_k^U)        (Eq. 6)

    (the whole downlink hides under the forward pass, the whole uplink under the
    backward pass) and solves Eq. 5 once more, choosing FCFS or PS again from the new
    utilization. The correction is applied once, not iterated to a fixed point.

    Parameters are those of :func:`lin_async`, with the computation split into
    ``forward_s`` (S^F) and ``backward_s`` (S^B), each one number or one per worker.

    Returns:
        :class:`AsyncPrediction` with ``model="lin-async-overlap"``; its ``compute_s``
        is the corrected S_k^W.
    """
    workers = _check_workers(workers)
    batch_size = _check_batch(batch_size)
    forward = _check_times("forward_s", forward_s, workers)
    backward = _check_times("backward_s", backward_s, workers)
    rho_threshold = _check_fraction("rho_threshold", rho_threshold)
    down = _check_time("downlink_s", downlink_s)
    up = _check_time("uplink_s", uplink_s)
    update = _check_time("update_s", update_s)
    plain = _lin_solve(workers, batch_size, tuple(f + b for f, b in zip(forward, backward)), down, up, update,
                       rho_threshold, "lin-async")
    corrected = tuple(max(0.0, f - t_d) + max(0.0, b - t_u) for f, b, t_d, t_u in
                      zip(forward, backward, plain.downlink_response_s, plain.uplink_response_s))
    return _lin_solve(workers, batch_size, corrected, down, up, update, rho_threshold, "lin-async-overlap")


# ---------------------------------------------------------------------------
# Cynthia (ICPE §1, §4.4)


def _cynthia(model: str, workers, batch_size, compute_s, transfer_s, utilization) -> Prediction:
    workers = _check_workers(workers)
    batch_size = _check_batch(batch_size)
    t_p = _check_time("compute_s", compute_s)
    t_c = _check_time("transfer_s", transfer_s)
    if utilization is None:
        u_1 = 2 * t_c / (t_p + 2 * t_c) if t_p + 2 * t_c > 0 else 0.0
    else:
        u_1 = _check_fraction("utilization", utilization)
    return _step_prediction(model, workers, batch_size, t_p * max(1.0, workers * u_1) + 2 * t_c)


def cynthia(workers: int, batch_size: int, compute_s: float, transfer_s: float, *,
            utilization: float | None = None) -> Prediction:
    """Cynthia's asynchronous-SGD throughput as ICPE §1 states it: ``W·K / (T_p·max(1, W·U_1) + 2·T_C)``.

    W workers, batch size K; T_p is the time to process a batch, T_C the transfer time
    of the model (and, once more, of the update); U_1 is the network utilization with
    one worker. A worker's step is then ``T_p·max(1, W·U_1) + 2·T_C``: once W workers
    would load the network beyond 1, computation is stretched by that factor.

    ICPE §4.4 says halving T_C changes U_1, so U_1 is a function of T_C: by default it
    is the share of a one-worker step during which the (one, shared) network is busy,
    ``U_1 = 2·T_C / (T_p + 2·T_C)``; pass ``utilization`` to use a measured value.

    Parameters:
        workers: W ≥ 1.
        batch_size: K, examples per step and worker.
        compute_s: T_p in seconds.
        transfer_s: T_C in seconds.
        utilization: U_1 in [0, 1], or None to derive it as above.

    Returns:
        :class:`Prediction` with ``model="cynthia"``.

    Raises:
        UsageError: workers < 1, batch_size < 1, a negative or non-finite time, U_1
            outside [0, 1], or T_p = T_C = 0.
    """
    return _cynthia("cynthia", workers, batch_size, compute_s, transfer_s, utilization)


def cynthia_halved(workers: int, batch_size: int, compute_s: float, transfer_s: float) -> Prediction:
    """Cynthia with T_C halved, the variant ICPE §4.4 tried.

    The uplink and downlink are separate resources, so ICPE halves the communication
    time T_C, which lowers both the ``2·T_C`` term and U_1 (derived from T_C as in
    :func:`cynthia`): ``U_1 = T_C / (T_p + T_C)``, step ``T_p·max(1, W·U_1) + T_C``.
    Parameters and errors as :func:`cynthia`, with ``transfer_s`` the unhalved T_C.

    Returns:
        :class:`Prediction` with ``model="cynthia-halved"``.
    """
    return _cynthia("cynthia-halved", workers, batch_size, compute_s, _check_time("transfer_s", transfer_s) / 2,
                    None)


# ---------------------------------------------------------------------------
# Synchronous SGD (TPDS §3.1)


def _sync_inputs(workers, batch_size, forward_s, backward_s, downlink_s, uplink_s, update_s):
    return (_check_workers(workers), _check_batch(batch_size), _check_time("forward_s", forward_s),
            _check_time("backward_s", backward_s), _check_time("downlink_s", downlink_s),
            _check_time("uplink_s", uplink_s), _check_time("update_s", update_s))


def sync_ps(workers: int, batch_size: int, forward_s: float, backward_s: float, downlink_s: float,
            uplink_s: float, update_s: float) -> Prediction:
    """Synchronous SGD, links shared equally (TPDS Eq. 7).

    All K workers start a step together and share the links equally, so both
    transfers take K times their one-worker time:
    ``T_PS = K·M/B + (T_F + T_B) + K·M/B + T_S``; throughput ``K·batch / T_PS``.

    Parameters:
        workers: K ≥ 1.
        batch_size: examples per step and worker.
        forward_s, backward_s: T_F and T_B of one worker's step.
        downlink_s, uplink_s: M/B of the model (downlink) and gradients (uplink).
        update_s: T_S, the update phase at the parameter server.

    Returns:
        :class:`Prediction` with ``model="sync-ps"``.
    """
    k, batch, t_f, t_b, t_d, t_u, t_s = _sync_inputs(workers, batch_size, forward_s, backward_s,
                                                     downlink_s, uplink_s, update_s)
    return _step_prediction("sync-ps", k, batch, k * t_d + (t_f + t_b) + k * t_u + t_s)


def sync_fcfs(workers: int, batch_size: int, forward_s: float, backward_s: float, downlink_s: float,
              uplink_s: float, update_s: float) -> Prediction:
    """Synchronous SGD, each transfer gets the whole link in turn (TPDS Eq. 8).

    The downlinks run one after another (the last worker waits K·M/B), which staggers
    the workers so that their uplinks do not meet:
    ``T_FCFS = K·M/B + (T_F + T_B) + M/B + T_S``. Parameters as :func:`sync_ps`.

    Returns:
        :class:`Prediction` with ``model="sync-fcfs"``.
    """
    k, batch, t_f, t_b, t_d, t_u, t_s = _sync_inputs(workers, batch_size, forward_s, backward_s,
                                                     downlink_s, uplink_s, update_s)
    return _step_prediction("sync-fcfs", k, batch, k * t_d + (t_f + t_b) + t_u + t_s)


def sync_hybrid(workers: int, batch_size: int, forward_s: float, backward_s: float, downlink_s: float,
                uplink_s: float, update_s: float) -> Prediction:
    """Synchronous SGD, the average of Eqs. 7 and 8 (TPDS Eq. 9).

    ``T_Hybrid = (T_PS + T_FCFS)/2 = K·M/B + (T_F + T_B) + (K+1)·M/(2B) + T_S``. The
    step times are averaged, as in Eq. 9 (not the throughputs). Parameters as
    :func:`sync_ps`.

    Returns:
        :class:`Prediction` with ``model="sync-hybrid"``.
    """
    k, batch, t_f, t_b, t_d, t_u, t_s = _sync_inputs(workers, batch_size, forward_s, backward_s,
                                                     downlink_s, uplink_s, update_s)
    return _step_prediction("sync-hybrid", k, batch, k * t_d + (t_f + t_b) + (k + 1) * t_u / 2 + t_s)


def sync_hybrid_overlap(workers: int, batch_size: int, forward_s: float, backward_s: float,
                        downlink_s: float, uplink_s: float, update_s: float) -> Prediction:
    """Synchronous SGD, Eq. 9 with communication fully overlapped (TPDS Eq. 10).

    ``T = max(K·M/B, T_F) + max((K+1)·M/(2B), T_B) + T_S``: the downlink hides the
    forward pass or is hidden by it, and likewise the uplink and the backward pass.
    Parameters as :func:`sync_ps`.

    Returns:
        :class:`Prediction` with ``model="sync-hybrid-overlap"``.
    """
    k, batch, t_f, t_b, t_d, t_u, t_s = _sync_inputs(workers, batch_size, forward_s, backward_s,
                                                     downlink_s, uplink_s, update_s)
    return _step_prediction("sync-hybrid-overlap", k, batch,
                            max(k * t_d, t_f) + max((k + 1) * t_u / 2, t_b) + t_s)


def ring_allreduce(workers: int, batch_size: int, forward_s: float, backward_s: float,
                   transfer_s: float) -> Prediction:
    """Synchronous SGD with ring all-reduce instead of a parameter server (TPDS Eq. 11).

    ``T = (T_F + T_B) + 2(K−1)/K · M/B``: reduce-scatter and all-gather each send
    M/K bytes K−1 times per worker; there is no update phase on a server.

    Parameters:
        workers: K ≥ 1.
        batch_size: examples per step and worker.
        forward_s, backward_s: T_F and T_B.
        transfer_s: M/B, the gradients' transfer time at a worker's full bandwidth.

    Returns:
        :class:`Prediction` with ``model="ring-allreduce"``.
    """
    k = _check_workers(workers)
    batch = _check_batch(batch_size)
    t_f = _check_time("forward_s", forward_s)
    t_b = _check_time("backward_s", backward_s)
    t_m = _check_time("transfer_s", transfer_s)
    return _step_prediction("ring-allreduce", k, batch, (t_f + t_b) + 2 * (k - 1) * t_m / k)


# ---------------------------------------------------------------------------
# PAI breakdown (PAI §II-B, §III-C, §V-B)


def _pairs(name_bytes: str, sizes, name_bw: str, bandwidths) -> list[tuple[float, float]]:
    """(bytes, bandwidth) per medium from two numbers or two equal-length sequences."""
    sizes_scalar = not isinstance(sizes, (Sequence, np.ndarray))
    if sizes_scalar != (not isinstance(bandwidths, (Sequence, np.ndarray))):
        raise UsageError(name_bw, f"give one bandwidth per entry of {name_bytes} (both numbers or both sequences)")
    sizes = [sizes] if sizes_scalar else list(np.ravel(sizes))
    bandwidths = [bandwidths] if sizes_scalar else list(np.ravel(bandwidths))
    if len(sizes) != len(bandwidths):
        raise UsageError(name_bw, f"{len(bandwidths)} bandwidths for {len(sizes)} entries of {name_bytes}")
    return [(_check_amount(name_bytes, size, "bytes"), _check_positive(name_bw, bandwidth))
            for size, bandwidth in zip(sizes, bandwidths)]


def pai_breakdown(compute_s: float, weight_bytes, weight_bandwidth_Bps, *, input_bytes=0.0,
                  input_bandwidth_Bps=math.inf, efficiency: float = 0.7) -> PaiBreakdown:
    """One worker's step time by the analytical breakdown of PAI §II-B.

    ``T_total = T_d + T_c + T_w`` with ``T_d = S_d / B_d`` (input data), ``T_c`` the
    computation, and ``T_w = S_w / B_w`` (weights and gradients moved in a step);
    overlap is deliberately ignored. PAI divides by 70% of each medium's nominal
    bandwidth (``efficiency``); pass 1 when the bandwidth is a measured rate. Traffic
    over several media (PAI Eq. 3: Ethernet plus PCIe; here downlink plus uplink) is a
    sum: give ``weight_bytes`` and ``weight_bandwidth_Bps`` as equal-length sequences.

    Parameters:
        compute_s: T_c in seconds (PAI Eq. 1 estimates it from FLOPs and memory
            traffic; here it is given).
        weight_bytes: S_w per step, one number or one per medium.
        weight_bandwidth_Bps: B_w, matching ``weight_bytes``.
        input_bytes: S_d per step.
        input_bandwidth_Bps: B_d; infinite (the default) makes T_d = 0.
        efficiency: fraction of each bandwidth achieved, in (0, 1].

    Returns:
        :class:`PaiBreakdown`.
    """
    t_c = _check_time("compute_s", compute_s)
    efficiency = _check_fraction("efficiency", efficiency)
    if efficiency == 0:
        raise UsageError("efficiency", "must be above 0")
    t_w = sum(size / (efficiency * bw) for size, bw in _pairs("weight_bytes", weight_bytes,
                                                               "weight_bandwidth_Bps", weight_bandwidth_Bps))
    (s_d, b_d), = _pairs("input_bytes", input_bytes, "input_bandwidth_Bps", input_bandwidth_Bps)
    t_d = s_d / (efficiency * b_d) if math.isfinite(b_d) else 0.0
    return PaiBreakdown(input_s=t_d, compute_s=t_c, weight_s=t_w)


def pai_bandwidth_whatif(breakdown: PaiBreakdown, bandwidth_factor: float) -> PaiBreakdown:
    """The breakdown with the weight-traffic bandwidth multiplied by ``bandwidth_factor`` (PAI §III-C).

    PAI's what-if changes one capacity in the §II-B formulas and recomputes: a network
    ``f`` times faster divides T_w by f and leaves T_d and T_c alone (e.g. 25 → 100
    Gbps is f = 4). The speedup is ``breakdown.total_s / result.total_s``.
    """
    factor = _check_positive("bandwidth_factor", bandwidth_factor)
    if not math.isfinite(factor):
        raise UsageError("bandwidth_factor", f"must be finite, not {factor}")
    return dataclasses.replace(breakdown, weight_s=breakdown.weight_s / factor)


def pai_prediction(breakdown: PaiBreakdown, workers: int, batch_size: int, *, overlap: bool = False) -> Prediction:
    """Throughput from a PAI breakdown: ``workers·batch / T``.

    The breakdown describes one worker and knows nothing of contention at the
    parameter server, so W workers scale linearly: an upper bound, and the reason PAI
    is a what-if tool rather than a scaling model. ``overlap=True`` uses the ideal
    overlap ``max(T_d, T_c, T_w)`` of PAI §V-B instead of the sum.

    Returns:
        :class:`Prediction` with ``model="pai"`` or ``"pai-overlap"``.
    """
    workers = _check_workers(workers)
    batch_size = _check_batch(batch_size)
    model = "pai-overlap" if overlap else "pai"
    return _step_prediction(model, workers, batch_size, breakdown.overlapped_s if overlap else breakdown.total_s)
