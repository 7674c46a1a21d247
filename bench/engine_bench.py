"""Speed of the simulation engine (docs/model.md §7.4).

Measures, in one run on this machine:

1. op-events simulated per second on one core (one process), on the bundled resnet50
   profile at W = 1, 4 and 16 (an op-event is one op of one worker's step completing);
2. the wall time of the sweep W = 1..16 x 1000 steps on the bundled resnet50 profile, with
   as many parallel processes as the machine has cores (and with one, for reference);
3. the speed-up over the literal Alg. 3.1 reference (tests/reference_sim.py) on the same
   configuration, short enough for the reference to finish.

Writes ``bench/results/engine.json``. Run: ``.venv/bin/python bench/engine_bench.py``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from simulate.cluster import ClusterModel  # noqa: E402
from simulate.config import SimConfig  # noqa: E402
from simulate.engine import run  # noqa: E402
from simulate.prepare import prepare  # noqa: E402
from simulate.sweep import predict  # noqa: E402
from tfbase.fileio import write_json  # noqa: E402
from tfbase.machine import machine_description  # noqa: E402
from tfprofile.profile_io import load_profile  # noqa: E402


def main() -> int:
    from reference_sim import reference_run

    profile = load_profile(ROOT / "data" / "profiles" / "resnet50.npz")
    cluster = ClusterModel.from_bandwidth(125e6)  # 1 Gbit/s
    results: dict = {"benchmark": "engine", "profile": "resnet50.npz", "ops_per_step": profile.graph.n_ops,
                     "machine": machine_description(), "date": time.strftime("%Y-%m-%d")}

    # Warm the compiled kernel (loads numba's on-disk cache, or compiles once).
    warm = prepare(profile, cluster, workers=2)
    run(warm, cluster, SimConfig(workers=2, steps=3, warmup=1))

    single = []
    for workers, steps in ((1, 2000), (4, 600), (16, 200)):
        graph = prepare(profile, cluster, workers=workers)
        best = None
        for _ in range(3):
            result = run(graph, cluster, SimConfig(workers=workers, steps=steps, warmup=1))
            rate = result.op_events / result.wall_s
            best = rate if best is None or rate > best else best
        single.append({"workers": workers, "steps": steps, "op_events": result.op_events,
                       "op_events_per_s": round(best)})
        print(f"one core, W={workers:2}: {best / 1e6:.2f} M op-events/s", flush=True)
    results["one_core"] = single

    # The reference on a short run of the same model, and the engine on exactly that run.
    config = SimConfig(workers=4, steps=6, warmup=1)
    graph = prepare(profile, cluster, workers=4)
    started = time.perf_counter()
    reference_run(graph, cluster, config)
    reference_s = time.perf_counter() - started
    fast = min((run(graph, cluster, config) for _ in range(5)), key=lambda r: r.wall_s)
    events = fast.op_events
    results["reference"] = {"workers": 4, "steps": 6, "op_events": events, "reference_s": reference_s,
                            "reference_op_events_per_s": round(events / reference_s),
                            "engine_s": fast.wall_s, "speedup": round(reference_s / fast.wall_s, 1)}
    print(f"reference: {events / reference_s / 1e3:.0f} k op-events/s; engine {reference_s / fast.wall_s:.0f}x faster",
          flush=True)

    sweeps = []
    for jobs in sorted({os.cpu_count() or 1, 1}, reverse=True):
        started = time.perf_counter()
        frame = predict(profile, cluster, workers=range(1, 17), steps=1000, warmup=50, jobs=jobs)
        wall = time.perf_counter() - started
        sweeps.append({"jobs": jobs, "wall_s": round(wall, 2), "configurations": len(frame),
                       "op_events": int(frame["op_events"].sum())})
        print(f"sweep W=1..16 x 1000 steps with {jobs} process(es): {wall:.1f} s", flush=True)
    results["sweep_resnet50_W1_16_N1000"] = sweeps
    out = ROOT / "bench" / "results" / "engine.json"
    write_json(out, results)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
