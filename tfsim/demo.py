"""``tfsim demo``: the pipeline on the bundled real data, no TensorFlow and no network needed.

It summarises every bundled profile, predicts the main model's throughput over W with
each transfer ordering (HTTP/2 as gRPC does it, FIFO with flow control off, TicTac's TIC
and TAC orders), sets the coarse analytical baselines beside it, and writes tables, JSON
and a plot to one directory (written whole, then renamed into place).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from tfsim.errors import InputError
from tfsim.fileio import atomic_output, write_json, write_text

MAIN_MODEL = "resnet50"
DEMO_WORKERS = (1, 2, 3, 4, 6, 8, 12, 16)
DEMO_TRANSFERS = ("http2", "fifo", "tic", "tac")
DEMO_BANDWIDTH = "1gbit"


def project_data_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "data"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def find_cluster(data: Path):
    """The bundled calibration to predict with, or None (then a bandwidth-only cluster is used)."""
    clusters = sorted((data / "clusters").glob("*.json")) if (data / "clusters").is_dir() else []
    preferred = [p for p in clusters if "1gbit" in p.name] or clusters
    return preferred[0] if preferred else None


def run_cli(args) -> int:
    import pandas as pd

    from calibration.cluster_file import load_cluster
    from simulate.cluster import ClusterModel
    from simulate.compare import baselines
    from simulate.predict import default_jobs, predict
    from tfprofile.profile_io import load_profile
    from tfprofile.summary import summarize
    from tfsim.plots import save_figure, throughput_figure
    from tfsim.prediction import format_table, ordering_priorities, prediction_document
    from tfsim.units import format_rate, parse_rate

    started = time.monotonic()
    data = args.data or project_data_dir()
    profiles = sorted((data / "profiles").glob("*.npz"))
    if not profiles:
        raise InputError(data / "profiles", "holds no bundled profile (*.npz): is this a tfsim checkout?")
    out = Path(args.out)
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)

    _say(f"[1/4] summarising {len(profiles)} bundled profiles from {data / 'profiles'}")
    rows, loaded = [], {}
    for path in profiles:
        profile = load_profile(path)
        loaded[path.stem] = profile
        s = summarize(profile)
        rows.append({"profile": path.stem, "model": s["model"], "batch": s["batch_size"], "ops": s["ops"],
                     "transfers": s["transfers"], "MB_down_per_step": s["bytes_downlink"] / 1e6,
                     "MB_up_per_step": s["bytes_uplink"] / 1e6, "step_time_ms": s["step_time_s"]["median"] * 1e3,
                     "critical_path_ms": s["critical_path_median_s"] * 1e3})
    summaries = pd.DataFrame(rows)
    print(summaries.to_string(index=False, float_format=lambda x: f"{x:,.1f}"))
    with atomic_output(partial / "profiles.csv") as handle:
        summaries.to_csv(handle, index=False)

    main = MAIN_MODEL if MAIN_MODEL in loaded else next(iter(loaded))
    profile = loaded[main]
    cluster_path = find_cluster(data)
    if cluster_path is not None:
        cluster = load_cluster(cluster_path)
        where = f"calibrated cluster {cluster_path.name}"
    else:
        cluster = ClusterModel.from_bandwidth(parse_rate(DEMO_BANDWIDTH))
        where = f"{DEMO_BANDWIDTH} links, uncalibrated (no parsing overhead, unlimited HTTP/2 window)"
    _say(f"[2/4] predicting {main} on W = {', '.join(map(str, DEMO_WORKERS))} with {', '.join(DEMO_TRANSFERS)} "
         f"orderings on {where}")
    priorities = ordering_priorities(profile, DEMO_TRANSFERS, bandwidth_Bps=cluster.downlink_Bps, seed=0)
    frame = predict(profile, cluster, workers=DEMO_WORKERS, transfer=DEMO_TRANSFERS, priorities=priorities,
                    steps=args.steps, warmup=min(50, args.steps // 5), jobs=args.jobs or default_jobs(),
                    progress=True)
    print(f"\n{main}, batch {profile.batch_size}, on {format_rate(cluster.downlink_Bps)} links "
          f"(* = saturation point):")
    print(format_table(frame))
    with atomic_output(partial / "prediction.csv") as handle:
        frame.to_csv(handle, index=False, float_format="%.9g")
    write_json(partial / "prediction.json",
               prediction_document(frame, profile_path=data / "profiles" / f"{main}.npz", cluster=cluster))

    _say("[3/4] coarse analytical baselines")
    base = baselines(profile, cluster, DEMO_WORKERS, "async")
    with atomic_output(partial / "baselines.csv") as handle:
        base.to_csv(handle, index=False, float_format="%.9g")
    print("\nbaselines (examples/s):")
    print(base.pivot(index="workers", columns="model", values="throughput_eps").to_string(
        float_format=lambda x: f"{x:,.1f}"))

    _say("[4/4] plotting")
    http2 = frame[frame["policy"] == "http2"]
    save_figure(throughput_figure(frame, title=f"{main} (batch {profile.batch_size}), "
                                              f"{format_rate(cluster.downlink_Bps)} links: predicted throughput"),
                partial / "throughput.png")
    save_figure(throughput_figure(http2, baselines=base, title=f"{main}: simulation vs coarse baselines"),
                partial / "baselines.png")
    best = frame.loc[frame.groupby("workers")["throughput_eps"].idxmax()]
    saturation = int(http2[http2["saturated"]]["workers"].iloc[0])
    lines = [f"tfsim demo: {main} (batch {profile.batch_size}) on {where}", "",
             f"- with gRPC's HTTP/2 transfers, throughput saturates at W = {saturation} "
             f"({http2[http2['workers'] == saturation]['throughput_eps'].iloc[0]:.1f} examples/s)"]
    for _, row in best.iterrows():
        base_thr = http2[http2["workers"] == row["workers"]]["throughput_eps"].iloc[0]
        lines.append(f"- W = {row['workers']:>2}: best order {row['policy']:<5} "
                     f"{row['throughput_eps']:8.1f} examples/s ({(row['throughput_eps'] / base_thr - 1) * 100:+.1f}% "
                     f"over http2)")
    write_text(partial / "findings.txt", "\n".join(lines) + "\n")
    write_json(partial / "demo.json", {"format": "tfsim.demo/1", "model": main, "cluster": where,
                                       "workers": list(DEMO_WORKERS), "transfers": list(DEMO_TRANSFERS),
                                       "steps": args.steps, "saturation_workers_http2": saturation})
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    print("\n" + "\n".join(lines))
    print(f"\nwrote {out}/ (prediction.csv/json, baselines.csv, profiles.csv, throughput.png, baselines.png, "
          f"findings.txt) in {time.monotonic() - started:.0f} s")
    return 0
