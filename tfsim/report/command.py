"""Build and write a report: what ``tfsim report`` and ``tfsim demo`` run."""

from __future__ import annotations

import sys
from pathlib import Path


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def make_report(request, out_dir: Path, say=_say):
    """Compute the report for ``request`` and write it to ``out_dir``; return (report, page path)."""
    from tfsim.report.advice import headline, recommendation
    from tfsim.report.build import build_report
    from tfsim.report.figures import report_figures
    from tfsim.report.outputs import report_document, write_report
    from tfsim.report.page import render_page

    report = build_report(request, say)
    say("drawing the page")
    numbers = headline(report)
    advice = recommendation(report, numbers)
    page = render_page(report, report_figures(report), numbers, advice)
    return report, write_report(Path(out_dir), report, page, report_document(report, numbers, advice))


def run_cli(args) -> int:
    from simulate.predict import default_jobs
    from tfsim.report.build import ReportRequest

    request = ReportRequest(
        profile_path=args.profile, cluster_path=args.cluster, bandwidth=args.bandwidth, workers=args.workers,
        steps=args.steps, warmup=args.warmup, seed=args.seed, mode=args.mode, cores=args.cores,
        measured_path=args.measured, setting=args.setting, gantt_workers=args.gantt_workers,
        plots_dir=args.cluster_plots, jobs=args.jobs or default_jobs(), progress=not args.no_progress)
    say = (lambda message: None) if args.no_progress else _say
    _, page = make_report(request, args.out, say)
    print(page)
    return 0
