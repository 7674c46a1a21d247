"""Salvage a lab setting stopped in its predictions: results.csv's measured columns from the
measuring runs' lab.json files, so that bench/lab_flow_judge.py (grpc, the saved corrected
profile.npz and CLUSTER.json) can predict its points. ``python salvage_c.py LAB_DIR SETTING
WORKER_CORES PS_CORES``."""
import json
import sys
from pathlib import Path

import pandas as pd

from tfsim.lab.validate import measurement_stats

lab, setting, worker_cores, ps_cores = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
rows = []
runs_by_w: dict[int, list[Path]] = {}
for path in (lab / setting).glob("measure-w*-r*/lab.json"):
    runs_by_w.setdefault(int(path.parent.name.split("-")[1][1:]), []).append(path)
for w, runs in sorted(runs_by_w.items()):
    eps = [json.loads(p.read_text())["throughput_eps"] for p in sorted(runs)]
    stats = measurement_stats(eps)
    rows.append({"setting": setting, "workers": w, "measured_eps": stats["mean"], "measured_min_eps": stats["min"],
                 "measured_max_eps": stats["max"], "repeats": len(eps), "worker_cores": worker_cores,
                 "ps_cores": ps_cores, "ps": 1, "error_grpc": float("nan"), "computation_scale": float("nan"),
                 "measured_runs_eps": " ".join(f"{x:.6g}" for x in eps)})
pd.DataFrame(rows).to_csv(lab / "results.csv", index=False)
print(pd.DataFrame(rows).to_string())
