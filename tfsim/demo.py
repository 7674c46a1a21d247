"""``tfsim demo``: the pipeline on the bundled real data, no TensorFlow and no network needed.

It summarises every bundled profile, then writes the report (:mod:`tfsim.report`) on the
main model: its throughput over W with each transfer ordering (HTTP/2 as gRPC does it, FIFO
with flow control off, TicTac's TIC and TAC orders, random orders), the coarse analytical
baselines beside it, and Gantt pictures of simulated steps. Everything goes to one directory,
its files planned before any work and committed together at the end (:mod:`tfbase.fileio`):
the report page and its JSON and CSV, the profile summaries, the plots and the findings in a
few lines.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from simulate.orderings import TRANSFER_MODELS
from tfbase.errors import InputError
from tfbase.figures import save_figure
from tfbase.fileio import OutputDirectory, Outputs, atomic_output, write_json, write_text
from tfbase.units import format_rate
from tfprofile.profile_io import load_profile
from tfprofile.summary import summarize
from tfsim.plots import throughput_figure
from tfsim.prediction import format_table
from tfsim.report import ReportRequest, make_report, say_on_stderr
from tfsim.report.advice import headline, order_advice
from tfsim.report.outputs import plan_report_files

MAIN_MODEL = "resnet50"
DEMO_WORKERS = (1, 2, 3, 4, 6, 8)  # well past resnet50's saturation point; under a minute with every order
DEMO_BANDWIDTH = "1gbit"
DEMO_FILES = (("profiles.csv", False), ("throughput.png", True), ("baselines.png", True), ("findings.txt", False),
              ("demo.json", False))


def project_data_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "data"


def find_cluster(data: Path):
    """The bundled calibration to predict with, or None (then a bandwidth-only cluster is used)."""
    clusters = sorted((data / "clusters").glob("*.json")) if (data / "clusters").is_dir() else []
    preferred = [p for p in clusters if "1gbit" in p.name] or clusters
    return preferred[0] if preferred else None


def summarise_profiles(paths: list[Path]):
    """One row per bundled profile: size of the DAG, bytes per step, step time, critical path."""
    import pandas as pd

    rows = []
    for path in paths:
        s = summarize(load_profile(path))
        rows.append({"profile": path.stem, "model": s["model"], "batch": s["batch_size"], "ops": s["ops"],
                     "transfers": s["transfers"], "MB_down_per_step": s["bytes_downlink"] / 1e6,
                     "MB_up_per_step": s["bytes_uplink"] / 1e6, "step_time_ms": s["step_time_s"]["median"] * 1e3,
                     "critical_path_ms": s["critical_path_median_s"] * 1e3})
    return pd.DataFrame(rows)


def plan_demo_files(directory: OutputDirectory) -> None:
    """Plan the demo's files in ``directory``: the report's, then its own."""
    plan_report_files(directory)
    for name, binary in DEMO_FILES:
        directory.file(name, binary=binary)


def _order_finding(workers: int, policy: str, throughput_eps: float, reference_eps: float, reference: str) -> str:
    """findings.txt's line for one W: the best order one could enforce, against the reference order.

    Examples
    --------
    >>> _order_finding(2, "tic", 7.2, 6.93, "recorded")
    '- W =  2: enforcing tic gives 7.2 examples/s, +3.9% over the recorded order'
    >>> _order_finding(4, "tic", 7.7, 7.72, "recorded")
    '- W =  4: no enforced order beats the recorded order (7.7 examples/s; the best, tic, -0.3%)'
    """
    gain = throughput_eps / reference_eps - 1
    if gain > 0:
        return (f"- W = {workers:>2}: enforcing {policy} gives {throughput_eps:.1f} examples/s, {gain * 100:+.1f}% "
                f"over the {reference} order")
    return (f"- W = {workers:>2}: no enforced order beats the {reference} order ({reference_eps:.1f} examples/s; "
            f"the best, {policy}, {gain * 100:+.1f}%)")


def run_demo(out: Path | OutputDirectory, *, data: Path | None = None, steps: int = 400, jobs: int = 1,
             say: Callable[[str], None] = say_on_stderr, ready: Callable[[], None] = lambda: None,
             text=None, after_commit: list[str] | None = None) -> int:
    """Write the demo into ``out`` (the bundled data of ``data``, default: the project's
    ``data/``): the report on the main model, profile summaries, plots and findings. ``out`` is a
    path (committed here) or a planned :class:`~tfbase.fileio.OutputDirectory` (its run commits
    it, and prints the lines left in ``after_commit`` once it has); ``ready()`` is called once
    the inputs are checked; the tables go to ``text`` (default stdout). Returns 0."""
    if not isinstance(out, OutputDirectory):
        closing: list[str] = []
        with Outputs() as outputs:
            directory = outputs.directory(out, "demo directory")
            plan_demo_files(directory)
            run_demo(directory, data=data, steps=steps, jobs=jobs, say=say, ready=ready, text=text,
                     after_commit=closing)
            outputs.commit()
        print("\n".join(closing), file=text or sys.stdout)
        return 0
    started = time.monotonic()
    text = text or sys.stdout
    data = data or project_data_dir()
    profiles = sorted((data / "profiles").glob("*.npz"))
    if not profiles:
        raise InputError(data / "profiles", "holds no bundled profile (*.npz): is this a tfsim checkout?")

    say(f"[1/3] summarising {len(profiles)} bundled profiles from {data / 'profiles'}")
    summaries = summarise_profiles(profiles)
    main = MAIN_MODEL if MAIN_MODEL in summaries["profile"].tolist() else profiles[0].stem
    cluster_path = find_cluster(data)
    where = (f"calibrated cluster {cluster_path.name}" if cluster_path is not None else
             f"{DEMO_BANDWIDTH} links, uncalibrated (no parsing overhead, unlimited HTTP/2 window)")
    request = ReportRequest(profile_path=data / "profiles" / f"{main}.npz", cluster_path=cluster_path,
                            bandwidth=None if cluster_path is not None else DEMO_BANDWIDTH,
                            workers=",".join(map(str, DEMO_WORKERS)), steps=steps,
                            warmup=min(50, steps // 5), jobs=jobs, progress=True)

    def inputs_checked() -> None:
        ready()
        print(summaries.to_string(index=False, float_format=lambda x: f"{x:,.1f}"), file=text)
        say(f"[2/3] the report on {main}: W = {', '.join(map(str, DEMO_WORKERS))}, every transfer order, "
            f"on {where}")

    with atomic_output(out / "profiles.csv") as handle:
        summaries.to_csv(handle, index=False)
    report, page = make_report(request, out, say=lambda message: say("      " + message), ready=inputs_checked)
    frame, reference = report.frame, report.reference
    links = format_rate(report.cluster["bandwidth_Bps"]["downlink"])
    print(f"\n{main}, batch {report.batch_size}, on {links} links (* = saturation point):", file=text)
    print(format_table(frame[~frame["policy"].str.startswith("random#")]), file=text)
    ref = report.reference_policy
    order_ref = report.ordering_reference
    print(f"\neach order against the {order_ref} order, TensorFlow's own in the profiled run, and against the random "
          "orders' median (E: TicTac's scheduling efficiency at W = 1):", file=text)
    print(report.orderings.to_string(index=False, formatters={
        "efficiency_E": "{:.2f}".format, "throughput_Wmin_eps": "{:,.1f}".format,
        "throughput_Wmax_eps": "{:,.1f}".format, "mean_gain": "{:+.1%}".format, "best_gain": "{:+.1%}".format,
        "mean_gain_over_random": "{:+.1%}".format}), file=text)
    advice = order_advice(headline(report))
    if advice is not None:
        print(advice[1], file=text)
    print("\nbaselines (examples/s):", file=text)
    print(report.baselines.pivot(index="workers", columns="model", values="throughput_eps").to_string(
        float_format=lambda x: f"{x:,.1f}"), file=text)

    say("[3/3] plotting")
    save_figure(throughput_figure(frame, title=f"{main} (batch {report.batch_size}), {links} links: "
                                              "predicted throughput"), out / "throughput.png")
    save_figure(throughput_figure(reference, baselines=report.baselines,
                                  title=f"{main}: simulation vs coarse baselines"), out / "baselines.png")
    # Orders one could enforce (fifo, tic, tac): grpc and http2 are models of gRPC itself, recorded is the reference.
    enforceable = frame[~frame["policy"].str.startswith("random#")
                        & ~frame["policy"].isin((*TRANSFER_MODELS, order_ref))]
    recorded = frame[frame["policy"] == order_ref]
    best = enforceable.loc[enforceable.groupby("workers")["throughput_eps"].idxmax()]
    saturation = report.saturation_workers
    lines = [f"tfsim demo: {main} (batch {report.batch_size}) on {where}", "",
             f"- with the {ref} transfer model, throughput saturates at W = {saturation} "
             f"({reference[reference['workers'] == saturation]['throughput_eps'].iloc[0]:.1f} examples/s)"]
    for _, row in best.iterrows():
        base_thr = recorded[recorded["workers"] == row["workers"]]["throughput_eps"].iloc[0]
        lines.append(_order_finding(row["workers"], row["policy"], row["throughput_eps"], base_thr, order_ref))
    write_text(out / "findings.txt", "\n".join(lines) + "\n")
    write_json(out / "demo.json", {"format": "tfsim.demo/1", "model": main, "cluster": where,
                                   "workers": list(DEMO_WORKERS), "transfers": sorted(set(frame["policy"])),
                                   "steps": steps, "reference_transfer": ref,
                                   "saturation_workers": saturation})
    print("\n" + "\n".join(lines), file=text)
    closing = [f"\nwrote {out.shown}/ (report.html with report.json, prediction.csv/json, comparison.csv, "
               f"baselines.csv, orderings.csv; profiles.csv, throughput.png, baselines.png, findings.txt) in "
               f"{time.monotonic() - started:.0f} s", f"the report: {page}"]
    if after_commit is not None:
        after_commit.extend(closing)  # said once the files are in place
    else:
        print("\n".join(closing), file=text)
    return 0
