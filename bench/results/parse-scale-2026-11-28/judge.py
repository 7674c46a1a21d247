"""Does the one-worker correction need to scale the parse overheads too? Re-predict saved lab
settings with the flow model, the correction fitted three ways: the worker's computation only
(the library's), plus the downlink's parse overheads (the worker's own parsing), plus both
directions' (the PS's parsing as well); and, as a fourth, each direction's parse overheads
divided by its receiver's traced over untraced CPU per step (calibration.pscpu.tracing_cpu_ratio:
the worker's for the downlink, the PS's for the uplink) before the library's correction.
``python judge.py OUT.csv LAB_DIR[:SETTING,...] ...`` (PYTHONPATH at the repository). A study
tool, not part of tfsim."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pandas as pd

from calibration.pscpu import tracing_cpu_ratio
from simulate.cluster_file import load_cluster
from simulate.config import TaskHosts, Transfer, model_cores
from simulate.sweep import predict
from simulate.untrace import MIN_SCALE, one_worker_step_s, scale_computation
from tfprofile.rundir import profile_from_run_dir
from tfsim.lab.validate import PREDICT_REPLICAS, untraced_step_s

STEPS, WARMUP, ROUNDS = 400, 50, 14
VARIANTS = ("computation", "downlink_parse", "both_parse", "parse_by_cpu_ratio")


def scaled(profile, cluster, factor, variant):
    profile = scale_computation(profile, max(factor, MIN_SCALE))
    if variant in ("downlink_parse", "both_parse"):
        down = cluster.overhead_downlink
        cluster = dataclasses.replace(cluster, overhead_downlink=dataclasses.replace(
            down, alpha_s_per_byte=down.alpha_s_per_byte * factor, beta_s=down.beta_s * factor))
    if variant == "both_parse":
        up = cluster.overhead_uplink
        cluster = dataclasses.replace(cluster, overhead_uplink=dataclasses.replace(
            up, alpha_s_per_byte=up.alpha_s_per_byte * factor, beta_s=up.beta_s * factor))
    return profile, cluster


def by_cpu_ratio(cluster, run_dir):
    """The cluster with each direction's parse overheads divided by its receiver's tracing CPU ratio."""
    ratios = tracing_cpu_ratio(run_dir, json.loads((run_dir / "run.json").read_text()))
    for field, task in (("overhead_downlink", "worker0"), ("overhead_uplink", "ps0")):
        ratio = max(1.0, ratios.get(task, 1.0))
        old = getattr(cluster, field)
        cluster = dataclasses.replace(cluster, **{field: dataclasses.replace(
            old, alpha_s_per_byte=old.alpha_s_per_byte / ratio, beta_s=old.beta_s / ratio)})
    return cluster


def fit(profile, cluster, target, variant, hosts):
    """Bisection over (0, 1] as simulate.untrace.fit_computation_scale (1 when the model is faster)."""
    transfer = Transfer(cluster.default_transfer)
    options = {"colocation": hosts, "statistic": "mean", "steps": STEPS, "warmup": WARMUP,
               "replicas": PREDICT_REPLICAS}
    if one_worker_step_s(profile, cluster, transfer, **options) <= target:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(ROUNDS):
        mid = (low + high) / 2
        if one_worker_step_s(*scaled(profile, cluster, mid, variant), transfer, **options) > target:
            high = mid
        else:
            low = mid
    return max(low, MIN_SCALE)


def main() -> None:
    out = Path(sys.argv[1])
    rows = []
    for spec in sys.argv[2:]:
        lab, _, only = spec.partition(":")
        lab = Path(lab)
        results = pd.read_csv(lab / "results.csv")
        for setting, group in results.groupby("setting", sort=False):
            if only and setting not in only.split(","):
                continue
            first = group.iloc[0]
            hosts = TaskHosts(worker_cores=model_cores(first["worker_cores"]), ps_cores=model_cores(first["ps_cores"]))
            base = profile_from_run_dir(lab / setting / "profile-run")
            cluster = load_cluster(lab / setting / "CLUSTER.json")
            target = untraced_step_s(lab / setting / "profile-run")
            for variant in VARIANTS:
                start = by_cpu_ratio(cluster, lab / setting / "profile-run") if variant == "parse_by_cpu_ratio" \
                    else cluster
                factor = fit(base, start, target, variant, hosts)
                profile, variant_cluster = scaled(base, start, factor, variant)
                frame = predict(profile, variant_cluster, workers=[int(w) for w in group["workers"]],
                                transfer="grpc", steps=STEPS, warmup=WARMUP, replicas=PREDICT_REPLICAS,
                                colocation=hosts, jobs=1)
                for (_, row), eps in zip(group.iterrows(), frame["throughput_eps"]):
                    error = float(eps) / float(row["measured_eps"]) - 1
                    rows.append({"lab": str(lab), "setting": setting, "variant": variant, "factor": factor,
                                 "workers": int(row["workers"]), "measured": float(row["measured_eps"]),
                                 "predicted": float(eps), "error": error})
                errors = [r["error"] for r in rows if r["setting"] == setting and r["variant"] == variant
                          and r["lab"] == str(lab)]
                print(f"{lab.name}/{setting} {variant}: factor {factor:.3f}, errors "
                      + " ".join(f"{e:+.1%}" for e in errors), flush=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(out, index=False)
    for variant, part in frame.groupby("variant", sort=False):
        print(f"{variant}: mean |error| {part['error'].abs().mean():.1%}, max {part['error'].abs().max():.1%}, "
              f"W>=2 {part[part['workers'] >= 2]['error'].abs().mean():.1%} over {len(part)} points")


if __name__ == "__main__":
    main()
