"""Re-derive a saved lab setting's connection caps as calibration now does (docs/calibration.md §4.9:
raised by the ends' untraced speed-up, dropped within 90% of iperf3's), and refit its one-worker
correction as the lab does; writes CLUSTER.json and profile.npz in place, so run it on a copy:
``cp -r LAB_DIR COPY && python prep.py COPY``. A study tool, not part of tfsim."""
import json
import sys
from pathlib import Path

import pandas as pd

from calibration.calibrate import _cap_speedup, untraced_caps
from calibration.pscpu import PS_PREFIX, WORKER_PREFIX, tracing_cpu_ratio
from simulate.cluster_file import load_cluster
from simulate.config import TaskHosts, model_cores
from simulate.untrace import fit_computation_scale, scale_computation
from tfprofile.profile_io import save_profile
from tfprofile.rundir import profile_from_run_dir
from tfsim.lab.validate import PREDICT_REPLICAS, untraced_step_s

lab = Path(sys.argv[1])
results = pd.read_csv(lab / "results.csv")
for setting, group in results.groupby("setting", sort=False):
    d = lab / setting
    c = json.loads((d / "CLUSTER.json").read_text())
    caps = c.get("connection_cap_Bps") or {}
    if not caps:
        print(setting, "no cap")
        continue
    run = json.loads((d / "profile-run" / "run.json").read_text())
    ratios = tracing_cpu_ratio(d / "profile-run", run)
    speedup = _cap_speedup({t: r for t, r in ratios.items() if t.startswith((PS_PREFIX, WORKER_PREFIX))})
    new = untraced_caps(caps, speedup, c["iperf3_bandwidth_Bps"])
    print(setting, "ratios", {t: round(r, 3) for t, r in ratios.items()}, "speedup", round(speedup, 3),
          "caps", {k: round(v / 1e6, 1) for k, v in caps.items()}, "->", {k: round(v / 1e6, 1) for k, v in new.items()})
    c["connection_cap_Bps"] = new
    if not new:
        del c["connection_cap_Bps"]
    (d / "CLUSTER.json").write_text(json.dumps(c, indent=1))
    first = group.iloc[0]
    hosts = TaskHosts(worker_cores=model_cores(first["worker_cores"]), ps_cores=model_cores(first["ps_cores"]))
    profile = profile_from_run_dir(d / "profile-run")
    cluster = load_cluster(d / "CLUSTER.json")
    target = untraced_step_s(d / "profile-run")
    scale = fit_computation_scale(profile, cluster, target, statistic="mean", steps=400, warmup=50,
                                  replicas=PREDICT_REPLICAS, colocation=hosts)
    print(setting, "scale", round(scale, 4), "lab", first["computation_scale"])
    save_profile(scale_computation(profile, scale), d / "profile.npz")
