"""The report's measured timeline (``tfsim report --timeline-run RUN_DIR``).

A W-worker run captured at PS 0 (``tfsim collect --capture --capture-at ps``; on a real
cluster with PS 0's capture copied into the run directory: docs/formats.md §2.7) laid beside tfsim's ``grpc``
simulation of the same W with the report's profile, cluster and hosts
(:func:`tfsim.lab.timeline_view.timeline_view`, docs/formats.md §10.1). This module checks the
run directory before anything is simulated, builds the view, and gives what the report shows
of it: its numbers for ``report.json``, its figure and its Chrome trace
(``timeline.trace.json`` beside the page). :mod:`tfsim.report.timeline_page` draws the section.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tfbase.fileio import json_ready

TIMELINE_TRACE = "timeline.trace.json"
# A full Ethernet frame carries 1448 bytes of TCP payload (MSS with timestamps) in 1514 bytes on
# the wire: the cluster's bandwidths are payload rates, the capture's busy time counts wire bytes.
FRAME_WIRE_BYTES, FRAME_PAYLOAD_BYTES = 1514, 1448


@dataclasses.dataclass(frozen=True, eq=False)
class MeasuredTimeline:
    """The view of one captured run: where it came from, the link's wire rate it was read at
    and the sustained payload rates the used fractions are of, and the
    :class:`~tfsim.lab.timeline_view.TimelineView`."""

    run_dir: Path
    rate_Bps: float
    capacity_Bps: dict
    view: object

    @property
    def workers(self) -> int:
        return self.view.workers

    def summary(self) -> dict:
        """The view's summary (:meth:`~tfsim.lab.timeline_view.TimelineView.summary`), JSON-ready."""
        return json_ready(self.view.summary())

    def document(self) -> dict:
        """``report.json``'s ``timeline``: the run, the rates, and the view's summary and fractions."""
        return json_ready({
            "run": str(self.run_dir), "rate_Bps": self.rate_Bps, "capacity_Bps": self.capacity_Bps,
            "trace": TIMELINE_TRACE, "used_fractions": self.view.used_fractions(),
            "busy_fractions": self.view.busy_fractions(),
            **self.view.summary()})

    def trace_text(self) -> str:
        """The Chrome trace of both runs, compact (a W = 4 trace indented is tens of MB)."""
        return json.dumps(json_ready(self.view.chrome_trace()), separators=(",", ":"), allow_nan=False)


def check_timeline_run(run_dir: Path) -> Path:
    """Check ``run_dir`` holds a W-worker run captured at PS 0; return its capture.

    Raises :class:`~tfbase.errors.InputError` naming the directory and what is missing, before
    the report simulates anything.
    """
    from tfsim.lab.timeline_view import ps_capture_of

    return ps_capture_of(run_dir)


def wire_rate_Bps(cluster) -> float:
    """The rate on the wire, in bytes/s, at which a captured packet occupies the PS's link: the
    faster direction's sustained payload rate (:func:`~tfsim.lab.timeline_view.sustained_capacity_Bps`)
    with the frame's headers added."""
    from tfsim.lab.timeline_view import sustained_capacity_Bps

    return max(sustained_capacity_Bps(cluster).values()) * FRAME_WIRE_BYTES / FRAME_PAYLOAD_BYTES


def build_timeline(run_dir: Path, profile, cluster, *, cores: float | None, colocation, seed: int,
                   tie_order="index") -> MeasuredTimeline:
    """The measured timeline of ``run_dir`` beside the simulation of the same W with ``profile``
    on ``cluster`` and the report's hosts (``cores``, ``colocation``), seed and tie order."""
    from tfsim.lab.timeline_view import sustained_capacity_Bps, timeline_view

    rate = wire_rate_Bps(cluster)
    view = timeline_view(run_dir, profile, cluster, rate_Bps=rate, cores=cores, colocation=colocation, seed=seed,
                         tie_order=tie_order)
    return MeasuredTimeline(Path(run_dir), rate, sustained_capacity_Bps(cluster), view)


def timeline_figure(timeline: MeasuredTimeline):
    """The figure the page shows: a few steps, measured above simulated."""
    return timeline.view.figure()
