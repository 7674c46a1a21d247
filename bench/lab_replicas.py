#!/usr/bin/env python3
"""The lab's prediction from one seed against the mean of replicas, on saved lab settings:
``python bench/lab_replicas.py SETTING_DIR [SETTING_DIR ...] [--replicas 5] [--steps 400]
[--tie-order recorded|index]``.

SETTING_DIR as for ``bench/lab_variants.py`` (``profile.npz``, ``CLUSTER.json``, its
``measure-w<W>-r<k>`` runs, measured with the lab's rule). The prediction is the lab's own
(``grpc``, a host of one core per task, ``steps`` steps with the lab's warm-up), once with
seed 0, as the lab predicted before replicas, and as the mean of ``--replicas`` seeds
(docs/model.md §5.2), with the replicas' range; ``--tie-order`` as ``tfsim predict``'s (docs/model.md
§2.4; the saved profile's one-worker correction was fitted by the lab with the model of its day).
A study tool, not part of tfsim.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from lab_variants import measured  # noqa: E402

from simulate.cluster_file import load_cluster  # noqa: E402
from simulate.config import TaskHosts  # noqa: E402
from simulate.sweep import predict  # noqa: E402
from tfprofile.profile_io import load_profile  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("settings", type=Path, nargs="+")
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400, help="the lab's predict_steps")
    parser.add_argument("--tie-order", choices=("index", "recorded"), default="index")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    for setting in args.settings:
        profile, cluster, truth = (load_profile(setting / "profile.npz"), load_cluster(setting / "CLUSTER.json"),
                                   measured(setting))
        workers = sorted(truth)
        common = dict(workers=workers, transfer="grpc", steps=args.steps, warmup=min(50, args.steps // 5),
                      colocation=TaskHosts(1.0, 1.0), tie_order=args.tie_order)
        single = predict(profile, cluster, **common)
        replicated = predict(profile, cluster, replicas=args.replicas, **common)
        errors = {"seed 0": [], f"{args.replicas} replicas": []}
        for i, w in enumerate(workers):
            one, many = single["throughput_eps"][i], replicated["throughput_eps"][i]
            errors["seed 0"].append(one / truth[w] - 1)
            errors[f"{args.replicas} replicas"].append(many / truth[w] - 1)
            print(f"{setting.name} W={w}: measured {truth[w]:,.0f}; seed 0 {one:,.0f} ({one / truth[w] - 1:+.1%}); "
                  f"{args.replicas} replicas {many:,.0f} ({many / truth[w] - 1:+.1%}), range "
                  f"{replicated['throughput_min_eps'][i]:,.0f}..{replicated['throughput_max_eps'][i]:,.0f}")
        print("  " + "; ".join(f"{name}: mean |error| {np.mean(np.abs(e)):.1%}, max {np.max(np.abs(e)):.1%}"
                               for name, e in errors.items()))


if __name__ == "__main__":
    main()
