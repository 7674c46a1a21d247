"""The CPU each task of a run uses, and the CPU it may use (docs/formats.md §2.3.1).

``collect`` reads every task's CPU time twice: when the chief reports its first measured step
and when it reports its last (:class:`TaskCpuSampler`), so that calibration can take a
parameter server's CPU per step (docs/calibration.md §4.8): a PS host at its limit bounds the
throughput of any number of workers, and a one-worker run shows how far it is from there. A
task's CPU time is the sum over its threads of the time they ran
(``/proc/PID/task/*/schedstat``, nanoseconds; the process's ``stat`` counts clock ticks of
10 ms). Two readings cost the job nothing; reading at every step did: the lab's one-worker
steps were 7% slower with it, and a clock thread inside the PS cost the PS 8% of its CPU.
What a task may use (:func:`cpu_limit`) is the CPUs its affinity allows, bounded by the CPU
quota of its cgroup and of every ancestor (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``
over ``cpu.cfs_period_us``): a container's limit, or the lab's emulated host.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import io
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

TASK_CPU_FILE = "task_cpu.csv"
NS_PER_S = 1e9
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _quota_cores(group: Path, version: int) -> float:
    """The quota of one cgroup directory in cores (inf: none)."""
    try:
        if version == 2:
            quota, period = (group / "cpu.max").read_text().split()
            return math.inf if quota == "max" else int(quota) / int(period)
        quota = int((group / "cpu.cfs_quota_us").read_text())
        period = int((group / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return math.inf
    return math.inf if quota < 0 else quota / period


def quota_cores(pid: int, proc: Path = Path("/proc"), root: Path = CGROUP_ROOT) -> float:
    """The tightest CPU quota over ``pid``'s cgroup and its ancestors, in cores (inf: none).

    Reads the v1 ``cpu`` hierarchy where it is mounted, else the unified (v2) one.
    """
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return math.inf
    places = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        places[controllers] = path.lstrip("/")
    v1 = next(((c, p) for c, p in places.items() if "cpu" in c.split(",")), None)
    if v1 is not None:
        mount = next((m for m in (root / "cpu,cpuacct", root / "cpu") if m.is_dir()), None)
        if mount is None:
            return math.inf
        base, relative, version = mount, v1[1], 1
    elif "" in places:
        base, relative, version = root, places[""], 2
    else:
        return math.inf
    cores, group = math.inf, base / relative
    while True:
        cores = min(cores, _quota_cores(group, version))
        if group == base or base not in group.parents:
            return cores
        group = group.parent


@dataclasses.dataclass(frozen=True)
class CpuLimit:
    """What a task may use: ``cpus`` its affinity allows, ``quota_cores`` its cgroups' quota
    (None: none), ``cores`` the lesser."""

    cpus: int
    quota_cores: float | None

    @property
    def cores(self) -> float:
        return self.cpus if self.quota_cores is None else min(self.cpus, self.quota_cores)

    def to_json(self) -> dict:
        return {"cpus": self.cpus, "quota_cores": self.quota_cores, "cores": self.cores}


def cpu_limit(pid: int) -> CpuLimit | None:
    """``pid``'s :class:`CpuLimit`, or None once it is gone."""
    try:
        cpus = len(os.sched_getaffinity(pid))
    except OSError:
        return None
    quota = quota_cores(pid)
    return CpuLimit(cpus, None if math.isinf(quota) else round(quota, 6))


def cpu_seconds(pid: int, proc: Path = Path("/proc")) -> float | None:
    """The CPU time of process ``pid``'s live threads, in seconds (None once it is gone).

    Examples
    --------
    >>> cpu_seconds(os.getpid()) > 0
    True
    """
    reading = cpu_reading(pid, proc)
    return None if reading is None else reading[0]


def cpu_reading(pid: int, proc: Path = Path("/proc")) -> tuple[float, int] | None:
    """The CPU time of process ``pid``'s live threads, in seconds, and how many times the
    scheduler put one of them on a CPU (the third field of ``schedstat``: a thread that sleeps
    and wakes for every message counts one per message, a busy one few); None once it is gone.

    Examples
    --------
    >>> seconds, slices = cpu_reading(os.getpid())
    >>> seconds > 0 and slices >= 1
    True
    """
    total_ns, slices = 0, 0
    try:
        for thread in (proc / str(pid) / "task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (thread / "schedstat").read_text().split()
                total_ns += int(fields[0])
                slices += int(fields[2])
    except OSError:
        return None
    return total_ns / NS_PER_S, slices


class TaskCpuSampler:
    """Every task's CPU time after given steps of the chief (rows of :data:`TASK_CPU_FILE`),
    and what each task may use.

    ``pids`` maps task labels to process ids, or is a function returning that map, called at
    the first reading (a task forked by a fork server has its pid only once it runs).
    """

    def __init__(self, pids: Mapping[str, int] | Callable[[], Mapping[str, int]]):
        self._pids = pids
        self.rows: list[tuple[int, float, str, float, int]] = []
        self.limits: dict[str, dict] = {}

    @functools.cached_property
    def pids(self) -> dict[str, int]:
        return dict(self._pids() if callable(self._pids) else self._pids)

    def sample(self, step: int) -> None:
        """Record each task's CPU time now, when the chief has reported step ``step``
        (counting from 1 with the warm-up steps); the first call also reads every task's limit."""
        first = not self.rows and not self.limits
        now = time.time()
        for task, pid in self.pids.items():
            if first:
                limit = cpu_limit(pid)
                if limit is not None:
                    self.limits[task] = limit.to_json()
            reading = cpu_reading(pid)
            if reading is not None:
                self.rows.append((step, now, task, *reading))

    def csv_text(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["step", "time_unix_s", "task", "cpu_s", "slices"])
        for step, now, task, used, slices in self.rows:
            writer.writerow([step, f"{now:.6f}", task, f"{used:.9f}", slices])
        return out.getvalue()

    def record(self) -> dict:
        """``run.json``'s ``task_cpu``: the file and what each task may use."""
        return {"file": TASK_CPU_FILE, "limits": dict(sorted(self.limits.items()))}
