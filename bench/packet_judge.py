#!/usr/bin/env python3
"""Judge the packet-level backend (simulate/packet_replay.py) on a lab directory's saved
measurements: ``python bench/packet_judge.py LAB_DIR [--steps 120] [--seeds 1] [--cc bbr]``.

For every setting and W of LAB_DIR/results.csv: ``simulate.predict(transfer="packet")`` of the
setting's one-worker profile (one-worker correction applied, as the lab predicts from) on the
setting's calibrated cluster, each task on a host of the lab's quota (max(1, q) cores,
docs/model.md §4.3), the links shaped as the lab's tbf was (CLUSTER.json ``link_ceiling.link``)
unless ``--calibrated-shaper``, with the tbf's limit as the buffer for a lab calibrated before
CLUSTER.json carried it; the PS CPU bound (docs/model.md §4.7) applies as for the flow model.
Prints per point the measured mean and range, the lab's flow prediction and the replay's, and
the bars' summary for both. ``--packet-window queue_window`` gives the replay of before
2026-11-27 (each connection capped at the calibrated queue window). A study tool, not part of
tfsim.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulate.cluster_file import load_cluster  # noqa: E402
from simulate.config import CongestionControl, PacketNetwork, TaskHosts, WindowLimit  # noqa: E402
from simulate.sweep import predict  # noqa: E402
from tfprofile.profile_io import load_profile  # noqa: E402
from tfsim.lab.netns import Transport  # noqa: E402
from tfsim.lab.validate import CLOSE_ENOUGH  # noqa: E402


def lab_buffer(row: pd.Series) -> float | None:
    """The tbf limit of the setting's links: results.csv's, else from its transport's queue."""
    if "buffer_bytes" in row and pd.notna(row["buffer_bytes"]):
        return float(row["buffer_bytes"])
    match = re.search(r"queue ([0-9.]+) ms", str(row.get("transport", "")))
    if not match:
        return None
    return float(Transport(queue_ms=float(match.group(1))).buffer_bytes(int(float(row["rate_mbit"]) * 1e6)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lab", type=Path)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--cc", default="reno", choices=[c.name.lower() for c in CongestionControl])
    parser.add_argument("--settings", help="comma-separated setting names (default: all)")
    parser.add_argument("--workers", help="comma-separated W (default: all measured)")
    parser.add_argument("--calibrated-shaper", action="store_true")
    parser.add_argument("--segment", type=int, default=1448)
    parser.add_argument("--csv", type=Path)
    parser.add_argument("--follow-cc", action="store_true", help="use the setting's own congestion control")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--window", type=int, help="each connection's receive window, bytes (default: as "
                                                   "--packet-window says)")
    parser.add_argument("--packet-window", choices=[w.value for w in WindowLimit], default="congestion",
                        help="what bounds a connection's bytes in flight (simulate.config.WindowLimit)")
    args = parser.parse_args()
    results = pd.read_csv(args.lab / "results.csv")
    rows = []
    for setting, group in results.groupby("setting", sort=False):
        if args.settings and setting not in args.settings.split(","):
            continue
        first = group.iloc[0]
        profile = load_profile(args.lab / setting / "profile.npz")
        cluster = load_cluster(args.lab / setting / "CLUSTER.json")
        if args.calibrated_shaper:
            cluster = dataclasses.replace(cluster, shaper=None)
        buffer = lab_buffer(first)
        if not np.isfinite(cluster.buffer_downlink_bytes) and buffer is not None:
            cluster = cluster.with_buffer(buffer)
        cc = CongestionControl[args.cc.upper()]
        named = re.search(r"(bbr|cubic|reno) congestion control", str(first.get("transport", "")))
        if named and args.follow_cc:
            cc = CongestionControl[named.group(1).upper()]
        network = PacketNetwork(congestion_control=cc, segment_bytes=args.segment, receive_window_bytes=args.window,
                                window=WindowLimit(args.packet_window))
        workers = [int(w) for w in group["workers"]]
        if args.workers:
            workers = [w for w in workers if w in {int(x) for x in args.workers.split(",")}]
        started = time.time()
        hosts = TaskHosts(worker_cores=max(1.0, float(first["worker_cores"])),
                          ps_cores=max(1.0, float(first["ps_cores"])))
        frame = predict(profile, cluster, workers=workers, servers=int(first.get("ps", 1)), transfer="packet",
                        steps=args.steps,
                        warmup=args.steps // 6, replicas=args.seeds, colocation=hosts, network=network,
                        jobs=args.jobs)
        for (_, row), predicted in zip(group[group["workers"].isin(workers)].iterrows(), frame["throughput_eps"]):
            w = int(row["workers"])
            mean, low, high = (float(row[c]) for c in ("measured_eps", "measured_min_eps", "measured_max_eps"))
            error = float(predicted) / mean - 1
            flow = float(row["predicted_grpc_eps"]) / mean - 1
            rows.append({"setting": setting, "workers": w, "measured_eps": mean, "min": low, "max": high,
                         "packet_eps": float(predicted), "error": error, "flow_error": flow,
                         "inside": bool(low <= predicted <= high or abs(error) <= CLOSE_ENOUGH)})
            print(f"{setting} W={w}: measured {mean:,.1f} ({low:,.1f}..{high:,.1f}) packet {predicted:,.1f} "
                  f"({error:+.1%}) flow {flow:+.1%}", flush=True)
        print(f"{setting}: {time.time() - started:.0f} s", flush=True)
    frame = pd.DataFrame(rows)
    if args.csv:
        frame.to_csv(args.csv, index=False)
    errors, flow = frame["error"].abs(), frame["flow_error"].abs()
    print(f"packet: mean |error| {errors.mean():.1%}, max {errors.max():.1%}, inside {frame['inside'].mean():.0%}; "
          f"flow (the lab's): mean {flow.mean():.1%}, max {flow.max():.1%}")


if __name__ == "__main__":
    main()
