#!/usr/bin/env python3
"""Candidate rules for ``--transfer auto`` judged on saved lab points, from saved predictions only:
``python bench/results/auto-rule-2026-11-27/judge_rules.py [--with-cap]`` (seconds).

Per lab: the packet model's error per point (bench/packet_judge.py ``--csv``, congestion-window
senders), the flow model's (bench/lab_flow_judge.py on the same saved profiles and
calibrations), the measured range (results.csv); a lab without CSVs here uses its own
results.csv columns (``error_packet``, ``error_grpc``). Rules: flow everywhere, packet
everywhere, auto's committed rule (packet where the workers' queue windows overflow the port's
buffer: results.csv ``overflow_expected``, or the same rule from CLUSTER.json and the lab's queue
for labs older than that column), and packet from W = 2 with flow at W = 1. A study tool.
"""
import math
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from auto_judge import _truthy  # noqa: E402  (the same reading of results.csv's flags)
from packet_judge import lab_buffer  # noqa: E402

from simulate.cluster import overflow_onset_workers  # noqa: E402
from simulate.cluster_file import load_cluster  # noqa: E402
from tfsim.lab.validate import CLOSE_ENOUGH  # noqa: E402

KEY = ["setting", "workers"]
LABS = {  # name: (results dir, packet csv, flow csv)
    "matrix": ("lab-2026-11-27-matrix", "packet-window-2026-11-27/matrix-congestion.csv",
               "flow-lab-2026-11-27-matrix.csv"),
    "fresh-200": ("auto-2026-11-27/fresh", "packet-window-2026-11-27/auto-fresh-congestion.csv",
                  "flow-auto-2026-11-27-fresh.csv"),
    "fresh-11-26": ("packet-2026-11-26/fresh", "packet-window-2026-11-27/fresh-2026-11-26-congestion.csv",
                    "flow-packet-2026-11-26-fresh.csv"),
    "tf2pss": ("lab-2026-11-27-tf2pss-settle", "packet-window-2026-11-27/tf2pss-congestion.csv",
               "flow-lab-2026-11-27-tf2pss-settle.csv"),
    "transport": ("lab-2026-11-26-transport", "auto-rule-2026-11-27/transport-packet.csv",
                  "flow-lab-2026-11-26-transport.csv"),
    "2ps": ("lab-2026-11-27-2ps", "auto-rule-2026-11-27/2ps-packet.csv", "flow-lab-2026-11-27-2ps.csv"),
    "fresh-11-27": ("fresh-2026-11-27/run", None, None),  # the lab's own packet and flow predictions
}
RESULTS = ROOT / "bench" / "results"
frames = []
for name, (lab, packet_csv, flow_csv) in LABS.items():
    if packet_csv is None:
        results = pd.read_csv(RESULTS / lab / "results.csv")
        if "error_packet" not in results or results["error_packet"].isna().all():
            print(f"{name}: no packet predictions yet")
            continue
        t = results.rename(columns={"error_packet": "packet", "error_grpc": "flow"})[
            KEY + ["measured_eps", "measured_min_eps", "measured_max_eps", "overflow_expected", "packet",
                   "flow"]].copy()
        t["lab"] = name
        frames.append(t)
        continue
    packet_path = RESULTS / packet_csv
    flow_path = HERE / flow_csv
    if not packet_path.exists() or not flow_path.exists():
        print(f"{name}: missing {packet_path if not packet_path.exists() else flow_path}")
        continue
    results = pd.read_csv(RESULTS / lab / "results.csv")
    if "overflow_expected" not in results:  # older labs: the same rule from their calibration and queue
        flags, windows = [], {}
        for _, row in results.iterrows():
            if row["setting"] not in windows:  # one calibration per setting
                cluster = load_cluster(RESULTS / lab / row["setting"] / "CLUSTER.json")
                windows[row["setting"]] = cluster.queue_window_uplink_bytes
            onset = overflow_onset_workers(windows[row["setting"]], lab_buffer(row) or math.inf)
            flags.append(onset is not None and row["workers"] >= onset)
        results["overflow_expected"] = flags
    packet = pd.read_csv(packet_path)[KEY + ["error"]].rename(columns={"error": "packet"})
    flow = pd.read_csv(flow_path)[KEY + ["error"]].rename(columns={"error": "flow"})
    t = results[KEY + ["measured_eps", "measured_min_eps", "measured_max_eps", "overflow_expected"]].merge(
        packet, on=KEY).merge(flow, on=KEY)
    t["lab"] = name
    frames.append(t)
t = pd.concat(frames, ignore_index=True)
if "--with-cap" in sys.argv[1:]:  # the packet model's points where the calibration caps a connection, re-judged
    # with the cap (bench/results/connection-cap-2026-11-27); every other point is the same by construction
    CAPPED = {"matrix": "matrix-convnet.csv", "2ps": "2ps-convnet.csv", "fresh-11-27": "fresh-convnet.csv"}
    for name, csv in CAPPED.items():
        capped = pd.read_csv(RESULTS / "connection-cap-2026-11-27" / csv).set_index(KEY)["error"]
        rows = t.index[t["lab"] == name]
        keys = pd.MultiIndex.from_frame(t.loc[rows, KEY])
        found = keys.isin(capped.index)
        t.loc[rows[found], "packet"] = capped.reindex(keys[found]).to_numpy()
over = _truthy(t["overflow_expected"])
t["auto_onset"] = t["packet"].where(over, t["flow"])
t["packet_from_w2"] = t["packet"].where(t["workers"] >= 2, t["flow"])
rules = ["flow", "packet", "auto_onset", "packet_from_w2"]

def summary(frame, column):
    e = frame[column]
    predicted = frame["measured_eps"] * (1 + e)
    inside = predicted.between(frame["measured_min_eps"], frame["measured_max_eps"]) | (e.abs() <= CLOSE_ENOUGH)
    return f"{e.abs().mean():5.1%} max {e.abs().max():5.1%} in {inside.mean():4.0%}"

print(f"{'lab':12s} {'n':>3s} " + "".join(f"{r:>30s}" for r in rules))
for name, frame in list(t.groupby("lab", sort=False)) + [("all", t)]:
    print(f"{name:12s} {len(frame):3d} " + "".join(f"{summary(frame, r):>30s}" for r in rules))
w2 = t[t.workers >= 2]
print(f"{'all W>=2':12s} {len(w2):3d} " + "".join(f"{summary(w2, r):>30s}" for r in rules))
