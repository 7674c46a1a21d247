"""Timing helper shared by the benchmark scripts."""

import statistics
import time


def time_calls(function, repeat: int) -> tuple[float, float]:
    """Best and median wall time (s) of ``repeat`` calls of ``function``."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        runs.append(time.perf_counter() - start)
    return min(runs), statistics.median(runs)
