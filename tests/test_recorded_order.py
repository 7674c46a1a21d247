"""The recorded order (tfprofile.tictac.recorded_order) against the captures' stream order.

Each bundled capture in data/captures sits in the run directory whose traces it was taken
with. The worker opens one HTTP/2 stream per RecvTensor call, with stream ids rising in the
order it issued them: the capture's stream order is the order TensorFlow requested the
parameter transfers. The recorded order ranks them by their median recorded start in the
profile built from the same run's traces. Both are exact orders of the same events, so the
test asks for exact agreement, traced step by traced step (Kendall's tau of 1), not a
correlation above a threshold.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import tfprofile
from calibration.runmatch import match_run, run_server_ports
from netcapture import read_capture
from tfprofile import tictac

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "captures"
RUNS = sorted(p.parent.name for p in CAPTURES.glob("*/capture.*") if (p.parent / "run.json").is_file())


TF2_PSS_RUNS = ["tiny_tf2pss"]  # a worker asks for every tensor at once: the responses carry the order


def test_every_bundled_capture_is_checked():
    assert RUNS == ["tiny16_lo_smallwin", "tiny_100mbit_w2_ps", "tiny_lo", "tiny_tf2pss", "wide_100mbit",
                    "wide_1gbit", "wide_1gbit_smallwin"]


def _kendall_tau(order: list, reference: list) -> float:
    position = {op: i for i, op in enumerate(reference)}
    ranks = [position[op] for op in order]
    pairs = [(a, b) for i, a in enumerate(ranks) for b in ranks[i + 1:]]
    return sum(1 if a < b else -1 for a, b in pairs) / len(pairs)


@pytest.mark.parametrize("name", TF2_PSS_RUNS)
def test_recorded_order_of_a_tf2_pss_run_is_its_response_order(name):
    """A TF2 PSS worker issues its RecvTensor requests together, in no order (the stream ids say
    nothing), and a transfer starts when both its request and the PS's _Send are there: the
    recorded order is the order of the responses' first DATA frames, by median over the traced
    steps, exactly; single steps may swap neighbours."""
    run_dir = CAPTURES / name
    profile = tfprofile.read_profile(run_dir)
    graph = profile.graph
    order = tictac.compute_ordering(profile, "recorded").order().tolist()
    capture = read_capture(next(run_dir.glob("capture.*")), server_ports=run_server_ports(run_dir))
    match = match_run(capture, run_dir)
    first_data: dict[int, list[float]] = {}
    taus, id_taus = [], []
    for step in sorted({m.transfer.step_file for m in match.matches}):
        streams = {graph.index[m.transfer.tensor_name]: m.stream for m in match.matches
                   if m.transfer.step_file == step and graph.index.get(m.transfer.tensor_name) in set(order)}
        assert set(streams) == set(order)
        start = min(stream.response_first_data_time_s for stream in streams.values())
        for op, stream in streams.items():
            first_data.setdefault(op, []).append(stream.response_first_data_time_s - start)
        taus.append(_kendall_tau(sorted(streams, key=lambda op: streams[op].response_first_data_time_s), order))
        id_taus.append(_kendall_tau(sorted(streams, key=lambda op: streams[op].stream_id), order))
    assert len(taus) >= 10 and min(taus) >= 0.7 and np.median(taus) == 1.0
    assert sorted(first_data, key=lambda op: np.median(first_data[op])) == order
    assert abs(np.median(id_taus)) < 0.5  # the request order is not what the recorded order follows


@pytest.mark.parametrize("name", [run for run in RUNS if run not in TF2_PSS_RUNS])
def test_recorded_order_is_the_captured_stream_order(name):
    run_dir = CAPTURES / name
    profile = tfprofile.read_profile(run_dir)
    graph = profile.graph
    order = tictac.compute_ordering(profile, "recorded")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean capture decodes without a warning
        capture = read_capture(next(run_dir.glob("capture.*")), server_ports=run_server_ports(run_dir))
    match = match_run(capture, run_dir)
    ranked = set(order.recv.tolist())
    steps = sorted({m.transfer.step_file for m in match.matches})
    assert len(steps) >= 1
    for step in steps:
        streams = {}
        for m in match.matches:
            op = graph.index.get(m.transfer.tensor_name)
            if m.transfer.step_file == step and op in ranked:
                streams[op] = (m.stream.connection, m.stream.stream_id)
        assert set(streams) == ranked  # every parameter transfer has its stream in every traced step
        assert len({connection for connection, _ in streams.values()}) == graph.n_servers  # one per PS
        by_stream = sorted(streams, key=lambda op: streams[op][1])
        assert by_stream == order.order().tolist(), step
    assert np.isfinite(order.key).all()
