"""Busy fraction conditional on active workers, and per-step phase timings, for a prototype run."""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2])); sys.path.insert(0, str(Path(__file__).resolve().parent))

def proto_activity(sim, dt=0.00002, min_bytes=20000):
    from tfprofile.dag import Resource
    t0, t1 = sim.window()
    grid = np.arange(t0, t1, dt)
    out = {}
    for d, dn in ((0, "down"), (1, "up")):
        dep = np.array(sim.links[d].departures); rate = sim.links[d].p.rate_Bps
        m = (dep[:, 0] >= t0 - 0.01) & (dep[:, 0] < t1)
        diff = np.zeros(grid.size + 1)
        si = np.clip(np.floor((dep[m, 0] - dep[m, 1] / rate - t0) / dt), 0, grid.size).astype(int)
        ei = np.clip(np.ceil((dep[m, 0] - t0) / dt), 0, grid.size).astype(int)
        np.add.at(diff, si, 1); np.add.at(diff, ei, -1)
        busy = (np.cumsum(diff)[:-1] > 0).astype(float)
        active = np.zeros(grid.size, dtype=int)
        res = Resource.DOWNLINK if d == 0 else Resource.UPLINK
        for w in range(sim.W):
            ind = np.zeros(grid.size + 1)
            for r in sim.msg_rows:
                if r["worker"] != w or r["kind"] != "tensor" or sim.g.resource[r["op"]] != res or r["bytes"] < min_bytes: continue
                a, c = r["first_t"], r["last_t"]
                if c < t0 or a > t1: continue
                ia, ic = int(max(0, (a - t0) / dt)), int(min(grid.size, np.ceil((c - t0) / dt)))
                ind[ia] += 1; ind[ic] -= 1
            active += (np.cumsum(ind)[:-1] > 0)
        out[dn] = {"busy": float(busy.mean()), "by_active": [(k, float((active == k).mean()), float(busy[active == k].mean())) for k in range(active.max() + 1) if (active == k).any()]}
    return out

if __name__ == "__main__":
    from proto_eval import load

    from simulate.sweep import staggered_starts
    from tfsim.lab.fifo_proto import ProtoParams, lab_link, simulate
    W = int(sys.argv[1]); kw = dict(s.split("=") for s in sys.argv[2:])
    kw = {k: (v == "True" if v in ("True", "False") else (int(v) if k in ("bbr_rounds", "chunk_bytes") else float(v))) for k, v in kw.items()}
    prof, cl, g = load(Path("study-data/calib-a"))
    sim = simulate(g, ProtoParams(down=lab_link(400e6), up=lab_link(400e6), **kw), W, steps=150, warmup=30, start_offsets_s=staggered_starts(prof, W, 1.0))
    print("throughput", round(sim.throughput_eps()), sim.utilisation())
    print("backlog", json.dumps(sim.backlog_stats()))
    for dn, v in proto_activity(sim).items():
        print(dn, round(v["busy"], 3), "  ".join(f"k={k}: {f:.2f} busy {b:.2f}" for k, f, b in v["by_active"]))
    # phases: per step, first/last byte of big tensors per direction relative to step start
    rows = [r for r in sim.msg_rows if r["kind"] == "tensor" and r["bytes"] > 20000 and r["step"] >= 30]
    from collections import defaultdict
    ph = defaultdict(list)
    for r in rows:
        d = "down" if sim.g.resource[r["op"]] == 0 else "up"
        s0 = sim.step_start[r["worker"], r["step"]]
        ph[(r["worker"], r["step"], d)].append((r["first_t"] - s0, r["last_t"] - s0))
    for d in ("down", "up"):
        a = np.array([(min(x[0] for x in v), max(x[1] for x in v)) for k, v in ph.items() if k[2] == d])
        print(d, "phase first %.1f ms last %.1f ms (medians)" % (np.median(a[:, 0]) * 1e3, np.median(a[:, 1]) * 1e3))
    kinds = defaultdict(list)
    for r in sim.msg_rows:
        if r["kind"] != "tensor" and r["step"] >= 30: kinds[r["kind"]].append((r["last_t"] - r["enq_t"]) * 1e3)
    print({k: round(float(np.median(v)), 2) for k, v in kinds.items()}, "p90", {k: round(float(np.percentile(v, 90)), 2) for k, v in kinds.items()})
