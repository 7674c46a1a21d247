"""Emulated hosts: one cgroup per task with a hard CPU quota (needs root).

The cpu controller of cgroup v2 is used where the unified hierarchy has it (``cpu.max``,
``cpu.stat``'s ``usage_usec``, ``nr_throttled`` and ``throttled_usec``); otherwise the v1
``cpu`` controller (``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``; ``cpu.stat``'s
``nr_throttled`` and ``throttled_time``) with the v1 ``cpuacct`` controller for the CPU
time used. A task joins its groups through :mod:`tfsim.lab.cgexec` before
``ip netns exec`` runs (which remounts /sys in the new namespace, so the groups are joined
from the outside view).

Every group of a lab run lives under one parent named ``tfsimlab-<pid>-<hex>`` in each
hierarchy; :func:`cleanup_cgroups` removes the parents whose creating process is gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from tfbase.errors import UsageError
from tfsim.lab.netns import pid_alive

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "tfsimlab"
_NAME_RE = re.compile(rf"^{PREFIX}-(\d+)-[0-9a-f]+$")
PERIOD_US = 100_000  # the CFS period: 100 ms, the kernel's default
MIN_PERIOD_US = 1_000  # the kernel's bounds for a CFS period
MAX_PERIOD_US = 1_000_000
MIN_QUOTA_US = 1_000  # the kernel refuses a quota below 1 ms per period


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """Where the cpu controller (and CPU accounting) is mounted, and which interface it has."""

    version: int              # 1 or 2
    cpu: Path                 # the cpu controller's root (v2: the unified root)
    cpuacct: Path | None      # v1 only: the cpuacct controller's root

    def roots(self) -> tuple[Path, ...]:
        return (self.cpu,) if self.cpuacct is None or self.cpuacct == self.cpu else (self.cpu, self.cpuacct)


def _mounts() -> list[tuple[str, Path, set[str]]]:
    rows = []
    with contextlib.suppress(OSError), open("/proc/self/mounts") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
                rows.append((fields[2], Path(fields[1]), set(fields[3].split(","))))
    return rows


def find_hierarchy() -> Hierarchy:
    """The cpu controller to use: v2 where the unified hierarchy offers it, else v1.

    Raises :class:`~tfbase.errors.UsageError` (parameter ``ps_cores``) when neither is mounted.
    """
    mounts = _mounts()
    for kind, path, _ in mounts:
        if kind == "cgroup2":
            with contextlib.suppress(OSError):
                if "cpu" in (path / "cgroup.controllers").read_text().split():
                    return Hierarchy(2, path, None)
    cpu = next((path for kind, path, opts in mounts if kind == "cgroup" and "cpu" in opts), None)
    cpuacct = next((path for kind, path, opts in mounts if kind == "cgroup" and "cpuacct" in opts), None)
    if cpu is None:
        raise UsageError("ps_cores", "CPU quotas need the cpu controller of cgroup v2 or v1, and neither is mounted "
                                     "here (use the co-located hosts instead)")
    return Hierarchy(1, cpu, cpuacct)


@dataclasses.dataclass(frozen=True)
class CpuStats:
    """What a group used and how often its quota stopped it, since the group was made."""

    usage_s: float
    nr_throttled: int
    throttled_s: float

    def __sub__(self, other: CpuStats) -> CpuStats:
        return CpuStats(self.usage_s - other.usage_s, self.nr_throttled - other.nr_throttled,
                        self.throttled_s - other.throttled_s)


def _stat_file(path: Path) -> dict[str, int]:
    values = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                values[key] = int(value)
    return values


@dataclasses.dataclass(frozen=True)
class TaskGroup:
    """One task's groups (one per hierarchy root), and its quota in cores (None: no limit)."""

    name: str
    cores: float | None
    paths: tuple[Path, ...]
    hierarchy: Hierarchy

    def procs_files(self) -> list[str]:
        return [str(p / "cgroup.procs") for p in self.paths]

    def wrapper(self) -> list[str]:
        """The argv prefix that runs a command inside this group (:mod:`tfsim.lab.cgexec`)."""
        return [sys.executable, "-m", "tfsim.lab.cgexec", *self.procs_files(), "--"]

    def stats(self) -> CpuStats:
        cpu = _stat_file(self.paths[0] / "cpu.stat")
        if self.hierarchy.version == 2:
            return CpuStats(cpu.get("usage_usec", 0) / 1e6, cpu.get("nr_throttled", 0),
                            cpu.get("throttled_usec", 0) / 1e6)
        usage_ns = 0
        if len(self.paths) > 1:
            with contextlib.suppress(OSError, ValueError):
                usage_ns = int((self.paths[1] / "cpuacct.usage").read_text())
        return CpuStats(usage_ns / 1e9, cpu.get("nr_throttled", 0), cpu.get("throttled_time", 0) / 1e9)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as err:
        raise UsageError("ps_cores", f"cannot set {path}: {err.strerror or err}") from None


def check_period(period_us: int, min_cores: float) -> None:
    """A CFS period the kernel takes, long enough that a quota of ``min_cores`` is at least its
    1 ms minimum per period (a UsageError naming ``cpu_period_ms`` otherwise)."""
    if not (isinstance(period_us, int) and MIN_PERIOD_US <= period_us <= MAX_PERIOD_US):
        raise UsageError("cpu_period_ms", f"must be from {MIN_PERIOD_US / 1e3:g} to {MAX_PERIOD_US / 1e3:g} ms, "
                                          f"not {period_us / 1e3:g}")
    if min_cores * period_us < MIN_QUOTA_US:
        raise UsageError("cpu_period_ms", f"a quota of {min_cores:g} core over {period_us / 1e3:g} ms is below the "
                                          f"kernel's {MIN_QUOTA_US / 1e3:g} ms per period: give a longer period")


def _set_quota(group: Path, version: int, cores: float | None, period_us: int = PERIOD_US) -> None:
    quota = None if cores is None else max(MIN_QUOTA_US, round(cores * period_us))
    if version == 2:
        _write(group / "cpu.max", "max" if quota is None else f"{quota} {period_us}")
        return
    _write(group / "cpu.cfs_period_us", str(period_us))
    _write(group / "cpu.cfs_quota_us", "-1" if quota is None else str(quota))


def _kill_and_remove(group: Path) -> None:
    """Kill what still runs in ``group`` (and its children), then remove it, deepest first."""
    for child in sorted((p for p in group.iterdir() if p.is_dir()), reverse=True) if group.is_dir() else ():
        _kill_and_remove(child)
    procs = group / "cgroup.procs"
    for _ in range(50):
        try:
            pids = [int(x) for x in procs.read_text().split()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)  # a killed process leaves its group a moment after the signal


class LabCgroups:
    """The groups of one lab run: ``group(name, cores)`` per task; a context manager that
    removes them all (killing what still runs in them) on exit."""

    def __init__(self, hierarchy: Hierarchy | None = None) -> None:
        self.hierarchy = hierarchy or find_hierarchy()
        self.name = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}"
        self.parents = tuple(root / self.name for root in self.hierarchy.roots())
        self.groups: dict[str, TaskGroup] = {}

    def __enter__(self) -> LabCgroups:
        for parent in self.parents:
            try:
                parent.mkdir()
            except OSError as err:
                self.close()
                raise UsageError("ps_cores", f"cannot create the cgroup {parent}: {err.strerror or err} "
                                             "(the lab needs root)") from None
        if self.hierarchy.version == 2:  # children of a v2 group get a cpu controller only when asked
            _write(self.parents[0] / "cgroup.subtree_control", "+cpu")
        return self

    def group(self, name: str, cores: float | None, period_us: int = PERIOD_US) -> TaskGroup:
        """A new group for task ``name`` with a quota of ``cores`` (None: accounting only)
        enforced over CFS periods of ``period_us``."""
        if name in self.groups:
            raise UsageError("hosts", f"task {name!r} has a cgroup already")
        paths = []
        for k, parent in enumerate(self.parents):
            path = parent / name
            path.mkdir()
            if k == 0:
                _set_quota(path, self.hierarchy.version, cores, period_us)
            paths.append(path)
        group = TaskGroup(name, cores, tuple(paths), self.hierarchy)
        self.groups[name] = group
        return group

    def release(self, names: Iterable[str]) -> None:
        """Remove the groups of tasks that are done (a new run may reuse their names)."""
        for name in list(names):
            group = self.groups.pop(name, None)
            if group is not None:
                for path in group.paths:
                    _kill_and_remove(path)

    def close(self) -> None:
        for parent in self.parents:
            if parent.exists():
                _kill_and_remove(parent)
        self.groups.clear()

    def __exit__(self, *exc) -> None:
        self.close()


def cleanup_cgroups(include_live: bool = False) -> list[str]:
    """Remove lab groups whose creating process is gone (all with ``include_live``), killing
    what still runs in them; the paths removed."""
    try:
        hierarchy = find_hierarchy()
    except UsageError:
        return []
    removed = []
    for root in hierarchy.roots():
        for group in sorted(root.glob(f"{PREFIX}-*")):
            match = _NAME_RE.match(group.name)
            if not match or not group.is_dir():
                continue
            if not include_live and pid_alive(int(match.group(1))):
                continue
            _kill_and_remove(group)
            removed.append(str(group))
    return removed


def check_quotas(cores: Sequence[float], machine_cores: float, *, parameter: str = "workers") -> None:
    """Emulated hosts must fit the machine: their quotas may sum to at most its cores, or the
    quota no longer holds and tasks slow each other down as co-located ones do."""
    total = sum(cores)
    if total > machine_cores + 1e-9:
        raise UsageError(parameter, f"the emulated hosts' quotas add up to {total:g} cores, more than this machine's "
                                    f"{machine_cores:g}: give fewer workers or smaller quotas (ps_cores, "
                                    "worker_cores), or co-locate the tasks")
