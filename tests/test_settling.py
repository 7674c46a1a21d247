"""A run's drift between the halves of its measured steps, and settling (docs/model.md §5.8)."""

from __future__ import annotations

import json
import math
import types

import numpy as np
import pytest

from simulate.results import DRIFT_TOLERANCE, drift, half_throughputs_eps, is_settled
from simulate.sweep import combine_replicas, predict
from tfbase.errors import UsageError
from tfprofile.profile_io import load_profile

# The lab's wide_mlp at 1 Gbit/s: staggered workers that drift into lock step at W = 2.
PROFILE = "data/profiles/wide_mlp_lab.npz"
CLUSTER = "data/clusters/wide_mlp_lab_1gbit.json"


def _run(ends, steps, warmup, batch=2):
    return types.SimpleNamespace(step_end_s=np.asarray(ends, dtype=float),
                                 graph=types.SimpleNamespace(batch_size=batch),
                                 config=types.SimpleNamespace(steps=steps, warmup=warmup))


def test_halves_follow_section_5_1_per_half():
    # Worker 0 steps every 1 s, worker 1 every 1 s then every 4 s; warmup 2 of 10 steps.
    ends = [np.arange(1, 11, dtype=float), np.concatenate([np.arange(1, 7), 6 + 4 * np.arange(1, 5)])]
    first, second = half_throughputs_eps(_run(ends, steps=10, warmup=2))
    # Halves split at step 6 for both: 4 steps each, batch 2.
    assert first == pytest.approx(2 * 4 / 4 + 2 * 4 / 4)
    assert second == pytest.approx(2 * 4 / 4 + 2 * 4 / 16)
    assert drift(first, second) == pytest.approx(second / first - 1)
    assert not is_settled(drift(first, second))


def test_too_few_steps_give_no_drift_and_are_not_settled():
    first, second = half_throughputs_eps(_run([[1.0, 2.0]], steps=2, warmup=1))
    assert math.isnan(first) and math.isnan(second)
    assert math.isnan(drift(first, second)) and not is_settled(drift(first, second))


def test_tolerance_is_inclusive_and_symmetric():
    assert is_settled(DRIFT_TOLERANCE) and is_settled(-DRIFT_TOLERANCE)
    assert not is_settled(DRIFT_TOLERANCE * 1.01) and not is_settled(-DRIFT_TOLERANCE * 1.01)


def test_replicas_settle_only_together():
    rows = [{"throughput_eps": t, "ci95_eps": 1.0, "throughput_min_eps": t, "throughput_max_eps": t,
             "step_time_by_worker_s": [0.1], "steps": 100, "throughput_drift": d, "settled": is_settled(d)}
            for t, d in ((100.0, 0.01), (90.0, -0.2))]
    row = combine_replicas(rows, seed=0)
    assert row["settled"] is False
    assert row["throughput_drift"] == pytest.approx(-0.095)


@pytest.fixture(scope="module")
def profile():
    return load_profile(PROFILE)


def test_a_drifting_run_is_flagged_and_one_worker_is_not(profile):
    table = predict(profile, CLUSTER, workers=[1, 2], steps=200, warmup=10)
    one, two = table.iloc[0], table.iloc[1]
    assert one["settled"] and abs(one["throughput_drift"]) < 0.01
    # Staggered workers that alternate at first and lock into phase later: the second half is slower.
    assert not two["settled"] and two["throughput_drift"] < -DRIFT_TOLERANCE
    assert two["steps"] == 200  # no doubling without settle


def test_settle_doubles_the_steps_until_the_halves_agree(profile):
    plain = predict(profile, CLUSTER, workers=[2], steps=200, warmup=10)
    settled = predict(profile, CLUSTER, workers=[2], steps=200, warmup=10, settle=True, max_steps=3200)
    row = settled.iloc[0]
    assert row["settled"] and abs(row["throughput_drift"]) <= DRIFT_TOLERANCE
    assert row["steps"] in (400, 800, 1600, 3200)  # doubled from 200, at most max_steps
    # Longer runs read the locked phase: lower than the drifting 200-step average.
    assert row["throughput_eps"] < plain.iloc[0]["throughput_eps"]


def test_settle_must_be_a_bool(profile):
    with pytest.raises(UsageError) as err:
        predict(profile, CLUSTER, workers=[1], steps=20, warmup=5, settle="yes")
    assert err.value.source == "settle"


def test_predict_cli_names_the_rows_that_did_not_settle(tmp_path, capsys):
    from tfsim.cli import main

    out = tmp_path / "p.json"
    assert main(["predict", PROFILE, "--cluster", CLUSTER, "--workers", "1-2", "--steps", "200", "--warmup", "10",
                 "--no-progress", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "drift" in text.splitlines()[1]  # the table's header gains the column
    assert "not settled" in text and "W = 2 (" in text and "--settle" in text
    document = json.loads(out.read_text())
    assert [r["workers"] for r in document["drift"]["rows"]] == [2]
    assert document["rows"][0]["settled"] is True and document["rows"][1]["settled"] is False


def test_predict_cli_says_nothing_when_every_row_settled(capsys):
    from tfsim.cli import main

    assert main(["predict", PROFILE, "--cluster", CLUSTER, "--workers", "1", "--steps", "100", "--warmup", "10",
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "not settled" not in text and "drift" not in text


def test_the_report_says_which_rows_did_not_settle(tmp_path, capsys):
    """The report's prediction.json is tfsim predict's, drift included, and its page names the rows."""
    from cli_runner import run

    common = ["--cluster", CLUSTER, "--workers", "1-2", "--steps", "200", "--warmup", "10", "--jobs", "2",
              "--no-progress"]
    code, _, err = run(["report", PROFILE, *common, "--out", tmp_path / "r"], capsys)
    assert code == 0, err
    document = json.loads((tmp_path / "r" / "prediction.json").read_text())
    assert 2 in {row["workers"] for row in document["drift"]["rows"]}
    assert "not settled" in (tmp_path / "r" / "report.html").read_text()
    policies = ",".join(dict.fromkeys(row["policy"] for row in document["rows"]))
    code, _, err = run(["predict", PROFILE, *common, "--transfer", policies, "--json", tmp_path / "p.json"], capsys)
    assert code == 0, err
    assert (tmp_path / "p.json").read_bytes() == (tmp_path / "r" / "prediction.json").read_bytes()


def test_a_row_held_to_the_ps_cpu_bound_settles_there(profile):
    """docs/model.md §5.8: the halves are held to the bound (§4.7), so a run drifting above it
    reads as settled, and settle does not double its steps for a drift nobody would see."""
    document = json.loads(open(CLUSTER).read())
    # 16 examples per step on a 0.28571-core PS at 0.2857 / 30 * 16 s per step: at most 30 ex/s.
    document["ps_cpu"] = {**document["ps_cpu"], "cpu_s_per_step": 0.28571 * 16 / 30, "cores": 0.28571}
    from simulate.cluster_file import cluster_from_dict

    cluster = cluster_from_dict(document, "bound.json")
    row = predict(profile, cluster, workers=[2], steps=200, warmup=10, settle=True).iloc[0]
    assert row["throughput_eps"] == pytest.approx(30.0)
    assert row["settled"] and row["throughput_drift"] == pytest.approx(0.0, abs=1e-12) and row["steps"] == 200
