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
