"""Compute everything the report shows, from its inputs alone.

The throughput reference is the cluster's default transfer model (``grpc`` for a cluster
calibrated from TF 2.x captures, ``http2`` without a calibration), as ``tfsim predict`` uses it.
The orders are compared against the ``recorded`` order, TensorFlow's own in the profiled run
(:data:`simulate.orderings.ORDER_REFERENCE`), and against the random orders, with the one
table of gains that ``tfsim predict`` prints and writes (:func:`tfsim.prediction.ordering_summary`).
The prediction is exactly ``tfsim predict`` with the default model and every order
(``--transfer MODEL,recorded,http2,fifo,tic,tac,random``) and the same steps, warm-up, seed,
enforcement and tie order, so ``prediction.json`` beside the page equals ``tfsim predict --json``
for the same inputs. The orders are simulated under the other enforcement too, so that the
what-if shows each order's gains under both (docs/model.md §3.3): each equals ``tfsim predict
--transfer recorded,ORDER --enforcement E``'s. The
baselines and the measured comparison are ``tfsim compare``'s; the Gantt pictures come from
traced runs of the reference.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from pathlib import Path

from simulate.cluster import parse_latency
from simulate.cluster_file import resolve_cluster
from simulate.coarse import baselines
from simulate.config import MAX_TRACE_CHUNKS, Enforcement, TaskHosts, TieOrder
from simulate.executors import parse_executor
from simulate.orderings import ORDER_REFERENCE, expand_random, ordering_priorities
from simulate.planning import Prices, add_costs, pareto_front
from simulate.sweep import parse_workers, plan_sweep, plan_traced_run, run_sweeps, trace_chunks, traced_run
from simulate.sweep_journal import open_journal
from tfbase.errors import InputError, TfsimWarning, UsageError
from tfbase.units import parse_rate
from tfprofile.profile_io import load_profile
from tfsim.comparison import check_measured_in_sweep, comparison_table, read_measured
from tfsim.prediction import (
    drift_fields,
    ordering_fields,
    ordering_summary,
    prediction_document,
    prediction_settings,
    ps_cpu_fields,
)
from tfsim.report.facts import calibration_plots, cluster_facts, job_facts
from tfsim.report.gantt import gantt_from_run
from tfsim.report.stragglers import StragglerPlan, plan_stragglers, straggler_table
from tfsim.report.timeline import build_timeline, check_timeline_run

REPORT_ORDERS = (ORDER_REFERENCE, "http2", "fifo", "tic", "tac", "random")
GANTT_STEPS = 3


@dataclasses.dataclass(frozen=True)
class ReportRequest:
    """The inputs of one report, as the command line gives them."""

    profile_path: Path
    cluster_path: Path | None = None
    bandwidth: str | None = None
    workers: str = "1-16"
    steps: int = 1000
    warmup: int = 50
    seed: int = 0
    replicas: int = 1  # each configuration simulated with this many seeds (docs/model.md §5.2)
    mode: str = "async"
    cores: float | None = None
    ps_cores: float | None = None
    worker_cores: float | None = None
    price: str | None = None
    examples: float | None = None
    measured_path: Path | None = None
    setting: str | None = None
    gantt_workers: int | None = None
    plots_dir: Path | None = None
    timeline_run: Path | None = None
    jobs: int = 1
    progress: bool = True
    worker_speed: str | None = None  # stragglers: adds a section of async and sync with and without them
    latency: str | None = None  # a what-if one-way link latency (simulate.cluster.parse_latency)
    executor: str | None = None  # where the sweep runs: local, or dask://HOST:PORT (simulate.executors)
    journal: Path | None = None  # record each finished configuration here (simulate.sweep_journal)
    resume: bool = False  # take the configurations the journal holds
    enforcement: Enforcement = Enforcement.WORK_CONSERVING  # the prediction's; the what-if shows both
    tie_order: TieOrder = TieOrder.INDEX  # how fifo, http2 and grpc queue transfers ready at one instant

    @property
    def hosts(self):
        """The library's ``colocation``: a host per task when ``ps_cores`` or ``worker_cores`` is set."""
        if self.ps_cores is None and self.worker_cores is None:
            return None
        return TaskHosts(worker_cores=self.worker_cores, ps_cores=self.ps_cores)

    def command_line(self) -> str:
        """The ``tfsim report`` command that reproduces this report (without ``--out``)."""
        parts = ["tfsim report", str(self.profile_path)]
        if self.cluster_path is not None:
            parts += ["--cluster", str(self.cluster_path)]
        if self.bandwidth:
            parts += ["--bandwidth", self.bandwidth]
        if self.latency:
            parts += ["--latency", self.latency]
        parts += ["--workers", self.workers, "--steps", str(self.steps), "--warmup", str(self.warmup),
                  "--seed", str(self.seed)]
        if self.replicas != 1:
            parts += ["--replicas", str(self.replicas)]
        if self.mode != "async":
            parts += ["--mode", self.mode]
        if self.cores is not None:
            parts += ["--cores", f"{self.cores:g}"]
        if self.ps_cores is not None:
            parts += ["--ps-cores", f"{self.ps_cores:g}"]
        if self.worker_cores is not None:
            parts += ["--worker-cores", f"{self.worker_cores:g}"]
        if self.price:
            parts += ["--price", self.price]
        if self.examples is not None:
            parts += ["--examples", f"{self.examples:g}"]
        if self.measured_path is not None:
            parts += ["--measured", str(self.measured_path)]
        if self.setting:
            parts += ["--setting", self.setting]
        if self.gantt_workers:
            parts += ["--gantt-workers", str(self.gantt_workers)]
        if self.timeline_run is not None:
            parts += ["--timeline-run", str(self.timeline_run)]
        if self.worker_speed:
            parts += ["--worker-speed", self.worker_speed]
        if self.enforcement is not Enforcement.WORK_CONSERVING:
            parts += ["--enforcement", self.enforcement.value]
        if self.tie_order is not TieOrder.INDEX:
            parts += ["--tie-order", self.tie_order.value]
        return " ".join(parts)


@dataclasses.dataclass(frozen=True, eq=False)
class Report:
    """Everything the page, ``report.json`` and the CSV files show."""

    request: ReportRequest
    model: str
    batch_size: int
    cluster: dict
    reference_policy: str  # the cluster's default transfer model: what the orders are measured against
    job: dict
    frame: object  # the prediction table, one row per (policy, W)
    prediction: dict  # its tfsim.prediction/1 document
    baselines: object  # workers, model, throughput_eps, step_time_s
    comparison: object  # one row per W: measured, tfsim and each baseline, and the errors
    measured: object | None
    orderings: object  # per order: E, throughput, gains over the recorded order and the random ones (ordering_summary)
    gantt_one: object
    gantt_many: object
    calibration_plots: tuple[tuple[str, Path], ...]
    cost: object | None = None  # the reference rows with their cost (simulate.planning.add_costs), with --price
    ordering_reference: str = ORDER_REFERENCE  # what the orders' gains are measured against
    timeline: object | None = None  # a captured run beside its simulation (tfsim.report.timeline), with --timeline-run
    stragglers: object | None = None  # async and sync with and without stragglers (stragglers.straggler_table)
    straggler_plan: object | None = None  # what they were asked as (stragglers.StragglerPlan)
    # The same table under each enforcement (the request's is ``orderings``), keyed by Enforcement;
    # an order strict enforcement refuses (it would deadlock) is left out of the strict table.
    orderings_by_enforcement: dict = dataclasses.field(default_factory=dict)
    strict_refused: tuple[str, ...] = ()  # the orders strict enforcement refuses, with the reason

    @property
    def reference(self):
        """The reference rows: the prediction with the cluster's default transfer model."""
        rows = self.frame[self.frame["policy"] == self.reference_policy]
        return rows.sort_values("workers").reset_index(drop=True)

    @property
    def saturation_workers(self) -> int:
        saturated = self.reference[self.reference["saturated"]]
        return int(saturated["workers"].iloc[0])


def gantt_worker_count(request: ReportRequest, workers: list[int], saturation: int) -> int:
    """How many workers the second Gantt picture shows: as asked, else the saturation point (or
    the next W of the sweep when that is 1, so that there is contention to see)."""
    if request.gantt_workers:
        return request.gantt_workers
    if saturation > 1:
        return saturation
    larger = [w for w in workers if w > 1]
    return larger[0] if larger else 2


def report_transfers(reference: str) -> list[str]:
    """The transfer models and orders a report predicts: the reference first, then every order."""
    return [reference] + [name for name in REPORT_ORDERS if name != reference]


@dataclasses.dataclass(frozen=True, eq=False)
class ReportPlan:
    """A report's inputs, read and checked: what :func:`build_report` computes from."""

    request: ReportRequest
    profile: object
    cluster: object
    measured: object | None
    workers: list[int]
    reference: str
    transfers: list[str]
    priorities: dict
    sweep: object  # simulate.sweep.Sweep
    gantt_limit: int  # the most workers a Gantt trace of this profile may hold
    stragglers: StragglerPlan | None = None  # the straggler section's sweeps, when asked for
    executor: object = None  # where the sweeps run (simulate.executors)
    journal: object = None  # the checked journal (simulate.sweep_journal.SweepJournal), or None
    other_sweep: object | None = None  # the orders under the other enforcement (None: no order it accepts)
    strict_refused: tuple[str, ...] = ()  # orders strict enforcement refuses (the what-if's other side)
    baselines: object = None  # the coarse baselines over the sweep's W (simulate.coarse.baselines), computed here

    @property
    def sweeps(self) -> tuple:
        """Every sweep the report runs, as one batch: the prediction, the orders under the other
        enforcement (if any), then the straggler section's."""
        return (self.sweep, *(() if self.other_sweep is None else (self.other_sweep,)),
                *(self.stragglers.all_sweeps if self.stragglers is not None else ()))


def plan_report(request: ReportRequest) -> ReportPlan:
    """Read and check every input of a report; nothing is simulated or written.

    Raises :class:`~tfbase.errors.InputError` for a bad file and
    :class:`~tfbase.errors.UsageError` for a bad parameter, each naming it.
    """
    profile = load_profile(request.profile_path)
    cluster = resolve_cluster(request.cluster_path,
                              parse_rate(request.bandwidth, "bandwidth") if request.bandwidth else None)
    if request.latency:
        cluster = cluster.with_latency(*parse_latency(request.latency))
    if request.plots_dir is not None and not request.plots_dir.is_dir():
        raise InputError(request.plots_dir, "no such directory (give the DIR of tfsim calibrate --plots DIR)")
    workers = parse_workers(request.workers)
    measured = read_measured(request.measured_path, request.setting) if request.measured_path else None
    if measured is not None:
        check_measured_in_sweep(measured, workers, request.measured_path)
    reference = cluster.default_transfer
    transfers = expand_random(report_transfers(reference))
    priorities = ordering_priorities(profile, transfers, bandwidth_Bps=cluster.downlink_Bps, seed=request.seed)
    common = dict(workers=workers, mode=request.mode, priorities=priorities, steps=request.steps,
                  warmup=request.warmup, seed=request.seed, cores=request.cores, colocation=request.hosts,
                  replicas=request.replicas, tie_order=request.tie_order)
    sweep = plan_sweep(profile, cluster, transfer=transfers, enforcement=request.enforcement, **common)
    other_sweep, refused = _plan_other_enforcement(profile, cluster, [t for t in transfers if t in priorities],
                                                   other_enforcement(request.enforcement), common)
    for w in {1, 2, request.gantt_workers or 1}:  # the pictures that must fit; a larger default is capped later
        plan_traced_run(profile, cluster, workers=w, transfer=reference, priorities={}, mode=request.mode,
                        cores=request.cores, colocation=request.hosts, steps=GANTT_STEPS, seed=request.seed,
                        tie_order=request.tie_order, workers_parameter="gantt_workers")
    try:  # a profile the baselines cannot describe fails before the sweep, naming its file
        base = baselines(profile, cluster, workers, request.mode)
    except UsageError as err:
        if err.source != "profile":
            raise
        raise InputError(request.profile_path, err.problem) from None
    if request.timeline_run is not None:
        check_timeline_run(request.timeline_run)  # a run without a capture at the PS fails before the sweep
    if request.price:
        Prices.parse(request.price)  # checked before anything is simulated
    if request.examples is not None and not request.price:
        raise UsageError("examples", "an epoch's cost needs prices (price)")
    stragglers = None
    if request.worker_speed:
        stragglers = plan_stragglers(profile, cluster, text=request.worker_speed, workers=workers,
                                     transfer=reference, steps=request.steps, warmup=request.warmup,
                                     seed=request.seed, cores=request.cores, colocation=request.hosts,
                                     tie_order=request.tie_order)
    limit = max(1, MAX_TRACE_CHUNKS // trace_chunks(profile, 1, GANTT_STEPS))
    plan = ReportPlan(request, profile, cluster, measured, workers, reference, transfers, priorities, sweep, limit,
                      stragglers, executor=parse_executor(request.executor), other_sweep=other_sweep,
                      strict_refused=refused, baselines=base)
    if request.resume and request.journal is None:
        raise UsageError("resume", "needs a journal to resume from")
    if request.journal is not None:  # checked against every sweep before any runs
        plan = dataclasses.replace(plan, journal=open_journal(request.journal, plan.sweeps, resume=request.resume))
    if plan.journal is None or plan.journal.finished < plan.journal.total:
        plan.executor.check()  # an unreachable scheduler fails here, before anything runs
    return plan


def other_enforcement(enforcement: Enforcement) -> Enforcement:
    """The enforcement the what-if shows beside the request's."""
    return Enforcement.STRICT if enforcement is Enforcement.WORK_CONSERVING else Enforcement.WORK_CONSERVING


def _plan_other_enforcement(profile, cluster, orders: list[str], enforcement: Enforcement, common: dict):
    """The sweep of ``orders`` under ``enforcement`` (the what-if's other side), and the orders
    strict enforcement refuses, each with why: an order under which it would deadlock is left
    out there, not the whole report. None for the sweep when no order is left, or the recorded
    order (what the gains are measured against) is refused."""
    kept, refused = [], []
    for order in orders:
        try:
            plan_sweep(profile, cluster, transfer=[order], enforcement=enforcement,
                       **{**common, "workers": common["workers"][:1], "replicas": 1})
        except UsageError as err:
            if err.source != "priorities":
                raise
            refused.append(f"{order}: {err.problem}")
        else:
            kept.append(order)
    if ORDER_REFERENCE not in kept:
        return None, tuple(refused)
    return plan_sweep(profile, cluster, transfer=kept, enforcement=enforcement, **common), tuple(refused)


def orderings_under(frame, orders_frame):
    """The order table (:func:`tfsim.prediction.ordering_summary`) of ``frame``'s transfer models
    with the orders of ``orders_frame`` (the same orders under another enforcement; the models
    ignore the enforcement), its policies in ``frame``'s order."""
    import pandas as pd

    rank = {policy: k for k, policy in enumerate(dict.fromkeys(frame["policy"]))}
    kept = frame[~frame["policy"].isin(set(orders_frame["policy"]))]
    combined = pd.concat([kept, orders_frame], ignore_index=True)
    combined = combined.sort_values("policy", key=lambda column: column.map(rank), kind="stable")
    return ordering_summary(combined.reset_index(drop=True))


def build_report(request: ReportRequest, say: Callable[[str], None] = lambda message: None,
                 ready: Callable[[], None] = lambda: None) -> Report:
    """Read and check the inputs (then call ``ready``), run the sweep, the baselines and the
    traced runs; nothing is written."""

    say(f"[1/4] reading {request.profile_path}"
        + (f" and {request.cluster_path}" if request.cluster_path else ""))
    plan = plan_report(request)
    ready()
    profile, cluster, measured, workers, reference = (plan.profile, plan.cluster, plan.measured, plan.workers,
                                                      plan.reference)
    job = job_facts(profile, cluster)

    say(f"[2/4] predicting W = {request.workers} with {', '.join(report_transfers(reference))} "
        f"({request.steps} steps per worker)")
    if plan.other_sweep is not None:
        say(f"      and the orders enforced {other_enforcement(request.enforcement).value}")
    if plan.stragglers is not None:
        say(f"      and async and sync SGD with and without the stragglers ({request.worker_speed})")
    if plan.journal is not None and plan.journal.finished:
        say(f"      resuming from {plan.journal.path}: {plan.journal.finished} of {plan.journal.total} "
            "configurations done")
    frames = run_sweeps(plan.sweeps, jobs=request.jobs, progress=request.progress, executor=plan.executor,
                        journal=plan.journal)
    frame = frames[0]
    orderings = ordering_summary(frame)  # the page, orderings.csv and prediction.json state these gains
    # As tfsim predict states them: the report's prediction.json is the same document.
    moving, ps_cpu = drift_fields(frame), ps_cpu_fields(frame, cluster)
    document = prediction_document(frame, profile_path=request.profile_path, cluster=cluster,
                                   extra={**prediction_settings(request.enforcement, request.tie_order),
                                          **ordering_fields(orderings),
                                          **({"drift": moving} if moving is not None else {}),
                                          **({"ps_cpu": ps_cpu} if ps_cpu is not None else {})})
    by_enforcement = {request.enforcement: orderings}
    rest = frames[1:]
    if plan.other_sweep is not None:
        by_enforcement[other_enforcement(request.enforcement)] = orderings_under(frame, rest[0])
        rest = rest[1:]
    stragglers = straggler_table(plan.stragglers, rest) if plan.stragglers is not None else None

    say("[3/4] coarse analytical baselines" + (f" and the measurements of {request.measured_path}"
                                               if measured is not None else ""))
    base = plan.baselines
    reference_rows = frame[frame["policy"] == reference]
    comparison = comparison_table(reference_rows[["workers", "throughput_eps"]], base, measured)

    saturation = int(reference_rows[reference_rows["saturated"]]["workers"].iloc[0])
    many = gantt_worker_count(request, workers, saturation)
    if many > plan.gantt_limit:
        warnings.warn(TfsimWarning("gantt_workers", f"the Gantt picture of W = {many} would record more than "
                                                    f"{MAX_TRACE_CHUNKS:,} chunks: it shows W = {plan.gantt_limit}"),
                      stacklevel=2)
        many = plan.gantt_limit
    say(f"[4/4] tracing {GANTT_STEPS} simulated steps with 1 and with {many} workers")
    gantts = [gantt_from_run(traced_run(profile, cluster, workers=w, transfer=reference, priorities={},
                                        mode=request.mode, cores=request.cores, colocation=request.hosts,
                                        steps=GANTT_STEPS, seed=request.seed,
                                        tie_order=request.tie_order)) for w in (1, many)]
    timeline = None
    if request.timeline_run is not None:
        say(f"laying the captured run {request.timeline_run} beside its simulation")
        timeline = build_timeline(request.timeline_run, profile, cluster, cores=request.cores,
                                  colocation=request.hosts, seed=request.seed, tie_order=request.tie_order)
    cost = None
    if request.price:
        cost = add_costs(reference_rows.sort_values("workers").reset_index(drop=True), Prices.parse(request.price),
                         servers=max(profile.graph.n_servers, 1), examples=request.examples)
        cost["pareto"] = cost.index.isin(pareto_front(cost).index)
    return Report(request=request, model=profile.meta.get("model") or Path(request.profile_path).stem,
                  batch_size=profile.batch_size,
                  cluster=cluster_facts(cluster, request.cluster_path, request.bandwidth),
                  reference_policy=reference, job=job, frame=frame, prediction=document, baselines=base,
                  comparison=comparison, measured=measured, orderings=orderings,
                  orderings_by_enforcement={e: by_enforcement[e] for e in Enforcement if e in by_enforcement},
                  strict_refused=plan.strict_refused,
                  gantt_one=gantts[0], gantt_many=gantts[1],
                  calibration_plots=tuple(calibration_plots(request.cluster_path, request.plots_dir)), cost=cost,
                  timeline=timeline, stragglers=stragglers, straggler_plan=plan.stragglers)
