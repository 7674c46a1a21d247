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
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def cluster_facts(cluster, cluster_path: Path | None, bandwidth_text: str | None) -> dict:
    """What the prediction assumes about the network, and, for a calibrated cluster, how well the
    calibration fits: bandwidth per direction, the window, α/β per direction with R² and n,
    and each transfer model's stream end-time error."""
    facts = {
        "source": cluster.source, "calibrated": cluster.calibrated,
        "what_if_bandwidth": bandwidth_text if cluster_path is not None else None,
        "bandwidth_Bps": {"downlink": cluster.downlink_Bps, "uplink": cluster.uplink_Bps},
        "win_bytes": _finite(cluster.win_bytes),
        "overhead_placement": cluster.overhead_placement.value,
        "overhead": {d: {"alpha_s_per_byte": o.alpha_s_per_byte, "beta_s": o.beta_s}
                     for d, o in (("downlink", cluster.overhead_downlink), ("uplink", cluster.overhead_uplink))},
    }
    if cluster_path is None:
        return facts
    # load_cluster has checked the file already; the fit quality lives only in the JSON.
    document = json.loads(Path(cluster_path).read_text(encoding="utf-8"))
    facts["calibrated_bandwidth_Bps"] = document.get("bandwidth_Bps")
    facts["bandwidth_spread_Bps"] = document.get("bandwidth_spread_Bps")
    facts["win_bytes_by_direction"] = document.get("win_bytes_by_direction")
    for direction in DIRECTIONS:
        fit = (document.get("overhead") or {}).get(direction) or {}
        facts["overhead"][direction].update({k: fit.get(k) for k in ("r2", "n", "residual_median_abs_s", "method")
                                             if k in fit})
    facts["transfer_model_error"] = document.get("transfer_model_error") or {}
    facts["default_transfer"] = document.get("default_transfer")
    facts["provenance"] = document.get("provenance") or {}
    return facts


def calibration_plots(cluster_path: Path | None, plots_dir: Path | None) -> list[tuple[str, Path]]:
    """The calibration's figures: ``plots_dir``, or the ``<name>-plots/`` directory beside
    CLUSTER.json that ``tfsim calibrate --plots`` is pointed at by convention. Sorted by name."""
    if plots_dir is None and cluster_path is not None:
        plots_dir = Path(cluster_path).with_name(Path(cluster_path).stem + "-plots")
    if plots_dir is None or not plots_dir.is_dir():
        return []
    return [(PLOT_CAPTIONS.get(p.stem, p.stem), p) for p in sorted(plots_dir.glob("*.png"))]


def job_facts(profile) -> dict:
    """The profiled job: ``tfsim profile --summary`` and TicTac's E and S of the profiled steps
    (``tfsim order --json``)."""
    facts = summarize(profile)
    facts["tictac"] = profile_efficiency(profile).summary()
    return facts
