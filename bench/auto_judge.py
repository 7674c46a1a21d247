#!/usr/bin/env python3
"""Judge ``--transfer auto`` on saved lab points: ``python bench/auto_judge.py PACKET_CSV RESULTS_CSV
FLOW_CSV [--flow-variant NAME]``.

``auto``'s rule until 2026-11-28 (docs/model.md §12, "Auto") predicted with the packet model
where the lab expected an overflow (results.csv ``overflow_expected``: the workers' calibrated
queue windows exceed the link's buffer) and with the flow model elsewhere; this judges that
rule (today's, the packet model from W = 2, is judged beside it by
bench/results/auto-rule-2026-11-27/judge_rules.py). This takes each point's packet-model error
from PACKET_CSV (bench/packet_judge.py's output: columns setting, workers, error, inside; or a
``tfsim lab --packet`` results.csv: error_packet, inside_packet), the flow model's from FLOW_CSV
(bench/lab_judge.py's ``--csv``: one variant's setting, workers, error, inside) and prints the
lab's bars for flow, packet and auto over the points all three have. A study tool: it runs no
simulation, so auto's numbers are exactly the two models' on the same points.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd


def _truthy(column: pd.Series) -> pd.Series:
    return column.astype(str).str.lower().isin(["true", "1", "yes"])


def bars(errors: pd.Series, inside: pd.Series) -> str:
    return f"{errors.abs().mean():.1%}, {errors.abs().max():.1%}, {inside.mean():.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packet_csv")
    parser.add_argument("results_csv")
    parser.add_argument("flow_csv")
    parser.add_argument("--flow-variant", help="the variant of FLOW_CSV to use (default: its first)")
    args = parser.parse_args()
    packet = pd.read_csv(args.packet_csv)
    if "error_packet" in packet:
        packet = packet.rename(columns={"error_packet": "error", "inside_packet": "inside"})
    packet = packet[["setting", "workers", "error", "inside"]].dropna()
    flow = pd.read_csv(args.flow_csv)
    variant = args.flow_variant or flow["variant"].iloc[0]
    flow = flow[flow["variant"] == variant][["setting", "workers", "error", "inside"]]
    results = pd.read_csv(args.results_csv)[["setting", "workers", "overflow_expected"]]
    points = packet.merge(flow, on=["setting", "workers"], suffixes=("_packet", "_flow")).merge(
        results, on=["setting", "workers"])
    overflow = _truthy(points["overflow_expected"])
    auto_error = pd.Series(np.where(overflow, points["error_packet"], points["error_flow"]))
    auto_inside = pd.Series(np.where(overflow, _truthy(points["inside_packet"]), _truthy(points["inside_flow"])))
    print(f"{len(points)} points, {int(overflow.sum())} with an overflow expected; "
          f"mean |error|, max |error|, inside or within 3%:")
    print(f"- flow ({variant}): {bars(points['error_flow'], _truthy(points['inside_flow']))}")
    print(f"- packet: {bars(points['error_packet'], _truthy(points['inside_packet']))}")
    print(f"- auto: {bars(auto_error, auto_inside)}")


if __name__ == "__main__":
    main()
