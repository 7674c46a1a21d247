"""Trace readers on real single-step files, and on broken input: one clear error each."""

import gzip
import json
import shutil

import numpy as np
import pytest

from tfbase.errors import GraphError, ProfileFormatError, RunDirError, TraceFormatError
from tfprofile.api import read_profile
from tfprofile.dag import Resource
from tfprofile.profile_io import load_profile, save_profile
from tfprofile.rundir import open_run_dir, read_variables
from tfprofile.runmetadata import graph_nodes, read_run_metadata, step_records


def test_binary_text_and_gzip_runmetadata_read_the_same(data_dir, tmp_path):
    raw = data_dir / "raw"
    binary = read_run_metadata(raw / "tiny_step.pb")
    text = read_run_metadata(raw / "tiny_step.pbtxt")
    packed = tmp_path / "step.pb.gz"
    packed.write_bytes(gzip.compress((raw / "tiny_step.pb").read_bytes()))
    assert binary == text == read_run_metadata(packed)
    nodes = graph_nodes(binary, "x")
    assert len(nodes) > 50 and any(n.op == "_Recv" for n in nodes)
    records = step_records(binary, "x")
    assert len(records.transfers) == 19
    assert all(r.tensor_name.startswith("edge_") for r in records.transfers)


def test_single_raw_trace_builds_a_profile(data_dir):
    profile = read_profile([data_dir / "raw" / "tiny_step.pb"], batch_size=32,
                           variables=data_dir / "raw" / "tiny_variables.json")
    assert profile.n_steps == 1
    assert profile.bytes_per_step(Resource.DOWNLINK) == profile.variables.trainable_bytes


def test_chrome_trace_agrees_with_runmetadata_on_computation(data_dir):
    chrome = read_profile([data_dir / "raw" / "tiny_step.chrome.json.gz"], batch_size=32,
                          variables=data_dir / "raw" / "tiny_variables.json")
    full = read_profile([data_dir / "runs" / "tiny" / "trace" / "step_00000.pb.gz"], batch_size=32,
                        variables=data_dir / "raw" / "tiny_variables.json")
    g_c, g_f = chrome.graph, full.graph
    def compute(g):
        return {str(n) for n, r in zip(g.name, g.resource) if r in (Resource.WORKER, Resource.PS)}

    assert compute(g_c) == compute(g_f)
    assert (g_c.resource == Resource.DOWNLINK).sum() == (g_f.resource == Resource.DOWNLINK).sum()
    assert (g_c.resource == Resource.UPLINK).sum() == (g_f.resource == Resource.UPLINK).sum()
    assert chrome.bytes_per_step(Resource.DOWNLINK) == full.bytes_per_step(Resource.DOWNLINK)
    # The learning rate (4 bytes) feeds no single variable: the weaker format cannot size it.
    assert full.bytes_per_step(Resource.UPLINK) - chrome.bytes_per_step(Resource.UPLINK) == 4
    assert chrome.meta["chrome_unsized_transfers"] == 1
    index = g_c.index
    for name in compute(g_f):
        assert chrome.duration_s[0, index[name]] == pytest.approx(full.duration_s[0, g_f.index[name]], abs=1.5e-6)
    assert np.isnan(chrome.start_s[0, g_c.resource == Resource.DOWNLINK]).all()


@pytest.mark.parametrize("content, match", [
    (b"", "no step_stats"),
    (b"\x0a\x05hello", "truncated or corrupt|no step_stats"),
    (b"\xff\xfe\xfd\xfc" * 10, "truncated or corrupt|no step_stats"),
    (b"step_stats { dev_stats { device: ", "text format"),
])
def test_broken_runmetadata_gets_a_one_line_error(tmp_path, content, match):
    path = tmp_path / "bad.pb"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=match) as info:
        read_run_metadata(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_truncated_real_runmetadata(data_dir, tmp_path):
    raw = (data_dir / "raw" / "tiny_step.pb").read_bytes()
    path = tmp_path / "cut.pb"
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceFormatError, match="truncated or corrupt"):
        read_run_metadata(path)
    path.write_bytes(gzip.compress(raw)[:200])
    with pytest.raises(TraceFormatError, match="gzip"):
        read_run_metadata(path)


def test_other_protobuf_is_not_runmetadata(tmp_path):
    from tensorboard.compat.proto import graph_pb2

    graph = graph_pb2.GraphDef()
    graph.node.add(name="a", op="Const")
    path = tmp_path / "graph.pb"
    path.write_bytes(graph.SerializeToString())
    with pytest.raises(TraceFormatError, match="not a RunMetadata"):
        read_run_metadata(path)


@pytest.mark.parametrize("mutate, match", [
    (lambda t: {"traceEvents": "nope"}, "no traceEvents"),
    (lambda t: {**t, "traceEvents": [e for e in t["traceEvents"] if e.get("ph") != "M"]}, "Compute"),
    (lambda t: {**t, "traceEvents": [({**e, "args": {"op": "X"}} if e.get("ph") == "X" else e)
                                     for e in t["traceEvents"]]}, "lacks ts, dur, args.name"),
])
def test_chrome_trace_with_missing_fields(data_dir, tmp_path, mutate, match):
    trace = json.loads(gzip.decompress((data_dir / "raw" / "tiny_step.chrome.json.gz").read_bytes()))
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(mutate(trace)))
    with pytest.raises(TraceFormatError, match=match):
        read_profile([path], batch_size=4)


def test_chrome_trace_with_unknown_inputs_is_a_graph_error(data_dir, tmp_path):
    trace = json.loads(gzip.decompress((data_dir / "raw" / "tiny_step.chrome.json.gz").read_bytes()))
    for event in trace["traceEvents"]:
        if event.get("ph") == "X" and event["args"].get("name") == "Relu":
            event["args"]["input0"] = "no_such_op_S99"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(trace))
    with pytest.raises(GraphError, match="no_such_op_S99"):
        read_profile([path], batch_size=4)


def test_run_metadata_from_another_run_does_not_pair(data_dir, tmp_path):
    run = tmp_path / "mixed"
    shutil.copytree(data_dir / "runs" / "tiny", run)
    other = sorted((data_dir / "runs" / "vgg11" / "trace").glob("*.pb.gz"))[0]
    for path in (run / "trace").glob("step_*.pb.gz"):
        if path.name != "step_00000.pb.gz":
            path.write_bytes(other.read_bytes())
    with pytest.raises(GraphError, match="same run"):
        read_profile(run)


@pytest.mark.parametrize("breakage, match", [
    (lambda d: (d / "run.json").unlink(), "run.json.*missing"),
    (lambda d: (d / "run.json").write_text('{"format": "tfsim.run/1", "status": "incomplete"}'), "did not complete"),
    (lambda d: (d / "run.json").write_text("{not json"), "not valid JSON"),
    (lambda d: (d / "variables.json").unlink(), "variables.json.*missing"),
    (lambda d: shutil.rmtree(d / "trace"), "no traced step"),
    (lambda d: (d / "step_times.csv").write_text("a,b\n1,2\n"), "step-times"),
])
def test_broken_run_directory(data_dir, tmp_path, breakage, match):
    run = tmp_path / "run"
    shutil.copytree(data_dir / "runs" / "tiny", run)
    breakage(run)
    with pytest.raises(RunDirError, match=match):
        open_run_dir(run)


def test_variables_json_with_a_bad_entry(tmp_path):
    path = tmp_path / "variables.json"
    path.write_text(json.dumps({"format": "tfsim.variables/1", "variables": [{"name": "w"}]}))
    with pytest.raises(RunDirError, match="valid field"):
        read_variables(path)


def test_profile_file_round_trip_and_version_check(bundled_profile, tmp_path):
    profile = bundled_profile("tiny")
    save_profile(profile, tmp_path / "p.npz")
    again = load_profile(tmp_path / "p.npz")
    assert np.array_equal(again.duration_s, profile.duration_s) and again.meta == profile.meta
    np.savez(tmp_path / "future.npz", format=np.array("tfsim.profile/2"))
    with pytest.raises(ProfileFormatError, match="not supported"):
        load_profile(tmp_path / "future.npz")
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ProfileFormatError, match="corrupt"):
        load_profile(tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", x=np.arange(3))
    with pytest.raises(ProfileFormatError, match="not a tfsim profile"):
        load_profile(tmp_path / "other.npz")
