"""Speed of TicTac's heuristics on the bundled profiles: ``python bench/tictac_bench.py``.

Times, per profile, the whole of ``compute_ordering`` for TIC and for TAC (communication
dependencies, time oracle, properties and ordering), TAC with a bandwidth oracle, and the
dependency bitsets alone; each the best and the median of ``--repeat`` runs. Writes
``bench/results/tictac.json`` (seconds, ops, recvs, machine). TicTac reports about 10 s for
TAC on inception-sized graphs with its Python implementation (§5.1).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timing import time_calls  # noqa: E402

from tfbase.fileio import write_json  # noqa: E402
from tfbase.machine import cpu_model  # noqa: E402
from tfprofile import tictac  # noqa: E402
from tfprofile.profile_io import load_profile  # noqa: E402

DEFAULT_PROFILES = ("inception3", "resnet50")
BANDWIDTH_BPS = 1.25e9  # 10 Gbit/s, a typical cluster link


def _seconds(function, repeat: int) -> dict[str, float]:
    best, median = time_calls(function, repeat)
    return {"best": best, "median": median}

def machine() -> dict[str, object]:
    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "system": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__}


def bench_profile(path: Path, repeat: int) -> dict[str, object]:
    profile = load_profile(path)
    graph = profile.graph
    return {
        "profile": path.name,
        "ops": graph.n_ops,
        "recvs": len(tictac.recv_ops(graph)),
        "servers": graph.n_servers,
        "seconds": {
            "dependencies": _seconds(lambda: tictac.comm_dependencies(graph), repeat),
            "tic": _seconds(lambda: tictac.compute_ordering(profile, "tic"), repeat),
            "tac": _seconds(lambda: tictac.compute_ordering(profile, "tac"), repeat),
            "tac_bandwidth": _seconds(lambda: tictac.compute_ordering(profile, "tac", bandwidth_Bps=BANDWIDTH_BPS),
                                      repeat),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="*", default=list(DEFAULT_PROFILES),
                        help="bundled profile names or .npz paths (default: inception3 resnet50)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (default: 5)")
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "bench" / "results" / "tictac.json")
    args = parser.parse_args(argv)
    rows = []
    for name in args.profiles:
        path = Path(name) if name.endswith(".npz") else ROOT / "data" / "profiles" / f"{name}.npz"
        row = bench_profile(path, max(1, args.repeat))
        rows.append(row)
        s = row["seconds"]
        print(f"{row['profile']}: {row['ops']} ops, {row['recvs']} recvs: deps {s['dependencies']['best']:.3f} s, "
              f"TIC {s['tic']['best']:.3f} s, TAC {s['tac']['best']:.3f} s, "
              f"TAC (bandwidth) {s['tac_bandwidth']['best']:.3f} s (best of {args.repeat})")
    write_json(args.output, {"benchmark": "tictac", "repeat": args.repeat, "machine": machine(), "rows": rows})
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
