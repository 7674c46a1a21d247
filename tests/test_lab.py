"""The emulated cluster and the lab's quick preset, end to end (root, TensorFlow, iproute2)."""

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from tfsim.lab.netns import EmulatedCluster, cleanup, list_namespaces

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
                                reason="the lab needs root, ip and tc")


@needs_root
def test_cluster_is_shaped_and_always_torn_down():
    before = set(list_namespaces())
    with pytest.raises(RuntimeError, match="boom"):
        with EmulatedCluster(["ps0", "w0"], rate_bit=200_000_000) as cluster:
            assert set(cluster.namespaces()) <= set(list_namespaces())
            ps, worker = cluster.hosts["ps0"], cluster.hosts["w0"]
            assert ps.address.startswith("10.231.0.") and ps.address != worker.address
            qdiscs = subprocess.run([*worker.exec_prefix(), "tc", "qdisc", "show", "dev", "eth0"],
                                    capture_output=True, text=True).stdout
            assert "tbf" in qdiscs and "200Mbit" in qdiscs
            raise RuntimeError("boom")
    assert set(list_namespaces()) == before


@needs_root
def test_cleanup_removes_only_dead_runs():
    live = EmulatedCluster(["a"], rate_bit=10_000_000).up()
    dead_name = "tfsimlab-999999-dead-a"
    subprocess.run(["ip", "netns", "add", dead_name], check=True)
    try:
        removed = cleanup()
        assert dead_name in removed
        assert set(live.namespaces()) <= set(list_namespaces())
    finally:
        live.down()
        subprocess.run(["ip", "netns", "delete", dead_name], capture_output=True)


@needs_root
@pytest.mark.tensorflow
def test_quick_preset_end_to_end(tmp_path):
    pytest.importorskip("tensorflow")
    before = set(list_namespaces())
    result = subprocess.run([sys.executable, "-m", "tfsim", "lab", "--preset", "quick", "--out", str(tmp_path),
                             "--repeat", "2", "--no-progress", "--timeline"], capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    with open(tmp_path / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["workers"]) for r in rows] == [1, 2]
    for row in rows:
        measured = float(row["measured_eps"])
        assert measured > 0
        runs = [float(x) for x in row["measured_runs_eps"].split()]
        assert int(row["repeats"]) == len(runs) == 2 and measured == pytest.approx(sum(runs) / 2, rel=1e-4)
        assert float(row["measured_min_eps"]) <= measured <= float(row["measured_max_eps"])
        # an equal share of the machine for each of the largest cluster's 3 tasks (1 PS, 2 workers)
        assert row["hosts"] == "quota" and float(row["ps_cores"]) == pytest.approx(os.cpu_count() / 3, rel=1e-3)
        run = json.loads((tmp_path / "tiny-100mbit" / f"measure-w{row['workers']}-r1" / "lab.json").read_text())
        assert set(run["tasks"]) == {"ps0", *(f"w{k}" for k in range(int(row["workers"])))}
        assert all(t["usage_s"] > 0 for t in run["tasks"].values())
        assert run["load"]["outside_cores"] >= 0 and run["quotas"]["ps_cores"] == pytest.approx(float(row["ps_cores"]))
        # Each task was forked from the lab's fork server (tests/test_fork_server.py: into its host's cgroup).
        record = json.loads((tmp_path / "tiny-100mbit" / f"measure-w{row['workers']}-r1" / "run.json").read_text())
        assert record["launch"] == "fork-server"
        for model in ("grpc", "http2", "fifo"):  # the lab reports today's gRPC model beside ICPE's
            predicted = float(row[f"predicted_{model}_eps"])
            assert predicted > 0
            assert float(row[f"error_{model}"]) == pytest.approx(predicted / measured - 1, abs=1e-4)
        # --timeline: one more run per W captured at the PS, beside the simulation of that W
        for column in ("busy_down_measured", "busy_down_simulated", "busy_up_measured", "busy_up_simulated"):
            assert 0 < float(row[column]) <= 1
        for column in ("used_down_measured", "used_down_simulated", "used_up_measured", "used_up_simulated"):
            assert 0 < float(row[column]) <= 1.1  # a token bucket's burst lets a short window exceed 1
        assert float(row["timeline_run_eps"]) > 0 and float(row["step_median_simulated_s"]) > 0
        timeline = tmp_path / "tiny-100mbit" / f"timeline-w{row['workers']}"
        assert not list(timeline.glob("capture.pcap*"))  # decoded, then deleted
        view = json.loads((timeline / "timeline.json").read_text())
        assert view["workers"] == int(row["workers"]) and {r["direction"] for r in view["wire"]} == {"down", "up"}
        assert json.loads((timeline / "run.json").read_text())["capture"]["host"] == "ps0"
        assert (tmp_path / "tiny-100mbit" / f"timeline-w{row['workers']}.png").read_bytes()[:4] == b"\x89PNG"
    page = (tmp_path / "results.md").read_text()
    assert "## Where the time goes" in page
    share = os.cpu_count() / 3
    assert f"| tiny-100mbit | tf1 | PS {share:.2f}, w {share:.2f} | 1 |" in page and "measured again" in page
    assert (tmp_path / "tiny-100mbit.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "tiny-100mbit" / "CLUSTER.json").exists()
    # The profiling run records its link's shaper; calibration held its rates to that link's ceiling.
    link = json.loads((tmp_path / "tiny-100mbit" / "profile-run" / "run.json").read_text())["link"]
    assert link["rate_bit_s"] == 100_000_000 and link["peak_rate_bit_s"] == 102_000_000
    ceiling = json.loads((tmp_path / "tiny-100mbit" / "CLUSTER.json").read_text())["link_ceiling"]
    assert ceiling["link"]["rate_Bps"] == 12.5e6 and ceiling["mss_bytes"] and not ceiling["above"]
    assert {c["rate"] for c in ceiling["checks"]} >= {"iperf3 rate"}
    # The profiling run traces its first half of steps, then reads the tasks' CPU again: the PS's
    # CPU per step is the untraced half's.
    with open(tmp_path / "tiny-100mbit" / "profile-run" / "step_times.csv") as handle:
        traced = [s["traced"] for s in csv.DictReader(handle) if s["measured"] == "1"]
    half = len(traced) // 2
    assert traced == ["1"] * half + ["0"] * (len(traced) - half)
    from calibration.pscpu import ps_cpu_record

    profiling = tmp_path / "tiny-100mbit" / "profile-run"
    own = ps_cpu_record(profiling, json.loads((profiling / "run.json").read_text()))
    assert own["steps"] == len(traced) - half and "as the trace ended" in own["source"]
    # Each of the 2 rounds began with an untraced one-worker tail run: the correction and the PS
    # CPU bound took the mean over those and the profiling run's tail.
    ps_cpu = json.loads((tmp_path / "tiny-100mbit" / "CLUSTER.json").read_text())["ps_cpu"]
    assert ps_cpu["runs"] == 3 and ps_cpu["cpu_s_per_step_runs"][0] == pytest.approx(own["cpu_s_per_step"])
    assert ps_cpu["cpu_s_per_step"] == pytest.approx(sum(ps_cpu["cpu_s_per_step_runs"]) / 3)
    assert all(int(row["profile_tails"]) == 3 for row in rows)
    for k in (1, 2):
        with open(tmp_path / "tiny-100mbit" / f"profile-tail-r{k}" / "step_times.csv") as handle:
            assert [s["traced"] for s in csv.DictReader(handle) if s["measured"] == "1"][1:] == ["0"] * 15
    assert "the profiling run's tail alone" in (tmp_path / "results.md").read_text()
    # Each round also ran the profiling cluster with 2 workers (busy_ps_workers 3, held to the
    # largest W), untraced: each W's PS CPU bound took the CPU per step that W costs.
    busy = ps_cpu["busy"]
    assert [b["workers"] for b in busy] == [2] and busy[0]["runs"] == 2
    assert busy[0]["cpu_s_per_step"] == pytest.approx(sum(busy[0]["cpu_s_per_step_runs"]) / 2)
    for k in (1, 2):
        with open(tmp_path / "tiny-100mbit" / f"profile-busy-r{k}" / "step_times.csv") as handle:
            steps = list(csv.DictReader(handle))
        assert {s["worker"] for s in steps} == {"0", "1"} and not (tmp_path / "tiny-100mbit" / f"profile-busy-r{k}"
                                                                   / "trace").exists()
    cpu = {1: ps_cpu["cpu_s_per_step"], 2: busy[0]["cpu_s_per_step"]}
    for row in rows:
        w = int(row["workers"])
        assert int(row["busy_ps_runs"]) == 2 and float(row["busy_ps_workers"]) == 2
        assert float(row["ps_cpu_limit_eps"]) == pytest.approx(32 * ps_cpu["cores"] / cpu[w], rel=1e-4)
    one = next(row for row in rows if row["workers"] == "1")  # one worker: the one-worker CPU either way
    assert float(one["predicted_grpc_one_worker_cpu_eps"]) == pytest.approx(float(one["predicted_grpc_eps"]))
    assert "busy-PS run(s)" in (tmp_path / "results.md").read_text()
    assert set(list_namespaces()) == before
    from tfsim.lab.cgroups import PREFIX, find_hierarchy

    assert not list(find_hierarchy().cpu.glob(f"{PREFIX}-{os.getpid()}-*"))  # the lab's groups are gone too


def test_results_name_the_settings_that_miss_the_bars():
    import pandas as pd

    from tfsim.lab.validate import _bar_lines

    frame = pd.DataFrame({"setting": ["a", "a", "b", "b"], "workers": [1, 2, 1, 2],
                          "error_grpc": [0.05, -0.25, 0.02, 0.04], "inside_grpc": [True, False, False, False]})
    lines = _bar_lines(frame)
    # inside: a (in its range) and b W = 1 (2% from the mean); b W = 2 is 4% off and outside.
    assert lines[0] == ("bars (grpc model): mean |error| 9.0% (missed: <= 5%); max 25.0% (missed: <= 12%); inside "
                        "the measured range or within 3% of its mean: 2 of 4, 50% (missed: >= 80%)")
    assert lines[1:] == ["- a misses a bar: mean |error| 15.0%, worst -25.0% at W = 2"]
    frame["error_grpc"] = [0.02, -0.10, 0.02, 0.04]
    frame["inside_grpc"] = [True, True, False, True]
    assert _bar_lines(frame) == ["bars (grpc model): mean |error| 4.5% (met: <= 5%); max 10.0% (met: <= 12%); "
                                 "inside the measured range or within 3% of its mean: 4 of 4, 100% (met: >= 80%)",
                                 "- a misses a bar: mean |error| 6.0%, worst -10.0% at W = 2"]


def test_results_json_holds_values_json_has_no_number_for(tmp_path):
    """A setting without --timeline (its timeline columns NaN) or measured once (no CI) still
    gets its results.json: JSON has no NaN, so those values are null."""
    import math

    from tfsim.lab.validate import RESULT_COLUMNS, TIMELINE_COLUMNS, write_results

    row = dict.fromkeys(RESULT_COLUMNS, 1.0)
    row.update(setting="s", api="tf1", model="tiny", transport="queue 5 ms", hosts="quota", window="default", workers=1,
               measured_runs_eps="1", inside_grpc=True, ranges_overlap_grpc=True, predict_replicas=5, loaded_runs=0,
               measured_ci95_eps=math.nan,
               **dict.fromkeys(TIMELINE_COLUMNS, math.nan))
    write_results([row], tmp_path, preset="quick", elapsed_s=1.0)
    written = json.loads((tmp_path / "results.json").read_text())["rows"][0]
    assert written["measured_ci95_eps"] is None and written["busy_down_measured"] is None
    assert written["measured_eps"] == 1.0
    assert "## Where the time goes" not in (tmp_path / "results.md").read_text()


def test_results_md_gives_the_packet_model_where_a_setting_asked_for_it(tmp_path):
    import math

    from tfsim.lab.validate import RESULT_COLUMNS, TIMELINE_COLUMNS, packet_columns, write_results

    def row(workers, packet, overflow=False, steps=120):
        values = dict.fromkeys(RESULT_COLUMNS, 1.0)
        values.update(setting="s", api="tf1", model="tiny", transport="queue 5 ms", hosts="quota", window="default",
                      workers=workers, measured_runs_eps="100", inside_grpc=True, ranges_overlap_grpc=True,
                      predict_replicas=5, loaded_runs=0, measured_eps=100.0, measured_min_eps=95.0,
                      measured_max_eps=102.0, predicted_grpc_eps=90.0, error_grpc=-0.1,
                      **dict.fromkeys(TIMELINE_COLUMNS, math.nan),
                      overflow_expected=overflow,
                      **packet_columns(packet, {"mean": 100.0, "min": 95.0, "max": 102.0}, grpc_eps=90.0,
                                       auto_packet=workers >= 2, steps=steps))
        return values

    stats = {"mean": 100.0, "min": 95.0, "max": 102.0}
    assert packet_columns(102.5, stats, grpc_eps=90.0, auto_packet=False)["inside_packet"] is True  # within 3%
    assert packet_columns(110.0, stats, grpc_eps=90.0, auto_packet=False)["inside_packet"] is False
    # auto: grpc's prediction where it does not pick the packet model, the packet model's where it does
    assert packet_columns(104.0, stats, grpc_eps=90.0, auto_packet=False)["predicted_auto_eps"] == 90.0
    assert packet_columns(104.0, stats, grpc_eps=90.0, auto_packet=True)["error_auto"] == pytest.approx(0.04)
    write_results([row(1, 104.0), row(2, None), row(3, 101.0, overflow=True)], tmp_path, preset="quick",
                  elapsed_s=1.0)
    text = (tmp_path / "results.md").read_text()
    assert "bars (packet model, 2 points): mean |error| 2.5% (met); max 4.0% (met); inside the measured range " \
           "or within 3% of its mean: 50% (missed)" in text
    assert "bars (auto: packet from W = 2, grpc below, 2 points): mean |error| 5.5% (missed); max 10.0% " \
           "(met); inside the measured range or within 3% of its mean: 50% (missed)" in text
    assert "| s | 1 | 100.00 | 95.00..102.00 | 104.00 | +4.0% | no | -10.0% | no | -10.0% |" in text
    assert "| s | 3 | 100.00 | 95.00..102.00 | 101.00 | +1.0% | yes | -10.0% | yes | +1.0% |" in text
    assert "| s | 2 |" not in text.split("## The packet transfer model")[1].split("##")[0]
    assert "120 steps per worker, one seed" in text
    two = [row(1, 104.0), {**row(2, 101.0, steps=40), "setting": "t"}]
    write_results(two, tmp_path, preset="quick", elapsed_s=1.0)
    assert "steps per worker s 120, t 40, one seed" in (tmp_path / "results.md").read_text()


def test_the_packet_model_replays_a_settings_packet_steps(monkeypatch):
    import pandas as pd

    from tfsim.lab import validate

    calls = []

    def fake_predict(profile, cluster, **kwargs):
        calls.append(kwargs)
        return pd.DataFrame({"workers": kwargs["workers"], "throughput_eps": [10.0 * w for w in kwargs["workers"]]})

    monkeypatch.setattr(validate, "predict", fake_predict)
    assert validate.packet_predictions(None, None, (1, 3), hosts={}, steps=42) == {1: 10.0, 3: 30.0}
    assert validate.packet_predictions(None, None, (2,), hosts={}) == {2: 20.0}
    assert [(c["transfer"], c["steps"], c["warmup"]) for c in calls] == [("packet", 42, 7), ("packet", 120, 20)]
