"""The report's figures as inline PNG (``data:`` URIs), so the page needs no other file.

PNGs are written without timestamps (:func:`tfbase.figures.figure_bytes`), so equal inputs give
an equal page.
"""

from __future__ import annotations

import base64
import dataclasses
import warnings

from tfbase.errors import InputError, TfsimWarning
from tfbase.figures import figure_bytes, finish_throughput_axes
from tfbase.units import format_rate
from tfsim.plots import throughput_figure
from tfsim.report.gantt import gantt_figure
from tfsim.report.stragglers import straggler_figure
from tfsim.report.timeline import timeline_figure

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclasses.dataclass(frozen=True)
class Figure:
    """One picture of the page: its ``data:`` URI and its caption."""

    key: str
    uri: str
    caption: str


def png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _render(fig) -> str:
    return png_uri(figure_bytes(fig, "png"))


def cost_figure(cost, *, title: str):
    """Throughput against cost per hour, one point per W, the Pareto front joined."""
    from tfbase.figures import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    ax.scatter(cost["usd_per_hour"], cost["throughput_eps"], color="#a0aec0", zorder=2, label="configurations")
    front = cost[cost["pareto"]].sort_values("usd_per_hour")
    ax.plot(front["usd_per_hour"], front["throughput_eps"], "o-", color="#2b6cb0", zorder=3,
            label="Pareto front (nothing beats them on both)")
    for _, row in cost.iterrows():
        ax.annotate(f"W={int(row['workers'])}", (row["usd_per_hour"], row["throughput_eps"]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("cost ($ per hour)")
    finish_throughput_axes(fig, ax, title)
    return fig


def report_figures(report) -> dict[str, Figure]:
    """Every figure of the page, by key: ``throughput``, ``orderings``, ``gantt_one``,
    ``gantt_many``, ``calibration_<name>`` for each calibration plot found, and ``timeline``
    with a measured timeline."""
    links = format_rate(report.cluster["bandwidth_Bps"]["downlink"])
    figures = {}
    figures["throughput"] = Figure(
        "throughput",
        _render(throughput_figure(report.reference, baselines=report.baselines, measured=report.measured,
                                  title=f"{report.model} (batch {report.batch_size}) on {links} links: "
                                        f"predicted throughput ({report.reference_policy}), baselines"
                                        + (" and measurements" if report.measured is not None else ""))),
        f"Predicted throughput against the number of workers W with the {report.reference_policy} transfer model. "
        "Band: 95% "
        "confidence interval; star: saturation point; dashed: the coarse analytical baselines"
        + ("; squares: measured." if report.measured is not None else "."))
    figures["orderings"] = Figure(
        "orderings",
        _render(throughput_figure(report.frame, title=f"{report.model}: predicted throughput per transfer order")),
        "The same sweep with each transfer model and order: " + ", ".join(
            name for name in dict.fromkeys(report.frame["policy"]) if not name.startswith("random#"))
        + ", and five random orders (their median and range).")
    for key, gantt in (("gantt_one", report.gantt_one), ("gantt_many", report.gantt_many)):
        w = gantt.workers
        figures[key] = Figure(
            key,
            _render(gantt_figure(gantt, title=f"{gantt.steps} simulated steps with {w} worker{'s' if w > 1 else ''} "
                                              f"({report.reference_policy})")),
            f"{gantt.steps} simulated steps per worker with W = {w}: one row per resource of each worker; dark and "
            "light shades alternate with the step; hatched: the worker's computation is idle while its transfers "
            "are on the wire.")
    for caption, path in report.calibration_plots:
        data = _read_png(path)
        if data is not None:
            key = f"calibration_{path.stem}"
            figures[key] = Figure(key, png_uri(data), caption + f" ({path.name})")
    if getattr(report, "timeline", None) is not None:
        figures["timeline"] = Figure(
            "timeline", _render(timeline_figure(report.timeline)),
            f"A few steps of the run with W = {report.timeline.workers}, captured at PS 0 (top), and of tfsim's "
            "simulation of it (bottom): per direction the link's busy time, and per worker and direction each "
            "tensor from its first to its last byte; dotted: worker 0's steps.")
    if report.cost is not None:
        figures["cost"] = Figure(
            "cost", _render(cost_figure(report.cost, title=f"{report.model}: throughput against cost "
                                                             f"({report.reference_policy})")),
            "Each W's predicted throughput against what its cluster costs per hour; the line joins the "
            "configurations that no other beats on both.")
    if report.stragglers is not None:
        figures["stragglers"] = Figure(
            "stragglers", _render(straggler_figure(report.stragglers, title=f"{report.model}: async and sync SGD "
                                                                              f"with stragglers "
                                                                              f"({report.reference_policy})")),
            "Predicted throughput against W in async and sync SGD, every worker at the profiled speed (solid) and "
            f"with the speeds {report.straggler_plan.text} (dashed).")
    return figures


def _read_png(path) -> bytes | None:
    """A calibration plot's bytes; None (with a warning) for a file that is not a PNG."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not data.startswith(PNG_SIGNATURE):
        warnings.warn(TfsimWarning(path, "is not a PNG image: left out of the report"), stacklevel=2)
        return None
    return data
