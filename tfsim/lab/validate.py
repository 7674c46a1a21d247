"""``tfsim lab``: measure real W-worker throughput on emulated clusters and publish the prediction error.

For each setting (a model, a link rate, optionally 2 PS or a pinned HTTP/2 window), in an
emulated cluster on this machine (:mod:`tfsim.lab.netns`):

1. profile the job with 1 PS (or M) and 1 worker, with iperf3 and a capture;
2. calibrate (``tfsim calibrate``) and build the profile (``tfsim profile``);
3. predict W = 1..K, with every task on this machine's cores (the co-location model of docs/model.md §4.3,
   since PS and workers share them), with the ``grpc`` (today's gRPC, the default for TF 2.x),
   ``http2`` (ICPE's model) and ``fifo`` transfer models, and the coarse baselines;
   The ``grpc`` prediction is also given with every worker starting at once (lock step):
   workers that start together may stay in step, and the real job lands between the two;
4. run the real job with W = 1..K workers and measure its throughput: each worker's
   time-average over the last half of its steps, summed (ICPE §4.1);
5. tabulate measured against predicted, with the relative error.

Every TensorFlow process runs with one intra-op and one inter-op thread (the machine has
few cores; the model needs one op at a time per task).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from calibration.calibrate import calibrate_run
from calibration.plots import overhead_figure, stream_timeline_figure
from simulate.cluster_file import load_cluster, save_cluster
from simulate.coarse import baselines
from simulate.sweep import predict
from simulate.untrace import fit_computation_scale, scale_computation
from tfbase.figures import pyplot, save_figure
from tfbase.fileio import atomic_output, write_json, write_text
from tfbase.machine import machine_description
from tfprofile.harness.launcher import CollectConfig
from tfprofile.profile_io import save_profile
from tfprofile.rundir import profile_from_run_dir
from tfsim.lab.collect import collect_in_lab
from tfsim.lab.measure import measured_throughput
from tfsim.lab.netns import require_lab_tools


@dataclasses.dataclass(frozen=True)
class LabSetting:
    """One row group of the validation matrix."""

    name: str
    model: str
    batch_size: int
    rate_bit: int
    image_size: int = 0
    workers: tuple[int, ...] = (1, 2, 3, 4)
    ps_tasks: int = 1
    grpc_options: str | None = None
    profile_steps: int = 10
    measure_steps: int = 20
    warmup_steps: int = 3

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return (("TF_GRPC_DEFAULT_OPTIONS", self.grpc_options),) if self.grpc_options else ()


SMALL_WINDOW = "grpc.http2.bdp_probe=0,grpc.http2.lookahead_bytes=65535"

PRESETS: dict[str, tuple[LabSetting, ...]] = {
    "quick": (
        LabSetting("tiny-100mbit", "tiny", 32, 100_000_000, workers=(1, 2), profile_steps=6, measure_steps=12,
                   warmup_steps=2),
    ),
    # Three models whose traffic spans three orders of magnitude (0.5, 30 and 100 MB per step and
    # direction), each at two link rates where its transfers and its computation take comparable
    # time on this machine; a pinned small window; two PS. About 30 minutes here.
    "matrix": (
        LabSetting("tiny-100mbit", "tiny", 32, 100_000_000, profile_steps=8, measure_steps=24, warmup_steps=3),
        LabSetting("tiny-50mbit", "tiny", 32, 50_000_000, profile_steps=8, measure_steps=24, warmup_steps=3),
        LabSetting("wide_mlp-1gbit", "wide_mlp", 16, 1_000_000_000, profile_steps=8, measure_steps=16,
                   warmup_steps=2),
        LabSetting("wide_mlp-500mbit", "wide_mlp", 16, 500_000_000, profile_steps=8, measure_steps=14,
                   warmup_steps=2),
        LabSetting("resnet50-2gbit", "resnet50", 4, 2_000_000_000, image_size=32, profile_steps=6,
                   measure_steps=10, warmup_steps=2),
        LabSetting("resnet50-1gbit", "resnet50", 4, 1_000_000_000, image_size=32, profile_steps=6,
                   measure_steps=10, warmup_steps=2),
        LabSetting("wide_mlp-1gbit-smallwin", "wide_mlp", 16, 1_000_000_000, profile_steps=8, measure_steps=12,
                   warmup_steps=2, grpc_options=SMALL_WINDOW),
        LabSetting("wide_mlp-1gbit-2ps", "wide_mlp", 16, 1_000_000_000, profile_steps=8, measure_steps=16,
                   warmup_steps=2, ps_tasks=2),
    ),
}

TRANSFER_MODELS = ("grpc", "http2", "fifo")  # the first is the headline: the default for TF 2.x clusters
RESULT_COLUMNS = ("setting", "model", "batch", "rate_mbit", "ps", "window", "workers", "measured_eps",
                  *(f"predicted_{m}_eps" for m in TRANSFER_MODELS), *(f"error_{m}" for m in TRANSFER_MODELS),
                  "predicted_grpc_lockstep_eps", "error_grpc_lockstep",
                  "lin_async_eps", "cynthia_eps", "measured_step_s", "computation_scale",
                  *(f"calibration_{m}_median_error" for m in TRANSFER_MODELS))


def _say(message: str) -> None:
    print(f"tfsim lab: {message}", file=sys.stderr, flush=True)


def _collect(setting: LabSetting, out: Path, *, workers: int, steps: int, capture: bool, progress: bool) -> Path:

    config = CollectConfig(
        out_dir=out, model=setting.model, batch_size=setting.batch_size, image_size=setting.image_size,
        steps=steps, warmup_steps=setting.warmup_steps,
        # The profiling run traces every other step: the untraced ones measure what tracing costs
        # (:func:`untraced_step_s`); measuring runs trace one step only.
        trace_every=2 if capture else steps + 1,
        workers=workers, ps_tasks=setting.ps_tasks, intra_op_threads=1, inter_op_threads=1, capture=capture,
        zero_init=True, env=setting.env, iperf_repeats=3, iperf_seconds=2.0, timeout_s=1200.0,
    )
    return collect_in_lab(config, setting.rate_bit, progress=progress, overwrite=True)


def untraced_step_s(run_dir: Path) -> float | None:
    """Median wall time of the run's measured steps that were not traced, or None."""

    with open(run_dir / "step_times.csv", newline="") as handle:
        walls = [float(r["wall_s"]) for r in csv.DictReader(handle) if r["measured"] == "1" and r["traced"] == "0"]
    return float(sorted(walls)[len(walls) // 2]) if walls else None


def lockstep_predictions(profile, cluster, workers, *, cores: float, steps: int) -> dict[int, float]:
    """``grpc`` throughput per W with every worker starting at once (``stagger=0``): workers that
    stay in lock step, the other end of the range from the default's staggered starts."""

    frame = predict(profile, cluster, workers=workers, transfer="grpc", cores=cores, steps=steps,
                    warmup=min(50, steps // 5), stagger=0.0, jobs=1)
    return {int(w): float(t) for w, t in zip(frame["workers"], frame["throughput_eps"])}


def run_setting(setting: LabSetting, out_dir: Path, *, progress: bool = True, predict_steps: int = 400,
                cores: float | None = None) -> list[dict]:
    """Profile, calibrate, predict and measure one setting; return its result rows."""

    cores = cores or float(os.cpu_count() or 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    _say(f"[{setting.name}] profiling with {setting.ps_tasks} PS and 1 worker (capture + iperf3)")
    run_dir = _collect(setting, out_dir / "profile-run", workers=1, steps=setting.profile_steps, capture=True,
                       progress=progress)
    calibration = calibrate_run(run_dir)
    document = calibration.to_cluster_json()
    save_cluster(document, out_dir / "CLUSTER.json")

    save_figure(overhead_figure(calibration), out_dir / "overhead.png")
    save_figure(stream_timeline_figure(calibration), out_dir / "streams.png")
    profile = profile_from_run_dir(run_dir)
    cluster = load_cluster(out_dir / "CLUSTER.json")
    target = untraced_step_s(run_dir)
    scale = fit_computation_scale(profile, cluster, target) if target else 1.0
    profile = scale_computation(profile, scale)
    _say(f"[{setting.name}] computation scaled by {scale:.3f} to match the untraced step time "
         f"({target * 1e3 if target else float('nan'):.1f} ms): tracing's own cost")
    save_profile(profile, out_dir / "profile.npz")
    # The capture is big and fully summarised in CLUSTER.json: do not keep it.
    for capture in run_dir.glob("capture.pcap*"):
        capture.unlink()

    _say(f"[{setting.name}] predicting W = {', '.join(map(str, setting.workers))}")
    frame = predict(profile, cluster, workers=setting.workers, transfer=list(TRANSFER_MODELS), cores=cores,
                    steps=predict_steps, warmup=min(50, predict_steps // 5), jobs=1)
    lockstep = lockstep_predictions(profile, cluster, setting.workers, cores=cores, steps=predict_steps)
    base = baselines(profile, cluster, setting.workers, "async")
    rows = []
    for w in setting.workers:
        _say(f"[{setting.name}] measuring the real job with {w} worker(s)")
        measure_dir = out_dir / f"measure-w{w}"
        _collect(setting, measure_dir, workers=w, steps=setting.measure_steps, capture=False, progress=progress)
        measured = measured_throughput(measure_dir)
        shutil.rmtree(measure_dir / "trace", ignore_errors=True)
        shutil.rmtree(measure_dir / "logs", ignore_errors=True)
        predicted = {p: float(frame[(frame["workers"] == w) & (frame["policy"] == p)]["throughput_eps"].iloc[0])
                     for p in TRANSFER_MODELS}
        base_w = base[base["workers"] == w].set_index("model")["throughput_eps"]
        predicted_lockstep = lockstep[w]
        rows.append({
            "setting": setting.name, "model": setting.model, "batch": setting.batch_size,
            "rate_mbit": setting.rate_bit / 1e6, "ps": setting.ps_tasks,
            "window": "65535 (pinned)" if setting.grpc_options else "default", "workers": w,
            "measured_eps": measured["throughput_eps"],
            **{f"predicted_{m}_eps": predicted[m] for m in TRANSFER_MODELS},
            **{f"error_{m}": predicted[m] / measured["throughput_eps"] - 1 for m in TRANSFER_MODELS},
            "predicted_grpc_lockstep_eps": predicted_lockstep,
            "error_grpc_lockstep": predicted_lockstep / measured["throughput_eps"] - 1,
            "lin_async_eps": float(base_w.get("lin-async", math.nan)),
            "cynthia_eps": float(base_w.get("cynthia", math.nan)),
            "measured_step_s": measured["step_time_median_s"], "computation_scale": scale,
            **{f"calibration_{m}_median_error": document["transfer_model_error"].get(m, {}).get("all", {}).get("median")
               for m in TRANSFER_MODELS},
        })
    return rows


def machine_text() -> str:

    m = machine_description()
    return f"{m['cpu']}, {m['cores']} cores, Linux {m['kernel']}"


MEAN_ERROR_BAR, MAX_ERROR_BAR = 0.10, 0.20  # the validation's bars, on the default (grpc) model


def _bar_lines(frame) -> list[str]:
    """Which settings miss the bars (mean |error| <= 10% over the matrix, every row <= 20%)."""
    errors = frame["error_grpc"].abs()
    lines = [f"bars (grpc model): mean |error| {errors.mean() * 100:.1f}% "
             f"({'met' if errors.mean() <= MEAN_ERROR_BAR else 'missed'}: <= {MEAN_ERROR_BAR:.0%}); "
             f"rows over {MAX_ERROR_BAR:.0%}: {int((errors > MAX_ERROR_BAR).sum())} of {len(errors)}"]
    for setting, group in frame.groupby("setting", sort=False):
        worst = group.loc[group["error_grpc"].abs().idxmax()]
        if abs(worst["error_grpc"]) > MAX_ERROR_BAR or group["error_grpc"].abs().mean() > MEAN_ERROR_BAR:
            lines.append(f"- {setting} misses a bar: mean |error| {group['error_grpc'].abs().mean() * 100:.1f}%, "
                         f"worst {worst['error_grpc'] * 100:+.1f}% at W = {int(worst['workers'])}")
    return lines


def write_results(rows: Sequence[dict], out_dir: Path, *, preset: str, elapsed_s: float) -> None:
    """results.csv, results.md and one plot per setting (measured vs predicted over W)."""
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    with atomic_output(out_dir / "results.csv") as handle:
        frame.to_csv(handle, index=False, float_format="%.6g")
    grpc_err, http2_err = frame["error_grpc"].abs(), frame["error_http2"].abs()
    lines = [
        f"# tfsim lab results ({preset})", "",
        f"- date: {time.strftime('%Y-%m-%d')}", f"- machine: {machine_text()}",
        "- every task (PS and workers) in its own network namespace on one bridge, links shaped with tbf; "
        "all tasks share this machine's cores; 1 intra-op and 1 inter-op thread per task",
        "- measured: each worker's time-average over the last half of its steps, summed (ICPE §4.1)",
        "- predicted: tfsim's simulation with the co-location model (all tasks on one host's cores)",
        f"- wall time of the whole run: {elapsed_s / 60:.1f} min", "",
        f"mean |error| (grpc model, the default): {grpc_err.mean() * 100:.1f}%, max {grpc_err.max() * 100:.1f}%; "
        f"(http2 model): {http2_err.mean() * 100:.1f}%, max {http2_err.max() * 100:.1f}%", "",
        *_bar_lines(frame), "",
        "| setting | W | measured (ex/s) | predicted grpc | error | predicted http2 | error | predicted fifo | error "
        "| grpc, lock step | error | Lin et al. | Cynthia |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for _, r in frame.iterrows():
        cells = "".join(f" {r[f'predicted_{m}_eps']:.2f} | {r[f'error_{m}'] * 100:+.1f}% |" for m in TRANSFER_MODELS)
        lines.append(f"| {r['setting']} | {r['workers']} | {r['measured_eps']:.2f} |{cells} "
                     f"{r['predicted_grpc_lockstep_eps']:.2f} | {r['error_grpc_lockstep'] * 100:+.1f}% | "
                     f"{r['lin_async_eps']:.2f} | {r['cynthia_eps']:.2f} |")
    write_text(out_dir / "results.md", "\n".join(lines) + "\n")

    plt = pyplot()
    for setting, group in frame.groupby("setting", sort=False):
        fig, ax = plt.subplots(figsize=(6, 3.8), dpi=120)
        ax.plot(group["workers"], group["measured_eps"], "ks", label="measured")
        ax.plot(group["workers"], group["predicted_grpc_eps"], "o-", label="tfsim (grpc)")
        ax.plot(group["workers"], group["predicted_http2_eps"], "o-.", label="tfsim (http2)")
        ax.plot(group["workers"], group["predicted_grpc_lockstep_eps"], "v:", label="tfsim (grpc, lock step)")
        ax.plot(group["workers"], group["predicted_fifo_eps"], "o--", label="tfsim (fifo)")
        ax.plot(group["workers"], group["lin_async_eps"], ":", label="Lin et al.")
        ax.plot(group["workers"], group["cynthia_eps"], ":", label="Cynthia")
        ax.set_xlabel("workers W")
        ax.set_ylabel("throughput (examples/s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.set_title(str(setting), fontsize=10)
        ax.legend(fontsize=7)
        fig.tight_layout()
        save_figure(fig, out_dir / f"{setting}.png")
    write_json(out_dir / "results.json", {"format": "tfsim.lab/1", "preset": preset, "machine": machine_text(),
                                          "rows": frame.to_dict(orient="records")})


def run_lab(preset: str, out_dir: Path, *, progress: bool = True, only: Sequence[str] = ()) -> list[dict]:

    require_lab_tools()
    settings = [s for s in PRESETS[preset] if not only or s.name in only]
    started = time.monotonic()
    rows: list[dict] = []
    for setting in settings:
        rows.extend(run_setting(setting, out_dir / setting.name, progress=progress))
        write_results(rows, out_dir, preset=preset, elapsed_s=time.monotonic() - started)
    return rows
