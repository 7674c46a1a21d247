"""Transfer orders for a sweep, and what each order gains over a reference.

TicTac's policies (:mod:`tfprofile.tictac`) give each parameter transfer a priority; a sweep
runs the ``priority`` scheduler with each such order beside the transfer models. ``random``
stands for several seeded permutations (:data:`RANDOM_SEEDS`), so that a sweep shows the
spread of orders nobody chose, not one lucky or unlucky draw.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

from simulate.config import MAX_SEED
from tfbase.errors import UsageError
from tfprofile.dag import Profile
from tfprofile.tictac import compute_ordering, read_priorities

ORDER_POLICIES = {"tic": "tic", "tac": "tac", "reverse": "reverse_tic", "reverse_tic": "reverse_tic",
                  "random": "random"}
RANDOM_SEEDS = 5  # "random" is a spread, not one draw: this many seeded permutations


def expand_random(transfers: Iterable[str]) -> list[str]:
    """``random`` -> ``random#0`` .. ``random#4``: several seeded permutations, to show a spread."""
    out = []
    for name in transfers:
        out.extend([f"random#{k}" for k in range(RANDOM_SEEDS)] if name == "random" else [name])
    return out


def ordering_priorities(profile: Profile, names: Iterable[str], *, bandwidth_Bps: float | None,
                        seed: int) -> dict[str, dict[str, int]]:
    """Priority maps (transfer name -> priority) for the TicTac policies among ``names``
    (``tic``, ``tac``, ``reverse``, ``random#K``); other names are left out. ``random#K`` is
    the permutation of seed ``seed + K``."""
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


def order_gains(frame, reference: str):
    """Per policy of a prediction table: TicTac's E at the smallest W, throughput at the smallest
    and largest W, and, where ``reference`` is in the table, the gain over it at each W: its
    mean over the sweep, its best, and the W of the best.

    Returns a DataFrame with columns ``policy``, ``efficiency_E``, ``throughput_Wmin_eps``,
    ``throughput_Wmax_eps`` and, with a reference, ``mean_gain``, ``best_gain`` and
    ``best_gain_workers`` (fractions: 0.05 is 5% faster).
    """
    import pandas as pd

    base = frame[frame["policy"] == reference].set_index("workers")["throughput_eps"]
    rows = []
    for policy, group in frame.groupby("policy", sort=False):
        group = group.set_index("workers").sort_index()
        row = {"policy": policy, "efficiency_E": group["efficiency_E"].iloc[0],
               "throughput_Wmin_eps": group["throughput_eps"].iloc[0],
               "throughput_Wmax_eps": group["throughput_eps"].iloc[-1]}
        if len(base):
            gain = (group["throughput_eps"] / base.reindex(group.index) - 1.0).dropna()
            row["mean_gain"] = float(gain.mean()) if len(gain) else math.nan
            row["best_gain"] = float(gain.max()) if len(gain) else math.nan
            row["best_gain_workers"] = int(gain.idxmax()) if len(gain) else None
        rows.append(row)
    return pd.DataFrame(rows)
