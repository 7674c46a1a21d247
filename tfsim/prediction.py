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

from simulate.cluster import overflow_onset_workers
from simulate.config import Enforcement, TieOrder
from simulate.orderings import (
    ORDER_REFERENCE,
    RANDOM_PREFIX,
    candidate_orders,
    order_gains,
    random_gains,
)
from simulate.sweep import plain

PREDICTION_FORMAT = "tfsim.prediction/1"
ORDER_WORTH = 0.02  # the mean gain an order must exceed to be worth enforcing (predict and the report)


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
                    # only with a connection cap (docs/model.md §4.8), as the latency below
                    **({"connection_cap_Bps": cluster.connection_caps_Bps} if cluster.connection_caps_Bps else {}),
                    # only where the calibration recorded its hosts (calibration.md §4.10)
                    **({"host_cores": {"ps": cluster.ps_host_cores, "worker": cluster.worker_host_cores}}
                       if cluster.ps_host_cores is not None else {}),
                    # only with a what-if latency, so that a prediction without one reads as before
                    **({"latency_s": {"downlink": cluster.latency_downlink_s, "uplink": cluster.latency_uplink_s}}
                       if cluster.latency_downlink_s or cluster.latency_uplink_s else {})},
        "saturation_workers": saturation,
        "rows": rows,
        **(extra or {}),
    }


def prediction_settings(enforcement: Enforcement, tie_order: TieOrder) -> dict:
    """The settings a prediction document states beside its rows: the enforcement only when
    strict and the tie order only when recorded, so that a prediction with the defaults reads
    as before either option existed."""
    out = {} if enforcement is Enforcement.WORK_CONSERVING else {"enforcement": enforcement.value}
    if tie_order is not TieOrder.INDEX:
        out["tie_order"] = tie_order.value
    return out


def buffer_fields(cluster, buffer_bytes: int) -> dict:
    """prediction.json's ``buffer`` (and its sentence, ``text``): the PS port's buffer, the
    calibrated uplink queue window, and the fewest workers whose windows overflow it
    (:func:`simulate.cluster.overflow_onset_workers`; None: no queue window calibrated)."""
    window = float(cluster.queue_window_uplink_bytes)
    onset = overflow_onset_workers(window, buffer_bytes)
    if onset is None:
        text = (f"PS port buffer {buffer_bytes / 1e3:,.0f} kB: the cluster has no calibrated queue window, so when "
                "the workers' uploads overflow it is not known")
    elif onset == 1:
        text = (f"PS port buffer {buffer_bytes / 1e3:,.0f} kB is smaller than one calibrated queue window of "
                f"{window / 1e3:,.0f} kB: one worker's uploads already overflow it (the profiled run's losses are "
                "in the calibration), and every worker more overflows it further; the model holds the queue to the "
                "buffer but does not resend what is lost (docs/model.md §4.5, §10)")
    else:
        text = (f"PS port buffer {buffer_bytes / 1e3:,.0f} kB holds {onset - 1} calibrated queue window(s) of "
                f"{window / 1e3:,.0f} kB: from W = {onset} the workers' uploads overflow it and lose packets; the "
                "model holds the queue to the buffer but does not resend what is lost, so expect the real job "
                "somewhat below the table from there (docs/model.md §4.5, §10)")
    return {"bytes": int(buffer_bytes), "queue_window_bytes": window, "overflow_from_workers": onset, "text": text}


def ps_cpu_fields(frame, cluster) -> dict | None:
    """prediction.json's ``ps_cpu`` (and its sentence, ``text``) when the cluster measured the
    parameter servers' CPU (docs/model.md §4.7): the bound, and the smallest W it holds down."""
    if cluster.ps_cpu is None:
        return None
    limits = frame["ps_cpu_limit_eps"].dropna()
    if limits.empty:
        return None
    held = frame[frame["throughput_eps"] >= frame["ps_cpu_limit_eps"] * (1 - 1e-12)]
    first = int(held["workers"].min()) if not held.empty else None
    # With busy-PS runs a step costs the PS less as workers are added: the most any row's W allows.
    bound = float(limits.max())
    busy = cluster.ps_cpu.busy
    measured = "".join(f", {x.cpu_s_per_step * 1e3:.2f} ms with {x.workers} workers" for x in busy)
    text = (f"the parameter servers' CPU ({cluster.ps_cpu.cpu_s_per_step * 1e3:.2f} ms per worker-step"
            f"{' with one worker' + measured if busy else ''} on {cluster.ps_cpu.cores:g} core(s) each) "
            f"allows at most {bound:,.1f} ex/s"
            + (f": it holds the prediction from W = {first} on" if first is not None else ", above every row")
            + " (docs/model.md §4.7)")
    return {"cpu_s_per_step": cluster.ps_cpu.cpu_s_per_step, "cores": cluster.ps_cpu.cores,
            "busy": [{"workers": x.workers, "cpu_s_per_step": x.cpu_s_per_step} for x in busy],
            "limit_eps": bound, "limited_from_workers": first, "text": text}


def drift_fields(frame) -> dict | None:
    """prediction.json's ``drift`` (and its sentence, ``text``) when a row's simulated rate was
    still moving between the two halves of its measured steps (docs/model.md §5.8): those
    rows, each with its drift, and the steps they ran. None when every row settled."""
    moving = frame[~frame["settled"].astype(bool)]
    if moving.empty:
        return None
    keys = [c for c in ("policy", "sharing", "mode", "servers") if frame[c].nunique() > 1]
    rows = []
    for _, row in moving.iterrows():
        label = "/".join(str(row[k]) for k in keys)
        drift = row["throughput_drift"]
        rows.append({"workers": int(row["workers"]), **{k: plain(row[k]) for k in keys},
                     "throughput_drift": None if drift != drift else float(drift), "steps": int(row["steps"]),
                     "label": f"W = {int(row['workers'])}" + (f" {label}" if label else "")
                              + (f" ({drift:+.0%})" if drift == drift else " (too few steps to tell)")})
    text = ("not settled: the simulated rate moved between the first and the second half of the measured steps at "
            + ", ".join(r["label"] for r in rows) + "; those rows average a run whose rate was still changing "
            "(workers drifting into or out of phase) and depend on the run's length: simulate more steps per "
            "worker (docs/model.md §5.8)")
    return {"rows": [{k: v for k, v in r.items() if k != "label"} for r in rows], "text": text}


def settings_sentences(enforcement: Enforcement, tie_order: TieOrder) -> list[str]:
    """The lines ``tfsim predict`` prints above its table about settings away from their default."""
    out = []
    if enforcement is Enforcement.STRICT:
        out.append("priority orders enforced strictly: a transfer starts only after every lower-numbered transfer "
                   "of its worker and link has started")
    if tie_order is TieOrder.RECORDED:
        out.append("transfers ready at one instant queue in the profiled run's order (--tie-order recorded), not "
                   "by op index")
    return out


def format_table(frame) -> str:
    """The prediction as a terminal table."""
    show = frame.copy()
    show["thr (ex/s)"] = show["throughput_eps"].map(lambda x: f"{x:,.1f}")
    show["±95%"] = show["ci95_eps"].map(lambda x: "n/a" if not math.isfinite(x) else f"{x:,.1f}")
    show["range"] = [f"{lo:,.0f}..{hi:,.0f}" for lo, hi in zip(show["throughput_min_eps"], show["throughput_max_eps"],
                                                               strict=True)]
    show["step (ms)"] = (show["step_time_s"] * 1e3).map(lambda x: f"{x:,.1f}")
    show["down %"] = (show["util_downlink"] * 100).map(lambda x: f"{x:.0f}")
    show["up %"] = (show["util_uplink"] * 100).map(lambda x: f"{x:.0f}")
    show["sat"] = show["saturated"].map(lambda x: "*" if x else "")
    # The drift only where a row has not settled (docs/model.md §5.8), so a settled table reads as before.
    moving = ["drift"] if "settled" in show and not show["settled"].astype(bool).all() else []
    if moving:
        show["drift"] = [("" if ok else "n/a" if d != d else f"{d:+.0%}")
                         for ok, d in zip(show["settled"].astype(bool), show["throughput_drift"], strict=True)]
    keys = [c for c in ("policy", "sharing", "mode", "servers") if frame[c].nunique() > 1]
    spread = ["range"] if (frame["replicas"] > 1).any() else []  # the replicas' own range
    cols = keys + ["workers", "thr (ex/s)", "±95%", *spread, "step (ms)", "down %", "up %", "sat", *moving]
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


def _gain(value) -> str:
    # Rounded before formatting, and + 0.0, so that a tiny loss reads +0.0%, as on the report's page.
    return "n/a" if value != value else f"{round(value * 100, 1) + 0.0:+.1f}%"


def reference_sentence() -> str:
    """Which reference the gains are measured against, in words (predict's output and the report)."""
    return (f"gains are over the {ORDER_REFERENCE} order: TensorFlow's own order in the profiled run (each "
            "parameter transfer ranked by its median recorded start), replayed by the same priority scheduler; "
            "'vs random' is over the random orders' median throughput at each W")


def format_ordering_summary(summary) -> str:
    """The per-policy comparison (:func:`ordering_summary`) as a terminal table."""
    show = summary.copy()
    show["E (Wmin)"] = show["efficiency_E"].map(lambda x: "n/a" if x != x else f"{x:.2f}")
    show["thr Wmin"] = show["throughput_Wmin_eps"].map(lambda x: f"{x:,.1f}")
    show["thr Wmax"] = show["throughput_Wmax_eps"].map(lambda x: f"{x:,.1f}")
    show[f"best gain vs {ORDER_REFERENCE}"] = [f"{_gain(g)} at W={int(w)}" if g == g else "n/a"
                                               for g, w in zip(show["best_gain"], show["best_gain_workers"])]
    show["mean gain"] = show["mean_gain"].map(_gain)
    show["mean vs random"] = show["mean_gain_over_random"].map(_gain)
    cols = ["policy", "E (Wmin)", "thr Wmin", "thr Wmax", f"best gain vs {ORDER_REFERENCE}", "mean gain",
            "mean vs random"]
    return show[cols].to_string(index=False)


def random_spread(summary) -> str | None:
    """One line on the random orders' spread of gains, or None without them."""
    spread = random_gains(summary)
    if spread is None:
        return None
    return (f"random orders ({spread['orders']} seeds): mean gain over {ORDER_REFERENCE} from "
            f"{_gain(spread['min'])} to {_gain(spread['max'])} (median {_gain(spread['median'])})")


def ordering_verdict(summary, threshold: float = ORDER_WORTH) -> str:
    """One sentence answering "should I enable TicTac on this job?".

    Candidates are the orders one would choose (:func:`simulate.orderings.candidate_orders`:
    not the reference, not a model of gRPC, not a random permutation). A random permutation that
    beats them is named as what it is, a lucky draw, so that the sentence never contradicts the
    table above it.
    """
    if summary["mean_gain"].isna().all():
        return (f"no {ORDER_REFERENCE} reference in this sweep: add {ORDER_REFERENCE} to the transfers to compare "
                "orders against TensorFlow's own")
    candidates = candidate_orders(summary)
    draws = summary[summary["policy"].str.startswith(RANDOM_PREFIX)].dropna(subset=["mean_gain"])
    if candidates.empty:
        return "no other order to compare"
    best = candidates.loc[candidates["mean_gain"].idxmax()]
    luck = ""
    if len(draws):
        lucky = draws.loc[draws["mean_gain"].idxmax()]
        if lucky["mean_gain"] > max(threshold, best["mean_gain"]):
            luck = (f"; {lucky['policy']}'s {lucky['mean_gain'] * 100:+.1f}% is one random permutation's "
                    "luck, not an order TicTac or TensorFlow would choose")
    over_random = ("" if best["mean_gain_over_random"] != best["mean_gain_over_random"] else
                   f", {_gain(best['mean_gain_over_random'])} over the median random order")
    if best["mean_gain"] > threshold:
        return (f"verdict: enforcing the {best['policy']} order is predicted to gain "
                f"{best['mean_gain'] * 100:.1f}% over the {ORDER_REFERENCE} order on average over this sweep "
                f"(up to {best['best_gain'] * 100:.1f}% at W={int(best['best_gain_workers'])}{over_random}){luck}: "
                "worth trying")
    names = ", ".join(candidates["policy"])
    return (f"verdict: no chosen order ({names}) beats the {ORDER_REFERENCE} order by more than "
            f"{threshold * 100:.0f}% on average over this sweep (best: {best['policy']}, "
            f"{best['mean_gain'] * 100:+.1f}%{over_random}){luck}: not worth enforcing")


def ordering_summary(frame):
    """Per transfer policy of a prediction table: E at the smallest W, throughput at the smallest
    and largest W, the gains over the recorded order (best, where, mean) and over the random
    orders' median. The one table of gains: prediction.json, ``tfsim predict`` and the report
    all state it (:func:`simulate.orderings.order_gains` with :data:`ORDER_REFERENCE`)."""
    return order_gains(frame, ORDER_REFERENCE)


def _records(frame) -> list[dict]:
    """A table as JSON records at full precision (pandas' to_json keeps 10 decimals, which a gain
    of a few parts per million does not survive); NaN and missing are null."""
    def plain(value):
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return None
        return value.item() if hasattr(value, "item") else value

    return [{key: plain(value) for key, value in row.items()} for row in frame.to_dict(orient="records")]


def ordering_records(summary) -> list[dict]:
    """The order table (:func:`ordering_summary`) as JSON records, gains at full precision."""
    return _records(summary)


def ordering_fields(summary) -> dict:
    """What a prediction document adds when it compares orders: the reference, the per-policy
    summary, the random orders' spread (when there are any) and the verdict."""
    fields = {"ordering_reference": ORDER_REFERENCE, "orderings": _records(summary),
              "ordering_verdict": ordering_verdict(summary)}
    spread = random_gains(summary)
    if spread:
        fields["random_gains"] = spread
        fields["random_spread"] = random_spread(summary)
    return fields
