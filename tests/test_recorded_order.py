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


def test_every_bundled_capture_is_checked():
    assert RUNS == ["tiny16_lo_smallwin", "tiny_100mbit_w2_ps", "tiny_lo", "wide_100mbit", "wide_1gbit",
                    "wide_1gbit_smallwin"]


@pytest.mark.parametrize("name", RUNS)
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
