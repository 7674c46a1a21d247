"""The report as one self-contained HTML page: inline CSS, inline PNG figures, no script and
no external asset, so it opens offline and can be mailed as one file."""

from __future__ import annotations

from simulate.config import TieOrder
from tfbase.units import format_rate
from tfsim import __version__
from tfsim.report.advice import GAIN_NOTE, loss_words, order_advice
from tfsim.report.html import esc, figure, num, pct, table
from tfsim.report.timeline_page import timeline_section

STYLE = """
:root { --ink: #1a202c; --muted: #4a5568; --line: #e2e8f0; --accent: #2b6cb0; --good: #276749; --bad: #9b2c2c; }
* { box-sizing: border-box; }
body { margin: 0; background: #f7fafc; color: var(--ink);
       font: 15px/1.5 -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; }
main { max-width: 1080px; margin: 0 auto; padding: 28px 32px 48px; background: #fff; min-height: 100vh; }
header h1 { font-size: 26px; margin: 0 0 4px; }
header p { margin: 0; color: var(--muted); }
h2 { font-size: 19px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--line); }
h3 { font-size: 15px; margin: 20px 0 6px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(190px, 1fr)); gap: 12px; margin: 22px 0 8px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; background: #fbfdff; }
.card .label { font-size: 12px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 24px; font-weight: 600; }
.card .note { font-size: 12px; color: var(--muted); }
.advice { border-left: 4px solid var(--accent); background: #ebf8ff; padding: 10px 18px; margin: 18px 0; }
.advice ul { margin: 6px 0; padding-left: 20px; }
.advice li { margin: 4px 0; }
table { border-collapse: collapse; margin: 8px 0 12px; font-size: 13px; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: #edf2f7; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.mark td { background: #fefcbf; }
figure { margin: 14px 0 20px; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { font-size: 13px; color: var(--muted); margin-top: 4px; }
.note { color: var(--muted); font-size: 13px; }
code { background: #edf2f7; padding: 1px 4px; border-radius: 3px; font-size: 13px; }
pre { background: #edf2f7; padding: 10px 12px; border-radius: 4px; overflow-x: auto; font-size: 13px;
      white-space: pre-wrap; word-break: break-all; }
.verdict-yes { color: var(--good); font-weight: 600; }
.verdict-no { color: var(--bad); font-weight: 600; }
footer { margin-top: 36px; color: var(--muted); font-size: 12px; }
"""


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


# ---------------------------------------------------------------------------- sections

def _cards(numbers: dict) -> str:
    cards = [("Saturation point", f"W = {numbers['saturation_workers']}",
              f"smallest W within 5% of the best of W = 1..{numbers['largest_workers']}"
              if numbers["saturation_workers"] < numbers["largest_workers"]
              else "throughput still grows at the largest W predicted"),
             ("Throughput there", f"{num(numbers['throughput_at_saturation_eps'])}",
              f"examples/s, ±{num(numbers['ci95_at_saturation_eps'], '.2g')} (95%)"),
             ("Busiest link there", pct(numbers["busiest_link_utilisation"], 0),
              f"{numbers['busiest_link']} utilisation")]
    if "best_order" in numbers:
        best = f"{esc(numbers['best_order'])} {pct(numbers['best_order_mean_gain'], 1, True)}"
        cards.append(("Best transfer order", best,
                      f"mean gain over the {numbers['ordering_reference']} order; "
                      f"{pct(numbers['best_order_gain_at_saturation'], 1, True)} at "
                      f"W = {numbers['saturation_workers']}"))
    errors = numbers.get("mean_abs_error") or {}
    if "tfsim" in errors:
        cards.append(("Error vs measured", pct(errors["tfsim"], 1), "tfsim, mean |relative error|"))
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="label">{esc(label)}</div><div class="value">{value}</div>'
        f'<div class="note">{esc(note)}</div></div>' for label, value, note in cards) + "</div>"


def _cap_text(cluster: dict, direction: str) -> str:
    """A connection cap's words after the direction's bandwidth (docs/model.md §4.8); none: ''."""
    cap = (cluster.get("connection_cap_Bps") or {}).get(direction)
    return "" if cap is None else f" (each connection at most {esc(format_rate(cap))})"


def _cluster_section(cluster: dict, figures: dict) -> str:
    parts = ["<h2>1. The cluster</h2>"]
    if cluster["calibrated"]:
        source = f"Calibrated cluster <code>{esc(cluster['source'])}</code>"
        run_dir = (cluster.get("provenance") or {}).get("run_dir")
        if run_dir:
            source += f", fitted from the captured run <code>{esc(run_dir)}</code>"
        if cluster.get("what_if_bandwidth"):
            source += (f"; predicted at a what-if bandwidth of <b>{esc(cluster['what_if_bandwidth'])}</b> "
                       "(everything else as calibrated)")
    else:
        source = ("<b>Not calibrated</b>: bandwidth only, with no parsing overhead and an unlimited HTTP/2 window. "
                  "Run <code>tfsim calibrate</code> on a captured run for numbers to act on")
    latency = cluster.get("latency_s") or {}
    if any(latency.values()):
        source += (f"; with a what-if one-way latency of <b>{num(latency['downlink'], ',.3g', 1e3)} ms</b> PS → "
                   f"worker and <b>{num(latency['uplink'], ',.3g', 1e3)} ms</b> worker → PS added to every "
                   "transfer and message")
    parts.append(f"<p>{source}. Parsing overhead runs <b>{esc(cluster['overhead_placement'])}</b> "
                 f"(where received tensors are deserialised).</p>")
    spread = cluster.get("bandwidth_spread_Bps") or {}
    windows = cluster.get("win_bytes_by_direction") or {}
    rows = []
    for d in ("downlink", "uplink"):
        o = cluster["overhead"][d]
        s = spread.get(d) or {}
        win = windows.get(d, cluster["win_bytes"])
        rows.append([
            "PS → worker" if d == "downlink" else "worker → PS",
            esc(format_rate(cluster["bandwidth_Bps"][d])) + _cap_text(cluster, d),
            num(cluster["bandwidth_Bps"][d], ",.1f", 1e-6),
            (f"{esc(format_rate(s['min']))} – {esc(format_rate(s['max']))} ({s.get('runs')} runs)"
             if s.get("min") is not None else "–"),
            "unlimited" if win is None else num(win, ",.1f", 1 / 2 ** 20),
            num(o["alpha_s_per_byte"], ".3g", 1e9), num(o["beta_s"], ",.2f", 1e3),
            num(o.get("r2"), ".2f", missing="–"), esc(o.get("n", "–")),
            num(o.get("residual_median_abs_s"), ",.2f", 1e3, missing="–")])
    parts.append(table(["direction", "bandwidth B", "B (MB/s)", "iperf3 range", "HTTP/2 window (MiB)",
                        "α (ns/byte)", "β (ms)", "fit R²", "n", "median |residual| (ms)"], rows,
                       numeric={2, 4, 5, 6, 7, 8, 9}))
    errors = cluster.get("transfer_model_error") or {}
    if errors:
        rows = []
        for model, per in errors.items():
            for d in ("downlink", "uplink", "all"):
                e = per.get(d)
                if e:
                    rows.append([esc(model), esc(d), pct(e.get("median")), pct(e.get("p95")), pct(e.get("max")),
                                 esc(e.get("n", "–"))])
        parts.append("<h3>How well each transfer model reproduces the captured streams</h3>")
        parts.append('<p class="note">Relative error of each tensor stream\'s modelled end time against the capture, '
                     + esc((cluster.get("provenance") or {}).get("error_definition", "")) + ".</p>")
        parts.append(table(["transfer model", "direction", "median error", "p95 error", "max error", "streams"], rows,
                           numeric={2, 3, 4, 5}))
    plots = [f for k, f in figures.items() if k.startswith("calibration_")]
    if plots:
        parts.append("<h3>Calibration plots</h3>")
        parts.extend(figure(f, alt=f.caption) for f in plots)
    elif cluster["calibrated"]:
        parts.append('<p class="note">No calibration plots were found beside the cluster file '
                     "(<code>tfsim calibrate --plots DIR</code> writes them; <code>--cluster-plots DIR</code> "
                     "points the report at them).</p>")
    return "\n".join(parts)


def _job_section(report) -> str:
    job = report.job
    tictac = job["tictac"]
    st = job["step_time_s"] or {}
    rows = [
        ["model", esc(f"{job['model']} (batch {job['batch_size']} examples per step and worker)")],
        ["traced steps", esc(job["steps"])],
        ["ops per step", esc(f"{job['ops']:,}: " + ", ".join(f"{k} {v:,}" for k, v in job["ops_by_resource"].items()))],
        ["parameter servers", esc(job["servers"])],
        ["bytes per step", esc(f"downlink {job['bytes_downlink'] / 1e6:,.2f} MB, "
                               f"uplink {job['bytes_uplink'] / 1e6:,.2f} MB "
                               f"(trainable variables {job['trainable_variable_bytes'] / 1e6:,.2f} MB)")],
        ["step time (1 worker)", esc(f"median {num(st.get('median'), ',.1f', 1e3)} ms, p95 "
                                     f"{num(st.get('p95'), ',.1f', 1e3)} ms ({job['step_time_source']})")],
        ["critical path", esc(f"{num(job['critical_path_median_s'], ',.1f', 1e3)} ms (median op durations, "
                              "unlimited resources)")],
        ["busy time per step", esc(", ".join(f"{k} {v * 1e3:,.1f} ms" for k, v in job["busy_time_median_s"].items()))],
    ]
    parts = ["<h2>2. The job</h2>", table(["", "from the 1-worker profile"], rows)]
    parts.append("<h3>TicTac's scheduling efficiency of the profiled steps</h3>")
    parts.append('<p class="note">U: all ops one after another; L: the busiest resource alone; '
                 'm: the step\'s makespan. '
                 "E = (U − m)/(U − L) is 1 when the step overlaps as well as it can; S = (U − L)/L bounds what any "
                 "order can gain (TicTac Eqs. 1-4).</p>")
    rows = [["E (scheduling efficiency)", num(tictac["efficiency"]["mean"], ".3f"),
             num(tictac["efficiency"]["median"], ".3f")],
            ["S (speedup bound)", num(tictac["speedup"]["mean"], ".3f"), num(tictac["speedup"]["median"], ".3f")],
            ["U (ms)", num(tictac["upper_s"]["mean"], ",.1f", 1e3), num(tictac["upper_s"]["median"], ",.1f", 1e3)],
            [esc(f"L (ms), set by {tictac['bottleneck']}"), num(tictac["lower_s"]["mean"], ",.1f", 1e3),
             num(tictac["lower_s"]["median"], ",.1f", 1e3)],
            ["m (ms)", num(tictac["makespan_s"]["mean"], ",.1f", 1e3),
             num(tictac["makespan_s"]["median"], ",.1f", 1e3)]]
    parts.append(table(["quantity", "mean", "median"], rows, numeric={1, 2}))
    times = ("transfers timed at size/B with the cluster's bandwidth (each alone on its link, as TicTac assumes), "
             "computation as profiled" if tictac.get("times") == "dedicated" else
             "the trace's recorded durations: E needs a cluster's bandwidth to mean something")
    parts.append(f'<p class="note">Op times: {esc(times)}.</p>')
    if tictac.get("steps_outside_bounds"):
        parts.append(f'<p class="note">In {tictac["steps_outside_bounds"]} of {tictac["steps"]} steps the makespan '
                     "lies outside [L, U]; E is not defined there and left out.</p>")
    return "\n".join(parts)


def _throughput_section(report, figures: dict, numbers: dict) -> str:
    parts = ["<h2>3. Throughput against the number of workers</h2>", figure(figures["throughput"], alt="throughput")]
    comparison = report.comparison
    reference = report.reference.set_index("workers")
    methods = [c for c in comparison.columns
               if c not in ("workers", "measured", "tfsim") and not c.startswith("error_")]
    errors = [c for c in comparison.columns if c.startswith("error_")]
    has_measured = "measured" in comparison.columns
    headers = ["W"] + (["measured"] if has_measured else []) + ["tfsim", "± 95% CI", "step (ms)", "downlink busy",
                                                                "uplink busy"] + methods
    headers += [f"error {c[len('error_'):]}" for c in errors]
    rows, marked = [], set()
    for k, row in comparison.iterrows():
        w = int(row["workers"])
        ref = reference.loc[w]
        cells = [str(w)] + ([num(row["measured"], ",.2f", missing="–")] if has_measured else [])
        cells += [num(row["tfsim"], ",.2f"), num(ref["ci95_eps"], ",.3f"), num(ref["step_time_s"], ",.1f", 1e3),
                  pct(ref["util_downlink"], 0), pct(ref["util_uplink"], 0)]
        cells += [num(row[m], ",.2f") for m in methods]
        cells += [pct(row[c], 1, True) if row[c] == row[c] else "–" for c in errors]
        rows.append(cells)
        if w == numbers["saturation_workers"]:
            marked.add(k)
    parts.append('<p class="note">Throughput in examples/s, summed over the workers; tfsim with the cluster\'s '
                 f"default transfer model ({esc(report.reference_policy)}); link busy: the busiest parameter "
                 "server's link; the highlighted row is the "
                 "saturation point. Baselines: " + esc(", ".join(methods)) + " (the coarse analytical models of "
                 + esc(report.request.mode) + " SGD).</p>")
    parts.append(table(headers, rows, numeric=set(range(len(headers))), marked=marked))
    drift = report.prediction.get("drift")
    if drift is not None:
        parts.append(f'<p class="note">{esc(drift["text"])}.</p>')
    if report.measured is not None:
        outside = sorted(set(report.measured["workers"]) - set(comparison["workers"]))
        if outside:
            parts.append(f'<p class="note">Measured at W = {", ".join(map(str, outside))}, outside the predicted '
                         "sweep: plotted, not compared.</p>")
    return "\n".join(parts)


def _gain_cells(row) -> list[str]:
    """An order's mean gain, best gain (and where) and mean gain over random; dashes without a row."""
    if row is None:
        return ["–", "–", "–"]
    best = "n/a" if row["best_gain"] != row["best_gain"] else \
        f"{pct(row['best_gain'], 1, True)} at W = {int(row['best_gain_workers'])}"
    over_random = pct(row["mean_gain_over_random"], 1, True) if row["mean_gain_over_random"] == row[
        "mean_gain_over_random"] else "–"
    return [pct(row["mean_gain"], 1, True), best, over_random]


def _orderings_section(report, figures: dict, numbers: dict) -> str:
    reference = esc(report.ordering_reference)
    shown = report.request.enforcement
    parts = ["<h2>4. What if the transfers were ordered?</h2>", figure(figures["orderings"], alt="orderings")]
    tables = {e: {row["policy"]: row for _, row in summary.iterrows()}
              for e, summary in report.orderings_by_enforcement.items()}
    enforcements = list(tables)
    rows = []
    for _, row in report.orderings.iterrows():
        cells = [esc(row["policy"]), num(row["efficiency_E"], ".2f"), num(row["throughput_Wmin_eps"], ",.2f"),
                 num(row["throughput_Wmax_eps"], ",.2f")]
        gains = [_gain_cells(tables[e].get(row["policy"])) for e in enforcements]
        for k in range(3):  # each measure under every enforcement, side by side
            cells += [gain[k] for gain in gains]
        rows.append(cells)
    lo, hi = int(report.reference["workers"].min()), int(report.reference["workers"].max())
    headers = ["order", f"E at W = {lo}", f"examples/s at W = {lo}", f"examples/s at W = {hi}"]
    for measure in (f"mean gain over {reference}", f"best gain over {reference}", "mean gain over random"):
        headers += [f"{measure}, {esc(e.value)}" for e in enforcements]
    parts.append(table(headers, rows, numeric=set(range(1, len(headers)))))
    parts.append('<p class="note">Reference: the recorded order, TensorFlow\'s own in the profiled run (each '
                 "parameter transfer ranked by its median recorded start), replayed by the same priority scheduler "
                 "as the other orders; gains are throughput over it at the same W and under the same "
                 "enforcement, and over the random orders' median throughput at the same W. Work-conserving: an "
                 "order decides only among the transfers waiting; strict (TicTac's): a transfer starts only after "
                 "every lower-numbered transfer of its worker and link has started, even if the link waits "
                 f"(model.md §3.3). Throughput and E: {esc(shown.value)}, at the smallest W for E, TicTac's "
                 "scheduling efficiency of the simulated steps. tic and tac are TicTac's orders, fifo sends whole "
                 "streams first come first served with flow control off, grpc and http2 model gRPC itself (they "
                 "have no order to enforce: their gains differ between the columns only through the reference); "
                 + ("transfers ready at one instant queue in the recorded order there"
                    if report.request.tie_order is TieOrder.RECORDED else
                    "transfers ready at one instant queue by op index there (--tie-order index)")
                 + "; random#k are random orders.</p>")
    if report.strict_refused:
        parts.append('<p class="note">Strict enforcement refuses (it would deadlock): '
                     + "; ".join(esc(text) for text in report.strict_refused) + ".</p>")
    advice = order_advice(numbers)
    if advice is not None:
        label, sentence = advice
        style = "verdict-yes" if label == "Worth enforcing" else "verdict-no"
        parts.append(f'<p><span class="{style}">{esc(label)}.</span> {esc(sentence)}</p>')
    return "\n".join(parts)


def _cost_section(report, figures: dict) -> str:
    cost = report.cost
    if cost is None:
        return ""
    epoch = "hours_per_epoch" in cost
    rows = [[esc(int(r["workers"])), num(r["throughput_eps"]), num(r["usd_per_hour"], ",.2f"),
             num(r["usd_per_million_examples"], ",.2f")] + ([num(r["hours_per_epoch"], ",.2f")] if epoch else [])
            + ["yes" if r["pareto"] else ""] for _, r in cost.iterrows()]
    headers = ["W", "examples/s", "$ per hour", "$ per million examples"] + (["hours per epoch"] if epoch else []) \
        + ["on the front"]
    cheapest = cost.loc[cost["usd_per_million_examples"].idxmin()]
    return "\n".join([
        "<h2>Cost</h2>",
        f'<p class="note">Prices: {esc(report.request.price)} ($ per host and hour). The cheapest per example is '
        f'W = {int(cheapest["workers"])}: ${num(cheapest["usd_per_million_examples"], ",.2f")} per million '
        "examples.</p>",
        table(headers, rows, numeric={1, 2, 3} | ({4} if epoch else set())),
        figure(figures["cost"], alt="cost"),
    ])


def _straggler_section(report, figures: dict) -> str:
    speeds = report.stragglers
    if speeds is None:
        return ""
    pivot = {(r["mode"], int(r["workers"])): r for _, r in speeds.iterrows()}
    modes = list(dict.fromkeys(speeds["mode"]))
    rows = []
    for w in sorted(set(speeds["workers"])):
        cells = [esc(int(w)), num(pivot[(modes[0], w)]["slowest_speed"], ".3g")]
        for mode in modes:
            r = pivot[(mode, w)]
            cells += [num(r["throughput_even_eps"], ",.1f"), num(r["throughput_stragglers_eps"], ",.1f"),
                      pct(r["loss"], 1)]
        rows.append(cells)
    headers = ["W", "slowest worker's speed"]
    for mode in modes:
        headers += [f"{esc(mode)}: even", f"{esc(mode)}: with stragglers", f"{esc(mode)}: cost of the stragglers"]
    largest = int(speeds["workers"].max())
    losses = {mode: pivot[(mode, largest)]["loss"] for mode in modes}
    summary = "; ".join(f"{esc(mode)} SGD {esc(loss_words(loss))}" for mode, loss in losses.items())
    return "\n".join([
        "<h2>Stragglers: async against sync SGD</h2>",
        f'<p class="note">Worker speeds {esc(report.straggler_plan.text)} (relative to the profiled host; a '
        "straggler at 0.5 computes and parses at half speed, its links and its parameter server are unchanged). "
        "In async SGD a straggler costs its own share: the others do not wait for it. In sync SGD every step "
        "waits at the barrier for the slowest worker. Throughput in examples/s with the "
        f"{esc(report.reference_policy)} transfer model; the cost is the fraction of the even cluster's "
        f"throughput lost. At W = {largest}: {summary}."
        + (f" {esc(GAIN_NOTE)}" if min(losses.values()) < 0 else "") + "</p>",
        table(headers, rows, numeric=set(range(len(headers)))),
        figure(figures["stragglers"], alt="stragglers"),
    ])


def _gantt_section(report, figures: dict) -> str:
    parts = ["<h2>5. Simulated steps</h2>",
             '<p class="note">The engine\'s own events: what each worker\'s links, computation and its parameter '
             "server did during the first steps, alone and with other workers sharing the links (like ICPE "
             "Figs. 3 and 16). Transfers that share a link stretch; the hatched spans are the worker's idle time "
             "while its tensors are on the wire.</p>"]
    rows = []
    for gantt in (report.gantt_one, report.gantt_many):
        s = gantt.stats()
        rows.append([str(s["workers"]), str(s["steps_per_worker"]), num(s["span_s"], ",.2f"),
                     num(s["step_time_mean_s"], ",.1f", 1e3), pct(s["worker_busy_fraction"], 0),
                     pct(s["link_busy_fraction"], 0), pct(s["network_wait_fraction"], 0)])
    parts.append(table(["W", "steps per worker", "span (s)", "mean step (ms)", "worker computing",
                        "a transfer on the wire", "waiting on the network"], rows, numeric=set(range(7))))
    parts.append(figure(figures["gantt_one"], alt="one worker"))
    parts.append(figure(figures["gantt_many"], alt="several workers"))
    return "\n".join(parts)


def _reproduce_section(report) -> str:
    request = report.request
    files = ["report.json (every number on this page)", "prediction.json (tfsim.prediction/1, as tfsim predict --json "
             "writes it)", "prediction.csv (one row per order and W)", "comparison.csv (tfsim, baselines, measured "
             "and errors per W)", "baselines.csv", "orderings.csv"]
    return "\n".join([
        "<h2>6. Reproduce</h2>",
        f"<pre>{esc(request.command_line())} --out DIR</pre>",
        f'<p class="note">{request.steps} simulated steps per worker, the first {request.warmup} dropped; seed '
        f"{request.seed}; {esc(request.mode)} SGD. Beside this page: " + esc("; ".join(files)) + ".</p>",
    ])


def render_page(report, figures: dict, numbers: dict, advice: list[str]) -> str:
    """The whole page as a string."""

    cluster = report.cluster
    title = f"tfsim report: {report.model} (batch {report.batch_size})"
    servers = report.job["servers"]
    subtitle = (f"{esc(report.request.mode)} SGD, {servers} parameter server{'s' if servers != 1 else ''}, "
                f"{esc(format_rate(cluster['bandwidth_Bps']['downlink']))} links "
                f"({'calibrated' if cluster['calibrated'] else 'not calibrated'}); "
                f"W = {esc(report.request.workers)}; tfsim {esc(__version__)}")
    body = [
        f"<header><h1>{esc(title)}</h1><p>{subtitle}</p></header>",
        _cards(numbers),
        '<section class="advice"><b>Recommendation</b><ul>' + "".join(f"<li>{esc(s)}</li>" for s in advice)
        + "</ul></section>",
        _cluster_section(cluster, figures),
        _job_section(report),
        _throughput_section(report, figures, numbers),
        _orderings_section(report, figures, numbers),
        _cost_section(report, figures),
        _straggler_section(report, figures),
        _gantt_section(report, figures),
        timeline_section(report, figures),
        _reproduce_section(report),
        f"<footer>Generated by tfsim {esc(__version__)} from {esc(report.request.profile_path)}"
        + (f" and {esc(report.request.cluster_path)}" if report.request.cluster_path else "")
        + ".</footer>",
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<link rel=\"icon\" href=\"data:,\">\n"  # no favicon request: the page loads nothing else
            f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n"
            + "\n".join(body) + "\n</main>\n</body>\n</html>\n")
