#!/usr/bin/env python3
"""This machine's speed, sampled beside a lab run: ``python speed_probe.py OUT.csv [PERIOD_S]``.

Every PERIOD_S seconds (default 1) a fixed pure-Python loop of 100,000 additions is timed, and
``time_unix_s,wall_ms,cpu_ms`` appended to OUT.csv: its wall time and the CPU time the kernel
charged it. On an idle machine of this kind the loop takes 12-48 ms (median about 16): the
virtual CPUs' speed wanders, and no steal time shows it. The probe costs about 1.5% of a core.
Stop it with SIGTERM. A study tool, not part of tfsim.
"""

from __future__ import annotations

import sys
import time

LOOP = 100_000


def main() -> None:
    out, period = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    with open(out, "a", encoding="utf-8") as handle:
        while True:
            wall, cpu = time.perf_counter(), time.process_time()
            total = 0
            for i in range(LOOP):
                total += i
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            handle.write(f"{time.time():.3f},{wall * 1e3:.3f},{cpu * 1e3:.3f}\n")
            handle.flush()
            time.sleep(period)


if __name__ == "__main__":
    main()
