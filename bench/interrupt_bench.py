"""How fast Ctrl-C and SIGTERM stop a long compiled simulation: ``python bench/interrupt_bench.py``.

Runs ``tfsim predict data/profiles/resnet50.npz --cluster data/clusters/lab-1gbit.json
--workers 16 --steps 4000`` (one configuration, about 10 s of compiled event loop here) as a
child process, sends SIGINT to its process group (a terminal's Ctrl-C) or SIGTERM to it alone
after a delay inside the simulation, and measures the time until it has exited, with its exit
status and whether any process it started was left. Writes ``bench/results/interrupt.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_signals import alive, descendants  # noqa: E402

ARGV = ["predict", str(ROOT / "data" / "profiles" / "resnet50.npz"), "--cluster",
        str(ROOT / "data" / "clusters" / "lab-1gbit.json"), "--workers", "16", "--steps", "4000", "--no-progress"]
DELAYS = (2.0, 4.0, 6.0)


def once(sig: str, delay: float) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "tfsim", *ARGV], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen: set[int] = set()
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline:
        seen |= descendants(proc.pid)
        time.sleep(0.02)
    sent = time.monotonic()
    if sig == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    proc.wait()
    took = time.monotonic() - sent
    err = proc.stderr.read()
    time.sleep(0.05)
    return {"signal": sig, "after_s": delay, "exit_status": proc.returncode, "exit_after_signal_s": round(took, 3),
            "children_seen": len(seen), "children_left": sum(alive(pid) for pid in seen),
            "last_stderr_line": err.strip().splitlines()[-1] if err.strip() else ""}


def main() -> int:
    from tfbase.machine import machine_description

    runs = [once(sig, delay) for sig in ("SIGINT", "SIGTERM") for delay in DELAYS]
    result = {"command": "tfsim " + " ".join(a.replace(str(ROOT) + "/", "") for a in ARGV), "machine":
              machine_description(), "runs": runs,
              "max_exit_after_signal_s": max(r["exit_after_signal_s"] for r in runs)}
    out = HERE / "results" / "interrupt.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all(r["exit_status"] in (130, 143) and not r["children_left"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
