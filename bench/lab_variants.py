#!/usr/bin/env python3
"""Re-predict a lab setting's W = 1..N under model variants, against the lab's saved
measurements: ``python bench/lab_variants.py SETTING_DIR [--workers 1-6] [--steps 1500] [--tie-order recorded|index]``.

SETTING_DIR is a lab setting's directory with ``profile.npz`` (the profile the lab predicted
from, one-worker correction applied), ``CLUSTER.json`` and its ``measure-w<W>-r<k>`` runs,
whose throughput is recomputed with the lab's rule (the common window,
:func:`tfsim.lab.measure.spans_throughput`; the mean over repetitions). The
hosts are the lab's emulated ones (a host per task of max(1, quota) model cores,
docs/model.md §4.3). Variants, each with seeds 0..``--seeds``-1:

- ``base``: the lab's prediction (``grpc``, ``ps`` sharing, staggered starts);
- ``fcfs``: the same with first-come-first-served link sharing (docs/model.md §4.1);
- ``noise<σ>``: ``base`` with every transfer's bytes multiplied, per profiled step, by a
  lognormal factor of mean 1 and log-sd σ (8 noisy copies of each profiled step): does the
  prediction survive the small irregularities of a real link?

This is a study tool, not part of tfsim: it answers whether a model change moves the lab's
errors, before the change is made in the engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import simulate.sweep as sweep  # noqa: E402
from simulate.cluster_file import load_cluster  # noqa: E402
from simulate.config import TaskHosts  # noqa: E402
from simulate.prepare import KIND_TRANSFER, prepare  # noqa: E402
from tfprofile.profile_io import load_profile  # noqa: E402
from tfsim.lab.measure import read_step_spans, spans_throughput  # noqa: E402

NOISY_COPIES = 8  # noisy copies of each profiled step: the sampler draws among S x 8 steps
NOISE_SEED = 12345


def noisy_prepare(sigma: float):
    """``simulate.prepare.prepare`` with lognormal noise (mean 1, log-sd ``sigma``) on every
    transfer's bytes, independently per copy of each profiled step."""
    def wrapped(*args, **kwargs):
        graph = prepare(*args, **kwargs)
        rng = np.random.default_rng(NOISE_SEED)
        transfers = graph.kind == KIND_TRANSFER
        work = np.repeat(graph.work, NOISY_COPIES, axis=0)
        work[:, transfers] *= np.exp(rng.normal(-sigma ** 2 / 2, sigma, size=(work.shape[0], int(transfers.sum()))))
        return dataclasses.replace(graph, work=np.ascontiguousarray(work))
    return wrapped


def measured(setting: Path) -> dict[int, float]:
    """W -> the mean throughput of the setting's measuring runs, by the lab's rule."""
    runs: dict[int, list[float]] = {}
    for run in sorted(setting.glob("measure-w*-r*")):
        w = int(run.name.split("-")[1][1:])
        runs.setdefault(w, []).append(spans_throughput(*read_step_spans(run))["throughput_eps"])
    return {w: float(np.mean(v)) for w, v in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("setting", type=Path)
    parser.add_argument("--workers", default="1-6")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--quota", type=float, default=0.4, help="the lab's CPU quota per task (cores)")
    parser.add_argument("--variants", default="base,fcfs,noise0.03")
    parser.add_argument("--tie-order", choices=("index", "recorded"), default="index",
                        help="as tfsim predict's (docs/model.md §2.4)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    profile = load_profile(args.setting / "profile.npz")
    cluster = load_cluster(args.setting / "CLUSTER.json")
    hosts = TaskHosts(max(1.0, args.quota), max(1.0, args.quota))
    truth = measured(args.setting)
    for variant in args.variants.split(","):
        sharing = "fcfs" if variant == "fcfs" else "ps"
        sweep.prepare = noisy_prepare(float(variant[len("noise"):])) if variant.startswith("noise") else prepare
        for seed in range(args.seeds):
            frame = sweep.predict(profile, cluster, workers=args.workers, transfer="grpc", sharing=sharing,
                                  steps=args.steps, warmup=args.steps // 5, seed=seed, colocation=hosts,
                                  tie_order=args.tie_order)
            cells = []
            for w, t in zip(frame["workers"], frame["throughput_eps"]):
                error = f" ({t / truth[w] - 1:+.1%})" if w in truth else ""
                cells.append(f"W={w} {t:,.0f}{error}")
            print(f"{args.setting.name} {variant} seed {seed}: " + ", ".join(cells), flush=True)
    sweep.prepare = prepare


if __name__ == "__main__":
    main()
