#!/usr/bin/env python3
"""Build LAB_DIR's twin with the calibration of the tfsim on ``sys.path`` (run it with
``PYTHONPATH`` at a worktree of the commit before the busy-rate fix): for every setting, the
kept profiling capture calibrated again, the lab's own PS CPU record (its one-worker runs and
busy-PS runs, which the fix does not touch) carried over; the profile, the measured points and
the one-worker tail runs linked. ``python before.py LAB_DIR TWIN_DIR``; then judge both with
``bench/lab_flow_judge.py ... --refit``. A study tool."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from calibration.calibrate import calibrate_run
from simulate.cluster_file import save_cluster

lab, twin = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
twin.mkdir(parents=True, exist_ok=True)
shutil.copy(lab / "results.csv", twin / "results.csv")
for setting in sorted(p for p in lab.iterdir() if (p / "CLUSTER.json").is_file()):
    out = twin / setting.name
    out.mkdir(exist_ok=True)
    for entry in setting.iterdir():
        if entry.name != "CLUSTER.json" and not (out / entry.name).exists():
            (out / entry.name).symlink_to(entry)
    after = json.loads((setting / "CLUSTER.json").read_text())
    document = calibrate_run(setting / "profile-run", allow_above_ceiling=True).to_cluster_json()
    for key in ("ps_cpu", "hosts"):
        if key in after:
            document[key] = after[key]
    save_cluster(document, out / "CLUSTER.json")
    print(setting.name, "bandwidth", {k: round(v / 1e6, 1) for k, v in document["bandwidth_Bps"].items()},
          document.get("bandwidth_source"), "after:", {k: round(v / 1e6, 1) for k, v in after["bandwidth_Bps"].items()},
          after.get("bandwidth_source"))
