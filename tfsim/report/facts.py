"""The numbers the report states about its inputs: the cluster's calibration and the job.

Both are plain JSON-ready dicts, so the page and ``report.json`` show the same values.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tfprofile.summary import summarize
from tfprofile.tictac import profile_efficiency

DIRECTIONS = ("downlink", "uplink")
PLOT_CAPTIONS = {
    "overhead": "Parsing overhead against tensor size, per direction, with the robust α·size + β fit "
                "(from the captured run).",
    "streams": "One captured step's tensor streams on the wire: request to send-ready (grey), DATA frames, "
               "and the end of the RecvTensor record (red).",
}


def _finite(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return value if math.isfinite(value) else None
    except OverflowError:  # an integer beyond the range of a float
        return None


def cluster_facts(cluster, cluster_path: Path | None, bandwidth_text: str | None) -> dict:
    """What the prediction assumes about the network, and, for a calibrated cluster, how well the
    calibration fits: bandwidth per direction, the window, α/β per direction with R² and n,
    and each transfer model's stream end-time error."""
    facts = {
        "source": cluster.source, "calibrated": cluster.calibrated,
        "what_if_bandwidth": bandwidth_text if cluster_path is not None else None,
        "bandwidth_Bps": {"downlink": cluster.downlink_Bps, "uplink": cluster.uplink_Bps},
        "connection_cap_Bps": cluster.connection_caps_Bps,
        "win_bytes": _finite(cluster.win_bytes),
        "overhead_placement": cluster.overhead_placement.value,
        "latency_s": {"downlink": cluster.latency_downlink_s, "uplink": cluster.latency_uplink_s},
        "overhead": {d: {"alpha_s_per_byte": o.alpha_s_per_byte, "beta_s": o.beta_s}
                     for d, o in (("downlink", cluster.overhead_downlink), ("uplink", cluster.overhead_uplink))},
    }
    if cluster_path is None:
        return facts
    # load_cluster has checked what the model reads; the fit quality lives only in the JSON, where
    # nothing checked it: each key is shown only in the shape docs/formats.md §4 gives it.
    document = json.loads(Path(cluster_path).read_text(encoding="utf-8"))
    facts["calibrated_bandwidth_Bps"] = _per_direction(document.get("bandwidth_Bps"), _finite)
    facts["bandwidth_spread_Bps"] = _per_direction(document.get("bandwidth_spread_Bps"), _spread)
    facts["win_bytes_by_direction"] = _per_direction(document.get("win_bytes_by_direction"), _finite)
    overhead = document.get("overhead") if isinstance(document.get("overhead"), dict) else {}
    for direction in DIRECTIONS:
        fit = overhead.get(direction) if isinstance(overhead.get(direction), dict) else {}
        shown = {"r2": _finite(fit.get("r2")), "n": _count(fit.get("n")),
                 "residual_median_abs_s": _finite(fit.get("residual_median_abs_s")), "method": _text(fit.get("method"))}
        facts["overhead"][direction].update({k: v for k, v in shown.items() if k in fit and v is not None})
    facts["transfer_model_error"] = _model_errors(document.get("transfer_model_error"))
    facts["default_transfer"] = document.get("default_transfer")  # checked by the reader when present
    provenance = document.get("provenance") if isinstance(document.get("provenance"), dict) else {}
    facts["provenance"] = {k: v for k, v in {
        "run_dir": _text(provenance.get("run_dir"), 300), "tensorflow": _text(provenance.get("tensorflow")),
        "error_definition": _text(provenance.get("error_definition"), 300),
        "streams_matched": _count(provenance.get("streams_matched")),
        "capture_notes": [_text(n, 300) for n in provenance["capture_notes"][:20] if _text(n, 300) is not None]
        if isinstance(provenance.get("capture_notes"), list) else None}.items() if v is not None}
    return facts


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else None


def _text(value, limit: int = 80):
    return value[:limit] if isinstance(value, str) else None


def _per_direction(value, check) -> dict | None:
    if not isinstance(value, dict):
        return None
    shown = {d: check(value.get(d)) for d in DIRECTIONS}
    return shown if any(v is not None for v in shown.values()) else None


def _spread(value) -> dict | None:
    if not isinstance(value, dict) or _finite(value.get("min")) is None or _finite(value.get("max")) is None:
        return None
    return {"min": value["min"], "max": value["max"], "runs": _count(value.get("runs"))}


def _model_errors(value) -> dict:
    """``transfer_model_error``: per model, per direction, the error statistics that are numbers."""
    if not isinstance(value, dict):
        return {}
    out = {}
    for model, per in list(value.items())[:10]:
        if not isinstance(per, dict):
            continue
        rows = {}
        for direction in (*DIRECTIONS, "all"):
            stats = per.get(direction)
            if isinstance(stats, dict):
                rows[direction] = {k: v for k, v in {**{key: _finite(stats.get(key)) for key in
                                                        ("mean", "median", "p95", "max")},
                                                     "n": _count(stats.get("n"))}.items() if v is not None}
        if rows:
            out[str(model)[:40]] = rows
    return out


def calibration_plots(cluster_path: Path | None, plots_dir: Path | None) -> list[tuple[str, Path]]:
    """The calibration's figures: ``plots_dir``, or the ``<name>-plots/`` directory beside
    CLUSTER.json that ``tfsim calibrate --plots`` is pointed at by convention. Sorted by name."""
    if plots_dir is None and cluster_path is not None:
        plots_dir = Path(cluster_path).with_name(Path(cluster_path).stem + "-plots")
    if plots_dir is None or not plots_dir.is_dir():
        return []
    return [(PLOT_CAPTIONS.get(p.stem, p.stem), p) for p in sorted(plots_dir.glob("*.png"))]


def job_facts(profile, cluster=None) -> dict:
    """The profiled job: ``tfsim profile --summary`` and TicTac's E and S of the profiled steps,
    with the cluster's link rates for the transfers (dedicated times, TicTac §3.1) when given."""
    facts = summarize(profile)
    rates = None if cluster is None else (cluster.downlink_Bps, cluster.uplink_Bps)
    facts["tictac"] = profile_efficiency(profile, rates).summary()
    return facts
