"""Evaluate the FIFO/window/RPC prototype (tfsim/lab/fifo_proto.py) against the lab points."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

def load(calib: Path):
    from simulate.cluster_file import load_cluster
    from simulate.prepare import prepare
    from tfprofile.profile_io import load_profile
    prof = load_profile(calib / "profile.npz"); cl = load_cluster(calib / "CLUSTER.json")
    return prof, cl, prepare(prof, cl)

def run(calib: Path, workers, params, steps=300, warmup=50, seed=0):
    from simulate.sweep import staggered_starts
    from tfsim.lab.fifo_proto import simulate
    prof, cl, g = load(calib)
    rows = []
    for W in workers:
        t = time.time()
        sim = simulate(g, params, W, steps=steps, warmup=warmup, seed=seed, start_offsets_s=staggered_starts(prof, W, 1.0))
        u = sim.utilisation()
        ends = sim.step_end
        st = np.median(np.diff(ends[:, warmup:], axis=1))
        rows.append({"workers": W, "throughput_eps": sim.throughput_eps(), "step_median_ms": st * 1e3, **u, "wall_s": time.time() - t})
    return rows

if __name__ == "__main__":
    from tfsim.lab.fifo_proto import ProtoParams, lab_link
    ap = argparse.ArgumentParser()
    ap.add_argument("--calib", type=Path, default=Path("study-data/calib-a"))
    ap.add_argument("--workers", default="1,2,3,4,6")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--set", action="append", default=[], help="ProtoParams field=value")
    a = ap.parse_args()
    kw = {}
    for s in a.set:
        k, v = s.split("=", 1); kw[k] = type(getattr(ProtoParams, k, 0.0) if not isinstance(getattr(ProtoParams, k, None), bool) else True)(v) if v not in ("True", "False") else v == "True"
    params = ProtoParams(down=lab_link(400e6), up=lab_link(400e6), **kw)
    for r in run(a.calib, [int(x) for x in a.workers.split(",")], params, steps=a.steps):
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}))
