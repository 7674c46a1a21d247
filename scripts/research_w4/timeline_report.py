"""Measured timeline of a captured lab point beside the simulated one (tables as JSON + printed).

    python scripts/research_w4/timeline_report.py study-data/cap/w4-a --calib study-data/calib-a [--rate-Bps 50e6]
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def simulate_point(calib: Path, workers: int, steps: int = 300, warmup: int = 50, cluster=None, profile=None):
    from simulate.cluster_file import load_cluster
    from simulate.config import Colocation, SimConfig, Transfer
    from simulate.engine import run
    from simulate.sweep import staggered_starts
    from simulate.prepare import prepare
    from tfprofile.profile_io import load_profile

    prof = profile or load_profile(calib / "profile.npz")
    cl = cluster or load_cluster(calib / "CLUSTER.json")
    cfg = SimConfig(workers=workers, transfer=Transfer(cl.default_transfer), steps=steps, warmup=warmup,
                    colocation=Colocation.single_host(workers, 1, 2.0),
                    start_offsets_s=staggered_starts(prof, workers, 1.0), trace_steps=steps)
    return run(prepare(prof, cl, workers=workers), cl, cfg)


def main(argv=None):
    from tfsim.lab import timeline as tl

    ap = argparse.ArgumentParser()
    ap.add_argument("point", type=Path)
    ap.add_argument("--calib", type=Path, default=None)
    ap.add_argument("--rate-Bps", type=float, default=50e6, help="shaper rate on the wire (L2), bytes/s")
    args = ap.parse_args(argv)
    point = json.loads((args.point / "point.json").read_text())
    started = time.time()
    cache = args.point / "timeline.pkl"
    if cache.exists():
        T = pickle.loads(cache.read_bytes())
    else:
        T = tl.measured_timeline(args.point / "ps.pcap", args.point / "run", rate_Bps=args.rate_Bps,
                                 samples_dir=args.point)
        cache.write_bytes(pickle.dumps(T))
    print(f"decoded in {time.time() - started:.0f} s", file=sys.stderr)
    sim = tl.simulated_timeline(simulate_point(args.calib, point["workers"])) if args.calib else None
    out = tl.compare(T, sim)
    (args.point / "timeline.json").write_text(json.dumps(out, indent=1, default=str))
    m = out["measured"]
    print("wire:")
    for r in m["wire"]:
        print("  ", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()})
    if sim:
        for r in out["wire_side_by_side"]:
            print("  side by side", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()})
    print("hops (all workers):")
    for r in m["hops"]:
        if r["worker"] == "all":
            print("  ", {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()})
    for key in ("backlog", "tcp", "steps"):
        print(key + ":")
        for r in m.get(key, []):
            print("  ", {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()})
    if sim:
        print("tensors (ms from step start): measured request/first/last | simulated first/last")
        for r in sorted(out["tensors_side_by_side"], key=lambda r: r["measured_first_ms"] or 0):
            f = lambda x: "-" if x is None else f"{x:7.1f}"
            print(f"   {r['direction']:4s} {r['tensor'][:55]:55s} {f(r['measured_request_ms'])} {f(r['measured_first_ms'])} "
                  f"{f(r['measured_last_ms'])} | {f(r['simulated_first_ms'])} {f(r['simulated_last_ms'])}")


if __name__ == "__main__":
    main()
