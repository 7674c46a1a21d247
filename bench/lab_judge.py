#!/usr/bin/env python3
"""Judge model variants on a whole lab matrix, against its saved measurements:
``python bench/lab_judge.py LAB_DIR [--variants base,fcfs,hybrid,lockstep] [--steps 400] [--replicas 5]``.

LAB_DIR is a ``tfsim lab --out`` directory: its ``results.csv`` (the measured mean, min and max
per point, each setting's quotas) and one directory per setting with the ``profile.npz`` the lab
predicted from (one-worker correction applied) and ``CLUSTER.json``. Every variant is predicted
as the lab predicts (``grpc``, the lab's hosts, the mean of ``--replicas`` seeds) and scored by
the lab's bars (tfsim/lab/validate.py): mean |error|, max |error|, and the share of points inside
the measured min..max or within 3% of its mean. Variants:

- ``base``: the lab's own prediction (``ps`` sharing, staggered starts);
- ``fcfs``, ``hybrid``: the other link sharing rules (docs/model.md §4.1);
- ``lockstep``: ``base`` with every worker starting at once (``stagger=0``);
- ``buffer``: ``base`` with the lab's link buffer (results.csv ``buffer_bytes``, the tbf limit)
  as the cluster's (docs/model.md §4.5), for lab directories calibrated before CLUSTER.json
  carried it (a newer lab's ``base`` has it already);
- ``nobuffer``, ``nopscpu``, ``neither``: ``base`` without the link's buffer, without the
  parameter servers' CPU bound (docs/model.md §4.7), without both: each term's gain on a lab
  calibrated with them;
- ``nowindow``: ``base`` without the link's FIFO (queue windows 0: no message wait behind the
  queue, no acknowledgement coupling of the two directions, docs/model.md §4.5);
- ``pscpu``: ``base`` plus the parameter server's own communication CPU, which the profile does
  not hold (its ops are a fraction of the PS's CPU time): the PS's CPU seconds per worker-step,
  from a line through the cgroup CPU time of the W = 1 and W = 2 measuring runs against their
  step counts (the slope; the intercept is start-up), less its ops' share (their traced wall time
  times the quota), run at the quota's speed as extra receive work on the PS host, spread over
  the uplink bytes; the one-worker correction is fitted again with it. A study of whether the PS
  host's capacity explains the error, not a calibration a user could run.
- ``conncap``: the cluster as calibration now reads a capture-sourced CLUSTER.json's busy
  rates (calibration.calibrate.connection_bound): a direction whose busy rate is below
  CONNECTION_BOUND_FRACTION (0.9) of iperf3's gets iperf3's B and the busy rate as each
  connection's cap (docs/model.md §4.8); the one-worker correction is fitted again with it. For
  lab directories calibrated before the cap.
- ``nocap``: for a lab calibrated with connection caps, the model before them: each capped
  direction's busy rate as its B, shared, and no cap (the one-worker correction fitted again).
- ``bufconncap``: ``buffer`` and ``conncap`` together: the model as it is now, for lab
  directories calibrated before either.
- ``conncap1``: as ``conncap`` with the fraction 1: every direction whose busy rate is below
  iperf3's gets iperf3's B and the busy rate as each connection's cap.

A study tool, not part of tfsim: it shows, before a change is made in the engine, whether it
moves the lab's errors, and it prints the table a model change is published with.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.calibrate import CONNECTION_BOUND_FRACTION, connection_bound  # noqa: E402
from simulate.cluster import Overhead  # noqa: E402
from simulate.cluster_file import load_cluster  # noqa: E402
from simulate.config import TaskHosts  # noqa: E402
from simulate.sweep import predict  # noqa: E402
from simulate.untrace import fit_computation_scale, scale_computation  # noqa: E402
from tfprofile.dag import Resource  # noqa: E402
from tfprofile.profile_io import load_profile  # noqa: E402
from tfsim.lab.validate import CLOSE_ENOUGH, MACHINE_CORES, untraced_step_s  # noqa: E402

PSCPU_FIT_WORKERS = (1, 2)  # the measuring runs whose PS CPU time gives its CPU per worker-step


def ps_cpu_per_step_s(setting: Path) -> float:
    """Slope of the PS's cgroup CPU time over the measuring runs' step counts (W = 1 and 2)."""
    steps, usage = [], []
    for run in sorted(setting.glob("measure-w*-r*")):
        match = re.fullmatch(r"measure-w(\d+)-r\d+", run.name)
        if not match or int(match.group(1)) not in PSCPU_FIT_WORKERS or not (run / "lab.json").is_file():
            continue
        with open(run / "step_times.csv", newline="") as handle:
            steps.append(sum(1 for _ in csv.DictReader(handle)))
        usage.append(json.loads((run / "lab.json").read_text())["tasks"]["ps0"]["usage_s"])
    return float(np.polyfit(steps, usage, 1)[0])


def refitted(setting: Path, profile, changed, hosts: dict, what: str):
    """``profile`` with the one-worker correction fitted again for the ``changed`` cluster (the
    lab's rule: the mean untraced step of the profiling run), and ``changed``."""
    target = untraced_step_s(setting / "profile-run")
    scale = fit_computation_scale(profile, changed, target, statistic="mean", steps=400, warmup=50, **hosts)
    print(f"{setting.name} {what}; correction x{scale:.3f}", file=sys.stderr, flush=True)
    return scale_computation(profile, scale), changed


def with_ps_cpu(setting: Path, profile, cluster, quota: float, hosts: dict):
    """The ``pscpu`` variant's profile and cluster (see the module docstring)."""
    graph = profile.graph
    ops_cpu_s = float(profile.duration_s[:, graph.resource == Resource.PS].sum(axis=1).mean()) * min(1.0, quota)
    ps_cpu_s = ps_cpu_per_step_s(setting)
    extra_wall_s = max(0.0, ps_cpu_s - ops_cpu_s) / min(1.0, quota)
    up_bytes = float(graph.size_bytes[graph.resource == Resource.UPLINK].sum())
    up = cluster.overhead_uplink
    changed = dataclasses.replace(cluster, overhead_uplink=Overhead(up.alpha_s_per_byte + extra_wall_s / up_bytes,
                                                                    up.beta_s))
    return refitted(setting, profile, changed, hosts, f"pscpu: PS CPU {ps_cpu_s * 1e3:.2f} ms per worker-step, "
                    f"ops {ops_cpu_s * 1e3:.2f} ms: {extra_wall_s * 1e3:.1f} ms more on the PS host per step")


def with_connection_cap(setting: Path, profile, cluster, hosts: dict, fraction: float = CONNECTION_BOUND_FRACTION):
    """The ``conncap`` and ``conncap1`` variants' profile and cluster (see the module docstring)."""
    document = json.loads((setting / "CLUSTER.json").read_text())
    if document.get("bandwidth_source") != "capture" or "connection_cap_Bps" in document:
        return profile, cluster
    rates, caps = connection_bound(document["busy_rate_Bps"], document["iperf3_bandwidth_Bps"], fraction)
    if not caps:
        return profile, cluster
    changed = dataclasses.replace(
        cluster, downlink_Bps=rates["downlink"], uplink_Bps=rates["uplink"],
        connection_cap_downlink_Bps=caps.get("downlink", float("inf")),
        connection_cap_uplink_Bps=caps.get("uplink", float("inf")),
        bucket_downlink=None if "downlink" in caps else cluster.bucket_downlink,
        bucket_uplink=None if "uplink" in caps else cluster.bucket_uplink)
    return refitted(setting, profile, changed, hosts, f"conncap: caps {caps}")


def without_connection_cap(setting: Path, profile, cluster, hosts: dict):
    """The ``nocap`` variant's profile and cluster (see the module docstring)."""
    caps = cluster.connection_caps_Bps
    if not caps:
        return profile, cluster
    changed = dataclasses.replace(cluster, downlink_Bps=min(cluster.downlink_Bps, caps.get("downlink", float("inf"))),
                                  uplink_Bps=min(cluster.uplink_Bps, caps.get("uplink", float("inf"))),
                                  connection_cap_downlink_Bps=float("inf"), connection_cap_uplink_Bps=float("inf"))
    return refitted(setting, profile, changed, hosts, "nocap")


def _no_queue_window(cluster, row):
    return dataclasses.replace(cluster, queue_window_downlink_bytes=0.0, queue_window_uplink_bytes=0.0)


def _no_buffer(cluster, row):
    return dataclasses.replace(cluster, buffer_downlink_bytes=float("inf"), buffer_uplink_bytes=float("inf"))


def _no_ps_cpu(cluster, row):
    return dataclasses.replace(cluster, ps_cpu=None)


def _neither(cluster, row):
    return _no_ps_cpu(_no_buffer(cluster, row), row)


def _lab_buffer(cluster, row):
    buffer = float(row["buffer_bytes"])
    return dataclasses.replace(cluster, buffer_downlink_bytes=buffer, buffer_uplink_bytes=buffer)


VARIANTS = {  # name -> (predict() keyword arguments on top of the lab's, a change to the cluster)
    "base": ({}, None),
    "fcfs": ({"sharing": "fcfs"}, None),
    "hybrid": ({"sharing": "hybrid"}, None),
    "lockstep": ({"stagger": 0.0}, None),
    "nowindow": ({}, _no_queue_window),
    "buffer": ({}, _lab_buffer),
    "nobuffer": ({}, _no_buffer),
    "nopscpu": ({}, _no_ps_cpu),
    "neither": ({}, _neither),
    "pscpu": ({}, None),  # see with_ps_cpu
    "conncap": ({}, None),  # see with_connection_cap
    "conncap1": ({}, None),
    "bufconncap": ({}, _lab_buffer),
    "nocap": ({}, None),
}


def hosts_of(row: pd.Series) -> dict:
    """The lab's simulated hosts for a result row (tfsim.lab.validate.simulated_hosts)."""
    if row["hosts"] == "co-located":
        return {"cores": MACHINE_CORES}
    return {"colocation": TaskHosts(max(1.0, float(row["ps_cores"])), max(1.0, float(row["worker_cores"])))}


def judge(lab: Path, variants: list[str], steps: int, replicas: int) -> pd.DataFrame:
    results = pd.read_csv(lab / "results.csv")
    rows = []
    for setting, group in results.groupby("setting", sort=False):
        profile = load_profile(lab / setting / "profile.npz")
        cluster = load_cluster(lab / setting / "CLUSTER.json")
        workers = [int(w) for w in group["workers"]]
        first = group.iloc[0]
        servers = int(first["ps"]) if int(first["ps"]) != int(first["profile_ps"]) else None
        for variant in variants:
            options, change = VARIANTS[variant]
            used_profile, used_cluster = profile, change(cluster, first) if change else cluster
            if variant == "pscpu":
                used_profile, used_cluster = with_ps_cpu(lab / setting, profile, cluster, float(first["ps_cores"]),
                                                         hosts_of(first))
            if variant == "nocap":
                used_profile, used_cluster = without_connection_cap(lab / setting, profile, cluster, hosts_of(first))
            if variant in ("conncap", "conncap1", "bufconncap"):
                used_profile, used_cluster = with_connection_cap(
                    lab / setting, profile, used_cluster, hosts_of(first),
                    **({"fraction": 1.0} if variant == "conncap1" else {}))
            frame = predict(used_profile, used_cluster, workers=workers, transfer="grpc",
                            steps=steps, warmup=min(50, steps // 5), replicas=replicas, servers=servers, jobs=1,
                            **hosts_of(first), **options)
            for (_, measured), predicted in zip(group.iterrows(), frame["throughput_eps"]):
                mean, low, high = (float(measured[c]) for c in ("measured_eps", "measured_min_eps", "measured_max_eps"))
                error = float(predicted) / mean - 1
                rows.append({"setting": setting, "workers": int(measured["workers"]), "variant": variant,
                             "measured_eps": mean, "measured_min_eps": low, "measured_max_eps": high,
                             "predicted_eps": float(predicted), "error": error,
                             "inside": bool(low <= predicted <= high or abs(error) <= CLOSE_ENOUGH)})
            print(f"{setting} {variant}: " + ", ".join(
                f"W={r['workers']} {r['error']:+.1%}" for r in rows if r["setting"] == setting
                and r["variant"] == variant), file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> str:
    lines = ["| variant | points | mean abs error | max abs error | inside or within 3% | mean abs error W = 1 "
             "| W >= 2 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for variant, group in frame.groupby("variant", sort=False):
        errors = group["error"].abs()
        many = group["workers"] >= 2
        lines.append(f"| {variant} | {len(group)} | {errors.mean():.1%} | {errors.max():.1%} "
                     f"| {group['inside'].mean():.0%} | {errors[~many].mean():.1%} | {errors[many].mean():.1%} |")
    return "\n".join(lines)


def per_point(frame: pd.DataFrame) -> str:
    variants = list(dict.fromkeys(frame["variant"]))
    wide = frame.pivot_table(index=["setting", "workers"], columns="variant", values="error", sort=False)
    first = frame[frame["variant"] == variants[0]].set_index(["setting", "workers"])
    lines = ["| setting | W | measured ex/s (range) | " + " | ".join(variants) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in variants) + " |"]
    for (setting, w), errors in wide.iterrows():
        m = first.loc[(setting, w)]
        lines.append(f"| {setting} | {w} | {m['measured_eps']:,.1f} ({m['measured_min_eps']:,.1f}.."
                     f"{m['measured_max_eps']:,.1f}) | " + " | ".join(f"{errors[v]:+.1%}" for v in variants) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lab", type=Path)
    parser.add_argument("--variants", default="base,fcfs,hybrid,lockstep")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--csv", type=Path, help="also write every point's errors here")
    args = parser.parse_args()
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    warnings.simplefilter("ignore")
    frame = judge(args.lab, args.variants.split(","), args.steps, args.replicas)
    if args.csv:
        frame.to_csv(args.csv, index=False, float_format="%.6g")
    print(summary(frame))
    print()
    print(per_point(frame))
    print(f"\n(mean over {args.replicas} seeds, {args.steps} steps per worker; "
          f"errors against the measured mean; {np.unique(frame['setting']).size} settings)")


if __name__ == "__main__":
    main()
