"""Scale: W = 1..1024 on a log grid, 1000 steps each, on resnet50 (issue 19, part 5).

1. **The sweep.** Every W of the grid 1, 2, 4, ..., 1024 is simulated as ``tfsim predict
   PROFILE --cluster CLUSTER --workers W --steps 1000`` simulates it (the cluster's default
   transfer model, processor sharing, workers staggered over one step), each in a child
   process of its own, ``--jobs`` at a time, the largest first (as :mod:`simulate.sweep` orders
   its pool). The sweep's wall time is from the first child's start to the last one's end; per
   W the child reports its time (loading the inputs and the compiled loop, preparing, the loop)
   and its peak resident memory (``VmHWM`` of ``/proc/self/status``).
2. **Ops per step.** A smaller and a larger profile than resnet50 (tiny, inception3), and
   resnet50 itself, at a few W with fewer steps, one at a time: what a worker-step and an
   op-event cost as the step's ops grow.

Growth is a least-squares slope of log(cost) on log(W) (or log(ops per step)): 1 is linear.
Writes ``bench/results/scale.json`` and ``bench/results/scale.md``. Run:
``.venv/bin/python bench/scale_bench.py [--steps 1000] [--max-workers 1024] [--jobs 2] [--notes FILE]``;
``--render --notes FILE`` writes the page again from ``scale.json`` with the findings in FILE
(paragraphs separated by blank lines).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tfbase.fileio import write_json, write_text  # noqa: E402
from tfbase.machine import machine_description  # noqa: E402

TARGET_S = 120.0  # issue 19's bar for the whole sweep on this machine
OPS_PROFILES = ("tiny", "resnet50", "inception3")  # 93, 1,564 and 2,804 ops per step
OPS_WORKERS = (1, 16, 128)
OPS_STEPS = 100
GROWTH_FROM_W = 16  # below this the fixed costs of a child (imports, loading the loop) dominate


def _child(profile_name: str, cluster_name: str, workers: int, steps: int) -> dict:
    """One W as predict simulates it; its times and peak memory (run in a child process)."""
    started = time.perf_counter()
    import simulate
    from simulate.config import Mode, Sharing, Transfer
    from simulate.results import summarise
    from simulate.sweep import Scenario, simulate_one
    from tfprofile.profile_io import load_profile

    profile = load_profile(ROOT / "data" / "profiles" / f"{profile_name}.npz")
    cluster = simulate.load_cluster(ROOT / "data" / "clusters" / f"{cluster_name}.json")
    transfer = Transfer(cluster.default_transfer)
    scenario = Scenario(workers, None, Mode.ASYNC, Sharing.PS, transfer, transfer.value)
    # A first tiny run loads the compiled loop from numba's cache, so that loop_s is the loop alone.
    simulate_one(profile, cluster, Scenario(1, None, Mode.ASYNC, Sharing.PS, transfer, transfer.value), steps=2,
                 warmup=0)
    loaded = time.perf_counter()
    # predict's defaults: 50 warm-up steps (fewer for short runs), workers spread over one step
    result = simulate_one(profile, cluster, scenario, steps=steps, warmup=min(50, steps // 5), stagger=1.0)
    done = time.perf_counter()
    return {"profile": profile_name, "workers": workers, "steps": steps, "ops_per_step": int(result.graph.n_ops),
            "op_events": int(result.op_events), "loop_s": result.wall_s, "prepare_s": done - loaded - result.wall_s,
            "load_s": loaded - started, "child_s": done - started,
            "throughput_eps": summarise(result).throughput_eps, "peak_rss_bytes": _vm_hwm()}


def _vm_hwm() -> int:
    """This process's peak resident memory, bytes (``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmHWM in /proc/self/status")


def _spawn(profile: str, cluster: str, workers: int, steps: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--child", profile, cluster, str(workers), str(steps)],
                            stdout=subprocess.PIPE, cwd=ROOT, text=True)


def _collect(process: subprocess.Popen) -> dict:
    out, _ = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(process.args)} exited with status {process.returncode}")
    return json.loads(out)


def run_sweep(profile: str, cluster: str, grid: list[int], steps: int, jobs: int) -> tuple[list[dict], float]:
    """Every W of ``grid`` in a child of its own, ``jobs`` at a time, the largest first; the rows
    (by W) and the wall time of the whole sweep."""
    waiting = sorted(grid, reverse=True)
    running: dict[int, subprocess.Popen] = {}
    rows = []
    started = time.perf_counter()
    while waiting or running:
        while waiting and len(running) < jobs:
            w = waiting.pop(0)
            running[w] = _spawn(profile, cluster, w, steps)
        finished = next((w for w, p in running.items() if p.poll() is not None), None)
        if finished is None:
            time.sleep(0.05)
            continue
        row = _collect(running.pop(finished))
        row["finished_at_s"] = time.perf_counter() - started
        rows.append(row)
        print(f"W={row['workers']:5d}: {row['child_s']:7.1f} s (loop {row['loop_s']:.1f} s), "
              f"{row['op_events'] / 1e6:8.1f} M op-events, peak {row['peak_rss_bytes'] / 2**20:6.1f} MiB, "
              f"{row['throughput_eps']:,.1f} examples/s", flush=True)
    return sorted(rows, key=lambda r: r["workers"]), time.perf_counter() - started


def run_ops(cluster: str, profiles: tuple[str, ...], workers: tuple[int, ...], steps: int) -> list[dict]:
    """Each profile at each W, one child at a time (nothing else running)."""
    rows = []
    for profile in profiles:
        for w in workers:
            row = _collect(_spawn(profile, cluster, w, steps))
            rows.append(row)
            print(f"{profile:10s} ({row['ops_per_step']:5d} ops) W={w:4d}: loop {row['loop_s']:.2f} s, "
                  f"{_per_worker_step_us(row):.1f} us per worker-step", flush=True)
    return rows


def _per_worker_step_us(row: dict) -> float:
    return row["loop_s"] / (row["workers"] * row["steps"]) * 1e6


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) on log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    var = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / var if var else 0.0


def growth(sweep: list[dict], ops: list[dict]) -> dict:
    """How the loop's cost grows: per worker-step in W (the sweep's W >= GROWTH_FROM_W), the
    whole loop in W, and per worker-step in ops per step at each W of the ops part."""
    big = [r for r in sweep if r["workers"] >= GROWTH_FROM_W]
    out = {"per_worker_step_in_w": slope([r["workers"] for r in big], [_per_worker_step_us(r) for r in big]),
           "loop_in_w": slope([r["workers"] for r in big], [r["loop_s"] for r in big]),
           "per_worker_step_in_ops": []}
    for w in sorted({r["workers"] for r in ops}):
        at = [r for r in ops if r["workers"] == w]
        exponent = slope([r["ops_per_step"] for r in at], [_per_worker_step_us(r) for r in at])
        out["per_worker_step_in_ops"].append({"workers": w, "exponent": round(exponent, 2)})
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}


def markdown(results: dict) -> str:
    mib = 2 ** 20
    sweep, total = results["sweep"], results["sweep_wall_s"]
    verdict = "within" if total <= TARGET_S else "over"
    lines = [f"# Scale ({results['date']}, {results['machine']['cpu']}, {results['machine']['cores']} cores)", "",
             f"`{results['profile']}` on `{results['cluster']}` (its default transfer model, processor sharing), "
             f"W = {', '.join(str(r['workers']) for r in sweep)}, {results['steps']:,} steps per worker, "
             f"{results['jobs']} processes at a time: **{total:,.0f} s** for the whole sweep, {verdict} the "
             f"{TARGET_S:.0f} s bar. Peak memory at W = {sweep[-1]['workers']}: "
             f"**{sweep[-1]['peak_rss_bytes'] / mib:,.0f} MiB** (the child's VmHWM).", "",
             "| W | op-events | loop (s) | prepare (s) | load (s) | us per worker-step | ns per op-event | "
             "peak RSS | examples/s |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sweep:
        lines.append(f"| {r['workers']} | {r['op_events']:,} | {r['loop_s']:,.2f} | {r['prepare_s']:.2f} | "
                     f"{r['load_s']:.2f} | {_per_worker_step_us(r):,.1f} | {r['loop_s'] / r['op_events'] * 1e9:,.0f} | "
                     f"{r['peak_rss_bytes'] / mib:,.0f} MiB | {r['throughput_eps']:,.1f} |")
    g = results["growth"]
    lines += ["", f"Growth (least squares on log-log, W >= {GROWTH_FROM_W}): the loop's time per worker-step grows "
              f"as W^{g['per_worker_step_in_w']}, the whole loop of one W as W^{g['loop_in_w']}.", "",
              f"## Ops per step ({OPS_STEPS} steps per worker, one run at a time)", "",
              "| profile | ops per step | W | loop (s) | us per worker-step | ns per op-event |",
              "| --- | --- | --- | --- | --- | --- |"]
    for r in results["ops"]:
        lines.append(f"| {r['profile']} | {r['ops_per_step']:,} | {r['workers']} | {r['loop_s']:.2f} | "
                     f"{_per_worker_step_us(r):,.1f} | {r['loop_s'] / r['op_events'] * 1e9:,.0f} |")
    lines += ["", "The loop's time per worker-step grows in the ops per step as " + ", ".join(
        f"ops^{e['exponent']} at W = {e['workers']}" for e in g["per_worker_step_in_ops"]) + ".", ""]
    if results.get("notes"):
        lines += ["## Findings", ""]
        for note in results["notes"]:
            lines += [note, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="resnet50")
    parser.add_argument("--cluster", default="lab-1gbit", help="a CLUSTER.json of data/clusters (default: lab-1gbit)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--max-workers", type=int, default=1024)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--notes", type=Path, help="a text file of findings to publish with the numbers")
    parser.add_argument("--render", action="store_true",
                        help="simulate nothing: write scale.md again from scale.json (with --notes)")
    parser.add_argument("--child", nargs=4, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        profile, cluster, workers, steps = args.child
        print(json.dumps(_child(profile, cluster, int(workers), int(steps))))
        return 0
    out = ROOT / "bench" / "results"
    if args.render:
        results = json.loads((out / "scale.json").read_text())
        results["growth"] = growth(results["sweep"], results["ops"])
        if args.notes:
            results["notes"] = args.notes.read_text().strip().split("\n\n")
        write_json(out / "scale.json", results)
        write_text(out / "scale.md", markdown(results))
        return 0
    grid = [2 ** k for k in range(int(math.log2(args.max_workers)) + 1)]
    sweep, total = run_sweep(args.profile, args.cluster, grid, args.steps, args.jobs)
    print(f"sweep: {total:.1f} s", flush=True)
    ops = run_ops(args.cluster, OPS_PROFILES, OPS_WORKERS, OPS_STEPS)
    results = {"benchmark": "scale", "machine": machine_description(), "date": time.strftime("%Y-%m-%d"),
               "profile": args.profile, "cluster": args.cluster, "steps": args.steps, "jobs": args.jobs,
               "target_s": TARGET_S, "sweep_wall_s": round(total, 1), "sweep": sweep, "ops": ops,
               "growth": growth(sweep, ops),
               "notes": args.notes.read_text().strip().split("\n\n") if args.notes else []}
    write_json(out / "scale.json", results)
    write_text(out / "scale.md", markdown(results))
    print(f"wrote {out / 'scale.json'} and {out / 'scale.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
