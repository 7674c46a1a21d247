"""Build and write a report: what ``tfsim report`` and ``tfsim demo`` run."""

from __future__ import annotations

import sys

from tfsim.report.advice import headline, recommendation
from tfsim.report.build import ReportRequest, build_report
from tfsim.report.figures import report_figures
from tfsim.report.outputs import report_document, write_report
from tfsim.report.page import render_page


def say_on_stderr(message: str) -> None:
    """Print a stage message on stderr, at once."""
    print(message, file=sys.stderr, flush=True)


def make_report(request: ReportRequest, out_dir, say=say_on_stderr, ready=lambda: None):
    """Compute the report for ``request`` and write it to ``out_dir`` (a path, or a planned
    :class:`~tfbase.fileio.OutputDirectory` whose run commits it); ``ready()`` is called once
    the inputs are checked. Returns (report, page path)."""
    report = build_report(request, say, ready)
    say("drawing the page")
    numbers = headline(report)
    advice = recommendation(report, numbers)
    page = render_page(report, report_figures(report), numbers, advice)
    return report, write_report(out_dir, report, page, report_document(report, numbers, advice))
