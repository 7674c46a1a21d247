"""The parameter servers' CPU per step, from the CPU times ``collect`` read (docs/calibration.md §4.8).

``task_cpu.csv`` holds every task's CPU time when the chief reported its first measured step
and its last. A PS task's CPU per step is the difference over the steps between: its ops, and
the gRPC, serialisation and copying that no trace shows. Recording a trace costs the PS CPU
too (its share of a TF1 step's statistics; a tf2-pss job's profiler runs on it): on the lab's
recommender a profile that traced every other step gave 9.7 ms per step where untraced runs
measured 7.9-8.2 ms. So a run whose traced steps come first is read a third time when they
end (docs/formats.md §2.3.1), and the untraced steps after that reading give the CPU per
step. With the cores the task could use
(``run.json``'s ``task_cpu.limits``) this bounds how many worker-steps per second the PS host
serves.
"""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from pathlib import Path

from tfbase.errors import InputError
from tfbase.fileio import read_input

MIN_STEPS = 3  # fewer steps between the readings give no estimate worth a bound
PS_PREFIX = "ps"
WORKER_PREFIX = "worker"  # a tf2-pss run also reads its coordinator, which no connection of a step has


def _untraced_span(readings: list[tuple[int, float, float]]) -> tuple[tuple, tuple] | None:
    """The reading as a run's traced steps ended and its last one, when the run read its tasks a
    third time there (the lab's profiling runs) and at least MIN_STEPS untraced steps followed;
    else None.

    Examples
    --------
    >>> _untraced_span([(4, 0.0, 1.0), (15, 1.1, 1.15), (27, 2.3, 1.27)])
    ((15, 1.1, 1.15), (27, 2.3, 1.27))
    >>> _untraced_span([(4, 0.0, 1.0), (25, 2.1, 1.25), (27, 2.3, 1.27)]) is None
    True
    """
    if len(readings) >= 3 and readings[-1][0] - readings[-2][0] >= MIN_STEPS:
        return readings[-2], readings[-1]
    return None


def _span(readings: list[tuple[int, float, float]]) -> tuple[tuple[int, float, float], tuple[int, float, float]]:
    """The two readings a task's CPU per step is taken between: the untraced span
    (:func:`_untraced_span`; recording a trace costs the PS CPU) where there is one, else the
    first and last.

    Examples
    --------
    >>> _span([(4, 0.0, 1.0), (27, 2.3, 1.3)])
    ((4, 0.0, 1.0), (27, 2.3, 1.3))
    >>> _span([(4, 0.0, 1.0), (15, 1.1, 1.15), (27, 2.3, 1.27)])
    ((15, 1.1, 1.15), (27, 2.3, 1.27))
    """
    return _untraced_span(readings) or (readings[0], readings[-1])


def _readings(run_dir: str | os.PathLike, run: dict) -> dict[str, list[tuple[int, float, float]]] | None:
    """Every task's ``(step, time_unix_s, cpu_s)`` readings in step order, or None for a run
    without them (collected before they existed, or with ``--role``)."""
    path = Path(run_dir) / "task_cpu.csv"
    if not isinstance(run.get("task_cpu"), dict) or not path.is_file():
        return None
    readings: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                readings[row["task"]].append((int(row["step"]), float(row["time_unix_s"]), float(row["cpu_s"])))
    except (OSError, KeyError, ValueError, TypeError) as err:
        raise InputError(path, f"is not a task CPU table: {err}") from None
    return {task: sorted(rows) for task, rows in readings.items()}


def tracing_cpu_ratio(run_dir: str | os.PathLike, run: dict) -> dict[str, float]:
    r"""Per task: its CPU per traced step over its CPU per untraced step, for a run read a third
    time as its traced steps ended with at least MIN_STEPS steps on either side; ``{}`` for a run
    without such readings.

    A ratio above 1 is what recording the trace cost the task (the lab's deep_narrow profile,
    66 small variables: 1.43 on the PS, 1.48 on the worker; convnet: 1.00-1.13).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "task_cpu.csv").write_text("step,time_unix_s,task,cpu_s,slices\n"
    ...     "4,0.0,ps0,1.0,1\n15,1.1,ps0,1.33,1\n27,2.3,ps0,1.57,1\n")
    >>> round(tracing_cpu_ratio(d, {"task_cpu": {}})["ps0"], 3)
    1.5
    """
    readings = _readings(run_dir, run) or {}
    ratios = {}
    for task, rows in readings.items():
        untraced_span = _untraced_span(rows)
        if untraced_span is None:
            continue
        (first_step, _, first_cpu), ((end_step, _, end_cpu), (last_step, _, last_cpu)) = rows[0], untraced_span
        if end_step - first_step < MIN_STEPS:
            continue
        traced = (end_cpu - first_cpu) / (end_step - first_step)
        untraced = (last_cpu - end_cpu) / (last_step - end_step)
        if traced > 0 and untraced > 0:
            ratios[task] = traced / untraced
    return ratios


def untraced_window_s(run_dir: str | os.PathLike, run: dict) -> tuple[float, float] | None:
    """The unix times of :func:`_untraced_span`'s two readings (every task is read at the same
    moments): the untraced tail that the PS CPU estimate and the lab's one-worker correction
    take; None for a run without one."""
    readings = _readings(run_dir, run) or {}
    untraced_span = _untraced_span(next(iter(readings.values()), []))
    return None if untraced_span is None else (untraced_span[0][1], untraced_span[1][1])


def _server_cores(run: dict, servers: list[str]) -> list[float] | None:
    """The cores each of ``servers`` could use (``run.json``'s ``task_cpu.limits``), or None
    where any has no such record."""
    limits = run["task_cpu"].get("limits") or {}
    cores = [float(limits[task]["cores"]) for task in servers if isinstance(limits.get(task), dict)
             and isinstance(limits[task].get("cores"), (int, float))]
    return cores if len(cores) == len(servers) else None


def ps_cpu_record(run_dir: str | os.PathLike, run: dict) -> dict | None:
    """CLUSTER.json's ``ps_cpu`` for a collected run, or None when the run has no CPU readings
    (collected before they existed, or with ``--role``) or too few steps between them.

    The record: ``cpu_s_per_step`` (every PS task together), ``cores`` (the least any PS task
    could use), ``servers``, ``steps`` (the steps between the readings), ``busy_fraction`` (the
    CPU per step over the PS tasks' cores and the mean time per step between the readings: how
    close the one-worker run came to the bound) and ``source``.
    """
    readings = _readings(run_dir, run)
    if readings is None:
        return None
    servers = sorted(task for task in readings if task.startswith(PS_PREFIX))
    if not servers:
        return None
    total, steps, seconds, untraced = 0.0, None, None, False
    for task in servers:
        (first_step, first_s, first_cpu), (last_step, last_s, last_cpu) = _span(readings[task])
        untraced = first_step != min(readings[task])[0]
        if last_step - first_step < MIN_STEPS or last_s <= first_s:
            return None
        total += (last_cpu - first_cpu) / (last_step - first_step)
        steps, seconds = last_step - first_step, last_s - first_s
    cores = _server_cores(run, servers)
    if cores is None or total <= 0:
        return None
    return {"cpu_s_per_step": total, "cores": min(cores), "servers": len(servers), "steps": steps,
            "busy_fraction": total / (len(servers) * min(cores) * seconds / steps),
            "source": "task_cpu.csv: the PS tasks' CPU between " + (
                "the reading as the trace ended" if untraced else "the first") + " and the last measured step"}


def _worker_steps_between(run_dir: Path, start_unix_s: float, end_unix_s: float) -> tuple[int, int, int]:
    """How many steps of any worker ended between two readings, how many of those were traced,
    and how many workers the run had, from ``step_times.csv`` (every step of every worker,
    docs/formats.md §2.3)."""
    path = run_dir / "step_times.csv"
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = [(row["worker"], float(row["start_unix_s"]) + float(row["wall_s"]), row["traced"] == "1")
                    for row in csv.DictReader(handle)]
    except (OSError, KeyError, ValueError, TypeError) as err:
        raise InputError(path, f"is not a step time table: {err}") from None
    between = [traced for _, end, traced in rows if start_unix_s < end <= end_unix_s]
    return len(between), sum(between), len({worker for worker, _, _ in rows})


def busy_ps_cpu_record(run_dir: str | os.PathLike, run: dict) -> dict:
    """CLUSTER.json's ``ps_cpu.busy`` entry for a run with several workers (docs/calibration.md
    §4.8): the PS tasks' CPU per step of any worker between the run's readings
    (:func:`_span`), the steps counted in ``step_times.csv``.

    A busy PS serves several requests per wake-up, so a worker-step costs it less than a lone
    worker's step did; a one-worker run cannot show how much less. The record:
    ``workers``, ``cpu_s_per_step``, ``worker_steps`` (counted between the readings),
    ``busy_fraction`` (the PS tasks' CPU over their cores and that time) and ``source``.

    Raises
    ------
    InputError
        The run has one worker, no CPU readings (collected with ``--role``, or before they
        existed), no PS task, fewer than MIN_STEPS worker-steps between them, or traced steps
        between them.
    """
    run_dir = Path(run_dir)
    readings = _readings(run_dir, run)
    if readings is None:
        raise InputError(run_dir / "run.json", "has no task CPU readings (task_cpu.csv): collect the busy-PS run "
                                               "without a role, as the one-worker run was")
    servers = sorted(task for task in readings if task.startswith(PS_PREFIX))
    if not servers:
        raise InputError(run_dir / "task_cpu.csv", "reads no PS task")
    (_, first_s, _), (_, last_s, _) = _span(readings[servers[0]])
    steps, traced, workers = _worker_steps_between(run_dir, first_s, last_s)
    if workers < 2:
        raise InputError(run_dir / "step_times.csv", f"has {workers} worker(s): a busy-PS run has at least 2")
    if traced:
        # Recording a trace costs the PS CPU (the lab's deep_narrow: 1.43 times an untraced step's).
        raise InputError(run_dir / "step_times.csv", f"has {traced} traced steps between the CPU readings, and "
                                                     "a trace costs the PS CPU: collect the busy-PS run untraced "
                                                     "(trace_every above its steps)")
    if steps < MIN_STEPS * workers:
        raise InputError(run_dir / "step_times.csv", f"has {steps} worker-steps between the CPU readings, fewer "
                                                     f"than {MIN_STEPS * workers}")
    spans = [_span(readings[task]) for task in servers]
    cpu_s = sum(last_cpu - first_cpu for (_, _, first_cpu), (_, _, last_cpu) in spans)
    cores = _server_cores(run, servers)
    if cpu_s <= 0:
        raise InputError(run_dir / "task_cpu.csv", "reads no PS CPU time between its readings")
    return {"workers": workers, "cpu_s_per_step": cpu_s / steps, "worker_steps": steps,
            "busy_fraction": None if cores is None else cpu_s / (len(servers) * min(cores) * (last_s - first_s)),
            "source": f"task_cpu.csv and step_times.csv of a run with {workers} workers: the PS tasks' CPU per "
                      "step of any worker between the readings"}


RUN_JSON_LIMIT_BYTES = 16 * 2**20  # a run.json is a few kB; more is not one


def read_busy_ps_run(run_dir: str | os.PathLike) -> dict:
    """:func:`busy_ps_cpu_record` of a run directory, its ``run.json`` read here.

    Raises
    ------
    InputError
        ``run.json`` is missing or not JSON, or the run is not a busy-PS run
        (:func:`busy_ps_cpu_record`).
    """
    path = Path(run_dir) / "run.json"
    try:
        run = json.loads(read_input(path, limit=RUN_JSON_LIMIT_BYTES, what="run.json"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(path, f"is not JSON: {err}") from None
    if not isinstance(run, dict):
        raise InputError(path, "is not a run record (a JSON object)")
    return busy_ps_cpu_record(run_dir, run)


def with_busy_runs(ps_cpu: dict, records: list[dict]) -> dict:
    """CLUSTER.json's ``ps_cpu`` with its ``busy`` list made from :func:`busy_ps_cpu_record`
    ``records``: per worker count, the mean CPU per worker-step over its runs (each run weighing
    alike, as the one-worker runs do) and each run's value (docs/formats.md §4).

    Examples
    --------
    >>> busy = with_busy_runs({"cpu_s_per_step": 0.027, "cores": 0.25}, [
    ...     {"workers": 4, "cpu_s_per_step": 0.020}, {"workers": 4, "cpu_s_per_step": 0.023}])["busy"]
    >>> busy
    [{'workers': 4, 'cpu_s_per_step': 0.0215, 'runs': 2, 'cpu_s_per_step_runs': [0.02, 0.023]}]
    """
    by_workers: dict[int, list[float]] = defaultdict(list)
    for record in records:
        by_workers[record["workers"]].append(record["cpu_s_per_step"])
    return {**ps_cpu, "busy": [
        {"workers": workers, "cpu_s_per_step": sum(values) / len(values), "runs": len(values),
         "cpu_s_per_step_runs": values} for workers, values in sorted(by_workers.items())]}
