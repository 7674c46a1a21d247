"""The ``grpc`` transfer model (docs/model.md §3.4): window pauses in the engine, in the calibration's
replay, and in CLUSTER.json."""

import json

import numpy as np
import pytest
from test_engine import make_profile

from calibration.replay import replay_fifo, replay_grpc
from simulate.cluster import ClusterModel, FlowControl
from simulate.cluster_file import ClusterFormatError, cluster_from_dict, load_cluster
from simulate.config import SimConfig, Transfer
from simulate.engine import run
from simulate.prepare import prepare
from tfbase.errors import UsageError

B = 1e8


def one_stream(size):
    """A downlink stream then a tiny computation: the step time is the stream's end."""
    return make_profile(resource=[0, 1], server=[0, -1], size=[size, 0], durations=[[0.0, 0.0]], edges=[(0, 1)])


@pytest.mark.parametrize("windows,delay,expected_pauses", [(1, 0.0, 0), (4, 2e-3, 0), (1, 1e-3, 2), (2, 1e-3, 1)])
def test_a_stream_pauses_once_per_window_it_runs_out_of(windows, delay, expected_pauses):
    window = 1_000_000
    size = 3 * window
    flow = FlowControl(((0.0, windows * window),), delay)
    cluster = ClusterModel(B, B, flow_downlink=flow, flow_uplink=flow)
    graph = prepare(one_stream(size), cluster)
    result = run(graph, cluster, SimConfig(workers=1, transfer=Transfer.GRPC, steps=1, warmup=0))
    # Stop and wait: each window's bytes come back one delay after they were sent.
    assert result.step_end_s[0, 0] == pytest.approx(size / B + expected_pauses * delay, rel=1e-12)
    replayed = replay_grpc([0.0], [size], B, flow)
    assert replayed[0] == pytest.approx(result.step_end_s[0, 0], rel=1e-12)


def test_a_stream_waiting_for_the_connection_window_lets_a_resumed_one_wait_its_turn():
    flow = FlowControl(((0.0, 1_000_000),), 5e-3)
    ends = replay_grpc([0.0, 1e-3], [2_000_000, 300_000], B, flow)
    # Stream 0 sends one window (0-10 ms), using up its own window and the connection's, and
    # pauses; stream 1 (ready at 1 ms) waits for the connection window, which comes back at
    # 15 ms, when stream 0 rejoins the queue behind it: stream 1 runs 15-18 ms. Stream 0 then
    # sends the 0.7 MB the connection allows (18-25 ms), and the last 0.3 MB once stream 1's
    # bytes are back (23 ms): 25-28 ms.
    assert ends[1] == pytest.approx(0.018, rel=1e-12)
    assert ends[0] == pytest.approx(0.028, rel=1e-12)
    assert flow.steady_window_bytes == 1_000_000


def test_unlimited_windows_make_grpc_the_fifo_model():
    ready = np.array([0.0, 0.001, 0.0015, 0.02])
    size = np.array([3e6, 1e5, 2e6, 5e5])
    assert np.allclose(replay_grpc(ready, size, B, FlowControl()), replay_fifo(ready, size, B))


def test_window_timeline_must_ascend_and_never_shrink():
    with pytest.raises(UsageError):
        FlowControl(((0.0, 4e6), (1.0, 1e6)))
    with pytest.raises(UsageError):
        FlowControl(((1.0, 4e6), (0.5, 8e6)))
    with pytest.raises(UsageError):
        FlowControl(((0.0, 0.0),))
    with pytest.raises(UsageError):
        FlowControl(((0.0, 4e6),), update_delay_s=-1.0)


CLUSTER = {"format": "tfsim.cluster/1", "bandwidth_Bps": {"downlink": 1.2e8, "uplink": 1.1e8}, "win_bytes": 4194304,
           "alpha_s_per_byte": 1e-10, "beta_s": 1e-3, "default_transfer": "grpc",
           "flow_control": {"downlink": {"window_timeline": [{"t_s": 0, "window_bytes": 4194304},
                                                             {"t_s": 0.3, "window_bytes": 16777216}],
                                         "update_delay_s": 0.0005},
                            "uplink": {"window_timeline": [{"t_s": 0, "window_bytes": 4194304}]}}}


def test_cluster_file_carries_flow_control_and_the_default_transfer():
    cluster = cluster_from_dict(CLUSTER)
    assert cluster.default_transfer == "grpc"
    assert cluster.flow_downlink.window_timeline == ((0.0, 4194304.0), (0.3, 16777216.0))
    assert cluster.flow_downlink.update_delay_s == 0.0005
    assert cluster.flow_uplink.update_delay_s == 0.0
    assert cluster_from_dict({k: v for k, v in CLUSTER.items() if k != "flow_control"}).flow_uplink == FlowControl()


@pytest.mark.parametrize("flow_control,problem", [
    ("fast", "flow_control must map"),
    ({"downlink": {"window_timeline": []}}, "non-empty list"),
    ({"downlink": {"window_timeline": [{"t_s": 0, "window_bytes": 8}, {"t_s": 1, "window_bytes": 4}]}},
     "must not shrink"),
    ({"uplink": {"window_timeline": [{"t_s": 0, "window_bytes": "big"}]}}, "window_bytes must be a finite number"),
])
def test_bad_flow_control_is_a_one_line_cluster_error(tmp_path, flow_control, problem):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({**CLUSTER, "flow_control": flow_control}))
    with pytest.raises(ClusterFormatError) as err:
        load_cluster(path)
    assert problem in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_bundled_calibration_defaults_to_grpc_and_predicts_with_it(bundled_profile):
    from simulate.sweep import predict

    cluster = load_cluster("data/clusters/lab-1gbit.json")
    assert cluster.default_transfer == "grpc"
    frame = predict(bundled_profile("tiny"), cluster, workers=[1, 2], transfer=["grpc", "http2"], steps=60,
                    warmup=10, progress=False)
    assert set(frame["policy"]) == {"grpc", "http2"}
    assert (frame["throughput_eps"] > 0).all()
