"""``tfsim report``: one self-contained HTML page that answers "how many workers, and is an
enforced transfer order worth it?", with its numbers beside it as JSON and CSV.

- :mod:`tfsim.report.build` computes everything from the inputs (prediction, baselines,
  orderings, traced runs);
- :mod:`tfsim.report.facts` states the cluster's calibration and the job;
- :mod:`tfsim.report.gantt` lays traced runs out as Gantt pictures;
- :mod:`tfsim.report.advice` turns the numbers into the headline and the recommendation;
- :mod:`tfsim.report.figures` and :mod:`tfsim.report.page` draw the page;
- :mod:`tfsim.report.timeline` and :mod:`tfsim.report.timeline_page` add a captured run's
  measured timeline beside its simulation (``--timeline-run``);
- :mod:`tfsim.report.outputs` writes it.
"""

from tfsim.report.build import Report, ReportRequest, build_report
from tfsim.report.command import make_report, say_on_stderr

__all__ = ["Report", "ReportRequest", "build_report", "make_report", "say_on_stderr"]
