"""Transfer orders for a sweep, and what each order gains over a reference.

TicTac's policies (:mod:`tfprofile.tictac`) give each parameter transfer a priority; a sweep
runs the ``priority`` scheduler with each such order beside the transfer models. ``random``
stands for several seeded permutations (:data:`RANDOM_SEEDS`), so that a sweep shows the
spread of orders nobody chose, not one lucky or unlucky draw.

Gains are measured against :data:`ORDER_REFERENCE`, ``recorded``: the order TensorFlow
started the transfers in during the profiled run, replayed by the same priority scheduler
(docs/model.md §8.5). Against a transfer model (``http2``, ``grpc``) a gain would also measure
the engine's own queue order for simultaneously ready transfers, which is no order TensorFlow
used. :func:`order_gains` is the one computation of gains; the report, prediction.json and
``tfsim predict`` all state its numbers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

from simulate.config import MAX_SEED
from tfbase.errors import UsageError
from tfprofile.dag import Profile
from tfprofile.tictac import Policy, compute_ordering, read_priorities

ORDER_POLICIES = {"tic": Policy.TIC, "tac": Policy.TAC, "reverse": Policy.REVERSE_TIC,
                  "reverse_tic": Policy.REVERSE_TIC, "random": Policy.RANDOM, "recorded": Policy.RECORDED}
RANDOM_SEEDS = 5  # "random" is a spread, not one draw: this many seeded permutations
ORDER_REFERENCE = "recorded"  # what gains are measured against (module docstring)
RANDOM_PREFIX = "random#"
TRANSFER_MODELS = ("grpc", "http2")  # models of gRPC's own behaviour, not orders one could enforce


def expand_random(transfers: Iterable[str]) -> list[str]:
    """``random`` -> ``random#0`` .. ``random#4``: several seeded permutations, to show a spread."""
    out = []
    for name in transfers:
        out.extend([f"{RANDOM_PREFIX}{k}" for k in range(RANDOM_SEEDS)] if name == "random" else [name])
    return out


def ordering_priorities(profile: Profile, names: Iterable[str], *, bandwidth_Bps: float | None,
                        seed: int) -> dict[str, dict[str, int]]:
    """Priority maps (transfer name -> priority) for the orders among ``names`` (``tic``,
    ``tac``, ``reverse``, ``recorded``, ``random#K``); other names are left out. ``random#K`` is
    the permutation of seed ``seed + K``. Control transfers are in each map with the priority
    they inherit (:func:`tfprofile.tictac.inherit_priorities`)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise UsageError("seed", f"must be a whole number from 0 to {MAX_SEED}, not {seed}")
    out = {}
    for name in names:
        base, sep, suffix = name.partition("#")
        if base in ORDER_POLICIES and (not sep or (suffix.isdigit() and len(suffix) <= 4)):
            out[name] = compute_ordering(profile, ORDER_POLICIES[base], bandwidth_Bps=bandwidth_Bps,
                                         seed=seed + int(suffix or 0)).as_mapping()
    return out


def read_priority_files(profile: Profile, specs: Iterable[str | os.PathLike]) -> dict[str, dict[str, int]]:
    """``NAME=FILE`` or ``FILE`` (NAME: the file's stem) -> {NAME: priority map}, from TicTac's
    priority files (``name<TAB>priority``)."""
    out = {}
    for spec in specs:
        text = os.fspath(spec)
        name, sep, path = text.partition("=")
        if not sep:
            name, path = Path(text).stem, text
        out[name] = read_priorities(path, profile.graph).as_mapping()
    return out


def order_gains(frame, reference: str = ORDER_REFERENCE):
    """Per policy of a prediction table: TicTac's E at the smallest W, throughput at the smallest
    and largest W, and the gains over ``reference`` and over the random orders.

    The gain over ``reference`` at each W is ``throughput / throughput(reference) - 1``; the
    table gives its mean over the sweep, its best and the W of the best. The gain over the
    random orders at each W is over their median throughput at that W, averaged over the sweep.

    Returns a DataFrame with columns ``policy``, ``efficiency_E``, ``throughput_Wmin_eps``,
    ``throughput_Wmax_eps`` and ``mean_gain``, ``best_gain``, ``best_gain_workers`` (NaN and
    None without ``reference`` in the table) and ``mean_gain_over_random`` (NaN without random
    orders); gains are fractions (0.05 is 5% faster).

    Examples
    --------
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"policy": ["recorded", "recorded", "tic", "tic"], "workers": [1, 2, 1, 2],
    ...                       "throughput_eps": [100.0, 150.0, 110.0, 150.0], "efficiency_E": [0.5, 0.4, 0.6, 0.5]})
    >>> order_gains(frame)[["policy", "mean_gain", "best_gain", "best_gain_workers"]].round(3).values.tolist()
    [['recorded', 0.0, 0.0, 1], ['tic', 0.05, 0.1, 1]]
    """
    import pandas as pd

    base = frame[frame["policy"] == reference].set_index("workers")["throughput_eps"]
    random = frame[frame["policy"].str.startswith(RANDOM_PREFIX)]
    random_median = random.groupby("workers")["throughput_eps"].median()
    rows = []
    for policy, group in frame.groupby("policy", sort=False):
        group = group.set_index("workers").sort_index()
        row = {"policy": policy, "efficiency_E": group["efficiency_E"].iloc[0],
               "throughput_Wmin_eps": group["throughput_eps"].iloc[0],
               "throughput_Wmax_eps": group["throughput_eps"].iloc[-1]}
        gain = (group["throughput_eps"] / base.reindex(group.index) - 1.0).dropna()
        row["mean_gain"] = float(gain.mean()) if len(gain) else math.nan
        row["best_gain"] = float(gain.max()) if len(gain) else math.nan
        row["best_gain_workers"] = int(gain.idxmax()) if len(gain) else None
        over_random = (group["throughput_eps"] / random_median.reindex(group.index) - 1.0).dropna()
        row["mean_gain_over_random"] = float(over_random.mean()) if len(over_random) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def random_gains(gains) -> dict | None:
    """The random orders' mean gains over the reference (a table of :func:`order_gains`): how
    many, their median and their range; None without random orders or reference."""
    values = gains[gains["policy"].str.startswith(RANDOM_PREFIX)]["mean_gain"].dropna()
    if values.empty:
        return None
    return {"orders": len(values), "median": float(values.median()), "min": float(values.min()),
            "max": float(values.max())}


def candidate_orders(gains):
    """The rows of a table of :func:`order_gains` one could choose to enforce: neither the
    reference, nor a model of gRPC itself, nor a random draw, and with a gain."""
    policy = gains["policy"]
    chosen = ~policy.isin((ORDER_REFERENCE, *TRANSFER_MODELS)) & ~policy.str.startswith(RANDOM_PREFIX)
    return gains[chosen].dropna(subset=["mean_gain"])
