"""Summarise a series of labrun points: throughput mean, min..max, n per (queue, sysctls, W), with load."""
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def main(paths):
    groups = defaultdict(list)
    for p in paths:
        for d in sorted(Path(p).glob("*/point.json")):
            r = json.loads(d.read_text())
            key = (r["queue"] + ("+" + r["congctl"] if r.get("congctl") else ""), json.dumps(r.get("sysctls", {}), sort_keys=True), json.dumps(r.get("env", {})), r["capture"], r["workers"])
            load = r.get("load", {})
            groups[key].append((r["measured"]["throughput_eps"], r["measured"]["step_time_median_s"],
                                load.get("others_cores", np.nan), load.get("study_cores", np.nan), d.parent.name))
    print("| queue | sysctls | env | capture | W | n | mean ex/s | min..max | step median ms | others' load (cores) | study (cores) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(groups):
        v = groups[key]
        t = np.array([x[0] for x in v]); s = np.array([x[1] for x in v]); o = np.array([x[2] for x in v]); m = np.array([x[3] for x in v])
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | {len(v)} | {t.mean():.0f} | {t.min():.0f}..{t.max():.0f} | "
              f"{np.median(s)*1e3:.1f} | {o.min():.2f}..{o.max():.2f} | {m.mean():.2f} |")

if __name__ == "__main__":
    main(sys.argv[1:])
