#!/usr/bin/env python3
"""Put the results of lab runs made one setting at a time into one table:
``python bench/lab_merge.py OUT_DIR RUN_DIR [RUN_DIR ...]``.

Each RUN_DIR is a ``tfsim lab --out`` directory (one setting each, e.g. run one at a time under
a lock so that lab runs on one machine never overlap); OUT_DIR gets one ``results.csv``,
``results.md``, ``results.json`` and plot per setting, written by the lab's own
:func:`tfsim.lab.validate.write_results` from the runs' rows. The wall time given is the sum
of the runs' (each ``results.md`` states its own).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

from tfsim.lab.validate import RESULT_COLUMNS, write_results

WALL = re.compile(r"wall time of the whole run: ([0-9.]+) min")


def main(out_dir: Path, run_dirs: list[Path], label: str) -> None:
    frames, minutes = [], 0.0
    for run_dir in run_dirs:
        frames.append(pd.read_csv(run_dir / "results.csv", keep_default_na=True))
        found = WALL.search((run_dir / "results.md").read_text())
        minutes += float(found.group(1)) if found else 0.0
    frame = pd.concat(frames, ignore_index=True)
    rows = [{c: r.get(c) for c in RESULT_COLUMNS} for r in frame.to_dict(orient="records")]
    out_dir.mkdir(parents=True, exist_ok=True)
    write_results(rows, out_dir, preset=label, elapsed_s=minutes * 60)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[1])
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]], label=Path(sys.argv[1]).resolve().name)
