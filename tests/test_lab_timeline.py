"""The research-w4 timeline module and FIFO prototype on bundled data (no TensorFlow, no root)."""

from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[1] / "data"


def test_union_busy_and_gaps():
    from tfsim.lab.timeline import union_busy

    busy, gaps = union_busy(np.array([0.0, 0.5, 0.6]), np.array([0.2, 0.7, 0.65]), 0.0, 1.0)
    assert busy == pytest.approx(0.4)
    assert sorted(np.round(gaps, 6)) == [0.3, 0.3]


@pytest.mark.filterwarnings("ignore")
def test_measured_timeline_on_bundled_capture():
    from tfsim.lab.timeline import measured_timeline, read_layout

    run = DATA / "captures" / "wide_1gbit"
    T = measured_timeline(run / "capture.pcap.gz", run, rate_Bps=125e6)
    tables = T.tables()
    wire = {r["direction"]: r for r in tables["wire"] if r["worker"] == "all"}
    assert 0 < wire["down"]["busy_fraction"] <= 1 and 0 < wire["up"]["busy_fraction"] <= 1
    recv = [m for m in T.messages if m["rpc"] == "RecvTensor" and m["step"] >= 0]
    assert recv, "RecvTensor streams are assigned to steps"
    # first byte never after the last byte, and never before the request
    for m in recv:
        if m["first_data_t"] is not None and m["last_data_t"] is not None:
            assert m["first_data_t"] <= m["last_data_t"] + 1e-9
            assert m["first_data_t"] >= m["request_t"] - 1e-3
    assert len(read_layout(run).worker_ips) == 1


def test_simulated_timeline_and_prototype_on_bundled_profile():
    from simulate.cluster_file import load_cluster
    from simulate.config import SimConfig, Transfer
    from simulate.engine import run
    from simulate.prepare import prepare
    from tfprofile.profile_io import load_profile
    from tfsim.lab.fifo_proto import LinkParams, ProtoParams, simulate
    from tfsim.lab.timeline import simulated_timeline

    profile = load_profile(DATA / "profiles" / "tiny.npz")
    cluster = load_cluster(DATA / "clusters" / "lab-1gbit.json")
    graph = prepare(profile, cluster)
    sim = run(graph, cluster, SimConfig(workers=2, transfer=Transfer.GRPC, steps=30, warmup=5, trace_steps=30))
    S = simulated_timeline(sim)
    assert {r["direction"] for r in S["wire"]} == {"down", "up"}
    link = LinkParams(rate_Bps=12.5e6)
    one = simulate(graph, ProtoParams(down=link, up=link), 1, steps=20, warmup=5)
    two = simulate(graph, ProtoParams(down=link, up=link), 2, steps=20, warmup=5)
    assert 0 < one.throughput_eps() < two.throughput_eps() < 2.2 * one.throughput_eps()
    assert all(0 <= v <= 1.2 for v in two.utilisation().values())


W2_RUN = DATA / "captures" / "tiny_100mbit_w2_ps"  # tiny, 2 workers, 100 Mbit/s, captured at the PS
W2_RATE_BPS = 100e6 / 8


def test_merged_intervals_cover_what_union_busy_counts():
    from tfsim.lab.timeline import merged_intervals, union_busy

    rng = np.random.default_rng(7)
    starts = rng.uniform(0, 10, 200)
    ends = starts + rng.exponential(0.05, 200)
    merged = merged_intervals(starts, ends)
    assert np.all(merged[1:, 0] > merged[:-1, 1])  # disjoint and sorted
    busy, _ = union_busy(starts, ends, 0.0, 20.0)
    assert float((merged[:, 1] - merged[:, 0]).sum()) == pytest.approx(busy)


@pytest.mark.filterwarnings("ignore")
def test_measured_timeline_of_a_real_two_worker_lab_run():
    from tfsim.lab.timeline import measured_timeline

    T = measured_timeline(W2_RUN / "capture.pcap.gz", W2_RUN, rate_Bps=W2_RATE_BPS, chain=())
    assert len(T.layout.worker_ips) == 2 and T.layout.ps_ip not in T.layout.worker_ips
    # every measured step of each worker fetches tiny's 10 tensors and sends its 9 gradients
    per_step: dict = {}
    for m in T.messages:
        if m["rpc"] == "RecvTensor" and m["step"] >= 0:
            key = (m["worker"], m["step"], m["response_dir"])
            per_step[key] = per_step.get(key, 0) + 1
    for w in (0, 1):
        for k in range(len(T.layout.steps[w])):
            assert (per_step.get((w, k, "down")), per_step.get((w, k, "up"))) == (10, 9)
    wire = T.tables()["wire"]
    for direction in ("down", "up"):
        whole = next(r for r in wire if r["direction"] == direction and r["worker"] == "all")
        workers = [r for r in wire if r["direction"] == direction and r["worker"] in (0, 1)]
        # two workers keep a 100 Mbit/s link busy; nobody moves more than the link carries
        assert 0.7 < whole["busy_fraction"] <= 1.0
        assert whole["bytes_per_s"] <= W2_RATE_BPS
        assert sum(r["bytes_per_s"] for r in workers) == pytest.approx(whole["bytes_per_s"], rel=1e-9)
        assert all(0.25 < r["busy_fraction"] < whole["busy_fraction"] for r in workers)


@pytest.mark.filterwarnings("ignore")
def test_timeline_view_lays_the_real_run_beside_the_simulated_one():
    import dataclasses

    from simulate.cluster_file import load_cluster
    from tfprofile.profile_io import load_profile
    from tfsim.lab.timeline_view import timeline_view

    profile = load_profile(DATA / "profiles" / "tiny.npz")
    payload_Bps = W2_RATE_BPS * 1448 / 1514  # TCP payload of full frames
    cluster = dataclasses.replace(load_cluster(DATA / "clusters" / "lab-1gbit.json"), downlink_Bps=payload_Bps,
                                  uplink_Bps=payload_Bps, bucket_downlink=None, bucket_uplink=None)
    view = timeline_view(W2_RUN, profile, cluster, rate_Bps=W2_RATE_BPS, cores=2.0, steps=20)
    busy = view.busy_fractions()
    assert set(busy) == {"measured_down", "simulated_down", "measured_up", "simulated_up"}
    assert all(0 < v <= 1 for v in busy.values())
    summary = view.summary()
    assert summary["workers"] == 2 and summary["step_median_ms"]["measured"] > 0
    # the simulated step is as long as the simulated run says
    sim = view.simulated_run
    assert summary["step_median_ms"]["simulated"] == pytest.approx(
        float(np.median(sim.step_end_s[:, 10:] - sim.step_start_s[:, 10:])) * 1e3)
    assert summary["tensors_most_apart"], "tiny's tensors appear in both runs"
    import json

    from tfbase.fileio import json_ready

    for document in (summary, view.comparison["tensors_side_by_side"], view.chrome_trace()):
        json.dumps(json_ready(document), allow_nan=False)  # what the lab writes: no NaN reaches the file
    fig = view.figure()
    assert len(fig.axes) == 2 and [t.get_text() for t in fig.axes[0].get_yticklabels()][:3] == [
        "link down", "link up", "w0 down"]
    trace = view.chrome_trace()
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert {"measured worker 0", "measured worker 1", "simulated worker 0", "simulated worker 1"} <= names
    measured_tensors = [e for e in trace["traceEvents"] if e.get("cat") == "transfer" and e["pid"] < 1000]
    assert len(measured_tensors) == sum(1 for m in view.measured.messages if m["rpc"] == "RecvTensor")


@pytest.mark.filterwarnings("ignore")
def test_used_fraction_counts_the_tensors_moved_on_both_sides():
    """The used fraction is payload over the link's sustained rate, counted alike in the
    capture (TCP payload of the packets) and in the simulation (transfer chunks): each must
    match the tensors that finished in the window (decoded gRPC responses; simulated
    transfers) over the capacity, give or take the tensors the window's ends cut. The busy
    fraction of the same capture reads lower (GSO packets captured with one header, merged
    packets overlapping)."""
    import dataclasses

    from simulate.cluster_file import load_cluster
    from tfprofile.profile_io import load_profile
    from tfsim.lab.timeline_view import sustained_capacity_Bps, timeline_view

    profile = load_profile(DATA / "profiles" / "tiny.npz")
    payload_Bps = W2_RATE_BPS * 1448 / 1514
    cluster = dataclasses.replace(load_cluster(DATA / "clusters" / "lab-1gbit.json"), downlink_Bps=payload_Bps,
                                  uplink_Bps=payload_Bps, bucket_downlink=None, bucket_uplink=None)
    assert sustained_capacity_Bps(cluster) == {"down": payload_Bps, "up": payload_Bps}
    view = timeline_view(W2_RUN, profile, cluster, rate_Bps=W2_RATE_BPS, cores=2.0, steps=20)
    used, busy = view.used_fractions(), view.busy_fractions()

    def tensors_used(rows, window, direction):
        t0, t1 = window
        moved = sum(r["tensor_bytes"] or 0 for r in rows
                    if r["response_dir"] == direction and r["last_data_t"] is not None and t0 <= r["last_data_t"] < t1)
        return moved / (t1 - t0) / payload_Bps

    measured_rows = [m for m in view.measured.messages if m["rpc"] == "RecvTensor"]
    for d in ("down", "up"):
        assert used[f"measured_{d}"] == pytest.approx(tensors_used(measured_rows, view.measured.window, d), rel=0.06)
        assert used[f"simulated_{d}"] == pytest.approx(
            tensors_used(view.simulated["tensors"], view.simulated["window"], d), rel=0.06)
        assert busy[f"measured_{d}"] < used[f"measured_{d}"] - 0.05
