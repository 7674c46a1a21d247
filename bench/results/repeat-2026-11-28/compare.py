"""The same setting (deep_narrow, 400 Mbit/s, W = 1..6, 0.29-core hosts) as six whole lab runs:
this directory's three of run/ (settings a, b, c, 60 measured steps) and the two of
bench/results/fresh-2026-11-28 (run/ and rerun/, 40 measured steps), which measured a W's runs
back to back, and rounds/ (setting d, 60 measured steps), measured in rounds. Per W: each lab run's measured mean and
its within-run range, the spread of the means between lab runs, and each run's profiling tail
and flow prediction. Run from the repository's root:
``python bench/results/repeat-2026-11-28/compare.py``. A study tool, not part of tfsim."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

RESULTS = Path("bench/results")
RUNS = {
    "2026-11-28 run (capture on the tail)": (RESULTS / "fresh-2026-11-28/run", "deep-narrow-400mbit"),
    "2026-11-28 rerun": (RESULTS / "fresh-2026-11-28/rerun", "deep-narrow-400mbit"),
    "a": (RESULTS / "repeat-2026-11-28/run", "deep-narrow-400mbit-a"),
    "b": (RESULTS / "repeat-2026-11-28/run", "deep-narrow-400mbit-b"),
    "c": (RESULTS / "repeat-2026-11-28/run", "deep-narrow-400mbit-c"),
    "d (rounds)": (RESULTS / "repeat-2026-11-28/rounds", "deep-narrow-400mbit-d"),
}


def tail_ms(setting_dir: Path) -> float:
    """The profiling run's untraced steps, mean wall time per step (ms)."""
    steps = pd.read_csv(setting_dir / "profile-run" / "step_times.csv")
    tail = steps[(steps["measured"] == 1) & (steps["traced"] == 0)]
    return float(tail["wall_s"].mean() * 1e3)


def main() -> None:
    rows = []
    for label, (lab, setting) in RUNS.items():
        results = pd.read_csv(lab / "results.csv")
        part = results[results["setting"] == setting]
        cluster = json.loads((lab / setting / "CLUSTER.json").read_text())
        for _, r in part.iterrows():
            rows.append({"run": label, "W": int(r["workers"]), "measured": r["measured_eps"],
                         "min": r["measured_min_eps"], "max": r["measured_max_eps"],
                         "within_run_range": (r["measured_max_eps"] - r["measured_min_eps"]) / r["measured_eps"],
                         "predicted_flow": r["predicted_grpc_eps"], "error_flow": r["error_grpc"],
                         "tail_ms": tail_ms(lab / setting),
                         "ps_cpu_ms": 1e3 * (cluster.get("ps_cpu") or {}).get("cpu_s_per_step", float("nan")),
                         "cap_down_MBps": (cluster.get("connection_cap_Bps") or {}).get("downlink", float("nan"))
                         / 1e6})
    frame = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print("Each lab run: tail step, PS CPU per step (calibration), downlink cap")
    print(frame.groupby("run", sort=False)[["tail_ms", "ps_cpu_ms", "cap_down_MBps"]].first().round(1).to_string())
    print()
    print("Measured mean (ex/s) per W and lab run, the within-run range (max-min over mean) and the flow error")
    print(frame.pivot(index="W", columns="run", values="measured").round(0).to_string())
    print()
    print(frame.pivot(index="W", columns="run", values="within_run_range").mul(100).round(1).to_string())
    print()
    print(frame.pivot(index="W", columns="run", values="error_flow").mul(100).round(1).to_string())
    print()
    spread = frame.groupby("W")["measured"].agg(["min", "max", "mean"])
    spread["between_runs_range_%"] = (spread["max"] - spread["min"]) / spread["mean"] * 100
    spread["median_within_run_range_%"] = frame.groupby("W")["within_run_range"].median() * 100
    print("Between lab runs against within one:")
    print(spread.round(1).to_string())
    recent = frame[frame["run"].isin(["a", "b", "c", "d (rounds)"])]
    print()
    per_run = frame.groupby("run", sort=False)["error_flow"].apply(lambda e: e.abs().mean())
    print("flow mean |error| per lab run: " + ", ".join(f"{k} {v:.1%}" for k, v in per_run.items()))
    print(f"a, b, c, d together: {recent['error_flow'].abs().mean():.1%}")


if __name__ == "__main__":
    main()
