#!/usr/bin/env python3
"""Measure a finished lab run's throughput again under both rules, from its saved step times:
``python bench/lab_remeasure.py LAB_OUT_DIR``.

For every setting and W of LAB_OUT_DIR/results.csv, each measuring run's ``step_times.csv``
(``measure-w<W>-r<k>/``) gives the common-window rate (tfsim/lab/measure.py, the lab's rule
since 2026-11-25) and ICPE §4.1's per-worker sum (the rule before); the table puts the mean and
range of each beside the ``grpc`` prediction, with its error against each.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

from tfsim.lab.measure import read_step_spans, spans_throughput


def main(out_dir: Path) -> None:
    with open(out_dir / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    print("| setting | W | per-worker sum: mean (range) | error grpc | common window: mean (range) | error grpc "
          "| finish spread (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        w = int(row["workers"])
        old, new, spread = [], [], []
        for run in sorted((out_dir / row["setting"]).glob(f"measure-w{w}-r*")):
            measured = spans_throughput(*read_step_spans(run))
            old.append(measured["per_worker_sum_eps"])
            new.append(measured["throughput_eps"])
            spread.append(measured["finish_spread_s"])
        predicted = float(row["predicted_grpc_eps"])
        print(f"| {row['setting']} | {w} | {np.mean(old):.0f} ({min(old):.0f}..{max(old):.0f}) | "
              f"{predicted / np.mean(old) - 1:+.1%} | {np.mean(new):.0f} ({min(new):.0f}..{max(new):.0f}) | "
              f"{predicted / np.mean(new) - 1:+.1%} | {max(spread):.2f} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[1].strip())
    main(Path(sys.argv[1]))
