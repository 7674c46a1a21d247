"""The lab's prediction pipeline (tfsim/lab/validate.py run_setting) for the recommender job:
1-worker calibration run with the worker-side capture and iperf3, calibrate, profile, untrace
correction, predict W = 1..K (grpc, staggered; and lock step). Writes CLUSTER.json,
profile.npz, predictions.json in OUT.

    python scripts/research_w4/calib_predict.py --out study-data/calib-a [--rate-mbit 400] [--queue latency50]
    python scripts/research_w4/calib_predict.py --out study-data/calib-a --predict-only
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def predict_all(out: Path, workers=(1, 2, 3, 4, 6), steps: int = 1200, warmup: int = 200, cores: float = 2.0) -> dict:
    from simulate.cluster_file import load_cluster
    from simulate.sweep import predict
    from tfprofile.profile_io import load_profile
    from tfsim.lab.validate import lockstep_predictions

    profile = load_profile(out / "profile.npz")
    cluster = load_cluster(out / "CLUSTER.json")
    frame = predict(profile, cluster, workers=list(workers), transfer=["grpc", "http2", "fifo"], cores=cores,
                    steps=steps, warmup=warmup, jobs=1)
    lock = lockstep_predictions(profile, cluster, list(workers), cores=cores, steps=steps)
    rows = frame[["workers", "policy", "throughput_eps", "ci95_eps", "step_time_s", "util_downlink",
                  "util_uplink"]].to_dict(orient="records")
    result = {"steps": steps, "warmup": warmup, "cores": cores, "rows": rows, "lockstep_grpc": lock}
    (out / "predictions.json").write_text(json.dumps(result, indent=2))
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rate-mbit", type=float, default=400)
    ap.add_argument("--queue", default="latency50")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--predict-only", action="store_true")
    ap.add_argument("--workers", default="1,2,3,4,6")
    args = ap.parse_args(argv)
    out = args.out
    if not args.predict_only:
        from labrun import run_point

        from calibration.calibrate import calibrate_run
        from simulate.cluster_file import load_cluster, save_cluster
        from simulate.untrace import fit_computation_scale, scale_computation
        from tfprofile.profile_io import save_profile
        from tfprofile.rundir import profile_from_run_dir
        from tfsim.lab.validate import untraced_step_s

        rec = run_point(out, workers=1, steps=args.steps, warmup=5, rate_bit=int(args.rate_mbit * 1e6),
                        queue=args.queue, profile=True)
        run_dir = out / "run"
        calibration = calibrate_run(run_dir)
        document = calibration.to_cluster_json()
        save_cluster(document, out / "CLUSTER.json")
        profile = profile_from_run_dir(run_dir)
        cluster = load_cluster(out / "CLUSTER.json")
        target = untraced_step_s(run_dir)
        scale = fit_computation_scale(profile, cluster, target) if target else 1.0
        save_profile(scale_computation(profile, scale), out / "profile.npz")
        save_profile(profile, out / "profile-traced.npz")
        summary = {"untraced_step_s": target, "computation_scale": scale,
                   "bandwidth_Bps": document["bandwidth_Bps"], "bandwidth_source": document.get("bandwidth_source"),
                   "iperf3_bandwidth_Bps": document.get("iperf3_bandwidth_Bps"),
                   "busy_rate_Bps": document.get("busy_rate_Bps"), "default_transfer": document.get("default_transfer"),
                   "load": rec.get("load")}
        (out / "calibration-summary.json").write_text(json.dumps(summary, indent=2))
        print(json.dumps({k: v for k, v in summary.items() if k != "load"}, indent=1))
    result = predict_all(out, workers=[int(w) for w in args.workers.split(",")])
    for r in result["rows"]:
        if r["policy"] == "grpc":
            print(f"W={r['workers']} grpc {r['throughput_eps']:.0f} ex/s (±{r['ci95_eps']:.0f}) "
                  f"util down {r['util_downlink']:.2f} up {r['util_uplink']:.2f}; "
                  f"lockstep {result['lockstep_grpc'][r['workers']]:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
