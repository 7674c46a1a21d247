"""The report page's section on a measured timeline (``tfsim report --timeline-run``): a few
steps, measured above simulated, and the tables of where the two differ
(:mod:`tfsim.report.timeline` computes them)."""

from __future__ import annotations

from tfbase.units import format_rate
from tfsim.report.html import esc, figure, num, pct, table

TENSOR_ROWS = 5  # the tensors shown: those whose last byte lands furthest apart


def _points(measured, simulated) -> str:
    """Simulated minus measured, in percentage points."""
    if measured is None or simulated is None:
        return "n/a"
    return num((float(simulated) - float(measured)) * 100, "+.1f")


def _wire_table(summary: dict) -> str:
    rows = []
    for row in summary["wire"]:
        label = "PS → workers" if row["direction"] == "down" else "workers → PS"
        m_used, s_used = row["measured_used_fraction"], row["simulated_used_fraction"]
        rows.append([esc(label), pct(m_used), pct(s_used), _points(m_used, s_used),
                     pct(row["measured_busy_fraction"]), pct(row["simulated_busy_fraction"]),
                     pct(row["measured_gaps_over_2ms_fraction"]), pct(row["simulated_gaps_over_2ms_fraction"])])
    return table(["direction", "used, measured", "used, simulated", "difference (points)", "busy, measured",
                  "busy, simulated", "idle gaps > 2 ms, measured", "idle gaps > 2 ms, simulated"], rows,
                 numeric=set(range(1, 8)))


def _step_table(summary: dict) -> str:
    step = summary["step_median_ms"]
    measured, simulated = step["measured"], step["simulated"]
    apart = (simulated / measured - 1) if measured and simulated is not None else None
    return table(["", "measured", "simulated", "simulated against measured"],
                 [["median step (ms)", num(measured, ",.1f"), num(simulated, ",.1f"), pct(apart, 1, True)]],
                 numeric={1, 2, 3})


def _tensor_table(summary: dict) -> str:
    rows = []
    for r in summary["tensors_most_apart"][:TENSOR_ROWS]:
        apart = (r["simulated_last_ms"] - r["measured_last_ms"]
                 if r["simulated_last_ms"] is not None and r["measured_last_ms"] is not None else None)
        rows.append([f"<code>{esc(r['tensor'])}</code>", esc(r["direction"]),
                     num(r["measured_request_ms"], ",.1f"), num(r["measured_first_ms"], ",.1f"),
                     num(r["simulated_first_ms"], ",.1f"), num(r["measured_last_ms"], ",.1f"),
                     num(r["simulated_last_ms"], ",.1f"), num(apart, "+,.1f")])
    return table(["tensor", "direction", "requested, measured", "first byte, measured", "first byte, simulated",
                  "last byte, measured", "last byte, simulated", "last byte apart"], rows,
                 numeric=set(range(2, 8)))


def timeline_section(report, figures: dict) -> str:
    """The section, or ``""`` for a report without ``--timeline-run``."""
    timeline = getattr(report, "timeline", None)
    if timeline is None:
        return ""
    summary = timeline.summary()
    w = summary["workers"]
    return "\n".join([
        f"<h2>Measured beside simulated: the run of W = {w}</h2>",
        f'<p class="note">The run <code>{esc(timeline.run_dir)}</code>, captured at PS 0 while {w} workers '
        f"trained, beside tfsim's <code>grpc</code> simulation of the same W with this page's profile, cluster and "
        "hosts; both compared over the last half of their steps. A captured packet occupies the link for its "
        f"wire bytes at {esc(format_rate(timeline.rate_Bps))} (the cluster's sustained rate with the frames' "
        "headers). Used: the payload moved over what the link sustains, counted alike in both; busy: the time "
        "any transfer was on the link (reads low on a loaded measured link).</p>",
        figure(figures["timeline"], alt="measured and simulated timeline"),
        "<h3>The PS's link</h3>",
        _wire_table(summary),
        _step_table(summary),
        "<h3>The tensors whose timing differs most</h3>",
        '<p class="note">Median times in ms from the step\'s start over the compared steps, per tensor and '
        "direction (down: a variable fetched from the PS, up: a gradient sent to it); sorted by how far the last "
        "byte lands apart.</p>",
        _tensor_table(summary),
        '<p class="note">Both runs, every tensor of every worker, are in <code>timeline.trace.json</code> beside '
        "this page: open it in Perfetto (ui.perfetto.dev) or chrome://tracing.</p>",
    ])
