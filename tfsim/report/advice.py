"""The report's answers in numbers (the headline) and in plain sentences (the recommendation):
how many workers before throughput saturates, what limits it there, and whether enforcing a
transfer order is worth it. Every figure is read from the computed report."""

from __future__ import annotations

import math

from simulate.orderings import candidate_orders, random_gains
from tfsim.prediction import ORDER_WORTH

LINK_BOUND = 0.8  # a link this busy at the saturation point is what limits the job
ORDER_MATTERS = 0.02  # random orders spreading less than this: the order barely matters
MODEL_ERROR_NOTE = 0.2  # calibration capture errors above this are worth a caveat




def headline(report) -> dict:
    """The numbers the page leads with (also in ``report.json``)."""
    reference = report.reference
    saturation = report.saturation_workers
    at_sat = reference[reference["workers"] == saturation].iloc[0]
    peak = reference.loc[reference["throughput_eps"].idxmax()]
    first = reference.iloc[0]
    busiest = "downlink" if at_sat["util_downlink"] >= at_sat["util_uplink"] else "uplink"
    out = {
        "reference_policy": report.reference_policy,
        "ordering_reference": report.ordering_reference,
        "saturation_workers": saturation,
        "largest_workers": int(reference["workers"].max()),
        "throughput_at_saturation_eps": float(at_sat["throughput_eps"]),
        "ci95_at_saturation_eps": _number(at_sat["ci95_eps"]),
        "peak_throughput_eps": float(peak["throughput_eps"]),
        "peak_workers": int(peak["workers"]),
        "speedup_at_saturation": (float(at_sat["throughput_eps"] / first["throughput_eps"])
                                  if int(first["workers"]) == 1 else None),
        "busiest_link": busiest,
        "busiest_link_utilisation": float(at_sat[f"util_{busiest}"]),
        "network_wait_fraction_one": report.gantt_one.stats()["network_wait_fraction"],
        "network_wait_fraction_many": report.gantt_many.stats()["network_wait_fraction"],
        "gantt_workers": report.gantt_many.workers,
    }
    candidates = candidate_orders(report.orderings)
    if len(candidates):
        best = candidates.loc[candidates["mean_gain"].idxmax()]
        frame, reference_order = report.frame, report.ordering_reference
        at_workers = frame[frame["workers"] == saturation].set_index("policy")["throughput_eps"]
        out.update({"best_order": str(best["policy"]), "best_order_mean_gain": float(best["mean_gain"]),
                    "best_order_max_gain": float(best["best_gain"]),
                    "best_order_max_gain_workers": int(best["best_gain_workers"]),
                    "best_order_gain_at_saturation":
                        float(at_workers[best["policy"]] / at_workers[reference_order] - 1),
                    "order_worth_enforcing": bool(best["mean_gain"] > ORDER_WORTH)})
        if best["mean_gain_over_random"] == best["mean_gain_over_random"]:
            out["best_order_mean_gain_over_random"] = float(best["mean_gain_over_random"])
    spread = random_gains(report.orderings)
    if spread is not None:
        out["random_gain_range"] = [spread["min"], spread["max"]]
        out["random_gain_median"] = spread["median"]
    errors = mean_abs_errors(report.comparison)
    if errors:
        out["mean_abs_error"] = errors
    if report.stragglers is not None:
        out["stragglers"] = straggler_numbers(report.stragglers, report.straggler_plan.text)
    return out


def straggler_numbers(table, speeds: str) -> dict:
    """At the largest W of the straggler section: each mode's throughput with the stragglers and
    the fraction of the even cluster's it loses."""
    largest = int(table["workers"].max())
    at = table[table["workers"] == largest].set_index("mode")
    return {"worker_speed": speeds, "workers": largest,
            **{f"throughput_{mode}_eps": float(at.at[mode, "throughput_stragglers_eps"]) for mode in at.index},
            **{f"loss_{mode}": float(at.at[mode, "loss"]) for mode in at.index}}


def mean_abs_errors(comparison) -> dict:
    """Each method's mean |relative error| against the measurements (empty without them)."""
    out = {}
    for column in comparison.columns:
        if column.startswith("error_"):
            value = float(comparison[column].abs().mean())
            if math.isfinite(value):
                out[column[len("error_"):]] = value
    return out


def _number(value):
    value = float(value)
    return value if math.isfinite(value) else None


def _pct(value: float, sign: bool = False) -> str:
    # Rounded before formatting, and + 0.0, so that a tiny loss reads +0.0%, not -0.0%.
    return f"{round(value * 100, 1) + 0.0:+.1f}%" if sign else f"{value * 100:.0f}%"


def _pct1(value: float) -> str:
    return f"{value * 100:.1f}%"


def order_advice(numbers: dict) -> tuple[str, str] | None:
    """Whether enforcing an order is worth it: a short label and the sentence that says why."""
    if "best_order" not in numbers:
        return None
    best, mean, sat = numbers["best_order"], numbers["best_order_mean_gain"], numbers["saturation_workers"]
    at_sat, reference = numbers["best_order_gain_at_saturation"], f"the {numbers['ordering_reference']} order"
    most = f"up to {_pct(numbers['best_order_max_gain'], True)} at W = {numbers['best_order_max_gain_workers']}"
    if numbers["order_worth_enforcing"] and at_sat > ORDER_WORTH:
        return "Worth enforcing", (f"Enforcing the {best} order is worth trying: it is predicted to gain "
                                   f"{_pct(mean, True)} over {reference} on average over the sweep ({most}) and "
                                   f"{_pct(at_sat, True)} at W = {sat}.")
    if numbers["order_worth_enforcing"]:
        return "Worth it below the saturation point", (
            f"Enforcing the {best} order pays only with fewer than {sat} workers: it is predicted to gain "
            f"{_pct(mean, True)} over {reference} on average over the sweep ({most}), but {_pct(at_sat, True)} "
            f"at W = {sat}.")
    return "Not worth enforcing", (f"Enforcing a transfer order is not worth it: none beats {reference} by more than "
                                   f"{ORDER_WORTH * 100:.0f}% on average (best: {best}, {_pct(mean, True)}; "
                                   f"{_pct(at_sat, True)} at W = {sat}).")


def recommendation(report, numbers: dict) -> list[str]:
    """A few plain sentences, each built from the numbers in ``numbers`` (see :func:`headline`)."""
    sentences = []
    sat, largest = numbers["saturation_workers"], numbers["largest_workers"]
    thr = numbers["throughput_at_saturation_eps"]
    if sat == largest and largest > 1:
        sentences.append(f"Throughput still grows at W = {largest}, the largest worker count predicted "
                         f"({thr:,.1f} examples/s): predict more workers (--workers) to find where it saturates.")
    else:
        extra = numbers["peak_throughput_eps"] / thr - 1
        speedup = (f", {numbers['speedup_at_saturation']:.1f}× one worker" if numbers["speedup_at_saturation"]
                   else "")
        sentences.append(
            f"Use up to {sat} worker{'s' if sat != 1 else ''}. With the {numbers['reference_policy']} transfer model "
            f"the job reaches "
            f"{thr:,.1f} examples/s at W = {sat}{speedup}, within 5% of the most this sweep reaches; "
            f"going up to W = {largest} adds {_pct1(extra)} at most.")
    util = numbers["busiest_link_utilisation"]
    if util >= LINK_BOUND:
        sentences.append(f"At W = {sat} the parameter server's {numbers['busiest_link']} is {_pct(util)} busy: the "
                         "network is the bottleneck, so a faster link or more parameter servers (tfsim predict --ps M) "
                         "would raise the ceiling, and more workers would not.")
    else:
        sentences.append(f"At W = {sat} the busiest link ({numbers['busiest_link']}) is {_pct(util)} busy, so raw "
                         "bandwidth is not all that limits the job.")
    sentences.append("In the simulated steps a lone worker waits on the network "
                     f"{_pct(numbers['network_wait_fraction_one'])} "
                     f"of the time; with {numbers['gantt_workers']} workers, "
                     f"{_pct(numbers['network_wait_fraction_many'])}.")
    orders = order_advice(numbers)
    if orders is not None:
        sentences.append(orders[1])
    if "random_gain_range" in numbers:
        low, high = numbers["random_gain_range"]
        matters = "matters" if high - low >= ORDER_MATTERS else "barely matters"
        sentences.append(f"Random orders land between {_pct(low, True)} and {_pct(high, True)} over the "
                         f"{numbers['ordering_reference']} order on average (median "
                         f"{_pct(numbers['random_gain_median'], True)}): "
                         f"the order of the transfers {matters} for this job.")
    errors = numbers.get("mean_abs_error")
    if errors and "tfsim" in errors:
        others = sorted(((e, m) for m, e in errors.items() if m != "tfsim"))
        best_other = f"; the best coarse baseline, {others[0][1]}, is off by {_pct(others[0][0])}" if others else ""
        sentences.append(f"Against the measurements tfsim is off by {_pct(errors['tfsim'])} on average{best_other}.")
    straggler = straggler_advice(numbers)
    if straggler is not None:
        sentences.append(straggler)
    sentences.extend(_calibration_caveats(report.cluster, numbers["reference_policy"]))
    return sentences


def straggler_advice(numbers: dict) -> str | None:
    """What the stragglers cost at the largest W in async and in sync SGD, and which is faster
    with them; None when the report has no straggler section."""
    straggle = numbers.get("stragglers")
    if straggle is None:
        return None
    faster = max(("async", "sync"), key=lambda mode: straggle[f"throughput_{mode}_eps"])
    losses = (straggle["loss_async"], straggle["loss_sync"])
    return (f"With the stragglers ({straggle['worker_speed']}) at W = {straggle['workers']}, async SGD "
            f"{loss_words(losses[0])} and sync SGD {loss_words(losses[1])}: "
            f"{faster} SGD is faster ({straggle[f'throughput_{faster}_eps']:,.1f} examples/s)."
            + (f" {GAIN_NOTE}" if min(losses) < 0 else ""))


GAIN_NOTE = "A gain is possible where the links are contended: a slower worker leaves the others more of them."


def loss_words(loss: float) -> str:
    """What the stragglers cost a mode, in words: ``loses X%``, or ``gains X%`` when it is negative."""
    return f"gains {_pct1(-loss)}" if loss < 0 else f"loses {_pct1(loss)} of its throughput"


def _calibration_caveats(cluster: dict, model: str) -> list[str]:
    if not cluster["calibrated"]:
        return ["The cluster is not calibrated (no parsing overhead, an unlimited HTTP/2 window): calibrate it "
                "(tfsim calibrate) before acting on the absolute numbers."]
    errors = (cluster.get("transfer_model_error") or {}).get(model) or {}
    worst = max(((e.get("median") or 0.0, d) for d, e in errors.items() if d != "all"), default=None)
    if worst and worst[0] > MODEL_ERROR_NOTE:
        return [f"On the calibration capture the {model} transfer model's median stream end-time error is "
                f"{_pct(worst[0])} ({worst[1]}): read the absolute numbers with that margin."]
    return []
