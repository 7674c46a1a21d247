"""A host's load during a measurement, and the part of it the measurement did not cause.

The host's busy time comes from ``/proc/stat`` (every CPU's user, nice, system, irq, softirq
and steal time); the measurement's own is what the caller counts (the lab: its tasks'
cgroups; ``tfsim collect --role``: the task it started) plus this process's. The difference,
per second of wall time, is the outside load in cores: another job on the host, which slows
the tasks down in a way no model of the cluster should explain.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

OUTSIDE_LOAD_LIMIT_CORES = 0.1  # above this, a point is flagged (and by default measured again)
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system (idle iowait) irq softirq steal


def machine_busy_s(stat_path: str = "/proc/stat") -> float:
    """CPU seconds every core of the machine has been busy since boot."""
    with open(stat_path) as handle:
        for line in handle:
            if line.startswith("cpu "):
                ticks = [int(x) for x in line.split()[1:]]
                return sum(ticks[k] for k in _BUSY_FIELDS if k < len(ticks)) / os.sysconf("SC_CLK_TCK")
    raise OSError(f"{stat_path} has no cpu line")


def own_process_s() -> float:
    """CPU seconds of this process (its threads), excluding children."""
    times = os.times()
    return times.user + times.system


def reaped_children_s() -> float:
    """CPU seconds of this process's children that have exited and been waited for."""
    times = os.times()
    return times.children_user + times.children_system


@dataclasses.dataclass(frozen=True)
class LoadSample:
    """The load over one measured interval, in cores (CPU seconds per second)."""

    wall_s: float
    machine_cores: float
    lab_cores: float

    @property
    def outside_cores(self) -> float:
        return max(0.0, self.machine_cores - self.lab_cores)

    @property
    def flagged(self) -> bool:
        return self.outside_cores > OUTSIDE_LOAD_LIMIT_CORES

    def as_dict(self) -> dict:
        return {"wall_s": self.wall_s, "machine_cores": self.machine_cores, "own_cores": self.lab_cores,
                "outside_cores": self.outside_cores, "flagged": self.flagged}


class LoadMeter:
    """Measure an interval: ``with LoadMeter(lab_cpu_s) as meter: ...``, then ``meter.sample``.

    ``lab_cpu_s`` returns the CPU seconds the measured tasks have used so far (the lab's
    cgroups, or :func:`reaped_children_s` for a task this process started and waited for);
    this process's own time is added to it.
    """

    def __init__(self, lab_cpu_s: Callable[[], float]) -> None:
        self._lab_cpu_s = lab_cpu_s
        self.sample: LoadSample | None = None

    def __enter__(self) -> LoadMeter:
        self._start = (time.monotonic(), machine_busy_s(), self._lab_cpu_s() + own_process_s())
        return self

    def __exit__(self, *exc) -> None:
        wall, busy, lab = time.monotonic(), machine_busy_s(), self._lab_cpu_s() + own_process_s()
        wall_s = max(wall - self._start[0], 1e-9)
        self.sample = LoadSample(wall_s, (busy - self._start[1]) / wall_s, (lab - self._start[2]) / wall_s)
