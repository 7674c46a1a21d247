"""``tfsim lab``: measure real W-worker throughput on emulated clusters and publish the prediction error.

For each setting (a model, a link rate, optionally 2 PS or a pinned HTTP/2 window), in an
emulated cluster on this machine (:mod:`tfsim.lab.netns`):

1. profile the job with 1 PS (or M) and 1 worker, with iperf3 and a capture;
2. calibrate (``tfsim calibrate``) and build the profile (``tfsim profile``);
3. run the real job with W = 1..K workers and measure its throughput: the examples all
   workers complete over the last half of the window in which every one of them runs
   (:mod:`tfsim.lab.measure`; ICPE §4.1's per-worker sum is recorded beside it), in rounds,
   each round beginning with one more untraced one-worker run (a tail run) for step 4;
4. fit the one-worker correction to the mean untraced step of the profiling run's tail and
   the tail runs, and take the PS CPU bound's CPU per step over the same runs (this machine's
   speed wanders over minutes: one run is one draw of it); then predict W = 1..K for the same
   hosts (a host per task with its CPU quota, or, with ``colocated``, every task on this
   machine's cores: docs/model.md §4.3), with the ``grpc`` (today's gRPC, the default for
   TF 2.x), ``http2`` (ICPE's model) and ``fifo`` transfer models, and the coarse baselines.
   The ``grpc`` prediction is also given with every worker starting at once (lock step):
   workers that start together may stay in step, and the real job lands between the two; and
   from the profiling run's tail alone, as a user's one profile would give it;
5. tabulate measured against predicted, with the relative error, and say whether the
   matrix meets the bars (:data:`MEAN_ERROR_BAR`, :data:`MAX_ERROR_BAR`, :data:`INSIDE_SHARE_BAR`).

No prediction takes a measuring run: the tail runs are runs of their own.

Every TensorFlow process runs with one intra-op and one inter-op thread (the machine has
few cores; the model needs one op at a time per task).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from calibration.calibrate import calibrate_run
from calibration.plots import overhead_figure, stream_timeline_figure
from calibration.pscpu import ps_cpu_record, read_busy_ps_run, untraced_window_s, with_busy_runs
from simulate.cluster import overflow_onset_workers
from simulate.cluster_file import load_cluster, save_cluster
from simulate.coarse import baselines
from simulate.config import TaskHosts, model_cores
from simulate.results import measurement_stats
from simulate.sweep import AUTO_PACKET_FROM_WORKERS, auto_picks_packet, default_jobs, parse_workers, predict
from simulate.untrace import MAX_SCALE, MIN_SCALE, fit_computation_scale, scale_computation
from tfbase.errors import InputError, UsageError
from tfbase.figures import finish_throughput_axes, pyplot, save_figure
from tfbase.fileio import atomic_output, json_ready, read_input, write_json, write_text
from tfbase.load import OUTSIDE_LOAD_LIMIT_CORES
from tfbase.machine import machine_description
from tfbase.units import format_rate, parse_rate
from tfprofile.harness.fork_server import ForkServers
from tfprofile.harness.launcher import PLACEMENTS, CaptureSite, CollectConfig, TrainingApi
from tfprofile.profile_io import save_profile
from tfprofile.rundir import profile_from_run_dir
from tfsim.lab.cgroups import PERIOD_US, check_period, check_quotas
from tfsim.lab.collect import HostQuotas, LabRun, collect_in_lab
from tfsim.lab.cpu_trace import MACHINE, window_usage
from tfsim.lab.measure import measured_throughput
from tfsim.lab.netns import DEFAULT_QUEUE_MS, Transport, require_lab_tools

# A PS serving three workers had merged its wake-ups about as far as six workers did on the
# lab's PS-bound jobs (CPU per worker-step, deep_narrow: 26.5 ms with one, 21.5 with two, 21.4
# with three, 19.6-21.2 with four to six; sparse_tower 21.8, 20.4, 18.5, 16.9-17.5:
# bench/results/tail-runs-2026-11-28). A setting's largest W caps it (its quotas are sized for that).
DEFAULT_BUSY_PS_WORKERS = 3


# The packet model's steps per prediction: a replay costs seconds per worker, and the lab's
# measured runs hold 16-60 steps (one seed: its drops and timeouts vary within a run, not across seeds).
PACKET_STEPS = 120  # a setting's default (``packet_steps``)


@dataclasses.dataclass(frozen=True)
class LabSetting:
    """One row group of the validation matrix: a job, a link rate, the hosts, W = 1..K.

    ``model`` names a zoo model, or ``model_fn`` ("module:function") a user's (``model`` is
    then its label). ``ps_cores``/``worker_cores`` are the emulated hosts' CPU quotas, and
    ``colocated`` runs every task on this machine's shared cores instead (the older lab).
    With neither, each task gets an equal share of the machine (its cores over the largest
    cluster's task count), so that the quotas hold at every W. ``timeline`` adds, for every
    W, one more run captured at the PS, laid beside the simulation of that W
    (:func:`timeline_point`; one PS only). ``profile_ps`` profiles and calibrates with that many
    PS instead of ``ps_tasks`` (e.g. 1), and the prediction re-places the profile's variables
    over ``ps_tasks`` servers (docs/model.md §2.2): the check of a many-PS prediction made from
    a one-PS profile. ``packet`` also predicts every W with the packet transfer model
    (docs/model.md §12) and publishes its error beside grpc's, replaying ``packet_steps`` steps
    per worker (fewer for a job whose steps move tens of megabytes: ns-3 costs seconds per worker
    and step there). ``tail_runs`` measures the one-worker step once more in every measuring
    round, untraced, for the correction and the PS CPU bound (:func:`one_worker_tails`).
    ``busy_ps_workers`` runs the profiling cluster with that many workers once in every measuring
    round (at most the setting's largest W; 0: not), for the PS CPU per worker-step of a busy PS
    (:func:`busy_ps_runs`, docs/model.md §4.7).
    """

    name: str
    model: str
    batch_size: int
    rate_bit: int
    image_size: int = 0
    workers: tuple[int, ...] = (1, 2, 3, 4)
    ps_tasks: int = 1
    grpc_options: str | None = None
    profile_steps: int | None = None  # default: profiling_steps; half of them untraced
    measure_steps: int = 60
    warmup_steps: int = 3
    model_fn: str | None = None
    ps_cores: float | None = None
    worker_cores: float | None = None
    colocated: bool = False
    queue_ms: float | None = DEFAULT_QUEUE_MS
    queue_bytes: int | None = None
    congestion_control: str | None = None
    slow_start_after_idle: bool | None = None
    timeline: bool = False
    keep_captures: bool = False
    profile_ps: int | None = None
    api: str = "tf1"
    packet: bool = False
    packet_steps: int = PACKET_STEPS
    placement: str = "round_robin"
    cpu_period_ms: float = PERIOD_US / 1e3
    tail_runs: bool = True
    busy_ps_workers: int = DEFAULT_BUSY_PS_WORKERS

    def __post_init__(self) -> None:
        if self.api not in LAB_APIS:
            raise UsageError("api", f"must be one of {', '.join(LAB_APIS)}, not {self.api!r}")
        if self.api == "tf2-pss" and self.timeline:
            raise UsageError("timeline", "the timeline view reads a tf1 job's run (not yet a tf2-pss one)")
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise UsageError("setting", f"a setting's name must be a plain file name, not {self.name!r}")
        if not (isinstance(self.rate_bit, int) and self.rate_bit > 0):
            raise UsageError("rate_bit", f"a link rate must be positive, not {self.rate_bit}")
        if not self.workers or any(w < 1 for w in self.workers):
            raise UsageError("workers", f"worker counts must be at least 1, not {self.workers}")
        if self.ps_tasks < 1:
            raise UsageError("ps_tasks", f"must be at least 1, not {self.ps_tasks}")
        if self.placement not in PLACEMENTS:
            raise UsageError("placement", f"must be one of {', '.join(PLACEMENTS)}, not {self.placement!r}")
        if self.api == "tf2-pss" and self.placement != "round_robin":
            raise UsageError("placement", "a tf2-pss job places its variables itself (round robin): greedy is tf1's")
        if self.profile_ps is not None and not 1 <= self.profile_ps <= self.ps_tasks:
            raise UsageError("profile_ps", f"must be from 1 to the measured runs' {self.ps_tasks} PS, "
                                           f"not {self.profile_ps}")
        for name in ("profile_steps", "measure_steps", "batch_size", "packet_steps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UsageError(name, f"must be at least 1, not {getattr(self, name)}")
        self.transport()
        if self.timeline and self.ps_tasks != 1:
            raise UsageError("timeline", f"the timeline view reads one PS's link, not {self.ps_tasks}")
        if self.colocated and (self.ps_cores is not None or self.worker_cores is not None):
            raise UsageError("ps_cores", "co-located tasks share the machine's cores: no quotas with colocated")
        for name in ("ps_cores", "worker_cores"):
            value = getattr(self, name)
            if value is not None and not (MIN_QUOTA_CORES <= value <= MACHINE_CORES):
                raise UsageError(name, f"must be between {MIN_QUOTA_CORES:g} and this machine's {MACHINE_CORES:g} "
                                       f"cores, not {value:g}")
        if not isinstance(self.tail_runs, bool):
            raise UsageError("tail_runs", f"must be true or false, not {self.tail_runs!r}")
        if isinstance(self.busy_ps_workers, bool) or not isinstance(self.busy_ps_workers, int) \
                or self.busy_ps_workers == 1 or self.busy_ps_workers < 0:
            raise UsageError("busy_ps_workers", f"must be 0 (no busy-PS runs) or a worker count from 2, "
                                                f"not {self.busy_ps_workers!r}")
        if not math.isfinite(self.cpu_period_ms):
            raise UsageError("cpu_period_ms", f"must be a number of milliseconds, not {self.cpu_period_ms}")
        if not self.colocated:
            check_period(self.period_us, min(c for c in self._quota_cores() if c is not None))

    @property
    def busy_workers(self) -> int | None:
        """The workers of a round's busy-PS run: ``busy_ps_workers`` held to the largest W (the
        hosts' quotas are sized for it); None for no such run."""
        workers = min(self.busy_ps_workers, max(self.workers))
        return workers if workers >= 2 else None

    @property
    def period_us(self) -> int:
        """The CFS period of the emulated hosts' quotas, in microseconds."""
        return round(self.cpu_period_ms * 1e3)

    @property
    def profiled_ps(self) -> int:
        """The PS count of the profiling run."""
        return self.ps_tasks if self.profile_ps is None else self.profile_ps

    def transport(self) -> Transport:
        """The links' queue and TCP's settings (checked on construction)."""
        return Transport(self.queue_ms, self.queue_bytes, self.congestion_control, self.slow_start_after_idle)

    @property
    def pss(self) -> bool:
        """A TF2 ParameterServerStrategy job: a coordinator runs on one more host."""
        return self.api == "tf2-pss"

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return (("TF_GRPC_DEFAULT_OPTIONS", self.grpc_options),) if self.grpc_options else ()

    def quotas(self) -> HostQuotas:
        """Each task's quota (none when co-located); checked to fit this machine at the largest W."""
        if self.colocated:
            return HostQuotas()
        quotas = HostQuotas(*self._quota_cores(), self.period_us)
        check_quotas([quotas.ps_cores] * self.ps_tasks + [quotas.worker_cores] * max(self.workers)
                     + ([quotas.coordinator_cores] if self.pss else []), MACHINE_CORES)
        return quotas

    def _quota_cores(self) -> tuple[float, float, float | None]:
        """The PS's, a worker's and (tf2-pss) the coordinator's quota, unchecked: the given ones,
        else an equal share of the machine over the largest cluster's tasks."""
        share = MACHINE_CORES / (self.ps_tasks + max(self.workers) + int(self.pss))
        return (self.ps_cores if self.ps_cores is not None else share,
                self.worker_cores if self.worker_cores is not None else share, share if self.pss else None)

    @property
    def profiling_steps(self) -> int:
        """The profiling run's steps: ``profile_steps``, or the API's default (the first half
        traced, the rest untraced: the one-worker correction fits their mean)."""
        if self.profile_steps is not None:
            return self.profile_steps
        return PSS_PROFILE_STEPS if self.pss else TF1_PROFILE_STEPS

    def hosts_text(self) -> str:
        if self.colocated:
            return f"co-located on {MACHINE_CORES:g} cores"
        quotas = self.quotas()
        coordinator = f", coordinator {quotas.coordinator_cores:.2f} core" if self.pss else ""
        period = "" if self.period_us == PERIOD_US else f", quotas over {self.cpu_period_ms:g} ms periods"
        return f"PS {quotas.ps_cores:.2f} core, worker {quotas.worker_cores:.2f} core{coordinator}{period}"


MACHINE_CORES = float(os.cpu_count() or 1)
LAB_APIS = ("tf1", "tf2-pss")  # as tfsim collect --api
# A tf2-pss run traces a time window, not steps (docs/formats.md §2.8). The profiling run traces
# its first half of steps in a window this long (the rest run untraced once it has ended: the
# one-worker correction fits their mean); a measuring run needs no profile, and its short window
# runs idle before the measured steps.
PSS_PROFILE_TRACE_MS = 1500
# The profiling run's steps, half of them traced. A tf2-pss step on a quota host varies from
# one 100 ms quota period to the next (a tiny job at 0.33 core: 16 to 60 ms), and the
# untraced half's mean is the one-worker correction's target: 24 untraced steps there, 12 for
# a tf1 job, whose traced steps are the profile's samples and whose untraced ones vary less.
TF1_PROFILE_STEPS = 24
PSS_PROFILE_STEPS = 48
PSS_MEASURE_TRACE_MS = 200
MIN_QUOTA_CORES = 0.05

SMALL_WINDOW = "grpc.http2.bdp_probe=0,grpc.http2.lookahead_bytes=65535"

MATRIX_WORKERS = (1, 2, 3, 4, 5, 6)
PRESETS: dict[str, tuple[LabSetting, ...]] = {
    "quick": (
        LabSetting("tiny-100mbit", "tiny", 32, 100_000_000, workers=(1, 2), profile_steps=16, measure_steps=16,
                   warmup_steps=2),
    ),
    # The published matrix (bench/results/lab-2026-11-27-matrix): four models whose steps span
    # computation-bound to link-bound (tiny 0.5 MB per step and direction, the recommender 2.2 MB
    # with its lookups on the PS, convnet 5.4 MB behind 0.3 s of computation, wide_mlp 28 MB),
    # each at two link rates, W = 1..6, every task an equal share of the machine. Measured steps
    # per run differ by model; with 3 repetitions of every point it took 58 minutes here
    # (bench/results/lab-2026-11-27-matrix; 82 before the fork server).
    "matrix": (
        LabSetting("tiny-100mbit", "tiny", 32, 100_000_000, workers=MATRIX_WORKERS, measure_steps=60),
        LabSetting("tiny-50mbit", "tiny", 32, 50_000_000, workers=MATRIX_WORKERS, measure_steps=40),
        LabSetting("recommender-400mbit", "recommender", 256, 400_000_000, workers=MATRIX_WORKERS,
                   measure_steps=40, model_fn="tfsim.lab.models:recommender"),
        LabSetting("recommender-1gbit", "recommender", 256, 1_000_000_000, workers=MATRIX_WORKERS,
                   measure_steps=40, model_fn="tfsim.lab.models:recommender"),
        LabSetting("convnet-1gbit", "convnet", 64, 1_000_000_000, workers=MATRIX_WORKERS, measure_steps=30,
                   model_fn="tfsim.lab.models:convnet"),
        LabSetting("convnet-200mbit", "convnet", 64, 200_000_000, workers=MATRIX_WORKERS, measure_steps=30,
                   model_fn="tfsim.lab.models:convnet"),
        LabSetting("wide_mlp-1gbit", "wide_mlp", 16, 1_000_000_000, workers=MATRIX_WORKERS, measure_steps=20),
        LabSetting("wide_mlp-500mbit", "wide_mlp", 16, 500_000_000, workers=MATRIX_WORKERS, measure_steps=16),
    ),
}

PROFILE_RUN = "profile-run"
# The one-worker runs the correction and the PS CPU bound took (:class:`OneWorkerTails`), and what
# the profiling run's tail alone would have predicted (docs/formats.md §10).
TAIL_COLUMNS = ("profile_tails", "profile_tail_step_s", "profile_tail_steps_s", "computation_scale_one_tail",
                "predicted_grpc_one_tail_eps", "error_grpc_one_tail")
TAIL_RUN_PREFIX = "profile-tail-r"  # a measuring round's one-worker tail run (:func:`_tail_run`)
BUSY_RUN_PREFIX = "profile-busy-r"  # a measuring round's busy-PS run (:func:`_busy_ps_run`)
# The PS CPU per worker-step the busy-PS runs measured beside the one-worker runs', and what the
# one-worker runs' alone would have predicted (docs/formats.md §10).
BUSY_COLUMNS = ("busy_ps_workers", "busy_ps_runs", "ps_cpu_one_worker_s", "ps_cpu_busy_s", "ps_cpu_limit_eps",
                "predicted_grpc_one_worker_cpu_eps", "error_grpc_one_worker_cpu")
TIMELINE_COLUMNS = ("timeline_run_eps", "used_down_measured", "used_down_simulated", "used_up_measured",
                    "used_up_simulated", "busy_down_measured", "busy_down_simulated", "busy_up_measured",
                    "busy_up_simulated", "step_median_measured_s", "step_median_simulated_s")
# What the links and TCP did, per measuring run (mean over the repeats; tfsim/lab/netstats.py): the
# PS's shapers' drops (down: its egress; up: the bridge port towards it, where the workers'
# uploads meet), every host's retransmitted segments and retransmission timeouts, and the
# measured steps' mean over their median (a tail of stalled steps shows as a ratio above 1).
TRANSPORT_COLUMNS = ("ps_drops_down_per_run", "ps_drops_up_per_run", "retrans_segs_per_run",
                     "rto_timeouts_per_run", "step_mean_over_median")
# Whether the workers' uploads can overflow the PS's port: W connections each keeping the
# calibrated queue window (docs/calibration.md §4.5) queued there, against what the shaper holds.
OVERFLOW_COLUMNS = ("buffer_bytes", "queue_window_up_bytes", "overflow_expected")
USED_BAR = 0.05  # the timeline's bar: simulated used fraction of the link within 5 points of the measured one
TRANSFER_MODELS = ("grpc", "http2", "fifo")  # the first is the headline: the default for TF 2.x clusters
# Independent replications of each prediction (seeds 0..4): past one worker a run can settle into
# one of several phase patterns depending on the sampled steps (docs/model.md §5.2), and the lab
# compares the replicas' mean, showing their range beside the measured one.
PREDICT_REPLICAS = 5
# The lab predicts a setting after its measuring rounds, never beside a measured run, so its
# predictions take every core; results do not depend on the processes (simulate.predict).
PREDICT_JOBS = default_jobs()
PACKET_COLUMNS = ("packet_steps", "predicted_packet_eps", "error_packet", "inside_packet", "predicted_auto_eps",
                  "error_auto", "inside_auto")
RESULT_COLUMNS = ("setting", "api", "model", "batch", "rate_mbit", "ps", "profile_ps", "placement", "window",
                  "transport", "hosts",
                  "ps_cores", "worker_cores", "cpu_period_ms",
                  "workers", "repeats", "measured_eps", "measured_min_eps", "measured_max_eps", "measured_cv",
                  "measured_ci95_eps", "measured_runs_eps", "measured_per_worker_sum_eps", "finish_spread_s",
                  *(f"predicted_{m}_eps" for m in TRANSFER_MODELS), *(f"error_{m}" for m in TRANSFER_MODELS),
                  "predict_replicas", "predicted_grpc_min_eps", "predicted_grpc_max_eps",
                  "predicted_grpc_drift", "predicted_grpc_settled",
                  "inside_grpc", "ranges_overlap_grpc", "predicted_grpc_lockstep_eps", "error_grpc_lockstep",
                  "lin_async_eps", "cynthia_eps", "measured_step_s", "computation_scale",
                  "outside_load_cores", "loaded_runs", "reruns", "throttled_s_per_run", "ps_cores_used_in_window",
                  "profile_tail_outside_cores", *TAIL_COLUMNS, *BUSY_COLUMNS, *TRANSPORT_COLUMNS, *OVERFLOW_COLUMNS,
                  *(f"calibration_{m}_median_error" for m in TRANSFER_MODELS), *TIMELINE_COLUMNS, *PACKET_COLUMNS)


def _say(message: str) -> None:
    print(f"tfsim lab: {message}", file=sys.stderr, flush=True)


def _collect(setting: LabSetting, out: Path, *, workers: int, steps: int, capture: bool, progress: bool,
             capture_site: CaptureSite = CaptureSite.CHIEF_WORKER, fork_servers: ForkServers | None = None,
             profile_side: bool = False) -> LabRun:
    """One run of the setting's job in its emulated cluster. The profiling run is the captured
    one at the chief worker; ``profile_side`` runs the profiling run's PS count without its
    trace or capture (a tail run, :func:`_tail_run`)."""
    profiling = capture and capture_site is CaptureSite.CHIEF_WORKER
    # The profiling run traces its first half of steps and not the second: the untraced ones
    # measure what tracing costs the worker (:func:`untraced_step_s`) and the PS's CPU per step
    # (docs/calibration.md §4.8). A tf2-pss measuring run traces the warm-up's later steps (0).
    tracing = {"traced_steps": steps // 2} if profiling else {}
    if setting.pss:
        tracing = {"api": TrainingApi.TF2_PSS, "traced_steps": steps // 2 if profiling else 0,
                   "trace_ms": PSS_PROFILE_TRACE_MS if profiling else PSS_MEASURE_TRACE_MS}
    config = CollectConfig(
        out_dir=out, model=setting.model, model_fn=setting.model_fn, batch_size=setting.batch_size,
        # A tf2-pss coordinator hands the steps to whichever worker is free: W workers run about
        # ``steps`` each when it schedules W x ``steps``.
        image_size=setting.image_size, steps=steps * workers if setting.pss and not profiling else steps,
        warmup_steps=setting.warmup_steps,
        # A TF1 measuring run (and a timeline run) traces its first step only.
        trace_every=1 if setting.pss or profiling else steps + 1, **tracing,
        workers=workers, ps_tasks=setting.profiled_ps if profiling or profile_side else setting.ps_tasks,
        placement=setting.placement,
        intra_op_threads=1,
        inter_op_threads=1, capture=capture,
        capture_site=capture_site, zero_init=True, env=setting.env, iperf_repeats=3 if profiling else 0,
        iperf_seconds=2.0, timeout_s=1800.0,
    )
    return collect_in_lab(config, setting.rate_bit, progress=progress, overwrite=True, quotas=setting.quotas(),
                          transport=setting.transport(), fork_servers=fork_servers)


def profile_tail_outside_cores(lab_run: LabRun) -> float:
    """The load the lab did not cause over a profiling run's untraced tail, in cores: the
    machine's busy cores minus its tasks' (from the run's CPU samples); NaN for a run without a
    tail. The tail is a measurement too: the one-worker correction fits its step time and the PS
    CPU bound takes its PS CPU per step (docs/calibration.md §4.8). tcpdump, stopped as the tail
    begins, and this process count as outside here (a few hundredths of a core)."""
    window = untraced_window_s(lab_run.run_dir, json.loads((lab_run.run_dir / "run.json").read_text()))
    usage = window_usage(lab_run.cpu_samples, *window) if window else {}
    if MACHINE not in usage:
        return math.nan
    return max(0.0, usage[MACHINE]["cores"] - sum(v["cores"] for k, v in usage.items() if k != MACHINE))


def correction_reason(scale: float) -> str:
    """What a one-worker correction of ``scale`` says (:func:`simulate.untrace.fit_computation_scale`).

    Examples
    --------
    >>> correction_reason(0.8)
    "tracing's own cost taken out"
    """
    if scale <= MIN_SCALE:
        return ("even without computation the model's step is longer: its transfers and overheads alone take it "
                "(computation hidden behind them, or transfer costs overstated)")
    if scale >= MAX_SCALE:
        return "the most the correction puts back, and the model's step is still shorter"
    if scale < 1:
        return "tracing's own cost taken out"
    if scale > 1:
        return "host work the model has no term for put back, at the rate of the computation"
    return "none needed"


def untraced_step_s(run_dir: Path) -> float | None:
    """Mean wall time of the run's measured steps that were not traced, or None.

    The mean, not the median: throughput follows the mean step, and a host under a CPU quota
    has a tail of steps that met a throttled period (at 0.5 core, tiny with batch 512: a
    median of 111 ms, a mean of 120 ms). A tf2-pss run's step times are the worker's own span,
    without the coordinator's dispatch before it, which its profile models as an op
    (:func:`tfprofile.pssrun.dispatch_gap_s`): there the step is the time from one untraced
    step's start to the next one's, within each worker's last run of consecutively numbered
    steps: the untraced ones after the settling steps that follow the trace, which the run
    leaves out (docs/formats.md §2.8). Steps of the traced phase that ended after the trace
    are untraced too, but ran while the tasks were still paying for it."""

    with open(run_dir / "step_times.csv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["measured"] == "1"]
    if json.loads((run_dir / "run.json").read_text()).get("config", {}).get("api") == "tf2-pss":
        rows.sort(key=lambda r: (int(r["worker"]), int(r["step"])))
        pairs = [(a, b) for a, b in zip(rows, rows[1:]) if a["worker"] == b["worker"]]
        tail_start: dict[str, int] = {}  # per worker: the first step of its last run of consecutive steps
        for a, b in pairs:
            if int(b["step"]) != int(a["step"]) + 1:
                tail_start[b["worker"]] = int(b["step"])
        walls = [float(b["start_unix_s"]) - float(a["start_unix_s"]) for a, b in pairs
                 if int(b["step"]) == int(a["step"]) + 1 and int(a["step"]) >= tail_start.get(a["worker"], 0)
                 and a["traced"] == b["traced"] == "0"]
    else:
        walls = [float(r["wall_s"]) for r in rows if r["traced"] == "0"]
    return float(sum(walls) / len(walls)) if walls else None


def lockstep_predictions(profile, cluster, workers, *, hosts, steps: int, servers: int | None = None
                         ) -> dict[int, float]:
    """``grpc`` throughput per W with every worker starting at once (``stagger=0``): workers that
    stay in lock step, the other end of the range from the default's staggered starts."""

    frame = predict(profile, cluster, workers=workers, transfer="grpc", steps=steps, warmup=min(50, steps // 5),
                    stagger=0.0, servers=servers, jobs=PREDICT_JOBS, **hosts)
    return {int(w): float(t) for w, t in zip(frame["workers"], frame["throughput_eps"])}


def simulated_hosts(setting: LabSetting) -> dict:
    """The hosts the prediction simulates, the same as the lab's (docs/model.md §4.3): one
    shared host of this machine's cores when co-located, else a host per task.

    A host's cores in the model count the ops that run at once at their profiled speed. The
    profile was taken under the same quota, so its op times already carry a lone op's speed
    there: a task of one inter-op thread on a quota of q < 1 core runs one op at q, and two
    ops share that q, as two ops share one core in the model. So a quota q is max(1, q)
    cores of the model, and what the model adds is the queueing of several workers' ops on
    one PS host.
    """
    if setting.colocated:
        return {"cores": MACHINE_CORES}
    quotas = setting.quotas()
    return {"colocation": TaskHosts(worker_cores=model_cores(quotas.worker_cores),
                                    ps_cores=model_cores(quotas.ps_cores))}


@dataclasses.dataclass(frozen=True)
class Measured:
    """What :func:`measure_points` measured: each W's point (:func:`_point`), and the outside
    load of each round's tail run (:func:`_tail_run`) and busy-PS run (:func:`_busy_ps_run`),
    in cores, in round order."""

    points: dict[int, dict]
    tail_loads: tuple[float, ...] = ()
    busy_loads: tuple[float, ...] = ()


def measure_points(setting: LabSetting, out_dir: Path, workers: Sequence[int], *, repeat: int,
                   rerun_loaded: bool, progress: bool, fork_servers: ForkServers | None = None,
                   tail_runs: bool = False, busy_workers: int | None = None) -> Measured:
    """Measure the real job ``repeat`` times for every W of ``workers``, each run on a fresh
    cluster, in rounds: round k measures every W once (W = 1 first), so that a W's runs are
    spread over the setting's time and its range holds how the machine drifted meanwhile (a
    CPU-quota-bound one-worker step moved 26-40% between lab runs minutes apart on this
    machine), and no W is measured in a slow stretch the others missed. With ``tail_runs``
    each round begins with a tail run (:func:`_tail_run`): the one-worker step the correction
    and the PS CPU bound take is measured over the same stretch of time as the points; with
    ``busy_workers`` a busy-PS run follows it (:func:`_busy_ps_run`). A run
    during which the machine carried more than :data:`OUTSIDE_LOAD_LIMIT_CORES` of load the lab
    did not cause is measured again once (``rerun_loaded``), and flagged if still loaded."""
    records: dict[int, list[dict]] = {w: [] for w in workers}
    tail_loads, busy_loads = [], []
    for k in range(repeat):
        _say(f"[{setting.name}] measuring round {k + 1} of {repeat}: "
             f"{'a one-worker tail run, then ' if tail_runs else ''}"
             f"{f'a busy-PS run with {busy_workers} workers, then ' if busy_workers else ''}"
             f"W = {', '.join(map(str, workers))}")
        if tail_runs:
            tail_loads.append(_tail_run(setting, out_dir, k, rerun_loaded=rerun_loaded, progress=progress,
                                        fork_servers=fork_servers))
        if busy_workers:
            busy_loads.append(_busy_ps_run(setting, out_dir, k, busy_workers, rerun_loaded=rerun_loaded,
                                           progress=progress, fork_servers=fork_servers))
        for w in workers:
            records[w].append(_measure_run(setting, out_dir, w, k, rerun_loaded=rerun_loaded, progress=progress,
                                           fork_servers=fork_servers))
    return Measured({w: _point(runs) for w, runs in records.items()}, tuple(tail_loads), tuple(busy_loads))


def _tail_run(setting: LabSetting, out_dir: Path, k: int, *, rerun_loaded: bool, progress: bool,
              fork_servers: ForkServers | None) -> float:
    """Round ``k``'s (from 0) tail run, ``profile-tail-r<k+1>``: the profiling run's cluster with
    one worker, untraced but for its first step and without a capture, as long as a measuring
    run; measured again once when loaded, as a measuring run is. Returns its outside load in
    cores. This machine's speed wanders by up to 30% over minutes (a quota-bound one-worker
    step, and a fixed loop timed beside it: bench/results/tail-runs-2026-11-28), so one
    profiling tail is one draw of it; a tail per round gives the correction the points' mean."""
    return _profile_side_run(setting, out_dir / f"{TAIL_RUN_PREFIX}{k + 1}", f"tail run {k + 1}", 1,
                             rerun_loaded=rerun_loaded, progress=progress, fork_servers=fork_servers)


def _busy_ps_run(setting: LabSetting, out_dir: Path, k: int, workers: int, *, rerun_loaded: bool, progress: bool,
                 fork_servers: ForkServers | None) -> float:
    """Round ``k``'s (from 0) busy-PS run, ``profile-busy-r<k+1>``: the profiling run's cluster
    with ``workers`` workers, otherwise as a tail run (:func:`_tail_run`). Returns its outside
    load in cores. A one-worker run cannot show how much cheaper a worker-step gets once the
    PS's wake-ups serve several workers' requests; this run measures it
    (:func:`calibration.pscpu.busy_ps_cpu_record`)."""
    return _profile_side_run(setting, out_dir / f"{BUSY_RUN_PREFIX}{k + 1}", f"busy-PS run {k + 1}", workers,
                             rerun_loaded=rerun_loaded, progress=progress, fork_servers=fork_servers)


def _profile_side_run(setting: LabSetting, out: Path, label: str, workers: int, *, rerun_loaded: bool,
                      progress: bool, fork_servers: ForkServers | None) -> float:
    """One run of the profiling run's cluster (its PS count) with ``workers`` workers into
    ``out``, as a measuring run is run (:func:`_collect_unloaded`), its traced step and logs
    dropped once written. Returns its outside load in cores."""
    lab_run, _ = _collect_unloaded(setting, out, label, rerun_loaded=rerun_loaded, workers=workers,
                                   progress=progress, fork_servers=fork_servers, profile_side=True)
    _drop_leftovers(lab_run.run_dir)
    return lab_run.load.outside_cores


def _round_runs(setting_dir: Path, prefix: str) -> list[Path]:
    """``setting_dir``'s finished ``<prefix><k>`` runs, in round order (a run stopped midway
    keeps an ``.incomplete`` name, and a run without its run.json did not finish: both left out)."""
    return sorted((p for p in setting_dir.glob(f"{prefix}*")
                   if p.name[len(prefix):].isdigit() and (p / "run.json").is_file()),
                  key=lambda p: int(p.name[len(prefix):]))


def busy_ps_runs(setting_dir: Path) -> list[dict]:
    """The busy-PS records (:func:`calibration.pscpu.busy_ps_cpu_record`) of ``setting_dir``'s
    finished ``profile-busy-r<k>`` runs, in round order (a run stopped midway keeps an
    ``.incomplete`` name and is left out). A run that gives no record (too few steps between
    its CPU readings, say) is left out with a line saying why: the setting's measurements stand
    without it."""
    records = []
    for run in _round_runs(setting_dir, BUSY_RUN_PREFIX):
        try:
            records.append(read_busy_ps_run(run))
        except InputError as err:
            _say(f"busy-PS run left out: {err}")
    return records


def _collect_unloaded(setting: LabSetting, out: Path, label: str, *, rerun_loaded: bool, workers: int,
                      progress: bool, fork_servers: ForkServers | None, profile_side: bool = False
                      ) -> tuple[LabRun, int]:
    """One uncaptured run of ``measure_steps`` into ``out``, run again once (``rerun_loaded``)
    when it carried more than :data:`OUTSIDE_LOAD_LIMIT_CORES` of outside load. Returns the run
    kept and how many times it was run again."""
    reruns = 0
    for attempt in range(2 if rerun_loaded else 1):
        lab_run = _collect(setting, out, workers=workers, steps=setting.measure_steps, capture=False,
                           progress=progress, fork_servers=fork_servers, profile_side=profile_side)
        if not lab_run.load.flagged or attempt == 1 or not rerun_loaded:
            break
        reruns += 1
        _say(f"[{setting.name}] {label}: {lab_run.load.outside_cores:.2f} cores of outside load: measuring again")
    return lab_run, reruns


def _drop_captures(run_dir: Path) -> None:
    """A run's capture, once summarised (CLUSTER.json, timeline.json): tens of MB."""
    for capture in run_dir.glob("capture.pcap*"):
        capture.unlink()


def _drop_leftovers(run_dir: Path) -> None:
    """A measured run's one traced step and its logs, once read: the profile has the traces."""
    shutil.rmtree(run_dir / "trace", ignore_errors=True)
    shutil.rmtree(run_dir / "logs", ignore_errors=True)


@dataclasses.dataclass(frozen=True)
class OneWorkerTails:
    """The one-worker untraced steps of a setting's directory: the profiling run's tail
    (``None`` where it has none) and the tail runs' (round order), each run's mean step and its
    PS tasks' CPU per step (:func:`calibration.pscpu.ps_cpu_record`)."""

    profiling_step_s: float | None
    profiling_ps_cpu_s: float | None
    round_step_s: tuple[float, ...] = ()
    round_ps_cpu_s: tuple[float, ...] = ()

    @property
    def step_s(self) -> tuple[float, ...]:
        """Every run's mean untraced step, the profiling run's first."""
        return tuple(x for x in (self.profiling_step_s, *self.round_step_s) if x is not None)

    @property
    def ps_cpu_s(self) -> tuple[float, ...]:
        """Every run's PS CPU per step, the profiling run's first."""
        return tuple(x for x in (self.profiling_ps_cpu_s, *self.round_ps_cpu_s) if x is not None)

    @property
    def mean_step_s(self) -> float | None:
        """The runs' mean untraced step, each run weighing alike (each is one draw of the
        machine's speed); None without any."""
        return sum(self.step_s) / len(self.step_s) if self.step_s else None

    @property
    def mean_ps_cpu_s(self) -> float | None:
        """The runs' mean PS CPU per step, each run weighing alike; None without any."""
        return sum(self.ps_cpu_s) / len(self.ps_cpu_s) if self.ps_cpu_s else None


def _run_ps_cpu_s(run_dir: Path) -> float | None:
    record = ps_cpu_record(run_dir, json.loads((run_dir / "run.json").read_text()))
    return None if record is None else record["cpu_s_per_step"]


def one_worker_tails(setting_dir: Path) -> OneWorkerTails:
    """The untraced one-worker steps in ``setting_dir``: its ``profile-run``'s tail (where there
    is one) and its finished ``profile-tail-r<k>`` runs (a run stopped midway keeps an
    ``.incomplete`` name and is left out)."""
    rounds = _round_runs(setting_dir, TAIL_RUN_PREFIX)
    profiling = setting_dir / PROFILE_RUN
    found = (profiling / "run.json").is_file()
    return OneWorkerTails(untraced_step_s(profiling) if found else None, _run_ps_cpu_s(profiling) if found else None,
                          tuple(step for step in map(untraced_step_s, rounds) if step is not None),
                          tuple(cpu for cpu in map(_run_ps_cpu_s, rounds) if cpu is not None))


def pooled_ps_cpu(document: dict, tails: OneWorkerTails) -> dict:
    """CLUSTER.json ``document`` with its ``ps_cpu`` taken over every one-worker run of
    ``tails`` (the mean of each run's CPU per step, docs/formats.md §10); unchanged without a
    ``ps_cpu`` or with one run."""
    if "ps_cpu" not in document or len(tails.ps_cpu_s) < 2:
        return document
    return {**document, "ps_cpu": {
        **document["ps_cpu"], "cpu_s_per_step": tails.mean_ps_cpu_s, "runs": len(tails.ps_cpu_s),
        "cpu_s_per_step_runs": list(tails.ps_cpu_s),
        "source": "task_cpu.csv: the mean over the lab's one-worker runs of the PS tasks' CPU per untraced step "
                  "(the profiling run's tail, then a tail run per measuring round)"}}


def _measure_run(setting: LabSetting, out_dir: Path, workers: int, k: int, *, rerun_loaded: bool, progress: bool,
                 fork_servers: ForkServers | None) -> dict:
    """Run ``k`` (from 0) of the point with ``workers`` workers: ``measure-w<W>-r<k+1>`` and its lab.json."""
    measure_dir = out_dir / f"measure-w{workers}-r{k + 1}"
    lab_run, reruns = _collect_unloaded(setting, measure_dir, f"W = {workers}, run {k + 1}",
                                        rerun_loaded=rerun_loaded, workers=workers, progress=progress,
                                        fork_servers=fork_servers)
    measured = measured_throughput(lab_run.run_dir)
    _drop_leftovers(measure_dir)
    transport = transport_summary(lab_run, lab_run.run_dir)
    window_cpu = window_usage(lab_run.cpu_samples, *measured["window_unix_s"])
    write_json(measure_dir / "lab.json", {
        "format": "tfsim.lab-run/1", "throughput_eps": measured["throughput_eps"], "rule": measured["rule"],
        "window_s": measured["window_s"], "per_worker_eps": measured["per_worker_eps"],
        "per_worker_sum_eps": measured["per_worker_sum_eps"], "finish_spread_s": measured["finish_spread_s"],
        "round": k + 1,
        "load": {"wall_s": lab_run.load.wall_s, "machine_cores": lab_run.load.machine_cores,
                 "lab_cores": lab_run.load.lab_cores, "outside_cores": lab_run.load.outside_cores,
                 "flagged": lab_run.load.flagged},
        "tasks": {name: dataclasses.asdict(stats) for name, stats in lab_run.tasks.items()},
        "links": {name: counters.as_dict() for name, counters in lab_run.links.items()},
        "transport": transport,
        "window_cpu": window_cpu,
        "quotas": dataclasses.asdict(setting.quotas())})
    return {"throughput_eps": measured["throughput_eps"], "step_s": measured["step_time_median_s"],
            "per_worker_sum_eps": measured["per_worker_sum_eps"], "finish_spread_s": measured["finish_spread_s"],
            "load": lab_run.load, "reruns": reruns, "transport": transport,
            "throttled_s": sum(t.throttled_s for t in lab_run.tasks.values()),
            "ps_window_cores": window_cpu.get("ps0", {}).get("cores", math.nan)}


def _point(runs: list[dict]) -> dict:
    """One W's point from its runs (:func:`_measure_run`'s records, in round order)."""
    eps = [r["throughput_eps"] for r in runs]
    steps = sorted(r["step_s"] for r in runs)
    return {"runs": eps, "stats": measurement_stats(eps), "step_s": float(steps[len(steps) // 2]),
            "outside_load_cores": max(r["load"].outside_cores for r in runs),
            "loaded_runs": sum(r["load"].flagged for r in runs), "reruns": sum(r["reruns"] for r in runs),
            "throttled_s_per_run": sum(r["throttled_s"] for r in runs) / len(runs),
            "per_worker_sum_eps": sum(r["per_worker_sum_eps"] for r in runs) / len(runs),
            "finish_spread_s": max(r["finish_spread_s"] for r in runs),
            "ps_cores_used_in_window": sum(r["ps_window_cores"] for r in runs) / len(runs),
            **{c: sum(r["transport"][c] for r in runs) / len(runs) for c in TRANSPORT_COLUMNS}}


def overflow_columns(setting: LabSetting, cluster, workers: int) -> dict:
    """:data:`OVERFLOW_COLUMNS` for ``workers``: the shaper's buffer, the calibrated uplink
    queue window, and whether ``workers`` windows exceed the buffer (an incast overflow is
    expected at the PS's port; the measured drops say whether it came)."""
    buffer = setting.transport().buffer_bytes(setting.rate_bit)
    window = float(cluster.queue_window_uplink_bytes)
    onset = overflow_onset_workers(window, buffer)
    return {"buffer_bytes": buffer, "queue_window_up_bytes": window,
            "overflow_expected": onset is not None and workers >= onset}


def transport_summary(lab_run: LabRun, run_dir: Path) -> dict:
    """One run's :data:`TRANSPORT_COLUMNS`: drops at the PS's shapers, every host's retransmitted
    segments and timeouts, and the measured steps' mean over median (every worker's steps)."""
    import numpy as np

    ps = [c for name, c in lab_run.links.items() if name.startswith("ps")]
    with open(run_dir / "step_times.csv", newline="") as handle:
        walls = np.array([float(r["wall_s"]) for r in csv.DictReader(handle) if r["measured"] == "1"])
    return {"ps_drops_down_per_run": sum(c.egress.dropped for c in ps),
            "ps_drops_up_per_run": sum(c.ingress.dropped for c in ps),
            "retrans_segs_per_run": sum(c.tcp.retrans_segs for c in lab_run.links.values()),
            "rto_timeouts_per_run": sum(c.tcp.rto_timeouts for c in lab_run.links.values()),
            "step_mean_over_median": float(walls.mean() / np.median(walls)) if walls.size else math.nan}


def timeline_point(setting: LabSetting, out_dir: Path, workers: int, profile, cluster, hosts: dict, *,
                   progress: bool, fork_servers: ForkServers | None = None) -> dict:
    """One more run with ``workers`` workers, captured at the PS, laid beside the simulation of
    the same W (:func:`tfsim.lab.timeline_view.timeline_view`). Writes ``timeline-w<W>.png``
    (a few steps, measured above simulated) and, in the run's directory, ``timeline.json``
    (the tables) and ``timeline.trace.json`` (both runs, for Perfetto); the capture is deleted
    unless the setting keeps captures (``keep_captures``: ``tfsim report --timeline-run`` and
    ``tfsim calibrate`` can read the run directory then).
    Returns the row's :data:`TIMELINE_COLUMNS`. The run is not one of the measured
    repetitions: tcpdump's own CPU time would be counted against the job."""
    from tfsim.lab.timeline_view import timeline_view

    _say(f"[{setting.name}] W = {workers}: one more run, captured at the PS, for the timeline view")
    run_dir = _collect(setting, out_dir / f"timeline-w{workers}", workers=workers, steps=setting.measure_steps,
                       capture=True, capture_site=CaptureSite.PS, progress=progress,
                       fork_servers=fork_servers).run_dir
    view = timeline_view(run_dir, profile, cluster, rate_Bps=setting.rate_bit / 8, **hosts)
    summary = view.summary()
    write_json(run_dir / "timeline.json", json_ready({
        "format": "tfsim.timeline/1", **summary, "tensors": view.comparison["tensors_side_by_side"],
        "measured_wire_per_worker": view.comparison["measured"]["wire"],
        "simulated_wire_per_worker": view.simulated["wire"]}))
    # Compact, as tfsim predict --trace-out writes its traces: indented, a W = 4 trace is 26 MB.
    write_text(run_dir / "timeline.trace.json",
               json.dumps(json_ready(view.chrome_trace()), separators=(",", ":"), allow_nan=False))
    save_figure(view.figure(), out_dir / f"timeline-w{workers}.png")
    throughput = measured_throughput(run_dir)["throughput_eps"]
    if setting.keep_captures:
        shutil.rmtree(run_dir / "logs", ignore_errors=True)
    else:
        _drop_captures(run_dir)
        _drop_leftovers(run_dir)
    fractions = {"used": view.used_fractions(), "busy": view.busy_fractions()}
    return {"timeline_run_eps": throughput,
            **{f"{kind}_{d}_{side}": values[f"{side}_{d}"] for kind, values in fractions.items()
               for d in ("down", "up") for side in ("measured", "simulated")},
            "step_median_measured_s": summary["step_median_ms"]["measured"] / 1e3,
            "step_median_simulated_s": summary["step_median_ms"]["simulated"] / 1e3}


def run_setting(setting: LabSetting, out_dir: Path, *, progress: bool = True, predict_steps: int = 400,
                repeat: int = 3, rerun_loaded: bool = True, fork_servers: ForkServers | None = None) -> list[dict]:
    """Profile, calibrate, predict and measure one setting; return its result rows. With
    ``fork_servers`` every task is forked from a process that has imported TensorFlow."""

    out_dir.mkdir(parents=True, exist_ok=True)
    _say(f"[{setting.name}] profiling with {setting.profiled_ps} PS and 1 worker (capture + iperf3; "
         f"{setting.hosts_text()}; {setting.transport().describe()})")
    profiling = _collect(setting, out_dir / PROFILE_RUN, workers=1, steps=setting.profiling_steps, capture=True,
                         progress=progress, fork_servers=fork_servers)
    tail_outside = profile_tail_outside_cores(profiling)
    if rerun_loaded and tail_outside > OUTSIDE_LOAD_LIMIT_CORES:
        _say(f"[{setting.name}] {tail_outside:.2f} cores of outside load over the profiling run's untraced steps: "
             "profiling again")
        profiling = _collect(setting, out_dir / PROFILE_RUN, workers=1, steps=setting.profiling_steps,
                             capture=True, progress=progress, fork_servers=fork_servers)
        tail_outside = profile_tail_outside_cores(profiling)
    run_dir = profiling.run_dir
    # A rate above what the link can carry is recorded (CLUSTER.json link_ceiling) and said, not
    # fatal: the setting's runs measure the real job all the same.
    calibration = calibrate_run(run_dir, allow_above_ceiling=True)
    for check in calibration.link_ceiling.get("checks", []):
        if check["above"]:
            _say(f"[{setting.name}] the {check['direction']} {check['rate']}, {format_rate(check['rate_Bps'])}, is "
                 f"above {format_rate(check['ceiling_Bps'])}, what TCP payload can carry on this link (a calibration "
                 "bug)")
    document = calibration.to_cluster_json()
    save_cluster(document, out_dir / "CLUSTER.json")

    save_figure(overhead_figure(calibration), out_dir / "overhead.png")
    save_figure(stream_timeline_figure(calibration), out_dir / "streams.png")
    traced_profile = profile_from_run_dir(run_dir)
    hosts = simulated_hosts(setting)
    # The capture is big and summarised in CLUSTER.json: kept only when asked (to calibrate
    # it again, with another tfsim).
    if not setting.keep_captures:
        _drop_captures(run_dir)
    # A profile taken with fewer PS than the measured runs is re-placed over theirs (model.md §2.2),
    # as the profiling run placed its variables (the setting's placement, in the profile's meta).
    servers = setting.ps_tasks if setting.profiled_ps != setting.ps_tasks else None

    measured = measure_points(setting, out_dir, setting.workers, repeat=repeat, rerun_loaded=rerun_loaded,
                              progress=progress, fork_servers=fork_servers, tail_runs=setting.tail_runs,
                              busy_workers=setting.busy_workers)
    points = measured.points
    tails = one_worker_tails(out_dir)
    loads = [x for x in (tail_outside, *measured.tail_loads, *measured.busy_loads) if not math.isnan(x)]
    tail_outside = max(loads) if loads else math.nan
    one_tail_scale, one_tail = math.nan, {}
    if len(tails.step_s) > 1 and tails.profiling_step_s is not None:
        # What the profiling run's tail alone (a user's one profile) predicts: the part of the
        # error that the machine's speed during that one run accounts for.
        profiling_cluster = load_cluster(out_dir / "CLUSTER.json")
        one_tail_scale = _fitted_scale(traced_profile, profiling_cluster, tails.profiling_step_s, hosts,
                                       predict_steps)
        one_tail = _grpc_predictions(scale_computation(traced_profile, one_tail_scale), profiling_cluster,
                                     setting.workers, hosts=hosts, servers=servers, steps=predict_steps)
        document = pooled_ps_cpu(document, tails)
    busy = busy_ps_runs(out_dir)
    if busy and "ps_cpu" in document:
        document = {**document, "ps_cpu": with_busy_runs(document["ps_cpu"], busy)}
    save_cluster(document, out_dir / "CLUSTER.json")
    cluster = load_cluster(out_dir / "CLUSTER.json")
    target = tails.mean_step_s
    scale = _fitted_scale(traced_profile, cluster, target, hosts, predict_steps)
    profile = scale_computation(traced_profile, scale)
    _say(f"[{setting.name}] computation scaled by {scale:.3f} to match the untraced step time "
         f"({target * 1e3 if target else float('nan'):.1f} ms, over {len(tails.step_s)} one-worker run(s)): "
         f"{correction_reason(scale)}")
    save_profile(profile, out_dir / "profile.npz")

    _say(f"[{setting.name}] predicting W = {', '.join(map(str, setting.workers))}")
    frame = predict(profile, cluster, workers=setting.workers, transfer=list(TRANSFER_MODELS),
                    steps=predict_steps, warmup=min(50, predict_steps // 5), replicas=PREDICT_REPLICAS,
                    servers=servers, jobs=PREDICT_JOBS, **hosts)
    lockstep = lockstep_predictions(profile, cluster, setting.workers, hosts=hosts, steps=predict_steps,
                                    servers=servers)
    base = baselines(profile, cluster, setting.workers, "async")
    packet = packet_predictions(profile, cluster, setting.workers, hosts=hosts, servers=servers,
                                steps=setting.packet_steps) if setting.packet else {}
    # What the one-worker runs' PS CPU alone predicts, beside: the busy-PS runs' share of the error.
    one_worker_cpu = {}
    if cluster.ps_cpu is not None and cluster.ps_cpu.busy:
        one_worker_cluster = dataclasses.replace(cluster, ps_cpu=dataclasses.replace(cluster.ps_cpu, busy=()))
        one_worker_cpu = _grpc_predictions(profile, one_worker_cluster, setting.workers, hosts=hosts,
                                           servers=servers, steps=predict_steps)
    quotas = setting.quotas()
    rows = []
    for w in setting.workers:
        point = points[w]
        stats = point["stats"]
        rows_w = {p: frame[(frame["workers"] == w) & (frame["policy"] == p)].iloc[0] for p in TRANSFER_MODELS}
        predicted = {p: float(row["throughput_eps"]) for p, row in rows_w.items()}
        grpc_range = (float(rows_w["grpc"]["throughput_min_eps"]), float(rows_w["grpc"]["throughput_max_eps"]))
        base_w = base[base["workers"] == w].set_index("model")["throughput_eps"]
        predicted_lockstep = lockstep[w]
        rows.append({
            "setting": setting.name, "api": setting.api, "model": setting.model, "batch": setting.batch_size,
            "rate_mbit": setting.rate_bit / 1e6, "ps": setting.ps_tasks, "profile_ps": setting.profiled_ps,
            "placement": setting.placement, "window": "65535 (pinned)" if setting.grpc_options else "default",
            "transport": setting.transport().describe(),
            "hosts": "co-located" if setting.colocated else "quota",
            "ps_cores": quotas.ps_cores, "worker_cores": quotas.worker_cores,
            "cpu_period_ms": None if setting.colocated else setting.cpu_period_ms, "workers": w,
            "repeats": len(point["runs"]), "measured_eps": stats["mean"], "measured_min_eps": stats["min"],
            "measured_max_eps": stats["max"], "measured_cv": stats["cv"], "measured_ci95_eps": stats["ci95"],
            "measured_runs_eps": " ".join(f"{x:.6g}" for x in point["runs"]),
            "measured_per_worker_sum_eps": point["per_worker_sum_eps"], "finish_spread_s": point["finish_spread_s"],
            **{f"predicted_{m}_eps": predicted[m] for m in TRANSFER_MODELS},
            **{f"error_{m}": predicted[m] / stats["mean"] - 1 for m in TRANSFER_MODELS},
            "predict_replicas": PREDICT_REPLICAS, "predicted_grpc_min_eps": grpc_range[0],
            "predicted_grpc_max_eps": grpc_range[1],
            "predicted_grpc_drift": float(rows_w["grpc"]["throughput_drift"]),
            "predicted_grpc_settled": bool(rows_w["grpc"]["settled"]),
            "inside_grpc": bool(stats["min"] <= predicted["grpc"] <= stats["max"]),
            "ranges_overlap_grpc": bool(grpc_range[0] <= stats["max"] and stats["min"] <= grpc_range[1]),
            "predicted_grpc_lockstep_eps": predicted_lockstep,
            "error_grpc_lockstep": predicted_lockstep / stats["mean"] - 1,
            "lin_async_eps": float(base_w.get("lin-async", math.nan)),
            "cynthia_eps": float(base_w.get("cynthia", math.nan)),
            "measured_step_s": point["step_s"], "computation_scale": scale,
            "outside_load_cores": point["outside_load_cores"], "loaded_runs": point["loaded_runs"],
            "reruns": point["reruns"], "throttled_s_per_run": point["throttled_s_per_run"],
            "ps_cores_used_in_window": point["ps_cores_used_in_window"], "profile_tail_outside_cores": tail_outside,
            "profile_tails": len(tails.step_s), "profile_tail_step_s": target if target else math.nan,
            "profile_tail_steps_s": " ".join(f"{x:.6g}" for x in tails.step_s),
            "computation_scale_one_tail": one_tail_scale,
            "predicted_grpc_one_tail_eps": one_tail.get(w, math.nan),
            "error_grpc_one_tail": one_tail.get(w, math.nan) / stats["mean"] - 1,
            **busy_columns(cluster, busy, one_worker_cpu.get(w, math.nan), float(rows_w["grpc"]["ps_cpu_limit_eps"]),
                           stats["mean"]),
            **{c: point[c] for c in TRANSPORT_COLUMNS},
            **overflow_columns(setting, cluster, w),
            **{f"calibration_{m}_median_error": document["transfer_model_error"].get(m, {}).get("all", {}).get("median")
               for m in TRANSFER_MODELS},
            **(timeline_point(setting, out_dir, w, profile, cluster, hosts, progress=progress,
                              fork_servers=fork_servers) if setting.timeline
               else dict.fromkeys(TIMELINE_COLUMNS, math.nan)),
        })
        rows[-1].update(packet_columns(packet.get(w), stats, grpc_eps=predicted["grpc"],
                                       auto_packet=auto_picks_packet(w, rows[-1]["buffer_bytes"]),
                                       steps=setting.packet_steps))
    return rows


def busy_columns(cluster, busy: list[dict], one_worker_cpu_eps: float, limit_eps: float, measured_eps: float
                 ) -> dict:
    """One point's :data:`BUSY_COLUMNS`: the busy-PS runs' workers and count, the PS CPU per
    worker-step of the one-worker runs and of the busy-PS runs (NaN without them), the point's
    PS CPU bound, and the grpc prediction from the one-worker runs' CPU alone with its error."""
    ps_cpu = cluster.ps_cpu
    measured = ps_cpu.busy[-1] if ps_cpu is not None and ps_cpu.busy else None
    return {"busy_ps_workers": measured.workers if measured else math.nan, "busy_ps_runs": len(busy),
            "ps_cpu_one_worker_s": ps_cpu.cpu_s_per_step if ps_cpu is not None else math.nan,
            "ps_cpu_busy_s": measured.cpu_s_per_step if measured else math.nan, "ps_cpu_limit_eps": limit_eps,
            "predicted_grpc_one_worker_cpu_eps": one_worker_cpu_eps,
            "error_grpc_one_worker_cpu": one_worker_cpu_eps / measured_eps - 1}


def _fitted_scale(profile, cluster, target: float | None, hosts: dict, steps: int) -> float:
    """The one-worker correction's computation scale for an untraced step of ``target`` seconds
    (1 without one), fitted over the run the prediction simulates: the mean of a few dozen
    sampled steps moves with the sample where the traced steps differ widely (a tf2-pss profile
    under a quota of a third of a core: 18-72 ms; 80 steps gave a mean 17% below 400 steps')."""
    if not target:
        return 1.0
    return fit_computation_scale(profile, cluster, target, statistic="mean", steps=steps,
                                 warmup=min(50, steps // 5), replicas=PREDICT_REPLICAS, **hosts)


def _grpc_predictions(profile, cluster, workers, *, hosts: dict, servers: int | None, steps: int) -> dict[int, float]:
    """Each W's throughput under the grpc transfer model, the mean of the lab's replicas."""
    frame = predict(profile, cluster, workers=workers, transfer="grpc", steps=steps, warmup=min(50, steps // 5),
                    replicas=PREDICT_REPLICAS, servers=servers, jobs=PREDICT_JOBS, **hosts)
    return {int(w): float(eps) for w, eps in zip(frame["workers"], frame["throughput_eps"])}


def packet_predictions(profile, cluster, workers, *, hosts: dict, servers: int | None = None,
                       steps: int = PACKET_STEPS) -> dict[int, float]:
    """Each W's throughput under the packet transfer model (docs/model.md §12), for the lab's hosts,
    over ``steps`` replayed steps per worker (the first sixth not counted).

    On :data:`PREDICT_JOBS` processes, as every prediction of the lab."""
    _say(f"predicting W = {', '.join(map(str, workers))} with the packet transfer model (ns-3, {steps} steps)")
    frame = predict(profile, cluster, workers=workers, transfer="packet", steps=steps,
                    warmup=steps // 6, servers=servers, jobs=PREDICT_JOBS, **hosts)
    return {int(w): float(eps) for w, eps in zip(frame["workers"], frame["throughput_eps"])}


def packet_columns(predicted: float | None, stats: dict, *, grpc_eps: float, auto_packet: bool,
                   steps: int = PACKET_STEPS) -> dict:
    """results.csv's packet columns for one point (NaN where the setting did not ask for them),
    and ``auto``'s: the packet model's prediction where ``auto_packet``, grpc's elsewhere (what
    ``--transfer auto`` picks: :func:`simulate.sweep.auto_picks_packet`, docs/model.md §12, "Auto").
    ``steps`` is the replay's steps per worker (the setting's ``packet_steps``)."""
    if predicted is None:
        return dict.fromkeys(PACKET_COLUMNS, math.nan)
    auto = predicted if auto_packet else grpc_eps
    return {"packet_steps": steps, **_scored("packet", predicted, stats), **_scored("auto", auto, stats)}


def _scored(model: str, predicted: float, stats: dict) -> dict:
    error = predicted / stats["mean"] - 1
    return {f"predicted_{model}_eps": predicted, f"error_{model}": error,
            f"inside_{model}": bool(stats["min"] <= predicted <= stats["max"] or abs(error) <= CLOSE_ENOUGH)}


def machine_text() -> str:

    m = machine_description()
    return f"{m['cpu']}, {m['cores']} cores, Linux {m['kernel']}"


# The validation's bars, on the default (grpc) model: the mean and the largest |error| over the
# matrix, and the share of points whose prediction lies in the measured min..max or within
# CLOSE_ENOUGH of the measured mean (a range of 3 runs can be narrower than the model's
# resolution). docs/formats.md §10 states them.
MEAN_ERROR_BAR, MAX_ERROR_BAR = 0.05, 0.12
CLOSE_ENOUGH, INSIDE_SHARE_BAR = 0.03, 0.80


def _tail_load_line(frame) -> list[str]:
    """results.md's line on the profiling runs' untraced tails (none for rows without the column)."""
    tails = frame.groupby("setting", sort=False)["profile_tail_outside_cores"].first().dropna() \
        if "profile_tail_outside_cores" in frame else []
    if not len(tails):
        return []
    return [f"- outside load over each profiling run's untraced steps (the correction's and the PS CPU bound's "
            f"measurement; profiled again once above {OUTSIDE_LOAD_LIMIT_CORES:g} cores): at most {tails.max():.2f} "
            "cores"]


def _busy_ps_lines(frame) -> list[str]:
    """results.md's lines on each setting's busy-PS runs: the PS CPU per worker-step they
    measured beside the one-worker runs', and what the one-worker runs' CPU alone would have
    predicted (none for rows without busy-PS runs)."""
    if "busy_ps_runs" not in frame:
        return []
    lines = []
    for setting, group in frame.groupby("setting", sort=False):
        first = group.iloc[0]
        if not first["busy_ps_runs"] >= 1 or math.isnan(first["ps_cpu_busy_s"]):
            continue
        alone, busy = group["error_grpc_one_worker_cpu"].abs(), group["error_grpc"].abs()
        k = int(first["busy_ps_workers"])
        # At W = k the bound takes CPU measured with k workers (in runs of their own): said apart.
        others = group["workers"] != k
        lines.append(f"- {setting}: the PS's CPU per worker-step {first['ps_cpu_one_worker_s'] * 1e3:.1f} ms with one "
                     f"worker, {first['ps_cpu_busy_s'] * 1e3:.1f} ms with {k} (the mean of "
                     f"{int(first['busy_ps_runs'])} busy-PS run(s)); with the one-worker CPU alone grpc's mean "
                     f"|error| is {alone.mean() * 100:.1f}% (max {alone.max() * 100:.1f}%) against "
                     f"{busy.mean() * 100:.1f}% (max {busy.max() * 100:.1f}%)"
                     + (f"; at W other than {k}, {alone[others].mean() * 100:.1f}% against "
                        f"{busy[others].mean() * 100:.1f}%" if others.any() else ""))
    return lines


def _one_worker_tail_lines(frame) -> list[str]:
    """results.md's lines on the one-worker runs each setting's correction and PS CPU bound took,
    and on what its profiling run's tail alone would have predicted (none for rows without tail
    runs)."""
    if "profile_tails" not in frame:
        return []
    lines = []
    for setting, group in frame.groupby("setting", sort=False):
        first = group.iloc[0]
        if not first["profile_tails"] >= 2 or math.isnan(first["computation_scale_one_tail"]):
            continue  # no tail runs, or a profiling run without a tail of its own
        steps_ms = [float(x) * 1e3 for x in str(first["profile_tail_steps_s"]).split()]
        one_tail, pooled = group["error_grpc_one_tail"].abs(), group["error_grpc"].abs()
        lines.append(f"- {setting}: the one-worker step over {int(first['profile_tails'])} runs, {steps_ms[0]:.1f} ms "
                     f"in the profiling run's tail, then {', '.join(f'{x:.1f}' for x in steps_ms[1:])} ms in the "
                     f"rounds' tail runs (mean {first['profile_tail_step_s'] * 1e3:.1f} ms, computation scale "
                     f"{first['computation_scale']:.3f}); the profiling run's tail alone (scale "
                     f"{first['computation_scale_one_tail']:.3f}) gives grpc a mean |error| of "
                     f"{one_tail.mean() * 100:.1f}% (max {one_tail.max() * 100:.1f}%) against "
                     f"{pooled.mean() * 100:.1f}% (max {pooled.max() * 100:.1f}%)")
    return lines


def _met(ok: bool) -> str:
    return "met" if ok else "missed"


def bar_scores(frame, model: str) -> tuple[float, float, float]:
    """A model's mean |error|, largest |error| and share of points inside the measured range or
    within :data:`CLOSE_ENOUGH` of its mean, over the points of ``frame`` (results.csv's rows)
    that the model predicted: the three numbers of the bars.

    Examples
    --------
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"error_grpc": [0.02, -0.10, float("nan")], "inside_grpc": [False, True, False]})
    >>> tuple(round(x, 3) for x in bar_scores(frame, "grpc"))
    (0.06, 0.1, 1.0)
    """
    scored = frame[frame[f"error_{model}"].notna()]
    errors = scored[f"error_{model}"].abs()
    inside = scored[f"inside_{model}"].astype(bool) | (errors <= CLOSE_ENOUGH)
    return float(errors.mean()), float(errors.max()), float(inside.mean())


def _packet_bar_line(frame) -> list[str]:
    """The bars for the packet transfer model and for ``auto``, over the points the packet model
    predicted (none: no lines)."""
    packet = frame[frame["predicted_packet_eps"].notna()]
    if packet.empty:
        return []
    lines = []
    auto_label = f"auto: packet from W = {AUTO_PACKET_FROM_WORKERS}, grpc below"
    for model, label in (("packet", "packet model"), ("auto", auto_label)):
        mean, largest, share = bar_scores(packet, model)
        lines.append(f"bars ({label}, {len(packet)} points): mean |error| {mean * 100:.1f}% "
                     f"({_met(mean <= MEAN_ERROR_BAR)}); max {largest * 100:.1f}% "
                     f"({_met(largest <= MAX_ERROR_BAR)}); inside the measured range or within "
                     f"{CLOSE_ENOUGH:.0%} of its mean: {share:.0%} ({_met(share >= INSIDE_SHARE_BAR)})")
    return lines


def _packet_steps_text(packet) -> str:
    """How many steps the packet model replayed: one count, or each setting's where they differ."""
    by_setting = packet.groupby("setting", sort=False)["packet_steps"].first().astype(int)
    if by_setting.nunique() == 1:
        return f"{by_setting.iloc[0]} steps per worker"
    return "steps per worker " + ", ".join(f"{name} {steps}" for name, steps in by_setting.items())


def _packet_lines(frame) -> list[str]:
    """results.md's table of the packet transfer model's predictions, where the settings asked for them."""
    packet = frame[frame["predicted_packet_eps"].notna()]
    if packet.empty:
        return []
    lines = ["", "## The packet transfer model", "",
             f"ns-3's TCP under the same DAG (docs/model.md §12), {_packet_steps_text(packet)}, one seed:", "",
             "| setting | W | measured (ex/s) | range | packet | error | inside | grpc error | overflow expected "
             "| auto error |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for _, r in packet.iterrows():
        lines.append(f"| {r['setting']} | {r['workers']} | {r['measured_eps']:.2f} | {r['measured_min_eps']:.2f}.."
                     f"{r['measured_max_eps']:.2f} | {r['predicted_packet_eps']:.2f} | {r['error_packet'] * 100:+.1f}% "
                     f"| {'yes' if r['inside_packet'] else 'no'} | {r['error_grpc'] * 100:+.1f}% "
                     f"| {'yes' if r['overflow_expected'] else 'no'} | {r['error_auto'] * 100:+.1f}% |")
    return lines


def _bar_lines(frame) -> list[str]:
    """Whether the matrix meets the bars, and which settings miss the error bars."""
    mean, largest, share = bar_scores(frame, "grpc")
    inside = round(share * len(frame))
    lines = [f"bars (grpc model): mean |error| {mean * 100:.1f}% ({_met(mean <= MEAN_ERROR_BAR)}: "
             f"<= {MEAN_ERROR_BAR:.0%}); max {largest * 100:.1f}% ({_met(largest <= MAX_ERROR_BAR)}: "
             f"<= {MAX_ERROR_BAR:.0%}); inside the measured range or within {CLOSE_ENOUGH:.0%} of its mean: "
             f"{inside} of {len(frame)}, {share:.0%} ({_met(share >= INSIDE_SHARE_BAR)}: >= {INSIDE_SHARE_BAR:.0%})"]
    for setting, group in frame.groupby("setting", sort=False):
        worst = group.loc[group["error_grpc"].abs().idxmax()]
        if abs(worst["error_grpc"]) > MAX_ERROR_BAR or group["error_grpc"].abs().mean() > MEAN_ERROR_BAR:
            lines.append(f"- {setting} misses a bar: mean |error| {group['error_grpc'].abs().mean() * 100:.1f}%, "
                         f"worst {worst['error_grpc'] * 100:+.1f}% at W = {int(worst['workers'])}")
    return lines


def _transport_lines(frame) -> list[str]:
    """results.md's table of what the links and TCP did (per measuring run, mean over repeats)."""
    lines = ["", "## Links and TCP", "",
             "Per measuring run, the mean over its repeats: packets the PS's shapers dropped (down: what the PS "
             "sends; up: where the workers' uploads meet), segments retransmitted and retransmission timeouts "
             "(RTO) over every host, and the measured steps' mean over their median (a tail of stalled steps "
             "shows as a ratio above 1).", "",
             "`overflow expected`: W connections each keeping the calibrated queue window queued at the PS's "
             "port hold more than its shaper's buffer. `PS CPU`: the cores PS 0 used over the measured window "
             "(tfsim/lab/cpu_trace.py), and its quota.", "",
             "| setting | W | buffer (KB) | W x window (KB) | overflow expected | drops down | drops up | "
             "retransmitted | timeouts | step mean / median | PS CPU (cores) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for _, r in frame.iterrows():
        quota = r.get("ps_cores")
        ps_cpu = r.get("ps_cores_used_in_window", math.nan)
        ps_cpu_text = "" if not math.isfinite(ps_cpu) else f"{ps_cpu:.2f}" + (
            f" of {quota:.2f}" if isinstance(quota, float) and math.isfinite(quota) else "")
        lines.append(f"| {r['setting']} | {r['workers']} | {r['buffer_bytes'] / 1e3:.0f} | "
                     f"{r['workers'] * r['queue_window_up_bytes'] / 1e3:.0f} | "
                     f"{'yes' if r['overflow_expected'] else 'no'} | {r['ps_drops_down_per_run']:.0f} | "
                     f"{r['ps_drops_up_per_run']:.0f} | {r['retrans_segs_per_run']:.0f} | "
                     f"{r['rto_timeouts_per_run']:.1f} | {r['step_mean_over_median']:.2f} | {ps_cpu_text} |")
    return lines


def _timeline_lines(frame) -> list[str]:
    """The timeline table of results.md: per direction, the share of the link's sustained rate
    used and the busy fraction, measured in a run captured at the PS and simulated for the
    same W, and the median step of each."""
    timed = frame[frame["used_down_measured"].notna()]
    if timed.empty:
        return []
    apart = _largest_used_difference(timed)
    lines = ["", "## Where the time goes: the link, measured (capture at the PS) and simulated", "",
             "used: payload moved over what the link sustains (the same count on both sides); busy: the time a "
             "transfer was on the link (the measured value reads low on a loaded link: GSO/GRO packets overlap). "
             f"Bar: simulated used fraction within {USED_BAR * 100:.0f} points of measured in each direction; "
             f"largest difference {apart * 100:.1f} points ({'met' if apart <= USED_BAR else 'missed'}). Each "
             "setting's `timeline-w<W>.png` shows a few steps of both; `timeline-w<W>/timeline.trace.json` opens "
             "in Perfetto.",
             "", "| setting | W | capture run (ex/s) | used down: measured | simulated | used up: measured | simulated "
             "| busy down: measured | simulated | busy up: measured | simulated | median step: measured | simulated |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for _, r in timed.iterrows():
        cells = " | ".join(f"{r[f'{kind}_{d}_{side}']:.2f}" for kind in ("used", "busy") for d in ("down", "up")
                           for side in ("measured", "simulated"))
        lines.append(f"| {r['setting']} | {r['workers']} | {r['timeline_run_eps']:.2f} | {cells} | "
                     f"{r['step_median_measured_s'] * 1e3:.1f} ms | {r['step_median_simulated_s'] * 1e3:.1f} ms |")
    return lines


def _largest_used_difference(timed) -> float:
    """The largest |simulated - measured| used fraction over both directions of ``timed``."""
    return float(max((timed["used_down_simulated"] - timed["used_down_measured"]).abs().max(),
                     (timed["used_up_simulated"] - timed["used_up_measured"]).abs().max()))


def write_results(rows: Sequence[dict], out_dir: Path, *, preset: str, elapsed_s: float) -> None:
    """results.csv, results.md and one plot per setting (measured range vs predicted over W)."""
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    with atomic_output(out_dir / "results.csv") as handle:
        frame.to_csv(handle, index=False, float_format="%.6g")
    grpc_err, http2_err = frame["error_grpc"].abs(), frame["error_http2"].abs()
    loaded = frame[frame["loaded_runs"] > 0]
    lines = [
        f"# tfsim lab results ({preset})", "",
        f"- date: {time.strftime('%Y-%m-%d')}", f"- machine: {machine_text()}",
        "- every task (PS and workers; a tf2-pss job's coordinator too) in its own network namespace on one bridge, "
        "links shaped with tbf, and in its own cgroup: with a CPU quota (an emulated host of that many cores) "
        "unless the setting is co-located; "
        "1 intra-op and 1 inter-op thread per task",
        "- measured: the examples all workers complete over the last half of the window in which every worker runs "
        "its measured steps, per second (tfsim/lab/measure.py; ICPE §4.1's per-worker sum is in results.csv, "
        "`measured_per_worker_sum_eps`); each point measured `repeats` times on a fresh cluster, in rounds "
        "(each round measures every W of the setting once, so a point's range holds the machine's drift over the "
        "setting): the mean, and the range (min..max)",
        "- predicted: tfsim's simulation of the same hosts (a host per task with its quota, or one shared host), "
        f"the mean of {int(frame['predict_replicas'].max())} replicas (seeds 0, 1, ..: past one worker a simulated "
        "run can settle into one of several phase patterns; the grpc replicas' range is given); the error is against "
        "the measured mean, `inside` says whether the prediction lies in the measured range, `overlap` whether "
        "the two ranges meet",
        f"- outside load (CPU the lab did not cause, per run): at most {frame['outside_load_cores'].max():.2f} "
        f"cores; {len(loaded)} point(s) with a run above {OUTSIDE_LOAD_LIMIT_CORES:g} cores "
        f"({int(frame['reruns'].sum())} run(s) measured again because of it)",
        *_tail_load_line(frame), *_one_worker_tail_lines(frame), *_busy_ps_lines(frame),
        *(f"- {name}: {transport}" for name, transport in
          frame.groupby("setting", sort=False)["transport"].first().items()),
        f"- wall time of the whole run: {elapsed_s / 60:.1f} min", "",
        f"mean |error| (grpc model, the default): {grpc_err.mean() * 100:.1f}%, max {grpc_err.max() * 100:.1f}%; "
        f"(http2 model): {http2_err.mean() * 100:.1f}%, max {http2_err.max() * 100:.1f}%; grpc inside the measured "
        f"range: {int(frame['inside_grpc'].sum())} of {len(frame)}; the two ranges meet: "
        f"{int(frame['ranges_overlap_grpc'].sum())} of {len(frame)}", "",
        *_bar_lines(frame), *_packet_bar_line(frame), "",
        "| setting | api | hosts | W | measured (ex/s) | range | CV | predicted grpc | error | inside | grpc range "
        "| overlap | predicted http2 | error | predicted fifo | error | grpc, lock step | error | Lin et al. | Cynthia "
        "| outside load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- | --- | --- |",
    ]
    for _, r in frame.iterrows():
        hosts = "co-located" if r["hosts"] == "co-located" else f"PS {r['ps_cores']:.2f}, w {r['worker_cores']:.2f}"
        grpc_extra = (f" {'yes' if r['inside_grpc'] else 'no'} | {r['predicted_grpc_min_eps']:.2f}.."
                      f"{r['predicted_grpc_max_eps']:.2f} | {'yes' if r['ranges_overlap_grpc'] else 'no'} |")
        cells = "".join(f" {r[f'predicted_{m}_eps']:.2f} | {r[f'error_{m}'] * 100:+.1f}% |"
                        + (grpc_extra if m == "grpc" else "") for m in TRANSFER_MODELS)
        lines.append(f"| {r['setting']} | {r['api']} | {hosts} | {r['workers']} | {r['measured_eps']:.2f} | "
                     f"{r['measured_min_eps']:.2f}..{r['measured_max_eps']:.2f} | {r['measured_cv'] * 100:.1f}% |"
                     f"{cells} {r['predicted_grpc_lockstep_eps']:.2f} | {r['error_grpc_lockstep'] * 100:+.1f}% | "
                     f"{r['lin_async_eps']:.2f} | {r['cynthia_eps']:.2f} | {r['outside_load_cores']:.2f}"
                     f"{' (flagged)' if r['loaded_runs'] else ''} |")
    lines.extend(_packet_lines(frame))
    lines.extend(_transport_lines(frame))
    lines.extend(_timeline_lines(frame))
    write_text(out_dir / "results.md", "\n".join(lines) + "\n")

    plt = pyplot()
    for setting, group in frame.groupby("setting", sort=False):
        fig, ax = plt.subplots(figsize=(6, 3.8), dpi=120)
        ax.errorbar(group["workers"], group["measured_eps"],
                    yerr=[group["measured_eps"] - group["measured_min_eps"],
                          group["measured_max_eps"] - group["measured_eps"]],
                    fmt="ks", capsize=3, label="measured (mean, min..max)")
        line, = ax.plot(group["workers"], group["predicted_grpc_eps"], "o-", label="tfsim (grpc, mean and range of "
                                                                                  "its replicas)")
        ax.fill_between(group["workers"], group["predicted_grpc_min_eps"], group["predicted_grpc_max_eps"],
                        color=line.get_color(), alpha=0.15, linewidth=0)
        if group["predicted_packet_eps"].notna().any():
            ax.plot(group["workers"], group["predicted_packet_eps"], "D-", label="tfsim (packet, ns-3)")
        ax.plot(group["workers"], group["predicted_http2_eps"], "o-.", label="tfsim (http2)")
        ax.plot(group["workers"], group["predicted_grpc_lockstep_eps"], "v:", label="tfsim (grpc, lock step)")
        ax.plot(group["workers"], group["predicted_fifo_eps"], "o--", label="tfsim (fifo)")
        ax.plot(group["workers"], group["lin_async_eps"], ":", label="Lin et al.")
        ax.plot(group["workers"], group["cynthia_eps"], ":", label="Cynthia")
        ax.set_xlabel("workers W")
        finish_throughput_axes(fig, ax, str(setting), legend_fontsize=7)
        save_figure(fig, out_dir / f"{setting}.png")
    write_json(out_dir / "results.json", {"format": "tfsim.lab/2", "preset": preset, "machine": machine_text(),
                                          "rows": json_ready(frame.to_dict(orient="records"))})


def check_model_fn(model_fn: str) -> None:
    """Import ``module:function`` the way the task processes will (a child Python with the
    project and the current directory on its path), so that a bad name fails before any
    cluster is built. Raises :class:`~tfbase.errors.UsageError` naming ``model_fn``."""
    import subprocess

    module, _, function = model_fn.partition(":")
    if not module or not function.isidentifier():
        raise UsageError("model_fn", f"{model_fn!r} is not of the form MODULE:FUNCTION")
    code = ("import importlib, sys\n"
            "m = importlib.import_module(sys.argv[1])\n"
            "f = getattr(m, sys.argv[2], None)\n"
            "sys.exit(0 if callable(f) else 3)\n")
    env = task_environment()
    result = subprocess.run([sys.executable, "-c", code, module, function], env=env, capture_output=True, text=True,
                            timeout=300)
    if result.returncode == 3:
        raise UsageError("model_fn", f"module {module!r} has no function {function!r}")
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["it failed"])[-1]
        raise UsageError("model_fn", f"cannot import {module!r}: {last}")


def task_environment() -> dict[str, str]:
    """The environment the lab's task processes start with: the project and the current
    directory on PYTHONPATH (so that ``--model-fn mymodels:build`` finds ``./mymodels.py``)."""
    project_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [project_root, os.getcwd(), env.get("PYTHONPATH", "")]))
    return env


def run_lab(settings: Sequence[LabSetting], out_dir: Path, *, label: str, progress: bool = True, repeat: int = 3,
            rerun_loaded: bool = True, fork_server: bool = True) -> list[dict]:
    """Run ``settings`` one after the other; results are rewritten after each setting.

    ``fork_server``: fork every task from a process that has imported TensorFlow once per task
    environment (:mod:`tfprofile.harness.fork_server`) instead of starting it from nothing: each
    run skips its tasks' import, seconds of CPU each under their hosts' quotas."""
    require_lab_tools()
    if not 1 <= repeat <= MAX_REPEAT:
        raise UsageError("repeat", f"must be between 1 and {MAX_REPEAT}, not {repeat}")
    if not settings:
        raise UsageError("only", "no setting to run")
    for setting in settings:  # every setting's hosts and model are checked before the first is run
        setting.quotas()
    for model_fn in dict.fromkeys(s.model_fn for s in settings if s.model_fn):
        check_model_fn(model_fn)
    os.environ["PYTHONPATH"] = task_environment()["PYTHONPATH"]
    started = time.monotonic()
    rows: list[dict] = []
    with ForkServers() if fork_server else contextlib.nullcontext() as fork_servers:
        for setting in settings:
            rows.extend(run_setting(setting, out_dir / setting.name, progress=progress, repeat=repeat,
                                    rerun_loaded=rerun_loaded, fork_servers=fork_servers))
            write_results(rows, out_dir, preset=label, elapsed_s=time.monotonic() - started)
    return rows


MAX_REPEAT = 50
DEFAULT_BATCH = 32  # as tfsim collect's
SETTINGS_LIMIT = 1 << 20  # a settings file is a few lines: 1 MiB is far beyond any matrix
SETTING_KEYS = {f.name for f in dataclasses.fields(LabSetting)}


def read_settings(path: Path) -> list[LabSetting]:
    """A whole matrix from a TOML file: one ``[[setting]]`` table per setting, with the fields
    of :class:`LabSetting` (``rate`` as text such as ``"400mbit"`` in place of ``rate_bit``,
    ``workers`` as ``"1-6"`` or a list). Errors name the file and the setting."""
    import tomllib

    try:
        document = tomllib.loads(read_input(path, limit=SETTINGS_LIMIT, what="settings file",
                                            gunzip=False).decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(path, "is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as err:
        raise InputError(path, f"is not TOML: {err}") from None
    tables = document.get("setting")
    if not isinstance(tables, list) or not tables:
        raise InputError(path, "has no [[setting]] table")
    settings = []
    for k, table in enumerate(tables, start=1):
        where = f"setting {k}"
        try:
            values = dict(table)
            if "rate" in values:
                values["rate_bit"] = int(parse_rate(str(values.pop("rate")), "rate") * 8)
            if "workers" in values:
                w = values["workers"]
                values["workers"] = tuple(parse_workers(w) if isinstance(w, str) else [int(x) for x in w])
            if "batch" in values:
                values["batch_size"] = values.pop("batch")
            if "ps" in values:
                values["ps_tasks"] = values.pop("ps")
            unknown = set(values) - SETTING_KEYS
            if unknown:
                raise UsageError("settings", f"unknown key(s) {', '.join(sorted(unknown))}")
            values.setdefault("batch_size", DEFAULT_BATCH)
            values.setdefault("model", values.get("model_fn", "tiny").split(":")[-1] if values.get("model_fn")
                              else "tiny")
            values.setdefault("name", f"{values['model']}-{values.get('rate_bit', 0) // 1_000_000}mbit")
            settings.append(LabSetting(**values))
        except (TypeError, ValueError) as err:
            raise InputError(path, f"{where}: {err}") from None
        except InputError as err:
            raise InputError(path, f"{where}: {err}") from None
    names = [s.name for s in settings]
    if len(set(names)) != len(names):
        raise InputError(path, "two settings have the same name")
    return settings
