"""Link busy fraction conditional on how many workers have a tensor in flight (first to last byte)
in that direction: tells idle time from 'nobody has data' apart from 'a flow has data but does not fill the link'."""
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

def activity(T, rate=50e6, dt=0.00002, min_bytes=20000):
    t0, t1 = T.window
    grid = np.arange(t0, t1, dt)
    out = {}
    for d, dn in ((0, "down"), (1, "up")):
        m = T.wire["dir"] == d
        t, b = T.wire["t"][m], T.wire["bytes"][m]
        # busy indicator on the grid
        busy = np.zeros(grid.size)
        s = np.clip(((t - t0) / dt), 0, grid.size); e = np.clip(((t + b / rate - t0) / dt), 0, grid.size)
        diff = np.zeros(grid.size + 1)
        # fractional coverage: approximate by cell coverage counts
        si, ei = np.floor(s).astype(int), np.ceil(e).astype(int)
        np.add.at(diff, si, 1); np.add.at(diff, ei, -1)
        busy = (np.cumsum(diff)[:-1] > 0).astype(float)
        active = np.zeros(grid.size, dtype=int)
        for w in range(len(T.layout.worker_ips)):
            ind = np.zeros(grid.size + 1)
            for msg in T.messages:
                if msg["worker"] != w or msg["response_dir"] != dn or msg["rpc"] != "RecvTensor": continue
                if (msg["tensor_bytes"] or 0) < min_bytes or msg["first_data_t"] is None: continue
                a, c = msg["first_data_t"], msg["last_data_t"]
                if c < t0 or a > t1: continue
                ia, ic = int(max(0, (a - t0) / dt)), int(min(grid.size, np.ceil((c - t0) / dt)))
                ind[ia] += 1; ind[ic] -= 1
            active += (np.cumsum(ind)[:-1] > 0)
        rows = []
        for k in range(active.max() + 1):
            mk = active == k
            rows.append({"active_workers": k, "time_fraction": float(mk.mean()), "busy_when": float(busy[mk].mean()) if mk.any() else None})
        out[dn] = {"busy": float(busy.mean()), "by_active": rows}
    return out

if __name__ == "__main__":
    for p in sys.argv[1:]:
        T = pickle.loads((Path(p) / "timeline.pkl").read_bytes())
        a = activity(T)
        print(p)
        for dn, v in a.items():
            lost = {r["active_workers"]: r["time_fraction"] * (1 - r["busy_when"]) for r in v["by_active"] if r["busy_when"] is not None}
            print(f"  {dn}: idle time by active count (fraction of the window): " + "  ".join(f"k={k}: {x:.3f}" for k, x in lost.items()))
            print(f"  {dn}: busy {v['busy']:.3f}  " + "  ".join(f"k={r['active_workers']}: {r['time_fraction']:.2f} of time, busy {r['busy_when']:.2f}" for r in v["by_active"] if r["busy_when"] is not None))
