"""Independent replications of a configuration (``replicas``, docs/model.md §5.2)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simulate
from simulate.results import t95
from tfbase.errors import UsageError
from tfprofile.profile_io import load_profile

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "data" / "profiles" / "tiny.npz"
CLUSTER = ROOT / "data" / "clusters" / "lab-1gbit.json"
OPTIONS = {"workers": [1, 2, 4], "steps": 200, "warmup": 20}


@pytest.fixture(scope="module")
def profile():
    return load_profile(PROFILE)


def test_replicas_are_the_single_seed_runs_combined(profile):
    combined = simulate.predict(profile, CLUSTER, seed=7, replicas=3, **OPTIONS)
    singles = [simulate.predict(profile, CLUSTER, seed=7 + k, **OPTIONS) for k in range(3)]
    for i, row in combined.iterrows():
        runs = np.array([single.loc[i, "throughput_eps"] for single in singles])
        assert row["replicas"] == 3 and row["seed"] == 7
        assert row["throughput_eps"] == pytest.approx(runs.mean(), rel=1e-12)
        assert row["throughput_min_eps"] == runs.min() and row["throughput_max_eps"] == runs.max()
        assert row["ci95_eps"] == pytest.approx(t95(2) * runs.std(ddof=1) / math.sqrt(3), rel=1e-12)
        steps = np.array([single.loc[i, "step_time_s"] for single in singles])
        assert row["step_time_s"] == pytest.approx(steps.mean(), rel=1e-12)
    # Past one worker the seeds disagree, so the replicas' interval is not zero there.
    assert (combined["throughput_max_eps"] > combined["throughput_min_eps"])[combined["workers"] > 1].all()


def test_one_replica_is_the_plain_run(profile):
    row = simulate.predict(profile, CLUSTER, **OPTIONS).iloc[-1]
    assert row["replicas"] == 1
    assert row["throughput_min_eps"] == row["throughput_eps"] == row["throughput_max_eps"]


@pytest.mark.parametrize("replicas", [0, -1, 101, 2.5, True])
def test_bad_replicas_name_the_parameter(profile, replicas):
    with pytest.raises(UsageError) as err:
        simulate.predict(profile, CLUSTER, replicas=replicas, **OPTIONS)
    assert err.value.source == "replicas"


def test_seeds_past_the_last_are_refused(profile):
    with pytest.raises(UsageError) as err:
        simulate.predict(profile, CLUSTER, seed=2**32 - 2, replicas=3, **OPTIONS)
    assert err.value.source == "seed"


def test_the_cli_shows_the_range_and_names_the_option(tmp_path):
    run = [sys.executable, "-m", "tfsim", "predict", str(PROFILE), "--cluster", str(CLUSTER), "--workers", "1,4",
           "--steps", "200", "--warmup", "20", "--no-progress"]
    done = subprocess.run([*run, "--replicas", "3", "--csv", str(tmp_path / "p.csv")], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "range" in done.stdout.splitlines()[1]
    import pandas as pd

    table = pd.read_csv(tmp_path / "p.csv")
    assert table["replicas"].tolist() == [3, 3]
    bad = subprocess.run([*run, "--replicas", "0"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert bad.returncode == 2 and "--replicas" in bad.stderr and "Traceback" not in bad.stderr
