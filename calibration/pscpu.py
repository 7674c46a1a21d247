"""The parameter servers' CPU per step, from the CPU times ``collect`` sampled (docs/calibration.md §4.8).

``task_cpu.csv`` holds every task's CPU time each time the chief reported a step. A PS task's
CPU per step is the CPU it spent between the reports that frame an untraced measured step, over
all of them: the steps a trace was taken in are left out (recording the trace costs the PS CPU
of its own), and so are the warm-up steps. With the cores the task could use (``run.json``'s
``task_cpu.limits``) this bounds how many worker-steps per second the PS host serves, which no
trace shows: the ops a trace records are only part of a PS's CPU; gRPC, serialisation and
copying are the rest.
"""

from __future__ import annotations

import csv
import os
from collections import defaultdict
from pathlib import Path

from tfbase.errors import InputError

MIN_STEPS = 3  # fewer untraced steps than this give no estimate worth a bound
PS_PREFIX = "ps"


def ps_cpu_record(run_dir: str | os.PathLike, run: dict) -> dict | None:
    """CLUSTER.json's ``ps_cpu`` for a collected run, or None when the run has no CPU samples
    (collected before they existed, with ``--role``, or a TF2 job) or too few untraced steps.

    The record: ``cpu_s_per_step`` (every PS task together), ``cores`` (the least any PS task
    could use), ``servers``, ``steps`` (untraced steps counted), ``busy_fraction`` (the CPU
    per step over the PS tasks' cores and the chief's median untraced step: how close the
    one-worker run came to the bound) and ``source``.
    """
    record = run.get("task_cpu")
    path = Path(run_dir) / "task_cpu.csv"
    if not isinstance(record, dict) or not path.is_file():
        return None
    limits = record.get("limits") or {}
    warmup = int((run.get("config") or {}).get("warmup_steps", 0))
    samples: dict[str, dict[int, tuple[float, bool]]] = defaultdict(dict)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                samples[row["task"]][int(row["step"])] = (float(row["cpu_s"]), row["traced"] == "1")
    except (OSError, KeyError, ValueError, TypeError) as err:
        raise InputError(path, f"is not a task CPU table: {err}") from None
    servers = sorted(task for task in samples if task.startswith(PS_PREFIX))
    if not servers:
        return None
    total, counted = 0.0, None
    for task in servers:
        by_step = samples[task]
        spent, steps = 0.0, 0
        for step, (cpu_s, traced) in by_step.items():
            before = by_step.get(step - 1)
            if step <= warmup + 1 or traced or before is None:
                continue
            spent += cpu_s - before[0]
            steps += 1
        if steps < MIN_STEPS:
            return None
        total += spent / steps
        counted = steps if counted is None else min(counted, steps)
    cores = [float(limits[task]["cores"]) for task in servers if isinstance(limits.get(task), dict)
             and isinstance(limits[task].get("cores"), (int, float))]
    if len(cores) != len(servers) or total <= 0:
        return None
    step_s = _median_untraced_step_s(Path(run_dir), warmup)
    return {"cpu_s_per_step": total, "cores": min(cores), "servers": len(servers), "steps": counted,
            "busy_fraction": None if step_s is None else total / (len(servers) * min(cores) * step_s),
            "source": "task_cpu.csv: the PS tasks' CPU over the untraced measured steps"}


def _median_untraced_step_s(run_dir: Path, warmup: int) -> float | None:
    path = run_dir / "step_times.csv"
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            walls = sorted(float(r["wall_s"]) for r in csv.DictReader(handle)
                           if r["worker"] == "0" and r["measured"] == "1" and r["traced"] == "0")
    except (OSError, KeyError, ValueError):
        return None
    return walls[len(walls) // 2] if walls else None
