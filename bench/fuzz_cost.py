"""What one run of the whole-command fuzz campaign costs, per command: ``python bench/fuzz_cost.py --runs 30``.

The same runs (seed, command, numbers 0 to N-1) are made twice, each time from a fresh warm
worker forked from this process: once with the worker's warm-up as it was before the compiled
event loop and matplotlib's fonts were loaded in it (``cold``), once with the warm-up of
:func:`fuzz._warm_up` (``warm``). CPU time is the worker's own (making the inputs, checking
the outcome) plus its children's (the command and its simulation processes), in core-seconds
per run; the machine's load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import fuzz  # noqa: E402
import fuzz_targets  # noqa: E402
from fuzz_commands import COMMAND_TARGETS, remove_seeds  # noqa: E402


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def measure(names: list[str], runs: int, seed: int, warm: bool) -> dict:
    """Core-seconds per run of each command (in this process: fork it first)."""
    import ctypes

    ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER, as the campaign's worker
    if not warm:
        fuzz._warm_kernel = fuzz._warm_figures = lambda: None
    options = {"targets": names, "run_seconds": 120.0, "memory_mb": 3072}
    scratch = fuzz_targets.scratch_dir()
    rows = {}
    try:
        fuzz._warm_up(scratch, options)
        for name in names:
            own, children, started = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
            failures = []
            for index in range(runs):
                failure, (_, where) = fuzz.command_run(name, seed, index, scratch, options)
                if failure is not None:
                    failures.append(f"{index}: {failure}")
                shutil.rmtree(where, ignore_errors=True)
            rows[name] = {"worker_s": (_cpu(resource.RUSAGE_SELF) - own) / runs,
                          "command_s": (_cpu(resource.RUSAGE_CHILDREN) - children) / runs,
                          "wall_s": (time.monotonic() - started) / runs, "failures": failures}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        remove_seeds()
    return rows


def in_child(names: list[str], runs: int, seed: int, warm: bool) -> dict:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            os.write(write, json.dumps(measure(names, runs, seed, warm)).encode())
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        data = handle.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per command (default 30)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--commands", default=",".join(COMMAND_TARGETS))
    args = parser.parse_args(argv)
    names = [n for n in args.commands.split(",") if n]
    with open("/proc/loadavg") as handle:
        print("load before:", handle.read().strip())
    cold = in_child(names, args.runs, args.seed, warm=False)
    warm = in_child(names, args.runs, args.seed, warm=True)
    with open("/proc/loadavg") as handle:
        print("load after:", handle.read().strip())
    print(f"core-seconds per run ({args.runs} runs of each command, seed {args.seed})")
    print("| command | cold | warm | ratio |")
    print("| --- | ---: | ---: | ---: |")
    totals = [0.0, 0.0]
    for name in names:
        before = cold[name]["worker_s"] + cold[name]["command_s"]
        after = warm[name]["worker_s"] + warm[name]["command_s"]
        totals[0] += before
        totals[1] += after
        print(f"| {name} | {before:.3f} | {after:.3f} | {before / after:.1f} |")
    print(f"| all (mean) | {totals[0] / len(names):.3f} | {totals[1] / len(names):.3f} | "
          f"{totals[0] / totals[1]:.1f} |")
    for label, rows in (("cold", cold), ("warm", warm)):
        for name, row in rows.items():
            if row["failures"]:
                print(f"{label} {name} failures: {row['failures']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
