"""Dask against Ray for tfsim's sweeps (issue 19, part 6): the same sweep on a local cluster of
each, two worker processes of one thread on this machine, beside the local worker pool.

What is measured, each ``--repeat`` times (the median and the range are reported):

1. **Start**: from nothing to a cluster that takes tasks (Dask ``LocalCluster``, Ray
   ``ray.init``), and the time to shut it down.
2. **Per-task cost**: ``--tasks`` tasks that return their argument, through the executor's
   ``map`` (the one tfsim's sweeps call), after a first round that wakes every worker: the
   engine's own cost per task, with nothing to compute.
3. **A real sweep**: ``simulate.predict`` of the bundled tiny profile on the bundled lab
   calibration, W = 1..16 x three transfer models (48 configurations), through the local pool
   (``jobs=2``), Dask and Ray; every engine's table must equal the local one to the last bit.
4. **Memory**: the resident memory of every process the cluster started (this process's
   descendants, once the sweep has run), and the installed size of each engine's packages.

The machine's load is read from /proc/loadavg before and after (the script itself keeps two
cores busy while it runs). Ray is not one of tfsim's dependencies: ``pip install ray`` first.
Run: ``.venv/bin/python bench/executor_compare.py [--repeat 3] [--tasks 500]``; writes
``bench/results/executors.json`` and ``bench/results/executors.md``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import simulate  # noqa: E402
import tfprofile  # noqa: E402
from simulate.executors import parse_executor  # noqa: E402
from tfbase.fileio import write_json, write_text  # noqa: E402
from tfbase.machine import machine_description  # noqa: E402

PROFILE = ROOT / "data" / "profiles" / "tiny.npz"
CLUSTER = ROOT / "data" / "clusters" / "lab-1gbit.json"
SWEEP = dict(workers="1-16", transfer=["grpc", "fifo", "http2"], steps=300, warmup=30, seed=1)
WORKER_PROCESSES = 2


def echo(shared, item):
    """A task with nothing to compute."""
    return item


class RayExecutor:
    """tfsim's executor protocol (:class:`simulate.executors.Executor`) on a running Ray: the
    shared inputs put in Ray's object store once, one task per item, results as they finish."""

    def check(self) -> None:
        import ray

        if not ray.is_initialized():
            raise RuntimeError("ray.init() first")

    def map(self, fn, shared, items, *, jobs=1, on_result=None):
        import ray

        task = ray.remote(num_cpus=1, max_retries=0)(fn)
        shared_ref = ray.put(shared)
        futures = [task.remote(shared_ref, item) for item in items]
        position = {future: k for k, future in enumerate(futures)}
        pending = list(futures)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for future in done:
                if on_result is not None:
                    on_result(position[future], ray.get(future))
        return ray.get(futures)


class DaskEngine:
    name = "dask"

    def start(self):
        from distributed import LocalCluster

        self.cluster = LocalCluster(n_workers=WORKER_PROCESSES, threads_per_worker=1, processes=True,
                                    dashboard_address=None)
        return parse_executor("dask://" + self.cluster.scheduler_address[len("tcp://"):])

    def stop(self):
        self.cluster.close()


class RayEngine:
    name = "ray"

    def start(self):
        import ray

        ray.init(num_cpus=WORKER_PROCESSES, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
        return RayExecutor()

    def stop(self):
        import ray

        ray.shutdown()


def descendants_rss_bytes() -> int:
    import psutil

    total = 0
    for child in psutil.Process().children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total


def installed_bytes(distributions) -> int:
    total = 0
    for name in distributions:
        for file in importlib.metadata.distribution(name).files or ():
            path = file.locate()
            if os.path.isfile(path):
                total += os.path.getsize(path)
    return total


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def measure(engine, profile, local, tasks: int) -> dict:
    started = time.perf_counter()
    executor = engine.start()
    start_s = time.perf_counter() - started
    # A first round wakes every worker process (Ray starts its workers lazily).
    executor.map(echo, None, list(range(2 * WORKER_PROCESSES)), jobs=WORKER_PROCESSES)
    started = time.perf_counter()
    executor.map(echo, None, list(range(tasks)), jobs=WORKER_PROCESSES, on_result=lambda k, r: None)
    per_task_s = (time.perf_counter() - started) / tasks
    started = time.perf_counter()
    frame = simulate.predict(profile, str(CLUSTER), **SWEEP, executor=executor)
    sweep_s = time.perf_counter() - started
    rss = descendants_rss_bytes()
    started = time.perf_counter()
    engine.stop()
    stop_s = time.perf_counter() - started
    return {"start_s": start_s, "per_task_s": per_task_s, "sweep_s": sweep_s, "stop_s": stop_s,
            "cluster_rss_bytes": rss, "equal_to_local": bool(frame.equals(local))}


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=500)
    args = parser.parse_args()
    profile = tfprofile.load_profile(str(PROFILE))
    load_before = loadavg()
    local_s = []
    local = None
    for _ in range(args.repeat):
        started = time.perf_counter()
        local = simulate.predict(profile, str(CLUSTER), **SWEEP, jobs=WORKER_PROCESSES)
        local_s.append(time.perf_counter() - started)
    results = {"local": {"sweep_s": summary(local_s)}}
    for engine in (DaskEngine(), RayEngine()):
        runs = [measure(engine, profile, local, args.tasks) for _ in range(args.repeat)]
        results[engine.name] = {key: summary([run[key] for run in runs]) for key in runs[0] if key != "equal_to_local"}
        results[engine.name]["equal_to_local"] = all(run["equal_to_local"] for run in runs)
        print(engine.name, {k: v["median"] if isinstance(v, dict) else v for k, v in results[engine.name].items()},
              flush=True)
    results["dask"]["installed_bytes"] = installed_bytes(["dask", "distributed"])
    results["ray"]["installed_bytes"] = installed_bytes(["ray"])
    record = {"machine": machine_description(), "configurations": len(local), "sweep": {**SWEEP, "profile": "tiny",
              "cluster": CLUSTER.name}, "worker_processes": WORKER_PROCESSES, "repeat": args.repeat,
              "tasks": args.tasks, "versions": {name: importlib.metadata.version(name) for name in
                                                ("dask", "distributed", "ray")},
              "loadavg_before": load_before, "loadavg_after": loadavg(), "results": results}
    out = ROOT / "bench" / "results"
    write_json(out / "executors.json", record)
    write_text(out / "executors.md", render(record))
    print((out / "executors.md").read_text())


def render(record: dict) -> str:
    r = record["results"]

    def cell(engine, key, scale=1.0, digits=2):
        s = r[engine][key]
        return f"{s['median'] * scale:.{digits}f} ({s['min'] * scale:.{digits}f}..{s['max'] * scale:.{digits}f})"

    lines = [
        "# Dask and Ray for tfsim's sweeps",
        "",
        f"`.venv/bin/python bench/executor_compare.py --repeat {record['repeat']} --tasks {record['tasks']}` on "
        f"{record['machine']['cpu']}, {record['machine']['cores']} cores; dask {record['versions']['dask']}, "
        f"distributed {record['versions']['distributed']}, ray {record['versions']['ray']}. "
        f"Each engine a local cluster of {record['worker_processes']} worker processes "
        f"of one thread; median (min..max) of {record['repeat']} runs; load average "
        f"{record['loadavg_before']:.2f} before, {record['loadavg_after']:.2f} after.",
        "",
        f"The sweep: `simulate.predict` of the tiny profile on {record['sweep']['cluster']}, W = "
        f"{record['sweep']['workers']} x {', '.join(record['sweep']['transfer'])}, {record['sweep']['steps']} steps "
        f"({record['configurations']} configurations).",
        "",
        "| | start (s) | stop (s) | per task, nothing to compute (ms) | the sweep (s) | cluster's memory (MiB) "
        "| installed (MiB) | table equals the local run's |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| local pool (jobs={record['worker_processes']}) | | | | {cell('local', 'sweep_s')} | | | |",
    ]
    for engine in ("dask", "ray"):
        lines.append(
            f"| {engine} | {cell(engine, 'start_s')} | {cell(engine, 'stop_s')} | {cell(engine, 'per_task_s', 1e3)} | "
            f"{cell(engine, 'sweep_s')} | {cell(engine, 'cluster_rss_bytes', 1 / 2**20, 0)} | "
            f"{r[engine]['installed_bytes'] / 2**20:.0f} | {'yes' if r[engine]['equal_to_local'] else 'NO'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
