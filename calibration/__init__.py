"""Fitting a cluster's network and overhead parameters from captures, iperf3 and traces.

``calibration.calibrate_run(run_dir)`` is the entry point (docs/calibration.md); it returns a
:class:`~calibration.calibrate.Calibration` whose ``to_cluster_json()`` is the CLUSTER.json
document that :func:`simulate.load_cluster` reads. Matching a capture's streams to a run's
traced transfers is :func:`calibration.runmatch.match_run`.

The public names are bound on first use (calibrating imports the capture decoders), and
none is the name of a submodule.
"""

from tfbase.lazy import lazy_attributes

# public name -> the submodule that defines it
_PUBLIC = {
    "calibrate_run": "calibration.calibrate",
    "Calibration": "calibration.calibrate",
    "model_check": "calibration.calibrate",
    "match_run": "calibration.runmatch",
    "format_calibration": "calibration.summary",
}

__all__ = sorted(_PUBLIC)

__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)
