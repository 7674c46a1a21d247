"""Robust straight-line fits for the parsing overhead ``alpha * size + beta`` (ICPE §3.2.1).

The overhead samples (the delay from a tensor's last DATA frame on the wire to the end of its
RecvTensor record) have outliers: a record that ends late because the receiving thread
was busy with another op. A least-squares line is dragged by them; the Theil-Sen estimator
(the median of the pairwise slopes, then the median intercept) ignores up to 29% of them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tfbase.errors import InputError

MAX_EXACT_SAMPLES = 2000
MAX_PAIRS = 2_000_000


@dataclasses.dataclass(frozen=True)
class LineFit:
    """``y ≈ slope * x + intercept``, with how well it fits.

    ``r2`` is the coefficient of determination of the fitted line on the samples (it can be
    negative when the robust line fits the bulk but not the outliers); ``residual_*`` are
    ``y - fit(x)`` summaries; ``n`` the number of samples.
    """

    slope: float
    intercept: float
    r2: float
    n: int
    residual_median_abs: float
    residual_p95_abs: float
    method: str

    def __call__(self, x):
        return self.slope * np.asarray(x, dtype=float) + self.intercept

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _summary(x: np.ndarray, y: np.ndarray, slope: float, intercept: float, method: str) -> LineFit:
    residuals = y - (slope * x + intercept)
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residuals ** 2)) / total if total > 0 else 1.0
    return LineFit(float(slope), float(intercept), r2, int(x.size), float(np.median(np.abs(residuals))),
                   float(np.percentile(np.abs(residuals), 95)), method)


def theil_sen(x, y, *, source: str = "overhead samples") -> LineFit:
    """Theil-Sen line through (x, y): median pairwise slope, then median intercept.

    Needs at least two distinct x values; with one, the slope is 0 and the intercept the
    median of y (documented in the result's ``method``).
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size == 0:
        raise InputError(source, "no usable samples to fit")
    if np.unique(x).size < 2:
        return _summary(x, y, 0.0, float(np.median(y)), "median (one size only)")
    if x.size <= MAX_EXACT_SAMPLES:
        i, j = np.triu_indices(x.size, k=1)
    else:  # a fixed random subset of the pairs: the median slope barely moves, the memory stays bounded
        rng = np.random.default_rng(0)
        i, j = rng.integers(0, x.size, size=(2, MAX_PAIRS))
    dx = x[j] - x[i]
    ok = dx != 0
    slopes = (y[j] - y[i])[ok] / dx[ok]
    slope = float(np.median(slopes))
    intercept = float(np.median(y - slope * x))
    return _summary(x, y, slope, intercept, "theil-sen")


def least_squares(x, y) -> LineFit:
    """Ordinary least squares, for comparison with the robust fit."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    return _summary(x, y, slope, intercept, "least-squares")


def nonnegative_line(x, y, *, source: str = "overhead samples") -> LineFit:
    """Theil-Sen, constrained to a non-negative slope and intercept (an overhead cannot shrink
    with size, nor be negative): a negative slope falls back to the constant median of y."""
    fit = theil_sen(x, y, source=source)
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if fit.slope < 0:
        fit = _summary(x, y, 0.0, max(0.0, float(np.median(y))), "median (negative slope clamped to 0)")
    if fit.intercept < 0:
        fit = _summary(x, y, fit.slope, 0.0, fit.method + ", intercept clamped to 0")
    return fit
