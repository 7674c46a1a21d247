"""Every method side by side over W, with measurements when given (what ``tfsim compare`` shows).

Methods: the fine-grained simulation (``tfsim``), and the coarse baselines of the SGD mode
(:mod:`simulate.coarse`: Lin et al. and Cynthia for async, TPDS Eqs. 7-10 for sync, ring
all-reduce). Measurements come from a CSV with a ``workers`` column and a ``measured_eps``
(as ``tfsim lab`` writes) or ``throughput_eps`` column; with several lab settings in one
file, ``--setting`` picks one.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

from tfbase.errors import InputError
from tfbase.fileio import read_input

MAX_WORKERS = 1_000_000  # far above any cluster; bounds the integer conversion
MAX_TABLE_BYTES = 64 * 2**20


def read_measured(path: Path, setting: str | None = None):
    """The measured points of a CSV: a DataFrame with ``workers`` and ``throughput_eps``."""
    import pandas as pd

    raw = read_input(path, limit=MAX_TABLE_BYTES, what="measurement table", gunzip=False)
    try:
        frame = pd.read_csv(io.BytesIO(raw))
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(path, f"not a CSV table ({exc})") from None
    column = "measured_eps" if "measured_eps" in frame else "throughput_eps" if "throughput_eps" in frame else None
    if "workers" not in frame or column is None:
        raise InputError(path, "needs a workers column and a measured_eps (or throughput_eps) column")
    if "setting" in frame:
        labels = frame["setting"].map(str)
        settings = sorted(set(labels))
        if setting is None and len(settings) > 1:
            raise InputError(path, f"holds several settings ({', '.join(settings)}): choose one with --setting")
        if setting is not None:
            if setting not in settings:
                raise InputError(path, f"has no setting {setting!r} (it has {', '.join(settings)})")
            frame = frame[labels == setting]
    if frame.empty:
        raise InputError(path, "holds no measurement (no row)")
    workers = pd.to_numeric(frame["workers"], errors="coerce")
    rates = pd.to_numeric(frame[column], errors="coerce")
    if not workers.between(1, MAX_WORKERS).all() or not (workers % 1 == 0).all():
        raise InputError(path, f"workers must be whole numbers from 1 to {MAX_WORKERS}")
    if not (rates > 0).all() or not rates.lt(math.inf).all():
        raise InputError(path, "measured throughputs must be positive")
    counts = workers.astype(int).value_counts()
    repeated = counts[counts > 1]
    if len(repeated):
        w = int(repeated.index.min())
        hint = (" (this is a prediction table: it has one row per configuration)"
                if "policy" in frame or "transfer" in frame else "")
        raise InputError(path, f"W = {w} appears in {int(repeated[w])} rows: measurements have one row per W{hint}")
    return pd.DataFrame({"workers": workers.astype(int), "throughput_eps": rates.astype(float)})


def check_measured_in_sweep(measured, workers, path) -> None:
    """Refuse measurements at worker counts the sweep does not simulate (they could not be compared)."""
    outside = sorted({int(w) for w in measured["workers"]} - {int(w) for w in workers})
    if outside:
        listed = ", ".join(map(str, outside[:8])) + (", ..." if len(outside) > 8 else "")
        raise InputError(path, f"measures W = {listed}, outside the worker counts simulated "
                               f"({_ranges(workers)}): they could not be compared")


def _ranges(values) -> str:
    """``[1, 2, 3, 8]`` -> ``"1-3, 8"``."""
    values = sorted({int(v) for v in values})
    parts, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(f"{start}-{v}" if v > start else f"{v}")
            start = None
    return ", ".join(parts)


def comparison_table(simulated, baselines, measured=None):
    """Wide table: one row per W, one column per method (examples/s), and the error of each
    method against the measurement where there is one."""
    wide = baselines.pivot(index="workers", columns="model", values="throughput_eps")
    wide.insert(0, "tfsim", simulated.set_index("workers")["throughput_eps"])
    if measured is not None:
        wide.insert(0, "measured", measured.set_index("workers")["throughput_eps"])
        for method in [c for c in wide.columns if c != "measured"]:
            wide[f"error_{method}"] = wide[method] / wide["measured"] - 1
    return wide.reset_index()
