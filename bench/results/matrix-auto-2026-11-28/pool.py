#!/usr/bin/env python3
"""The bars over several lab runs' results.csv files pooled: per setting and over every point,
for the grpc, packet and auto predictions. ``python pool.py RESULTS.csv[:SETTING,...] ...``
(a file's settings after a colon: only those).

The numbers are the lab's own bars' (tfsim/lab/validate.py ``bar_scores``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tfsim.lab.validate import bar_scores

MODELS = ("grpc", "packet", "auto")


def bars(frame: pd.DataFrame) -> str:
    """mean |error|, max |error| and the inside share of each model, over the frame's points."""
    parts = []
    for model in MODELS:
        if frame[f"error_{model}"].isna().all():
            continue
        mean, largest, share = bar_scores(frame, model)
        parts.append(f"{model} {mean * 100:.1f}% (max {largest * 100:.1f}%, {share * 100:.0f}% inside)")
    return "; ".join(parts)


def read(argument: str) -> pd.DataFrame:
    """One results.csv, or with ``:A,B`` after its path only settings A and B of it."""
    path, _, only = argument.partition(":")
    frame = pd.read_csv(path)
    return frame[frame["setting"].isin(only.split(","))] if only else frame


def main() -> None:
    frame = pd.concat([read(argument) for argument in sys.argv[1:]], ignore_index=True)
    for setting, rows in frame.groupby("setting", sort=False):
        print(f"{setting} ({len(rows)} points): {bars(rows)}")
    print(f"all ({len(frame)} points): {bars(frame)}")
    beyond = frame[frame["workers"] >= 2]
    print(f"W >= 2 ({len(beyond)} points): {bars(beyond)}")


if __name__ == "__main__":
    main()
