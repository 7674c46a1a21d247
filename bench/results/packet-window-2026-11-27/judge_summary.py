#!/usr/bin/env python3
"""The published matrix's points under each model, from saved predictions only:
``python bench/results/packet-window-2026-11-27/judge_summary.py CSV [CSV ...]``.

CSV: ``bench/packet_judge.py --csv`` output of the congestion-window replay (here:
matrix-congestion.csv). Beside it: the flow model (the lab's ``error_grpc``), the capped replay
(``../lab-2026-11-27-matrix/packet-every-w.csv``), ``auto`` as its rule picks with either replay,
and the packet model from W = 2 with the flow model at W = 1. Prints every point, then per
column the mean and max |error|, the points inside the measured range or within 3% of its mean,
and the mean |error| at W = 2 and W >= 3.
"""

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tfsim.lab.validate import CLOSE_ENOUGH  # noqa: E402  (the lab's "inside" rule)

KEY = ["setting", "workers"]
MATRIX = Path(__file__).resolve().parent.parent / "lab-2026-11-27-matrix"


def main() -> None:
    capped = pd.read_csv(MATRIX / "packet-every-w.csv")
    measured = pd.read_csv(MATRIX / "results.csv")[KEY + ["measured_eps", "measured_min_eps", "measured_max_eps",
                                                         "error_grpc", "overflow_expected"]]
    congestion = pd.concat([pd.read_csv(path) for path in sys.argv[1:]])[KEY + ["error"]]
    table = (measured.merge(capped[KEY + ["error"]].rename(columns={"error": "capped"}), on=KEY)
             .merge(congestion.rename(columns={"error": "congestion"}), on=KEY, how="left"))
    table["auto_capped"] = table["capped"].where(table["overflow_expected"], table["error_grpc"])
    table["auto_congestion"] = table["congestion"].where(table["overflow_expected"], table["error_grpc"])
    table["packet_from_w2"] = table["congestion"].where(table["workers"] >= 2, table["error_grpc"])
    columns = ["error_grpc", "capped", "congestion", "auto_capped", "auto_congestion", "packet_from_w2"]
    pd.set_option("display.width", 220)
    print(table[KEY + ["overflow_expected"] + columns].round(3).to_string())
    judged = table.dropna(subset=["congestion"])
    print(f"{len(judged)} points")
    for column in columns:
        error = judged[column]
        predicted = judged["measured_eps"] * (1 + error)
        inside = (predicted.between(judged["measured_min_eps"], judged["measured_max_eps"])
                  | (error.abs() <= CLOSE_ENOUGH))
        print(f"{column:16s} mean {error.abs().mean():.1%} max {error.abs().max():.1%} inside {inside.sum()}/"
              f"{len(judged)}  W = 2 {error[judged['workers'] == 2].abs().mean():.1%}  "
              f"W >= 3 {error[judged['workers'] >= 3].abs().mean():.1%}")


if __name__ == "__main__":
    main()
