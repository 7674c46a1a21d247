#!/usr/bin/env python3
"""The coordinator's dispatch gap of a tf2-pss lab run, per W: ``python bench/lab_dispatch_gaps.py SETTING_DIR ...``.

For each SETTING_DIR (a ``tfsim lab --api tf2-pss`` setting's directory), the profile's
``ClusterCoordinatorDispatch`` op (the one-worker gap it was built with, docs/model.md §1.5) and,
for every W, the median over the measuring runs of the median gap between a worker's consecutive
steps (next start minus this step's end, from each run's ``step_times.csv``) and of the median
step span: whether the gap the profile keeps at every W held as W grew.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import numpy as np

from tfprofile.pssrun import dispatch_gap_s


def _rows(run: Path) -> list[dict]:
    with open(run / "step_times.csv", newline="") as handle:
        return [{"worker": int(r["worker"]), "step": int(r["step"]), "measured": r["measured"] == "1",
                 "traced": r["traced"] == "1", "start_unix_s": float(r["start_unix_s"]), "wall_s": float(r["wall_s"])}
                for r in csv.DictReader(handle)]


def main(settings: list[Path]) -> None:
    print("| setting | W | gap: median (ms) | span: median (ms) | gap / profile's op |")
    print("| --- | --- | --- | --- | --- |")
    for setting in settings:
        if json.loads((setting / "profile-run" / "run.json").read_text())["config"].get("api") != "tf2-pss":
            sys.exit(f"{setting}: not a tf2-pss setting (its profile-run/run.json)")
        profile_gap = dispatch_gap_s(_rows(setting / "profile-run"))
        print(f"| {setting.name} | profile (1) | {profile_gap.duration_s * 1e3:.2f} | | 1.00 |")
        by_w: dict[int, list[Path]] = {}
        for run in setting.glob("measure-w*-r*"):
            by_w.setdefault(int(re.match(r"measure-w(\d+)-r", run.name).group(1)), []).append(run)
        for w in sorted(by_w):
            gaps = [dispatch_gap_s(_rows(r)).duration_s for r in by_w[w]]
            spans = [float(np.median([r["wall_s"] for r in _rows(run)])) for run in by_w[w]]
            gap = float(np.median(gaps))
            print(f"| {setting.name} | {w} | {gap * 1e3:.2f} | {float(np.median(spans)) * 1e3:.2f} | "
                  f"{gap / profile_gap.duration_s:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[0])
    main([Path(p) for p in sys.argv[1:]])
