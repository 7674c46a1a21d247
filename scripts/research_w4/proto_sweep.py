"""Prototype variants x W x seeds -> study-data/proto/sweep.json (and a printed table)."""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from proto_eval import load

from simulate.sweep import staggered_starts
from tfsim.lab.fifo_proto import LinkParams, ProtoParams, lab_link, simulate

calib = Path(sys.argv[1] if len(sys.argv) > 1 else "study-data/calib-a")
prof, cl, g = load(calib)
tbf = lab_link(400e6)
busy_rate = json.loads((calib / "calibration-summary.json").read_text())["bandwidth_Bps"]
wpp = 1514 / 1448
variants = {
    "full": ProtoParams(down=tbf, up=tbf),
    "no_bucket (R sustained, no burst)": ProtoParams(down=LinkParams(tbf.rate_Bps), up=LinkParams(tbf.rate_Bps)),
    "B=capture busy rate, no bucket": ProtoParams(down=LinkParams(busy_rate["downlink"] * wpp), up=LinkParams(busy_rate["uplink"] * wpp)),
    "no_fifo (small msgs bypass)": ProtoParams(down=tbf, up=tbf, fifo=False),
    "no_rpc": ProtoParams(down=tbf, up=tbf, rpc=False),
    "no_fifo_no_rpc": ProtoParams(down=tbf, up=tbf, fifo=False, rpc=False),
}
out = []
for name, P in variants.items():
    for W in (1, 2, 3, 4, 6):
        vals = []
        for seed in (0, 1, 2):
            sim = simulate(g, P, W, steps=300, warmup=60, seed=seed, start_offsets_s=staggered_starts(prof, W, 1.0))
            u = sim.utilisation(); b = sim.backlog_stats()
            vals.append((sim.throughput_eps(), u["down"], u["up"], u["down_busy"], u["up_busy"], b["down"]["mean"], b["up"]["mean"]))
        v = np.array(vals)
        row = {"variant": name, "workers": W, "throughput_eps": float(v[:, 0].mean()), "min": float(v[:, 0].min()), "max": float(v[:, 0].max()),
               "util_down": float(v[:, 1].mean()), "util_up": float(v[:, 2].mean()), "busy_down": float(v[:, 3].mean()), "busy_up": float(v[:, 4].mean()),
               "backlog_down_mean": float(v[:, 5].mean()), "backlog_up_mean": float(v[:, 6].mean())}
        out.append(row); print(json.dumps({k: (round(x, 3) if isinstance(x, float) else x) for k, x in row.items()}), flush=True)
Path("study-data/proto").mkdir(exist_ok=True)
Path(f"study-data/proto/sweep-{calib.name}.json").write_text(json.dumps(out, indent=1))
