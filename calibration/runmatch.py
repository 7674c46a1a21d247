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
:class:`MatchError`.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from pathlib import Path

from netcapture.capture import Capture
from netcapture.errors import CaptureError
from netcapture.streams import StreamRecord
from netcapture.tcp import Endpoint
from tfbase.errors import RunDirError
from tfprofile.build import StepRecords
from tfprofile.rundir import RunDir, open_run_dir, traced_steps
from tfprofile.runmetadata import read_run_metadata, step_records

NS_PER_S = 10**9
# Slack when comparing trace and capture times: the trace's span starts when the tensor is
# both requested and ready and ends after it is parsed; the packets fall inside, give or
# take scheduling noise.
TIME_SLACK_S = 0.005


class MatchError(CaptureError):
    """A capture whose RecvTensor streams match none of the run's traced transfers."""


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


def read_trace_transfers(path: str | os.PathLike) -> tuple[TraceTransfer, ...]:
    """The RecvTensor records of one RunMetadata file, read by :mod:`tfprofile.runmetadata`."""
    path = Path(path)
    return step_transfers(path.name, step_records(read_run_metadata(path), path))


def step_transfers(label: str, records: StepRecords) -> tuple[TraceTransfer, ...]:
    """The transfer records of one traced step (``label`` names it)."""
    # Integer nanoseconds over an integer: one correctly rounded division each.
    return tuple(TraceTransfer(label, r.tensor_name, r.send_device, r.recv_device, r.size_bytes,
                               r.start_ns / NS_PER_S, r.start_ns / NS_PER_S + r.duration_ns / NS_PER_S)
                 for r in records.transfers)


def _as_run(run: RunDir | str | os.PathLike) -> RunDir:
    return run if isinstance(run, RunDir) else open_run_dir(run)


def run_tasks(run: RunDir | str | os.PathLike) -> dict[Endpoint, str]:
    """The run's task addresses: ``Endpoint -> "ps0"``, ``"worker0"``, ... (``run``: a
    :class:`~tfprofile.rundir.RunDir` or a run directory's path)."""
    run = _as_run(run)
    cluster = run.run.get("cluster")
    if not isinstance(cluster, dict):
        raise RunDirError(run.path / "run.json", "has no cluster addresses")
    tasks = {}
    try:
        for role, addresses in cluster.items():
            for index, address in enumerate(addresses):
                host, _, port = str(address).rpartition(":")
                tasks[Endpoint(host.strip("[]"), int(port))] = f"{role}{index}"
    except (TypeError, ValueError):
        raise RunDirError(run.path / "run.json", "cluster addresses must be lists of host:port") from None
    return tasks


def run_server_ports(run: RunDir | str | os.PathLike) -> frozenset[int]:
    """The TCP ports the run's tasks listened on (their gRPC servers)."""
    return frozenset(endpoint.port for endpoint in run_tasks(run))


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


def match_run(capture: Capture, run: RunDir | str | os.PathLike) -> RunMatch:
    """Match ``capture`` to the traces of ``run`` (a run directory); see the module docstring.

    Raises :class:`MatchError` when no record matches (a capture of another run, or one
    without RecvTensor streams).
    """
    run = _as_run(run)
    run_dir = run.path
    steps = {label: step_transfers(label, records) for label, records in traced_steps(run).items()}
    result = match_transfers(capture, steps)
    total = sum(len(t) for t in steps.values())
    if total and not result.matches:
        streams = len(capture.recv_tensor_streams())
        raise MatchError(capture.path, f"none of the {total} RecvTensor records of {run_dir} matches one of the "
                         f"capture's {streams} RecvTensor streams: are the trace and the capture from the same run?")
    return result
