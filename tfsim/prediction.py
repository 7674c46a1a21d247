"""A prediction as ``tfsim predict`` states it: the ``tfsim.prediction/1`` document, the terminal
tables, the order comparison and its verdict.

The JSON document has ``format: "tfsim.prediction/1"`` and ``rows``, one per configuration,
each with at least ``workers``, ``transfer``, ``mode``, ``throughput_eps`` (examples/s),
``ci95_eps`` and ``step_time_s`` (docs/formats.md).
"""

from __future__ import annotations

import json
import math
import os

from simulate.orderings import order_gains

PREDICTION_FORMAT = "tfsim.prediction/1"


def prediction_rows(frame) -> list[dict]:
    """A prediction table as JSON records; JSON has no inf or NaN: a value that could not be
    estimated is null."""
    rows = json.loads(frame.to_json(orient="records"))
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                row[key] = None
    return rows


def prediction_document(frame, *, profile_path, cluster, extra: dict | None = None) -> dict:
    """The ``tfsim.prediction/1`` JSON object of a prediction table."""
    rows = prediction_rows(frame)
    saturation = {}
    for row in rows:
        if row["saturated"]:
            saturation[f"{row['policy']}/{row['sharing']}/{row['mode']}/ps{row['servers']}"] = row["workers"]
    return {
        "format": PREDICTION_FORMAT,
        "profile": os.fspath(profile_path),
        "cluster": {"source": cluster.source, "calibrated": cluster.calibrated,
                    "bandwidth_Bps": {"downlink": cluster.downlink_Bps, "uplink": cluster.uplink_Bps},
                    "win_bytes": None if math.isinf(cluster.win_bytes) else cluster.win_bytes,
                    # only with a what-if latency, so that a prediction without one reads as before
                    **({"latency_s": {"downlink": cluster.latency_downlink_s, "uplink": cluster.latency_uplink_s}}
                       if cluster.latency_downlink_s or cluster.latency_uplink_s else {})},
        "saturation_workers": saturation,
        "rows": rows,
        **(extra or {}),
    }


def format_table(frame) -> str:
    """The prediction as a terminal table."""
    show = frame.copy()
    show["thr (ex/s)"] = show["throughput_eps"].map(lambda x: f"{x:,.1f}")
    show["±95%"] = show["ci95_eps"].map(lambda x: "n/a" if not math.isfinite(x) else f"{x:,.1f}")
    show["step (ms)"] = (show["step_time_s"] * 1e3).map(lambda x: f"{x:,.1f}")
    show["down %"] = (show["util_downlink"] * 100).map(lambda x: f"{x:.0f}")
    show["up %"] = (show["util_uplink"] * 100).map(lambda x: f"{x:.0f}")
    show["sat"] = show["saturated"].map(lambda x: "*" if x else "")
    keys = [c for c in ("policy", "sharing", "mode", "servers") if frame[c].nunique() > 1]
    cols = keys + ["workers", "thr (ex/s)", "±95%", "step (ms)", "down %", "up %", "sat"]
    return show[cols].to_string(index=False)


def format_costs(frame) -> str:
    """The cost of each configuration (:func:`simulate.planning.add_costs`), with ``+`` on the
    configurations that no other beats on both throughput and cost per hour."""
    from simulate.planning import pareto_front

    show = frame.copy()
    front = set(pareto_front(frame).index)
    show["thr (ex/s)"] = show["throughput_eps"].map(lambda x: f"{x:,.1f}")
    show["$/hour"] = show["usd_per_hour"].map(lambda x: f"{x:,.2f}")
    show["$/M examples"] = show["usd_per_million_examples"].map(lambda x: f"{x:,.2f}")
    show["front"] = ["+" if i in front else "" for i in show.index]
    keys = [c for c in ("policy", "sharing", "mode", "servers") if frame[c].nunique() > 1]
    cols = keys + ["workers", "thr (ex/s)", "$/hour", "$/M examples"]
    if "hours_per_epoch" in show:
        show["h/epoch"] = show["hours_per_epoch"].map(lambda x: f"{x:,.2f}")
        cols.append("h/epoch")
    return show[cols + ["front"]].to_string(index=False)


def plan_fields(row) -> dict:
    """The JSON of the cheapest configuration, and its sentence."""
    servers = row["servers"] if row.get("servers") == row.get("servers") and row.get("servers") is not None else None
    fields = {"workers": int(row["workers"]), "servers": None if servers is None else int(servers),
              "transfer": row["policy"], "throughput_eps": float(row["throughput_eps"]),
              "usd_per_hour": float(row["usd_per_hour"]),
              "usd_per_million_examples": float(row["usd_per_million_examples"])}
    if "hours_per_epoch" in row:
        fields["hours_per_epoch"] = float(row["hours_per_epoch"])
    ps = "" if servers is None else f", {int(servers)} PS"
    epoch = f", {fields['hours_per_epoch']:,.2f} h per epoch" if "hours_per_epoch" in fields else ""
    fields["text"] = (f"cheapest that meets the target: W = {fields['workers']}{ps} ({row['policy']}): "
                      f"{fields['throughput_eps']:,.1f} examples/s at ${fields['usd_per_hour']:,.2f}/hour, "
                      f"${fields['usd_per_million_examples']:,.2f} per million examples{epoch}")
    return fields


def format_ordering_summary(summary) -> str:
    """The per-policy comparison as a terminal table."""
    show = summary.copy()
    show["E (W=1)"] = show["efficiency_E"].map(lambda x: "n/a" if x != x else f"{x:.2f}")
    show["thr W=1"] = show["throughput_W1_eps"].map(lambda x: f"{x:,.1f}")
    show["thr Wmax"] = show["throughput_Wmax_eps"].map(lambda x: f"{x:,.1f}")
    cols = ["policy", "E (W=1)", "thr W=1", "thr Wmax"]
    if "best_gain_over_http2" in show:
        show["best gain vs http2"] = [f"{g * 100:+.1f}% at W={w}" if g == g else "n/a"
                                      for g, w in zip(show["best_gain_over_http2"], show["at_workers"])]
        show["mean gain"] = show["mean_gain_over_http2"].map(lambda x: "n/a" if x != x else f"{x * 100:+.1f}%")
        cols += ["best gain vs http2", "mean gain"]
    return show[cols].to_string(index=False)


def random_spread(summary) -> str | None:
    """One line on the random orders' spread of gains, or None without them."""
    rand = summary[summary["policy"].str.startswith("random#")]
    if rand.empty or "mean_gain_over_http2" not in rand:
        return None
    gains = rand["mean_gain_over_http2"] * 100
    return (f"random orders ({len(rand)} seeds): mean gain over http2 from {gains.min():+.1f}% to {gains.max():+.1f}% "
            f"(median {gains.median():+.1f}%)")


def ordering_verdict(summary, threshold: float = 0.02) -> str:
    """One sentence answering "should I enable TicTac on this job?".

    Candidates are the orders one would choose (every policy but ``http2`` and the random
    permutations). A random permutation that beats them is named as what it is, a lucky draw,
    so that the sentence never contradicts the table above it.
    """
    if "best_gain_over_http2" not in summary:
        return "no http2 baseline in this sweep: add --transfer http2 to compare orders against gRPC's default"
    is_random = summary["policy"].str.startswith("random#")
    candidates = summary[(summary["policy"] != "http2") & ~is_random].dropna(subset=["mean_gain_over_http2"])
    draws = summary[is_random].dropna(subset=["mean_gain_over_http2"])
    if candidates.empty:
        return "no other order to compare"
    best = candidates.loc[candidates["mean_gain_over_http2"].idxmax()]
    luck = ""
    if len(draws):
        lucky = draws.loc[draws["mean_gain_over_http2"].idxmax()]
        if lucky["mean_gain_over_http2"] > max(threshold, best["mean_gain_over_http2"]):
            luck = (f"; {lucky['policy']}'s {lucky['mean_gain_over_http2'] * 100:+.1f}% is one random permutation's "
                    "luck, not an order TicTac or gRPC would choose")
    if best["mean_gain_over_http2"] > threshold:
        return (f"verdict: enforcing the {best['policy']} order is predicted to gain "
                f"{best['mean_gain_over_http2'] * 100:.1f}% on average over this sweep "
                f"(up to {best['best_gain_over_http2'] * 100:.1f}% at W={best['at_workers']}){luck}: worth trying")
    names = ", ".join(candidates["policy"])
    return (f"verdict: no chosen order ({names}) beats http2 by more than {threshold * 100:.0f}% on average over "
            f"this sweep (best: {best['policy']}, {best['mean_gain_over_http2'] * 100:+.1f}%){luck}: not worth "
            "enforcing")


# The names prediction.json gives the columns of :func:`simulate.orderings.order_gains`.
_SUMMARY_NAMES = {"throughput_Wmin_eps": "throughput_W1_eps", "best_gain": "best_gain_over_http2",
                  "best_gain_workers": "at_workers", "mean_gain": "mean_gain_over_http2"}
SUMMARY_REFERENCE = "http2"


def ordering_summary(frame):
    """Per transfer policy: E at W = 1, throughput at the smallest and largest W, and the gain
    over ``http2`` (best, where, and mean), as prediction.json and ``tfsim predict`` state them."""
    gains = order_gains(frame, SUMMARY_REFERENCE).rename(columns=_SUMMARY_NAMES)
    return gains[[c for c in ("policy", "efficiency_E", "throughput_W1_eps", "throughput_Wmax_eps",
                              "best_gain_over_http2", "at_workers", "mean_gain_over_http2") if c in gains]]


def ordering_fields(summary) -> dict:
    """What a prediction document adds when it compares orders: the per-policy summary, the
    random orders' spread (when there are any) and the verdict."""
    fields = {"orderings": json.loads(summary.to_json(orient="records")), "ordering_verdict": ordering_verdict(summary)}
    spread = random_spread(summary)
    if spread:
        fields["random_spread"] = spread
    return fields


