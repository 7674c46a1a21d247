"""Write the report: the page and, beside it, its numbers as JSON and CSV.

The files are planned before anything is computed (:func:`plan_report_files`), staged as the
run goes, and committed together at its end, ``report.html`` last: a failed or interrupted
run leaves none of them, and a page always has its numbers beside it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tfbase.fileio import OutputDirectory, Outputs, atomic_output, write_json, write_text
from tfsim import __version__
from tfsim.prediction import ordering_records
from tfsim.report.stragglers import straggler_document
from tfsim.report.timeline import TIMELINE_TRACE

REPORT_FORMAT = "tfsim.report/1"


def _records(frame) -> list[dict]:
    """A DataFrame as JSON records, non-finite numbers as null (JSON has no NaN)."""
    rows = json.loads(frame.to_json(orient="records"))
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()} for row in rows]


def report_document(report, numbers: dict, advice: list[str]) -> dict:
    """``report.json``: every number the page shows."""
    request = report.request
    return {
        "format": REPORT_FORMAT,
        "tfsim": __version__,
        "inputs": {"profile": str(request.profile_path),
                   "cluster": None if request.cluster_path is None else str(request.cluster_path),
                   "bandwidth": request.bandwidth, "measured": None if request.measured_path is None
                   else str(request.measured_path), "setting": request.setting, "workers": request.workers,
                   "steps": request.steps, "warmup": request.warmup, "seed": request.seed,
                   "replicas": request.replicas, "mode": request.mode,
                   "cores": request.cores, "ps_cores": request.ps_cores, "worker_cores": request.worker_cores,
                   "price": request.price, "examples": request.examples,
                   "timeline_run": None if request.timeline_run is None else str(request.timeline_run),
                   "worker_speed": request.worker_speed, "latency": request.latency,
                   "enforcement": request.enforcement.value, "tie_order": request.tie_order.value,
                   "command": request.command_line()},
        "headline": numbers,
        "recommendation": advice,
        "cluster": report.cluster,
        "job": report.job,
        "prediction": report.prediction,
        # The order table under each enforcement (the request's is also prediction.orderings), at full
        # precision, as tfsim predict --enforcement E --json states it.
        "orderings_by_enforcement": {e.value: ordering_records(summary)
                                     for e, summary in report.orderings_by_enforcement.items()},
        "strict_refused": list(report.strict_refused),
        "baselines": _records(report.baselines),
        "comparison": _records(report.comparison),
        "measured": None if report.measured is None else _records(report.measured),
        "gantt": {"one_worker": report.gantt_one.stats(), "many_workers": report.gantt_many.stats()},
        "calibration_plots": [str(path) for _, path in report.calibration_plots],
        "cost": None if report.cost is None else _records(report.cost),
        "timeline": None if report.timeline is None else report.timeline.document(),
        "stragglers": None if report.stragglers is None
        else straggler_document(report.straggler_plan, report.stragglers),
    }


REPORT_FILES = ("report.json", "prediction.json", "prediction.csv", "comparison.csv", "baselines.csv",
                "orderings.csv", "report.html")  # in the order they are committed: the page last


def plan_report_files(directory: OutputDirectory, *, timeline: bool = False) -> None:
    """Plan the report's files in ``directory`` (checked and staged before any work); with
    ``timeline``, the measured timeline's trace too, before the page."""
    names = list(REPORT_FILES)
    if timeline:
        names.insert(names.index("report.html"), TIMELINE_TRACE)
    for name in names:
        directory.file(name)


def _write_csv(path, frame) -> None:
    with atomic_output(path) as handle:
        frame.to_csv(handle, index=False, float_format="%.9g")


def write_report(out_dir: Path | OutputDirectory, report, page: str, document: dict) -> Path:
    """Write the files into ``out_dir``, a planned :class:`~tfbase.fileio.OutputDirectory` (its
    run commits them) or a path (created if needed; committed here); return the page's path."""
    if not isinstance(out_dir, OutputDirectory):
        with Outputs() as outputs:
            directory = outputs.directory(out_dir, "report directory")
            plan_report_files(directory, timeline=report.timeline is not None)
            path = write_report(directory, report, page, document)
            outputs.commit()
        return path
    write_json(out_dir / "report.json", document)
    write_json(out_dir / "prediction.json", report.prediction)
    _write_csv(out_dir / "prediction.csv", report.frame)
    _write_csv(out_dir / "comparison.csv", report.comparison)
    _write_csv(out_dir / "baselines.csv", report.baselines)
    _write_csv(out_dir / "orderings.csv", report.orderings)
    if report.timeline is not None:
        write_text(out_dir / TIMELINE_TRACE, report.timeline.trace_text())
    write_text(out_dir / "report.html", page)
    return out_dir.path / "report.html"
