"""``tfsim predict``: read the inputs, run the sweep, write the table, JSON, CSV, plot and trace.

The JSON file has ``format: "tfsim.prediction/1"`` and ``rows``, one per configuration,
each with at least ``workers``, ``transfer``, ``mode``, ``throughput_eps`` (examples/s),
``ci95_eps`` and ``step_time_s`` (SPEC §7).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

from tfbase.errors import InputError, TfsimWarning, UsageError
from tfbase.fileio import atomic_output, write_json
from tfbase.units import format_rate, parse_rate

PREDICTION_FORMAT = "tfsim.prediction/1"
ORDER_POLICIES = {"tic": "tic", "tac": "tac", "reverse": "reverse_tic", "reverse_tic": "reverse_tic",
                  "random": "random"}
RANDOM_SEEDS = 5  # "random" is a spread, not one draw: this many seeded permutations


def ordering_priorities(profile, names, *, bandwidth_Bps: float | None, seed: int) -> dict:
    """Priority maps for the TicTac policies among ``names`` (tic, tac, reverse, random)."""
    from tfprofile.tictac import compute_ordering

    out = {}
    for name in names:
        base, _, suffix = name.partition("#")
        if base in ORDER_POLICIES:
            out[name] = compute_ordering(profile, ORDER_POLICIES[base], bandwidth_Bps=bandwidth_Bps,
                                         seed=seed + int(suffix or 0)).as_mapping()
    return out


def expand_random(transfers: list[str]) -> list[str]:
    """``random`` -> ``random#0`` .. ``random#4``: several seeded permutations, to show a spread."""
    out = []
    for name in transfers:
        out.extend([f"random#{k}" for k in range(RANDOM_SEEDS)] if name == "random" else [name])
    return out


def read_priority_files(profile, specs) -> dict:
    """``NAME=FILE`` or ``FILE`` (NAME: the file's stem) -> {NAME: priority map}."""
    from tfprofile.tictac import read_priorities

    out = {}
    for spec in specs:
        text = os.fspath(spec)
        name, sep, path = text.partition("=")
        if not sep:
            name, path = Path(text).stem, text
        out[name] = read_priorities(path, profile.graph).as_mapping()
    return out


def prediction_document(frame, *, profile_path, cluster, extra: dict | None = None) -> dict:
    """The ``tfsim.prediction/1`` JSON object of a prediction table."""
    rows = json.loads(frame.to_json(orient="records"))
    for row in rows:  # JSON has no inf: an interval that could not be estimated is null
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                row[key] = None
    saturation = {}
    for row in rows:
        if row["saturated"]:
            saturation[f"{row['policy']}/{row['sharing']}/{row['mode']}/ps{row['servers']}"] = row["workers"]
    return {
        "format": PREDICTION_FORMAT,
        "profile": os.fspath(profile_path),
        "cluster": {"source": cluster.source, "calibrated": cluster.calibrated,
                    "bandwidth_Bps": {"downlink": cluster.downlink_Bps, "uplink": cluster.uplink_Bps},
                    "win_bytes": None if math.isinf(cluster.win_bytes) else cluster.win_bytes},
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
    """One sentence answering "should I enable TicTac on this job?"."""
    if "best_gain_over_http2" not in summary:
        return "no http2 baseline in this sweep: add --transfer http2 to compare orders against gRPC's default"
    # A lucky random draw is no order to enforce: only the named policies are candidates.
    candidates = summary[(summary["policy"] != "http2") & ~summary["policy"].str.startswith("random#")]
    candidates = candidates.dropna(subset=["mean_gain_over_http2"])
    if candidates.empty:
        return "no other order to compare"
    best = candidates.loc[candidates["mean_gain_over_http2"].idxmax()]
    if best["mean_gain_over_http2"] > threshold:
        return (f"verdict: enforcing the {best['policy']} order is predicted to gain "
                f"{best['mean_gain_over_http2'] * 100:.1f}% on average over this sweep "
                f"(up to {best['best_gain_over_http2'] * 100:.1f}% at W={best['at_workers']}): worth trying")
    return (f"verdict: no order beats http2 by more than {threshold * 100:.0f}% on average over this sweep "
            f"(best: {best['policy']}, {best['mean_gain_over_http2'] * 100:+.1f}%): not worth enforcing")


def ordering_fields(summary) -> dict:
    """What a prediction document adds when it compares orders: the per-policy summary, the
    random orders' spread (when there are any) and the verdict."""
    fields = {"orderings": json.loads(summary.to_json(orient="records")), "ordering_verdict": ordering_verdict(summary)}
    spread = random_spread(summary)
    if spread:
        fields["random_spread"] = spread
    return fields


def resolve_cluster(cluster_path, bandwidth_text):
    """The cluster to predict for: a CLUSTER.json, rescaled to ``bandwidth_text`` if given (a
    what-if), or, without one, a bandwidth-only cluster (with a warning that it is uncalibrated)."""
    from simulate.cluster_file import load_cluster
    from simulate.cluster import ClusterModel

    bandwidth = parse_rate(bandwidth_text) if bandwidth_text else None
    if cluster_path is None:
        if bandwidth is None:
            raise UsageError("--cluster", "give a calibrated cluster (--cluster CLUSTER.json) or a --bandwidth")
        warnings.warn(TfsimWarning(None, "no calibration: parsing overhead 0 and an unlimited HTTP/2 window "
                                         "assumed"), stacklevel=2)
        return ClusterModel.from_bandwidth(bandwidth)
    cluster = load_cluster(cluster_path)
    if bandwidth is not None:
        cluster = cluster.with_bandwidth(bandwidth, cluster.uplink_Bps * bandwidth / cluster.downlink_Bps)
    return cluster


def run_cli(args) -> int:
    from simulate.predict import default_jobs, ordering_summary, predict
    from tfprofile.profile_io import load_profile

    profile = load_profile(args.profile)
    effective = resolve_cluster(args.cluster, args.bandwidth)
    if args.transfer is None:
        args.transfer = effective.default_transfer
    transfers = expand_random([t.strip() for t in args.transfer.split(",") if t.strip()])
    sharings = [s.strip() for s in args.sharing.split(",") if s.strip()]
    if not transfers or not sharings:
        raise UsageError("--transfer", "give at least one transfer scheduler and sharing model")
    priorities = read_priority_files(profile, args.priorities)
    priorities.update(ordering_priorities(profile, [t for t in transfers if t not in priorities],
                                          bandwidth_Bps=effective.downlink_Bps, seed=args.seed))
    flow_cap = parse_rate(args.flow_cap, "--flow-cap") if args.flow_cap else None
    frame = predict(
        profile, effective, workers=args.workers, servers=args.servers, mode=args.mode, sharing=sharings,
        transfer=transfers, priorities=priorities, steps=args.steps, warmup=args.warmup,
        seed=args.seed, flow_cap_Bps=flow_cap, cores=args.cores, ci_target=args.ci_target, stagger=args.stagger,
        jobs=args.jobs or default_jobs(), progress=not args.no_progress,
    )
    model = profile.meta.get("model") or Path(args.profile).stem
    print(f"{model}, batch {profile.batch_size}: downlink {format_rate(effective.downlink_Bps)}, "
          f"uplink {format_rate(effective.uplink_Bps)}, {args.mode} SGD ({args.steps} steps per worker, "
          f"first {args.warmup} dropped; * = saturation point)")
    print(format_table(frame))
    extra = {}
    if frame["policy"].nunique() > 1 and len(sharings) == 1:
        summary = ordering_summary(frame)
        print()
        print(format_ordering_summary(summary))
        extra = ordering_fields(summary)
        if "random_spread" in extra:
            print(extra["random_spread"])
        print(extra["ordering_verdict"])
    if args.json:
        write_json(args.json, prediction_document(frame, profile_path=args.profile, cluster=effective, extra=extra))
    if args.csv:
        with atomic_output(args.csv) as handle:
            frame.to_csv(handle, index=False, float_format="%.9g")
    if args.plot:
        from tfbase.figures import save_figure
        from tfsim.plots import throughput_figure

        save_figure(throughput_figure(frame, title=f"{model} (batch {profile.batch_size}) on "
                                                   f"{format_rate(effective.downlink_Bps)} links"), args.plot)
    if args.trace_out:
        write_trace(profile, effective, args, priorities)
    return 0


def write_trace(profile, cluster, args, priorities) -> None:
    """Simulate a few steps of the largest (or the chosen) configuration and write its Chrome trace."""
    from simulate.chrome_trace import write_chrome_trace
    from simulate.predict import parse_workers

    name = args.transfer.split(",")[0].strip()
    run = traced_run(profile, cluster, workers=args.trace_workers or max(parse_workers(args.workers)),
                     transfer=name, priorities=priorities, sharing=args.sharing.split(",")[0].strip(),
                     mode=args.mode, servers=args.servers, cores=args.cores, steps=args.trace_steps,
                     seed=args.seed, flow_cap=args.flow_cap, stagger=args.stagger)
    try:
        write_chrome_trace(run, args.trace_out)
    except OSError as exc:
        raise InputError(args.trace_out, f"cannot write: {exc.strerror or exc}") from None


def traced_run(profile, cluster, *, workers: int, transfer: str, priorities: dict, sharing: str = "ps",
               mode: str = "async", servers: int | None = None, cores: float | None = None, steps: int = 3,
               seed: int = 0, flow_cap: str | None = None, stagger: float = 1.0):
    """Simulate ``steps`` steps per worker of one configuration, recording every chunk (a
    :class:`~simulate.engine.SimRun` with a ``trace``). ``transfer`` is a scheduler name or a
    key of ``priorities``. Workers start as :func:`simulate.predict.staggered_starts` spreads them."""
    from simulate.config import Colocation, Mode, Sharing, SimConfig, Transfer, parse_enum
    from simulate.engine import run
    from simulate.predict import staggered_starts
    from simulate.prepare import prepare

    kind = Transfer.PRIORITY if transfer in priorities else parse_enum(Transfer, transfer, "--transfer")
    sharing_ = parse_enum(Sharing, sharing, "--sharing")
    if sharing_ is Sharing.HYBRID:
        warnings.warn(TfsimWarning("--trace-out", "hybrid sharing traced as ps"), stacklevel=2)
        sharing_ = Sharing.PS
    mode_ = parse_enum(Mode, mode, "--mode")
    graph = prepare(profile, cluster, workers=workers, mode=mode_, servers=servers,
                    priorities=priorities.get(transfer))
    colocation = Colocation.single_host(workers, graph.n_servers, cores) if cores else None
    config = SimConfig(workers=workers, mode=mode_, sharing=sharing_, transfer=kind, steps=steps,
                       warmup=0, seed=seed, trace_steps=steps, colocation=colocation,
                       start_offsets_s=staggered_starts(profile, workers, stagger),
                       flow_cap_Bps=parse_rate(flow_cap, "--flow-cap") if flow_cap else None)
    return run(graph, cluster, config)
