"""Match a capture's RecvTensor streams to the RecvTensor records of a run's traces.

A traced step's RunMetadata has one ``RecvTensor`` node stat per transfer, on the
receiving device, with the tensor (edge) name, sender and receiver in its
``timeline_label`` (``[0.5MB] [1.2Gb/s] edge_32_affine0/MatMul/ReadVariableOp from
/job:ps/... to /job:worker/...``), the size in ``requested_bytes``, and its span in
epoch microseconds. A captured RecvTensor stream carries the same edge name and devices
in its rendezvous key, and the step's ``step_id``.

The edge name alone repeats every step, so matching goes by step: for each traced step,
the capture's ``step_id`` whose streams overlap most of the step's records in time (same
clock: the trace and the capture are taken on the same host) is that step's, and within
it each record matches the one stream of the same tensor, sender and receiver.
A stream is used at most once. A trace and a capture from different runs match nothing:
:class:`~netcapture.errors.MatchError`.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import zlib
from collections import Counter
from pathlib import Path

from netcapture.capture import Capture
from netcapture.errors import MatchError
from netcapture.streams import StreamRecord
from netcapture.tcp import Endpoint
from tfbase.errors import RunDirError, TraceFormatError

_LABEL = re.compile(r"\]\s+(\S+)\s+from\s+(\S+)\s+to\s+(\S+)\s*$")
# Slack when comparing trace and capture times: the trace's span starts when the tensor is
# both requested and ready and ends after it is parsed; the packets fall inside, give or
# take scheduling noise.
TIME_SLACK_S = 0.005


@dataclasses.dataclass(frozen=True)
class TraceTransfer:
    """One RecvTensor record of a traced step."""

    step_file: str
    tensor_name: str
    send_device: str
    recv_device: str
    requested_bytes: int
    start_s: float
    end_s: float

    @property
    def direction(self) -> str:
        """``"downlink"`` (PS to worker), ``"uplink"`` (worker to PS) or ``"other"``."""
        if "/job:ps" in self.send_device and "/job:worker" in self.recv_device:
            return "downlink"
        if "/job:worker" in self.send_device and "/job:ps" in self.recv_device:
            return "uplink"
        return "other"


@dataclasses.dataclass(frozen=True)
class TensorMatch:
    transfer: TraceTransfer
    stream: StreamRecord


@dataclasses.dataclass(frozen=True)
class RunMatch:
    """The result of :func:`match_run`.

    ``step_ids`` maps each trace file to the capture's step id chosen for it;
    ``unmatched_streams`` are RecvTensor streams of those step ids no record claimed.
    """

    matches: tuple[TensorMatch, ...]
    unmatched_transfers: tuple[TraceTransfer, ...]
    unmatched_streams: tuple[StreamRecord, ...]
    step_ids: tuple[tuple[str, int], ...]


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(path, f"corrupt or truncated gzip data ({exc})") from None
    return raw


def read_trace_transfers(path: str | os.PathLike) -> tuple[TraceTransfer, ...]:
    """The RecvTensor records of one binary RunMetadata file (``.pb`` or ``.pb.gz``)."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import config_pb2

    path = Path(path)
    metadata = config_pb2.RunMetadata()
    try:
        metadata.ParseFromString(_read_bytes(path))
    except DecodeError as exc:
        raise TraceFormatError(path, f"not a binary RunMetadata ({exc})") from None
    transfers = []
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            if node.node_name != "RecvTensor":
                continue
            label = _LABEL.search(node.timeline_label)
            if label is None:
                continue
            size = node.output[0].tensor_description.allocation_description.requested_bytes if node.output else 0
            start = node.all_start_micros / 1e6
            transfers.append(TraceTransfer(path.name, label.group(1), label.group(2), label.group(3), size,
                                           start, start + node.all_end_rel_micros / 1e6))
    return tuple(transfers)


def read_run(run_dir: str | os.PathLike) -> dict:
    """A run directory's ``run.json``."""
    path = Path(run_dir) / "run.json"
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise RunDirError(path, f"cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise RunDirError(path, f"not JSON ({exc})") from None


def run_tasks(run_dir: str | os.PathLike) -> dict[Endpoint, str]:
    """The run's task addresses: ``Endpoint -> "ps0"``, ``"worker0"``, ..."""
    cluster = read_run(run_dir).get("cluster")
    if not isinstance(cluster, dict):
        raise RunDirError(Path(run_dir) / "run.json", "has no cluster addresses")
    tasks = {}
    for role, addresses in cluster.items():
        for index, address in enumerate(addresses):
            host, _, port = address.rpartition(":")
            tasks[Endpoint(host.strip("[]"), int(port))] = f"{role}{index}"
    return tasks


def run_server_ports(run_dir: str | os.PathLike) -> frozenset[int]:
    """The TCP ports the run's tasks listened on (their gRPC servers)."""
    return frozenset(endpoint.port for endpoint in run_tasks(run_dir))


def run_trace_files(run_dir: str | os.PathLike) -> list[Path]:
    """The run's binary RunMetadata traces, in step order."""
    run_dir = Path(run_dir)
    names = read_run(run_dir).get("traced_steps") or sorted(p.name for p in (run_dir / "trace").glob("*"))
    return [run_dir / "trace" / n for n in names if n.endswith((".pb", ".pb.gz"))]


def _overlaps(stream: StreamRecord, transfer: TraceTransfer) -> bool:
    begin = stream.request_headers_time_s
    end = stream.response_last_data_time_s or stream.response_end_time_s or begin
    if begin is None:
        return False
    return begin - TIME_SLACK_S <= transfer.end_s and end + TIME_SLACK_S >= transfer.start_s


def _time_distance(stream: StreamRecord, transfer: TraceTransfer) -> float:
    end = stream.response_last_data_time_s or stream.response_end_time_s or stream.request_headers_time_s or 0.0
    return abs(end - transfer.end_s)


def match_transfers(capture: Capture, steps: dict[str, tuple[TraceTransfer, ...]]) -> RunMatch:
    """Match the records of each traced step (``{trace file: records}``) to captured streams."""
    by_name: dict[tuple[str, str, str], list[StreamRecord]] = {}
    for stream in capture.recv_tensor_streams():
        if stream.tensor_name is not None:
            by_name.setdefault((stream.tensor_name, stream.src_device, stream.dst_device), []).append(stream)
    used: set[int] = set()
    matches, unmatched, step_ids = [], [], []
    for step_file, transfers in steps.items():
        votes = Counter(s.step_id for t in transfers for s in by_name.get((t.tensor_name, t.send_device,
                                                                            t.recv_device), ())
                        if s.step_id is not None and _overlaps(s, t))
        if not votes:
            unmatched.extend(transfers)
            continue
        step_id = votes.most_common(1)[0][0]
        step_ids.append((step_file, step_id))
        for transfer in transfers:
            candidates = [s for s in by_name.get((transfer.tensor_name, transfer.send_device, transfer.recv_device), ())
                          if s.step_id == step_id and id(s) not in used]
            if not candidates:
                unmatched.append(transfer)
                continue
            stream = min(candidates, key=lambda s: _time_distance(s, transfer))
            used.add(id(stream))
            matches.append(TensorMatch(transfer, stream))
    chosen = {step_id for _, step_id in step_ids}
    leftover = tuple(s for s in capture.recv_tensor_streams() if s.step_id in chosen and id(s) not in used)
    return RunMatch(tuple(matches), tuple(unmatched), leftover, tuple(step_ids))


def match_run(capture: Capture, run_dir: str | os.PathLike) -> RunMatch:
    """Match ``capture`` to the traces of the run in ``run_dir``; see the module docstring.

    Raises :class:`MatchError` when no record matches (a capture of another run, or one
    without RecvTensor streams).
    """
    files = run_trace_files(run_dir)
    if not files:
        raise RunDirError(run_dir, "has no binary RunMetadata trace (trace/step_*.pb.gz)")
    steps = {path.name: read_trace_transfers(path) for path in files}
    result = match_transfers(capture, steps)
    total = sum(len(t) for t in steps.values())
    if total and not result.matches:
        streams = len(capture.recv_tensor_streams())
        raise MatchError(capture.path, f"none of the {total} RecvTensor records of {run_dir} matches one of the "
                         f"capture's {streams} RecvTensor streams: are the trace and the capture from the same run?")
    return result
