"""Calibration: the fits, the single-link replay, and the whole fit on the bundled shaped captures."""

import dataclasses
import json
import shutil

import numpy as np
import pytest

from calibration.calibrate import StreamSample, _busy_steps, calibrate_run, connection_bound, untraced_caps
from calibration.fit import least_squares, theil_sen
from calibration.replay import error_summary, relative_errors, replay_fifo, replay_http2
from simulate.cluster import ClusterModel
from simulate.cluster_file import ClusterFormatError, load_cluster
from simulate.config import SimConfig, Transfer
from simulate.engine import run
from simulate.prepare import prepare
from tfbase.errors import InputError
from tfbase.units import format_rate
from tfsim.cli import main

SHAPED = {"wide_1gbit": 1e9, "wide_100mbit": 1e8, "wide_1gbit_smallwin": 1e9}


def test_theil_sen_ignores_outliers_that_drag_least_squares():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 20e6, 200)
    y = 2e-10 * x + 1e-3 + rng.normal(0, 1e-5, 200)
    y[:30] += rng.uniform(5e-3, 3e-2, 30)  # late records
    robust, plain = theil_sen(x, y), least_squares(x, y)
    assert robust.slope == pytest.approx(2e-10, rel=0.05)
    assert robust.intercept == pytest.approx(1e-3, abs=1e-4)
    assert abs(plain.intercept - 1e-3) > 5 * abs(robust.intercept - 1e-3)
    assert robust.n == 200 and robust.method == "theil-sen"


def test_theil_sen_needs_samples():
    with pytest.raises(InputError, match="no usable samples"):
        theil_sen([], [])
    one = theil_sen([5, 5, 5], [1.0, 2.0, 3.0])
    assert one.slope == 0 and one.intercept == 2.0


def test_replay_http2_cuts_once_and_fifo_does_not():
    # C is sent whole; A (5 windows) gets one window, then waits behind B; B whole; then A's rest.
    assert list(replay_http2([0, 0, 0], [100, 500, 100], 100.0, 100)) == [1.0, 7.0, 3.0]
    assert list(replay_fifo([0, 0, 0], [100, 500, 100], 100.0)) == [1.0, 6.0, 7.0]
    # An idle link waits for the next arrival.
    assert list(replay_fifo([0, 10], [100, 100], 100.0)) == [1.0, 11.0]


def test_replay_matches_the_engine_for_one_worker(bundled_profile):
    profile = bundled_profile("vgg11")
    cluster = ClusterModel(1.25e8, 1.25e8, win_bytes=4 * 2**20)
    graph = prepare(profile, cluster)
    result = run(graph, cluster, SimConfig(workers=1, steps=1, warmup=0, trace_steps=1, transfer=Transfer.HTTP2))
    trace = result.trace
    # The downlinks are ready at the times their PS reads end; replay them from those times.
    down = np.flatnonzero(graph.resource == 0)
    last_chunk_end = {}
    for op, _start, end, slot in zip(trace["op"], trace["start_s"], trace["end_s"], trace["slot"]):
        if slot == 0:
            last_chunk_end[op] = max(end, last_chunk_end.get(op, 0))
    ready = {}
    for op, end in zip(trace["op"], trace["end_s"]):
        for succ in graph.succ_idx[graph.succ_ptr[op]:graph.succ_ptr[op + 1]]:
            if succ in down:
                ready[succ] = max(end, ready.get(succ, 0.0))
    ops = sorted(down, key=lambda o: (ready.get(o, 0.0), o))
    modelled = replay_http2([ready.get(o, 0.0) for o in ops], graph.work[0, ops], 1.25e8, 4 * 2**20)
    assert np.allclose(modelled, [last_chunk_end[o] for o in ops], rtol=1e-12)


def test_relative_errors_and_summary():
    errors = relative_errors([1.1, 2.0, 3.0], [1.0, 2.0, 4.0], 0.0)
    assert np.allclose(errors, [0.1, 0.0, 0.25])
    summary = error_summary(errors)
    assert summary["median"] == pytest.approx(0.1) and summary["max"] == pytest.approx(0.25) and summary["n"] == 3
    assert error_summary([])["n"] == 0


@pytest.fixture(scope="module")
def calibrations(data_dir):
    return {name: calibrate_run(data_dir / "captures" / name) for name in SHAPED}


@pytest.mark.parametrize("name", SHAPED)
def test_shaped_capture_calibrates_to_plausible_values(calibrations, name):
    calibration = calibrations[name]
    rate = SHAPED[name] / 8
    for direction in ("downlink", "uplink"):
        assert 0.75 * rate <= calibration.bandwidth_Bps[direction] <= 1.0 * rate
        fit = calibration.overhead[direction]
        assert fit.slope >= 0 and 0 <= fit.intercept < 0.02 and fit.n >= 30
    windows = set(calibration.window_bytes.values())
    if name.endswith("smallwin"):
        assert windows == {65535}  # TF_GRPC_DEFAULT_OPTIONS pinned the window
    else:
        assert windows <= {4 * 2**20, 8 * 2**20, 16 * 2**20, 32 * 2**20}
    # Every traced transfer was seen on the wire.
    steps = {s.step_file for s in calibration.samples}
    assert len(calibration.samples) == 25 * len(steps)


def test_cluster_json_round_trips_with_the_spec_keys(calibrations, tmp_path):
    document = calibrations["wide_1gbit"].to_cluster_json()
    for key in ("format", "bandwidth_Bps", "win_bytes", "alpha_s_per_byte", "beta_s", "http2_model_error",
                "transfer_model_error"):
        assert key in document
    assert set(document["http2_model_error"]) == {"mean", "median", "p95", "max"}
    assert {"http2", "fifo"} <= set(document["transfer_model_error"])
    path = tmp_path / "CLUSTER.json"
    path.write_text(json.dumps(document))
    cluster = load_cluster(path)
    assert cluster.downlink_Bps == document["bandwidth_Bps"]["downlink"]
    assert cluster.overhead_uplink.alpha_s_per_byte == document["overhead"]["uplink"]["alpha_s_per_byte"]


@pytest.mark.parametrize("name", SHAPED)
def test_the_network_terms_are_calibrated_and_read_back(calibrations, name, tmp_path):
    """docs/calibration.md §4.4, §4.5, §7.1: a bucket where the busy rate beats iperf3, the
    queue window from the worker's bytes in flight, the RPC latencies; CLUSTER.json carries
    them to the model."""
    calibration = calibrations[name]
    document = calibration.to_cluster_json()
    for direction, bucket in document["token_bucket"].items():
        assert calibration.bandwidth_source == "capture"
        assert bucket["sustained_Bps"] == calibration.iperf3_bandwidth_Bps[direction]
        assert bucket["sustained_Bps"] < document["bandwidth_Bps"][direction]
        assert 0 < bucket["bucket_bytes"] < 30e6  # below a step's bytes
    window = document["queue_window_bytes"]
    assert window["downlink"] == window["uplink"] and 1_000 < window["uplink"] < 4e6
    flight = document["bytes_in_flight"]  # the window is its median; the peaks are above it
    assert flight["percentiles_bytes"]["p50"] == window["uplink"]
    assert window["uplink"] <= flight["percentiles_bytes"]["p90"] <= flight["percentiles_bytes"]["p99"] \
        <= flight["max_bytes"] and flight["samples"] > 100
    rpc = document["rpc"]
    assert rpc["steps"] >= 3  # traced steps whose RunGraph was captured
    assert all(0 <= rpc[key] < 0.05 for key in ("rungraph_s", "worker_requests_s", "ps_requests_s", "response_s"))
    path = tmp_path / "CLUSTER.json"
    path.write_text(json.dumps(document))
    cluster = load_cluster(path)
    assert cluster.queue_window_uplink_bytes == window["uplink"]
    assert cluster.rpc.rungraph_s == rpc["rungraph_s"]
    assert (cluster.bucket_downlink is None) == ("downlink" not in document["token_bucket"])


@pytest.mark.parametrize("name", ["tiny_tf2pss", "wide_1gbit"])
def test_the_rpc_chain_takes_each_lags_least_over_the_traced_steps(data_dir, name):
    """docs/calibration.md §7.1: a lag is the hosts' latency plus any waiting its step met (a
    throttled period under a CPU quota), so the cluster gets the least over the steps."""
    from calibration.calibrate import rpc_lags
    from calibration.runmatch import match_run, run_server_ports
    from netcapture import read_capture
    from tfprofile.rundir import open_run_dir

    run_dir = data_dir / "captures" / name
    run = open_run_dir(run_dir)
    capture = read_capture(next(run_dir.glob("capture.pcap*")), server_ports=run_server_ports(run))
    lags = rpc_lags(run, capture, match_run(capture, run))
    rpc = calibrate_run(run_dir).to_cluster_json()["rpc"]
    assert rpc["steps"] == len(lags["rungraph_s"]) >= 3
    for key, values in lags.items():
        assert len(values) >= 3 and rpc[key] == max(0.0, min(values))
        assert rpc[key] <= max(0.0, float(np.median(values)))  # what the calibration's check replays


def test_bytes_in_flight_of_the_busiest_sender_connection(data_dir):
    from netcapture.inflight import bytes_in_flight

    flights = bytes_in_flight(data_dir / "captures" / "wide_1gbit" / "capture.pcap.gz", "10.231.0.2")
    busiest = max(flights, key=lambda f: f.payload_bytes)
    assert busiest.sender_port == 2223  # the worker's own server port: the PS pulls gradients from it
    # a few packets of 64 kB or less in flight each time; the worker's requests (the other connection) almost none
    assert 64e3 <= busiest.median_bytes <= 1.3e6 and len(busiest.samples_bytes) > 1000
    assert min(flights, key=lambda f: f.payload_bytes).median_bytes < 2e3


def test_calibrate_cli_writes_cluster_and_plots(data_dir, tmp_path, capsys):
    out = tmp_path / "CLUSTER.json"
    assert main(["calibrate", str(data_dir / "captures" / "wide_100mbit"), "-o", str(out), "--plots",
                 str(tmp_path / "plots")]) == 0
    text = capsys.readouterr().out
    assert "overhead" in text and "http2" in text
    assert json.loads(out.read_text())["format"] == "tfsim.cluster/1"
    for name in ("overhead.png", "streams.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:4] == b"\x89PNG"


def test_calibrate_bad_inputs_exit_2(data_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(data_dir / "captures" / "wide_100mbit", run_dir)
    (run_dir / "capture.pcap.gz").unlink()
    assert main(["calibrate", str(run_dir), "-o", str(tmp_path / "c.json")]) == 2
    assert "capture" in capsys.readouterr().err
    shutil.copy(data_dir / "captures" / "wide_1gbit" / "capture.pcap.gz", run_dir)  # another run's capture
    assert main(["calibrate", str(run_dir), "-o", str(tmp_path / "c.json")]) == 2
    assert str(run_dir) in capsys.readouterr().err
    bad = run_dir / "iperf3" / "uplink_0.json"
    bad.write_text(json.dumps({"error": "unable to connect to server: Connection refused"}))
    assert main(["calibrate", str(run_dir), "-o", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert "uplink_0.json" in err and "Connection refused" in err
    assert not (tmp_path / "c.json").exists()


def test_cluster_file_errors(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"format": "tfsim.cluster/1", "bandwidth_Bps": {"downlink": -1, "uplink": 5},
                                "win_bytes": None, "alpha_s_per_byte": 0, "beta_s": 0}))
    with pytest.raises(ClusterFormatError, match="positive"):
        load_cluster(path)
    path.write_text("[1, 2]")
    with pytest.raises(ClusterFormatError, match="object"):
        load_cluster(path)


@pytest.mark.parametrize("name", SHAPED)
def test_one_worker_reproduces_the_calibration_runs_step_time(calibrations, data_dir, name):
    """docs/model.md §7.3 (one worker reproduces its own calibration run), on every bundled calibrated run:
    with its own calibration,
    the model of one worker takes the traced step time to within 3%."""
    import warnings

    from simulate.cluster_file import cluster_from_dict
    from simulate.sweep import predict
    from tfprofile.rundir import profile_from_run_dir

    document = calibrations[name].to_cluster_json()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        profile = profile_from_run_dir(data_dir / "captures" / name)
    cluster = cluster_from_dict(document)
    frame = predict(profile, cluster, workers=1, transfer=cluster.default_transfer, steps=200, warmup=20)
    traced = float(np.median(profile.step_makespan_s))
    assert abs(frame["step_time_s"].iloc[0] / traced - 1) < 0.03


@pytest.mark.parametrize("name", SHAPED)
def test_every_transfer_model_is_checked_and_grpc_is_the_tf2_default(calibrations, name):
    document = calibrations[name].to_cluster_json()
    assert document["default_transfer"] == "grpc"  # the bundled captures are of TF 2.21
    errors = document["transfer_model_error"]
    assert set(errors) == {"grpc", "http2", "fifo"}
    for model in errors.values():
        assert model["uplink"]["n"] > 0 and model["downlink"]["n"] > 0
    # ICPE's model misplaces the uplink's streams: TF 2.x's gRPC sends them in send-ready order.
    assert errors["grpc"]["uplink"]["median"] < 0.5 * errors["http2"]["uplink"]["median"]
    assert errors["grpc"]["uplink"]["median"] < 0.05


def test_a_connection_bound_direction_gets_the_links_rate_and_a_cap(data_dir, tmp_path):
    """docs/calibration.md §4.9, on the bundled TF2 run over loopback: its tensors moved below
    what iperf3 moved (the gradients at a tenth), so B is iperf3's and the busy rate caps each
    connection, with no token bucket; CLUSTER.json carries the caps to the model."""
    calibration = calibrate_run(data_dir / "captures" / "tiny_tf2pss")
    busy, iperf3 = calibration.busy_rate_Bps, calibration.iperf3_bandwidth_Bps
    assert busy["uplink"] < 0.1 * iperf3["uplink"] and busy["downlink"] < iperf3["downlink"]
    assert calibration.bandwidth_source == "capture"
    assert calibration.bandwidth_Bps == iperf3
    assert calibration.connection_cap_Bps == busy
    assert calibration.token_bucket == {}
    path = tmp_path / "CLUSTER.json"
    path.write_text(json.dumps(calibration.to_cluster_json()))
    cluster = load_cluster(path)
    assert (cluster.connection_cap_downlink_Bps, cluster.connection_cap_uplink_Bps) == (busy["downlink"],
                                                                                      busy["uplink"])
    # the one-worker check replays each connection as the run had it: the traced step within 5%
    assert abs(calibration.placement_check["relative_error_of_one_worker_step"][calibration.placement]) < 0.05


def test_a_cap_read_under_tracing_is_raised_by_its_ends_untraced_speedup(data_dir, tmp_path):
    """docs/calibration.md §4.9: the same bundled run, given CPU readings as its traced steps ended
    (the PS spent 1.25x, the worker 1.6x and the coordinator, on no connection, 1.0x per traced
    step what they spent untraced), gets caps 1.25x higher, the check still against the traced run."""
    traced = calibrate_run(data_dir / "captures" / "tiny_tf2pss")
    run_dir = tmp_path / "run"
    shutil.copytree(data_dir / "captures" / "tiny_tf2pss", run_dir)
    run = json.loads((run_dir / "run.json").read_text())
    limit = {"cpus": 2, "quota_cores": None, "cores": 2}
    run["task_cpu"] = {"file": "task_cpu.csv", "limits": {"ps0": limit, "worker0": limit, "coordinator0": limit}}
    (run_dir / "run.json").write_text(json.dumps(run))
    per_step = {"ps0": (0.0125, 0.01), "worker0": (0.032, 0.02), "coordinator0": (0.005, 0.005)}
    lines = ["step,time_unix_s,task,cpu_s,slices"]
    for task, (traced_s, untraced_s) in per_step.items():
        for step, cpu in ((3, 1.0), (9, 1.0 + 6 * traced_s), (15, 1.0 + 6 * traced_s + 6 * untraced_s)):
            lines.append(f"{step},{1000 + step * 0.1},{task},{cpu},{step}")
    (run_dir / "task_cpu.csv").write_text("\n".join(lines) + "\n")
    raised = calibrate_run(run_dir)
    assert traced.connection_cap_Bps["uplink"] < 0.5 * traced.iperf3_bandwidth_Bps["uplink"]
    assert raised.connection_cap_Bps["uplink"] == pytest.approx(1.25 * traced.connection_cap_Bps["uplink"])
    document = raised.to_cluster_json()
    speedup = document["connection_cap_traced"]["untraced_cpu_speedup"]
    assert speedup == pytest.approx(1.25)
    assert document["connection_cap_traced"]["traced_Bps"] == traced.connection_cap_Bps
    assert raised.connection_cap_Bps == untraced_caps(traced.connection_cap_Bps, speedup, traced.iperf3_bandwidth_Bps)
    assert raised.placement_check == traced.placement_check


def test_a_cap_that_the_untraced_speedup_takes_near_iperf3s_is_dropped():
    iperf3 = {"downlink": 47.9e6, "uplink": 47.9e6}
    assert untraced_caps({"downlink": 30.9e6}, 1.43, iperf3) == {}
    assert untraced_caps({"downlink": 30.9e6}, 1.0, iperf3) == {"downlink": 30.9e6}
    assert untraced_caps({}, 2.0, iperf3) == {}


def test_a_busy_rate_above_iperf3s_stays_the_links_peak():
    rates, caps = connection_bound({"downlink": 130e6, "uplink": 60e6}, {"downlink": 120e6, "uplink": 118e6})
    assert rates == {"downlink": 130e6, "uplink": 118e6} and caps == {"uplink": 60e6}
    assert connection_bound({"downlink": 60e6}, {"downlink": 118e6}, fraction=0.5) == ({"downlink": 60e6}, {})


def _stream(step: str, size: int, ready_s: float, rate_Bps: float = 50e6, first_s: float | None = None):
    first = ready_s if first_s is None else first_s
    return StreamSample("uplink", step, f"t{ready_s}", size, ready_s, ready_s, first, first + size / rate_Bps,
                        first + size / rate_Bps + 1e-4, 4 << 20)


def test_the_busy_rate_counts_only_the_bytes_after_its_spans_start():
    # A deep, narrow model's uplink: twelve 64 KiB gradients, one every 5 ms as the backward pass
    # makes them, and the first layer's 128 KiB one (the step's only large stream) last. All
    # the step's bytes over that last stream's span would be 350 MB/s on a 50 MB/s link.
    narrow = [_stream("a", 65_536, 0.005 * k) for k in range(12)] + [_stream("a", 131_072, 0.060)]
    assert _busy_steps(narrow, set())["uplink"] == []  # 128 KiB after the start: too few to time the link
    # Large streams from the start: every byte counts, over the first one's ready time to the last byte.
    wide = [_stream("b", 400_000, 0.0), _stream("b", 200_000, 0.001, first_s=0.008)]
    ((total, span),) = _busy_steps(wide, set())["uplink"]
    assert total == 600_000 and span == pytest.approx(0.008 + 200_000 / 50e6)
    # A stream on the wire when the span starts counts for the share of its frames after it.
    straddling = [_stream("c", 100_000, 0.0), _stream("c", 500_000, 0.001)]
    straddling[0] = dataclasses.replace(straddling[0], size_bytes=50_000, first_data_s=-0.001, last_data_s=0.003)
    ((total, span),) = _busy_steps(straddling, set())["uplink"]
    assert total == pytest.approx(500_000 + 25_000)


def test_a_bad_connection_cap_in_cluster_json_is_named(data_dir, tmp_path):
    document = json.loads((data_dir / "clusters" / "lab-1gbit.json").read_text())
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**document, "connection_cap_Bps": {"uplink": 0}}))
    with pytest.raises(ClusterFormatError, match=r"connection_cap_Bps\.uplink must be positive"):
        load_cluster(path)
    path.write_text(json.dumps({**document, "connection_cap_Bps": [1]}))
    with pytest.raises(ClusterFormatError, match="connection_cap_Bps must map"):
        load_cluster(path)


def test_predict_says_which_connections_are_capped(data_dir, tmp_path, capsys):
    out = tmp_path / "p.json"
    status = main(["predict", str(data_dir / "profiles" / "tiny_tf2pss.npz"), "--cluster",
                   str(data_dir / "clusters" / "tiny_tf2pss_lo.json"), "--workers", "1", "--steps", "20",
                   "--warmup", "2", "--no-progress", "--json", str(out)])
    assert status == 0
    cluster = load_cluster(data_dir / "clusters" / "tiny_tf2pss_lo.json")
    assert f"each uplink connection at most {format_rate(cluster.connection_cap_uplink_Bps)}" in capsys.readouterr().out
    assert json.loads(out.read_text())["cluster"]["connection_cap_Bps"] == cluster.connection_caps_Bps
