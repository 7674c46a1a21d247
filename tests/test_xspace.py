"""The TF2 ParameterServerStrategy reader on the bundled real run (data/captures/tiny_tf2pss):
XSpace parsing without TensorFlow, the profile it builds, the calibration from its capture, and
bad inputs (one line naming the file, of the reader's own error type)."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run

from tfbase.errors import RunDirError, TraceFormatError
from tfprofile.dag import Resource

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "data" / "captures" / "tiny_tf2pss"
WORKER = RUN / "trace" / "worker0.xplane.pb.gz"
PS = RUN / "trace" / "ps0.xplane.pb.gz"
PROFILE = ROOT / "data" / "profiles" / "tiny_tf2pss.npz"
TRAINABLE_BYTES = 547_496  # tiny's weights: conv 3x3x3x16 + 3x3x16x32, fc 2048x64 + 64x10, biases; float32


@pytest.fixture(scope="module")
def pss_profile():
    import tfprofile

    return tfprofile.read_profile(RUN)


def test_reading_an_xspace_imports_no_tensorflow():
    code = ("import sys; from tfprofile.xspace import read_xspace, task_trace; "
            f"t = task_trace(read_xspace({str(WORKER)!r}), 'w'); "
            "print(len(t.ops) > 0, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["True", "False"]


def test_worker_and_ps_traces_share_step_ids_and_hold_every_receive():
    from tfprofile.xspace import read_xspace, task_trace

    worker, ps = task_trace(read_xspace(WORKER), WORKER), task_trace(read_xspace(PS), PS)
    train_steps = {step for step, name in worker.ops if name == "model/Relu"}  # the first conv, fused
    assert len(train_steps) >= 12
    assert train_steps <= ps.step_ids  # the PS runs its partition of every worker step under the same id
    one = min(train_steps & ps.step_ids)
    # The worker receives the 8 weights (two conv kernels twice: forward and gradient) and a control edge;
    # the PS receives the 8 gradients and a control edge.
    assert len({n for s, n in worker.recv_start if s == one}) == 11
    assert len({n for s, n in ps.recv_start if s == one}) == 9
    for trace in (worker, ps):
        for key, start in trace.recv_start.items():
            if key in trace.recv_done:
                assert trace.recv_done[key] >= start
    # Times are on the host's clock (ns since the epoch), the same for both tasks.
    start_unix_s = min(s for s, _ in worker.ops.values()) / 1e9
    assert abs(start_unix_s - json.loads((RUN / "run.json").read_text())["created_unix_s"]) < 60


def test_the_profile_has_the_tf1_shape(pss_profile):
    graph = pss_profile.graph
    counts = {r.name: int((graph.resource == r).sum()) for r in Resource}
    assert counts == {"DOWNLINK": 11, "WORKER": 91, "UPLINK": 9, "PS": 32}  # the coordinator's dispatch included
    assert pss_profile.n_steps == 12 and pss_profile.batch_size == 8
    assert pss_profile.bytes_per_step(0) == pss_profile.bytes_per_step(2) == TRAINABLE_BYTES
    assert int(pss_profile.variables.size_bytes[pss_profile.variables.trainable].sum()) == TRAINABLE_BYTES
    assert np.isfinite(pss_profile.duration_s).all() and (pss_profile.duration_s >= 0).all()
    links = np.isin(graph.resource, [Resource.DOWNLINK, Resource.UPLINK])
    assert set(graph.server[links].tolist()) == {0}
    assert pss_profile.meta["api"] == "tf2-pss" and pss_profile.meta["unsized_transfers"] == []
    # The two control edges (the step's timestamps to and from the PS) are 0-byte transfers.
    zero = sorted(str(n) for n in graph.name[links & (graph.size_bytes == 0)])
    assert len(zero) == 4 and all("Timestamp" in n or "ReadVariableOp" in n for n in zero)


def test_the_coordinator_s_dispatch_is_op_0_and_starts_every_step(pss_profile):
    """The gap between the worker's consecutive steps (its own tf.timestamp()s: after one step's
    updates, before the next one's model) is in no trace: op 0 stands for it."""
    import csv

    from tfprofile.dag import DISPATCH_OP

    with open(RUN / "step_times.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    gaps = [float(b["start_unix_s"]) - float(a["start_unix_s"]) - float(a["wall_s"]) for a, b in zip(rows, rows[1:])]
    assert len(gaps) == 11 and 0.004 < np.median(gaps) < 0.008  # ~6 ms of a ~13 ms step (every step traced here)
    graph = pss_profile.graph
    assert graph.name[0] == graph.op_type[0] == DISPATCH_OP and graph.resource[0] == Resource.WORKER
    np.testing.assert_allclose(pss_profile.duration_s[:, 0], np.median(gaps), rtol=1e-5)  # the CSV's µs
    assert pss_profile.meta["coordinator_dispatch"] == {
        "duration_s": pytest.approx(np.median(gaps), rel=1e-5), "gaps": 11, "steps": "measured"}
    # Every other op waits for it: op 0 is the only root, and it precedes every former root.
    assert list(np.flatnonzero(graph.in_degree == 0)) == [0]
    assert len(graph.successors(0)) == 17  # the step's 17 roots: its arguments, constants and the iterator
    assert np.isnan(pss_profile.start_s[:, 0]).all()


def test_the_dispatch_brings_the_one_worker_prediction_near_the_run(pss_profile):
    """The bundled run did 590 examples/s (its measured steps' mean start-to-start time); with
    the bundled calibration its profile predicts 1039 without the dispatch (+76%), 599 with it (+1.5%)."""
    import csv

    from simulate import load_cluster, predict
    from tfprofile.pssrun import with_dispatch_op

    with open(RUN / "step_times.csv", newline="") as handle:
        starts = [float(r["start_unix_s"]) for r in csv.DictReader(handle)]
    measured = pss_profile.batch_size / float(np.mean(np.diff(starts)))
    assert measured == pytest.approx(590, rel=0.01)
    cluster = load_cluster(ROOT / "data" / "clusters" / "tiny_tf2pss_lo.json")
    without = dataclasses_without_dispatch(pss_profile)
    assert list(with_dispatch_op(without, float(pss_profile.duration_s[0, 0])).graph.name) == list(
        pss_profile.graph.name)

    def one_worker(profile):
        frame = predict(profile, cluster, workers=[1], transfer="grpc", steps=100, warmup=20, jobs=1)
        return float(frame["throughput_eps"].iloc[0])

    assert one_worker(without) / measured - 1 > 0.6
    assert abs(one_worker(pss_profile) / measured - 1) < 0.05


def dataclasses_without_dispatch(profile):
    """``profile`` with op 0 (the dispatch) taken out again."""
    import dataclasses

    from tfprofile.dag import OpGraph

    g = profile.graph
    roots = len(g.successors(0))
    graph = OpGraph(name=g.name[1:], op_type=g.op_type[1:], resource=g.resource[1:], server=g.server[1:],
                    size_bytes=g.size_bytes[1:], variable=g.variable[1:], data_ptr=g.data_ptr[1:],
                    data_idx=g.data_idx - 1, ctrl_ptr=g.ctrl_ptr[1:] - roots, ctrl_idx=g.ctrl_idx[roots:] - 1)
    return dataclasses.replace(profile, graph=graph, duration_s=profile.duration_s[:, 1:],
                               start_s=profile.start_s[:, 1:],
                               step_makespan_s=profile.step_makespan_s - profile.duration_s[:, 0])


def test_every_sized_transfer_carries_its_variable(pss_profile):
    graph, variables = pss_profile.graph, pss_profile.variables
    links = np.isin(graph.resource, [Resource.DOWNLINK, Resource.UPLINK]) & (graph.size_bytes > 0)
    assert links.sum() == 16 and (graph.variable[links] >= 0).all()
    np.testing.assert_array_equal(variables.size_bytes[graph.variable[links]], graph.size_bytes[links])
    # Re-partitioning over two PS tasks needs those links: both servers get traffic.
    from simulate.prepare import repartition_servers

    assert set(repartition_servers(pss_profile, 2)[links].tolist()) == {0, 1}


def test_the_bundled_profile_is_this_reader_s_output(pss_profile):
    import tfprofile

    bundled = tfprofile.load_profile(PROFILE)
    assert list(bundled.graph.name) == list(pss_profile.graph.name)
    np.testing.assert_array_equal(bundled.graph.size_bytes, pss_profile.graph.size_bytes)
    np.testing.assert_allclose(bundled.duration_s, pss_profile.duration_s)


def test_every_captured_tensor_has_the_profile_s_size(pss_profile):
    from calibration.runmatch import match_run, run_server_ports
    from netcapture import read_capture
    from tfprofile.rundir import open_run_dir

    run_dir = open_run_dir(RUN)
    capture = read_capture(RUN / "capture.pcap.gz", server_ports=run_server_ports(run_dir))
    match = match_run(capture, run_dir)
    assert len(match.matches) == 12 * (11 + 9) and not match.unmatched_transfers
    sizes = dict(zip(pss_profile.graph.name.tolist(), pss_profile.graph.size_bytes.tolist()))
    assert all(m.stream.tensor_content_bytes == sizes[m.transfer.tensor_name] for m in match.matches)


def test_calibrate_reads_the_pss_capture(tmp_path, capsys):
    out = tmp_path / "cluster.json"
    code, _, err = run(["calibrate", RUN, "-o", out], capsys)
    assert code == 0, err
    cluster = json.loads(out.read_text())
    assert cluster["format"] == "tfsim.cluster/1" and cluster["default_transfer"] == "grpc"
    fits = cluster["overhead"]
    assert fits["downlink"]["n"] == 12 * 11 and fits["uplink"]["n"] == 12 * 9
    # The PS's part of a step starts with RunComponentFunction, TF2's stand-in for TF1's RunGraph.
    assert cluster["rpc"]["steps"] == 12 and 0 < cluster["rpc"]["rungraph_s"] < 0.05


# Bad inputs: one line, naming the file, of the reader's error type.

def _copy_run(tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(RUN, target, ignore=shutil.ignore_patterns("capture.pcap.gz", "iperf3"))
    return target


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "not-gzip"])
def test_a_damaged_xspace_is_one_line_naming_the_file(tmp_path, damage):
    from tfprofile.xspace import read_xspace

    raw = gzip.decompress(WORKER.read_bytes())
    path = tmp_path / "worker0.xplane.pb.gz"
    body = {"truncated": raw[: len(raw) // 3], "garbage": bytes(range(256)) * 40, "empty": b""}.get(damage)
    path.write_bytes(gzip.compress(body) if body is not None else WORKER.read_bytes()[:500])
    with pytest.raises(TraceFormatError) as caught:
        read_xspace(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and "\n" not in message
    expected = {"truncated": "truncated or corrupt", "garbage": "truncated or corrupt", "empty": "/host:CPU",
                "not-gzip": "gzip"}[damage]
    assert expected in message


def test_tfsim_profile_of_a_run_with_a_corrupt_trace_exits_2_with_one_line(tmp_path, capsys):
    run_dir = _copy_run(tmp_path)
    trace = run_dir / "trace" / "ps0.xplane.pb.gz"
    trace.write_bytes(gzip.compress(b"\x0a\xff\xff\xff\x0f"))  # a field that claims 4 GB
    code, _, err = run(["profile", run_dir, "-o", tmp_path / "p.npz"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"tfsim: error: {trace}: not an XSpace"), err


def test_a_missing_worker_trace_or_graph_is_named(tmp_path):
    from tfprofile.rundir import profile_from_run_dir

    run_dir = _copy_run(tmp_path)
    (run_dir / "trace" / "worker0.xplane.pb.gz").unlink()
    with pytest.raises(RunDirError, match="no trace of the worker"):
        profile_from_run_dir(run_dir)
    run_dir = _copy_run(tmp_path / "again")
    shutil.rmtree(run_dir / "graphs")
    with pytest.raises(RunDirError, match="no partition graph"):
        profile_from_run_dir(run_dir)


def test_a_corrupt_partition_graph_is_named(tmp_path):
    from tfprofile.rundir import profile_from_run_dir

    run_dir = _copy_run(tmp_path)
    graph = sorted((run_dir / "graphs").glob("*.pbtxt.gz"))[0]
    graph.write_bytes(gzip.compress(b"node { name: 'x' op: "))
    with pytest.raises(TraceFormatError) as caught:
        profile_from_run_dir(run_dir)
    assert str(caught.value).startswith(f"{graph}: not a GraphDef")


def test_traces_of_another_run_pair_no_step(tmp_path):
    from tfbase.errors import GraphError
    from tfprofile.rundir import profile_from_run_dir

    run_dir = _copy_run(tmp_path)
    # The PS's trace replaced by the worker's: no step has the PS's receives.
    shutil.copy(WORKER, run_dir / "trace" / "ps0.xplane.pb.gz")
    with pytest.raises(GraphError, match="no traced step of the training function has every receive"):
        profile_from_run_dir(run_dir)


@pytest.mark.parametrize("flags, needle", [
    (["--trace-every", "2"], "--trace-every: applies to --api tf1 only"),
    (["--placement", "greedy"], "--placement: applies to --api tf1 only"),
])
def test_tf1_only_collect_options_are_refused_for_tf2_pss(tmp_path, capsys, flags, needle):
    code, _, err = run(["collect", "--api", "tf2-pss", *flags, "--out", tmp_path / "run"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.incomplete").exists()
