"""What a prediction costs, and the cheapest cluster that meets a target (docs/model.md §11).

Pure functions on a prediction table (:func:`simulate.predict`): they add columns and pick
rows, and never simulate. A cluster of W workers and M parameter servers costs
``W * worker + M * ps`` dollars per hour; at ``throughput_eps`` examples per second a million
examples cost ``usd_per_hour / (throughput_eps * 3600) * 1e6``, and an epoch of ``examples``
takes ``examples / throughput_eps / 3600`` hours.
"""

from __future__ import annotations

import dataclasses
import math

from tfbase.errors import UsageError

SECONDS_PER_HOUR = 3600.0
MAX_PRICE_USD_PER_HOUR = 1e6  # beyond any instance's price: a typo, not a cluster


@dataclasses.dataclass(frozen=True)
class Prices:
    """Dollars per hour of one worker host and of one parameter-server host.

    Examples
    --------
    >>> Prices.parse("worker=2.48,ps=0.68")
    Prices(worker_usd_per_h=2.48, ps_usd_per_h=0.68)
    """

    worker_usd_per_h: float
    ps_usd_per_h: float = 0.0

    def __post_init__(self) -> None:
        for name in ("worker_usd_per_h", "ps_usd_per_h"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and 0 <= value <= MAX_PRICE_USD_PER_HOUR):
                raise UsageError("price", f"a price must be between 0 and {MAX_PRICE_USD_PER_HOUR:,.0f} $/hour, "
                                          f"not {value!r}")
        if self.worker_usd_per_h == 0 and self.ps_usd_per_h == 0:
            raise UsageError("price", "give the price of a worker host, of a PS host, or both")

    @classmethod
    def parse(cls, text: str) -> Prices:
        """``"worker=2.48,ps=0.68"`` ($/hour each; a role left out costs nothing)."""
        values = {}
        for part in filter(None, (p.strip() for p in str(text).split(","))):
            role, sep, number = part.partition("=")
            role = role.strip().lower()
            if not sep or role not in ("worker", "ps"):
                raise UsageError("price", f"{part!r} is not worker=PRICE or ps=PRICE")
            if role in values:
                raise UsageError("price", f"{role} is priced twice")
            try:
                values[role] = float(number)
            except ValueError:
                raise UsageError("price", f"{number.strip()!r} is not a number of $/hour") from None
        if not values:
            raise UsageError("price", "give worker=PRICE and/or ps=PRICE")
        return cls(values.get("worker", 0.0), values.get("ps", 0.0))


def add_costs(frame, prices: Prices, *, servers: int, examples: float | None = None):
    """``frame`` with ``usd_per_hour``, ``usd_per_million_examples`` and (with ``examples``, an
    epoch's size) ``hours_per_epoch``; ``servers`` is the PS count of rows that keep the
    profile's placement (``servers`` empty).

    Examples
    --------
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"workers": [1, 2], "servers": [None, None], "throughput_eps": [100.0, 180.0]})
    >>> costs = add_costs(frame, Prices(2.0, 1.0), servers=1, examples=3.6e6)
    >>> costs[["usd_per_hour", "hours_per_epoch"]].values.tolist()
    [[3.0, 10.0], [5.0, 5.555555555555555]]
    """
    if examples is not None and not (math.isfinite(examples) and examples > 0):
        raise UsageError("examples", f"an epoch must have a positive number of examples, not {examples}")
    out = frame.copy()
    ps = out["servers"].fillna(servers).astype(float) if "servers" in out else float(servers)
    out["usd_per_hour"] = out["workers"] * prices.worker_usd_per_h + ps * prices.ps_usd_per_h
    per_hour = out["throughput_eps"] * SECONDS_PER_HOUR
    out["usd_per_million_examples"] = (out["usd_per_hour"] / per_hour * 1e6).where(per_hour > 0, math.inf)
    if examples is not None:
        out["hours_per_epoch"] = (examples / per_hour).where(per_hour > 0, math.inf)
    return out


def pareto_front(frame):
    """The rows no other row beats on both throughput (higher) and cost per hour (lower), by
    throughput; ``frame`` needs ``usd_per_hour`` (:func:`add_costs`)."""
    rows = frame.sort_values(["usd_per_hour", "throughput_eps"], ascending=[True, False])
    keep, best = [], -math.inf
    for index, throughput in zip(rows.index, rows["throughput_eps"]):
        if throughput > best:
            keep.append(index)
            best = throughput
    return frame.loc[keep].sort_values("throughput_eps")


def cheapest(frame, *, target_eps: float | None = None, deadline_h: float | None = None):
    """The row that meets the target (``throughput_eps >= target_eps``, or ``hours_per_epoch <=
    deadline_h``) at the lowest cost per example (what the whole job costs: a larger cluster
    that is as cheap per example finishes sooner); ties go to fewer hosts. Raises
    :class:`~tfbase.errors.UsageError` when no row meets it."""
    if (target_eps is None) == (deadline_h is None):
        raise UsageError("target_eps", "give a target throughput or a deadline, one of them")
    if target_eps is not None:
        if not (math.isfinite(target_eps) and target_eps > 0):
            raise UsageError("target_eps", f"must be a positive throughput, not {target_eps}")
        meets = frame[frame["throughput_eps"] >= target_eps]
        wanted = f"{target_eps:,.1f} examples/s"
    else:
        if not (math.isfinite(deadline_h) and deadline_h > 0):
            raise UsageError("deadline_h", f"must be a positive number of hours, not {deadline_h}")
        if "hours_per_epoch" not in frame:
            raise UsageError("deadline_h", "a deadline needs the epoch's size (examples)")
        meets = frame[frame["hours_per_epoch"] <= deadline_h]
        wanted = f"an epoch within {deadline_h:g} h"
    if meets.empty:
        best = frame["throughput_eps"].max()
        raise UsageError("target_eps" if target_eps is not None else "deadline_h",
                         f"no configuration simulated reaches {wanted} (the best: {best:,.1f} examples/s); "
                         "simulate more workers or servers")
    hosts = meets["workers"] + meets["servers"].fillna(0) if "servers" in meets else meets["workers"]
    order = meets.assign(_hosts=hosts).sort_values(["usd_per_million_examples", "_hosts", "throughput_eps"],
                                                   ascending=[True, True, False])
    return order.drop(columns="_hosts").iloc[0]
