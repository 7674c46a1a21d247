"""Each task's CPU use over the measured steps, not over the whole run.

A run's totals (``lab.json`` ``tasks``) include TensorFlow's start-up, which under a quota of
a fraction of a core takes seconds of throttled time, so they cannot say whether a task was at
its quota while the measured steps ran. :class:`CpuTrace` samples every task's cumulative CPU
time and throttled time, and the machine's busy time, a few times a second while a run goes
on; :func:`window_usage` reads them over any window of the run (the lab's measured window,
:func:`tfsim.lab.measure.measured_window`) by linear interpolation between samples.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tfbase.load import machine_busy_s
from tfsim.lab.cgroups import TaskGroup

SAMPLE_INTERVAL_S = 0.2  # a measured window lasts seconds: a few samples a second resolve it
MACHINE = "machine"  # the key of the machine's busy time beside the tasks' names


class CpuTrace:
    """``with CpuTrace(groups) as trace: ...``, then ``trace.samples``: a background thread
    samples, every :data:`SAMPLE_INTERVAL_S`, the unix time and each group's cumulative CPU
    and throttled seconds, and the machine's busy seconds (under :data:`MACHINE`)."""

    def __init__(self, groups: Iterable[TaskGroup], interval_s: float = SAMPLE_INTERVAL_S) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, not {interval_s}")
        self._groups = list(groups)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-trace", daemon=True)
        self.samples: list[tuple[float, dict[str, tuple[float, float]]]] = []

    def _sample(self) -> None:
        values = {g.name: (s.usage_s, s.throttled_s) for g in self._groups for s in (g.stats(),)}
        values[MACHINE] = (machine_busy_s(), 0.0)
        self.samples.append((time.time(), values))

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._sample()
            except OSError:  # a group removed under us at the end of a run: the samples so far stand
                return

    def __enter__(self) -> CpuTrace:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self._sample()
        except OSError:
            pass


def window_usage(samples: Sequence[tuple[float, Mapping[str, tuple[float, float]]]], start_s: float,
                 end_s: float) -> dict[str, dict[str, float]]:
    """Each series' CPU use over ``[start_s, end_s]`` (unix s): ``cores`` (CPU seconds per
    second) and ``throttled_fraction`` (the share of the window a task spent throttled), from
    cumulative samples interpolated linearly; an empty dict when the samples do not span the
    window or it is empty.

    Examples
    --------
    >>> samples = [(0.0, {"ps0": (0.0, 0.0)}), (1.0, {"ps0": (0.25, 0.5)}), (2.0, {"ps0": (0.75, 0.5)})]
    >>> window_usage(samples, 0.5, 1.5)
    {'ps0': {'cores': 0.375, 'throttled_fraction': 0.25}}
    """
    if not samples or not end_s > start_s or samples[0][0] > start_s or samples[-1][0] < end_s:
        return {}
    times = np.array([t for t, _ in samples])
    names = [n for n in samples[0][1] if all(n in values for _, values in samples)]
    usage = {}
    for name in names:
        counters = np.array([values[name] for _, values in samples])  # (samples, 2): CPU s, throttled s
        used, throttled = (float(np.interp(end_s, times, c) - np.interp(start_s, times, c)) / (end_s - start_s)
                           for c in counters.T)
        usage[name] = {"cores": used, "throttled_fraction": throttled}
    return usage
