#!/usr/bin/env python3
"""The RPC chain's lags per traced step, and a lab directory with the old rule's calibration:
``python bench/results/rpc-least-2026-11-28/rpc_rule.py LAB_DIR OUT_DIR``.

For every setting of LAB_DIR whose profiling run kept its capture (``tfsim lab --keep-captures``):
prints each traced step's lags (``calibration.calibrate.rpc_lags``), their least (the rule since
this directory's commit, ``chain_latencies``) and their median (the rule before), and writes
OUT_DIR/<setting>/CLUSTER.json: the setting's calibration with the median's ``rpc``, beside links
to the setting's other files, and OUT_DIR/results.csv. Then ``python bench/lab_flow_judge.py
OUT_DIR median.csv --refit`` and ``python bench/lab_flow_judge.py LAB_DIR least.csv --refit``
judge the two rules on the same measurements. A study tool, not part of tfsim.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

from calibration.calibrate import chain_latencies, rpc_lags
from calibration.runmatch import match_run, run_server_ports
from netcapture import read_capture
from tfprofile.rundir import open_run_dir


def main() -> None:
    lab, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(lab / "results.csv", out / "results.csv")
    for setting_dir in sorted(p for p in lab.iterdir() if (p / "CLUSTER.json").is_file()):
        run_dir = setting_dir / "profile-run"
        captures = sorted(run_dir.glob("capture.pcap*"))
        if not captures:
            print(f"{setting_dir.name}: no kept capture, left out")
            continue
        run = open_run_dir(run_dir)
        stopped = (run.run.get("capture") or {}).get("stopped_at_step") is not None
        capture = read_capture(captures[0], backend="scapy", server_ports=run_server_ports(run),
                               stopped_mid_run=stopped)
        lags = rpc_lags(run, capture, match_run(capture, run))
        for key, values in lags.items():
            print(f"{setting_dir.name} {key}: " + " ".join(f"{v * 1e3:.2f}" for v in values) + " ms")
        least, median = chain_latencies(lags), chain_latencies(lags, statistic=np.median)
        print(f"{setting_dir.name} least: {json.dumps(least)}\n{setting_dir.name} median: {json.dumps(median)}")
        target = out / setting_dir.name
        target.mkdir(exist_ok=True)
        for item in setting_dir.iterdir():
            if item.name != "CLUSTER.json" and not (target / item.name).exists():
                (target / item.name).symlink_to(item.resolve())
        document = json.loads((setting_dir / "CLUSTER.json").read_text())
        document["rpc"] = median
        (target / "CLUSTER.json").write_text(json.dumps(document, indent=1))


if __name__ == "__main__":
    main()
