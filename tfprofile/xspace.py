"""Read TensorFlow profiler XSpace files (``*.xplane.pb``, optionally gzip'd) without importing TensorFlow.

An XSpace is what a task's profiler server returns to ``tf.profiler.experimental.client.trace``
(docs/formats.md §2.8). Of its ``/host:CPU`` plane this reader keeps what a profile needs
(docs/model.md §1.5 says why these events and what they mean):

- ``ExecutorState::Process`` events: the executor running one step of a function, with the
  step's id in the stat ``id``. The same id names that step on every task of the job.
- Op events nested in them, named ``<node>:<op type>``: one op of the step, start and duration.
- ``ExecutorState::ProcessAsync::Start`` and ``::Done`` events of a ``_Recv`` kernel (stats
  ``name``, ``kernel_type``, ``step_id``): the receiver asking for a tensor, and the tensor
  arriving. Their span is a transfer, as a TF1 ``RecvTensor`` record is.

The protobuf definitions are TensorFlow's own (tsl's ``xplane.proto``), from the
``xplane_pb2`` module that the ``tensorflow``/``tensorflow-cpu`` wheel ships. No package on PyPI
ships them apart from TensorFlow (the XProf plugin, ``xprof``, parses XSpace in native code
and has no ``xplane_pb2``); the module is loaded from its file, so that TensorFlow itself is
never imported: it needs ``google.protobuf`` only.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

from tfbase.errors import TraceFormatError
from tfbase.fileio import read_input

MAX_XSPACE_BYTES = 512 * 2**20  # one task's trace, decompressed
HOST_PLANE = "/host:CPU"
# The plane whose stat profile_start_time (ns since the epoch) the lines' timestamps count from.
TASK_ENVIRONMENT_PLANE = "Task Environment"
PROFILE_START_STAT = "profile_start_time"
STEP_EVENT = "ExecutorState::Process"
RECV_START_EVENT = "ExecutorState::ProcessAsync::Start"
RECV_DONE_EVENT = "ExecutorState::ProcessAsync::Done"
RECV_KERNELS = frozenset({"_Recv", "_HostRecv"})
# The generated module inside the TensorFlow wheel (TF 2.15-2.21: tensorflow/tsl/...).
XPLANE_MODULE = Path("tsl", "profiler", "protobuf", "xplane_pb2.py")
PS_PER_NS = 1000


@functools.cache
def _load_xplane_pb2():
    """The module, loaded once (a second load would register its file with protobuf again), or None."""
    spec = importlib.util.find_spec("tensorflow")  # finds the package; runs none of its code
    for root in list(spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / XPLANE_MODULE
        if path.is_file():
            module_spec = importlib.util.spec_from_file_location("tfsim_tsl_xplane_pb2", path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            return module
    return None


def xplane_pb2(source: str | os.PathLike | None = None):
    """TensorFlow's ``xplane_pb2`` module, loaded from the installed wheel without importing TensorFlow.

    ``source`` names the file being read, for the error raised when TensorFlow is not installed.
    """
    module = _load_xplane_pb2()
    if module is None:
        raise TraceFormatError(source, "reading an XSpace needs the protobuf definitions that the tensorflow (or "
                                       "tensorflow-cpu) package ships: pip install 'tfsim[tf]'")
    return module


@dataclasses.dataclass(frozen=True)
class TaskTrace:
    """What one task's XSpace recorded, in nanoseconds since the epoch (the host's clock), keyed by step id.

    ``ops``: ``(step_id, node name) -> (start_ns, duration_ns)``, an op listed twice in a step
    keeping its earliest start and latest end. ``recv_start`` and ``recv_done``:
    ``(step_id, _Recv node name) -> time_ns`` of the receive's request and of its completion.
    """

    source: str
    ops: Mapping[tuple[int, str], tuple[int, int]]
    recv_start: Mapping[tuple[int, str], int]
    recv_done: Mapping[tuple[int, str], int]

    @property
    def step_ids(self) -> frozenset[int]:
        return frozenset(step for step, _ in self.ops)


def read_xspace(path: str | os.PathLike):
    """Parse one XSpace file; return the ``XSpace`` message.

    Raises :class:`~tfbase.errors.TraceFormatError` for a file that is not a profiler XSpace
    of a TensorFlow CPU task: unreadable, truncated, or without a ``/host:CPU`` plane.
    """
    from google.protobuf import message

    path = Path(path)
    data = read_input(path, limit=MAX_XSPACE_BYTES, error=TraceFormatError, what="profiler trace")
    space = xplane_pb2(path).XSpace()
    try:
        space.ParseFromString(data)
    except message.DecodeError as exc:
        raise TraceFormatError(path, f"not an XSpace protobuf: truncated or corrupt ({exc})") from None
    if not any(plane.name == HOST_PLANE for plane in space.planes):
        raise TraceFormatError(path, f"has no {HOST_PLANE} plane: not the profiler trace (XSpace) of a TensorFlow "
                                     "task")
    if profile_start_ns(space) is None:
        raise TraceFormatError(path, f"has no {PROFILE_START_STAT} in a {TASK_ENVIRONMENT_PLANE!r} plane: its times "
                                     "cannot be put on the host's clock")
    return space


def profile_start_ns(space) -> int | None:
    """When the task's trace began (ns since the epoch): its events' times count from it."""
    for plane in space.planes:
        if plane.name == TASK_ENVIRONMENT_PLANE:
            names = {k: m.name for k, m in plane.stat_metadata.items()}
            for stat in plane.stats:
                if names.get(stat.metadata_id) == PROFILE_START_STAT and stat.WhichOneof("value") == "uint64_value":
                    return stat.uint64_value
    return None


def _stat_value(plane, stat):
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return plane.stat_metadata[stat.ref_value].name
    return getattr(stat, kind) if kind else None


def task_trace(space, source: str | os.PathLike) -> TaskTrace:
    """The steps' op and receive events of one task's XSpace (see the module's docstring)."""
    plane = next(p for p in space.planes if p.name == HOST_PLANE)
    origin_ps = (profile_start_ns(space) or 0) * PS_PER_NS  # read_xspace refuses a trace without it
    stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
    ops: dict[tuple[int, str], tuple[int, int]] = {}
    recv_start: dict[tuple[int, str], int] = {}
    recv_done: dict[tuple[int, str], int] = {}
    for line in plane.lines:
        base_ps = origin_ps + line.timestamp_ns * PS_PER_NS
        steps = []  # (start_ps, end_ps, step_id) of this thread's executor runs
        nested = []  # (start_ps, duration_ps, name) of the other events
        for event in line.events:
            meta = plane.event_metadata[event.metadata_id]
            start = base_ps + event.offset_ps
            if meta.name == STEP_EVENT:
                stats = {stat_names.get(s.metadata_id): _stat_value(plane, s) for s in event.stats}
                if isinstance(stats.get("id"), int):
                    steps.append((start, start + event.duration_ps, stats["id"]))
            elif meta.name in (RECV_START_EVENT, RECV_DONE_EVENT):
                stats = {stat_names.get(s.metadata_id): _stat_value(plane, s) for s in event.stats}
                if stats.get("kernel_type") in RECV_KERNELS and isinstance(stats.get("step_id"), int):
                    table = recv_start if meta.name == RECV_START_EVENT else recv_done
                    key = (stats["step_id"], str(stats.get("name")))
                    table[key] = min(table.get(key, start), start) // PS_PER_NS
            elif ":" in meta.name and ": " not in meta.name and "::" not in meta.name:
                nested.append((start, event.duration_ps, meta.name.rpartition(":")[0]))
        steps.sort()
        starts = [s[0] for s in steps]
        for start, duration, name in nested:
            k = bisect.bisect_right(starts, start) - 1
            if k < 0 or start + duration > steps[k][1]:
                continue  # not inside an executor's step: no op of a function
            key = (steps[k][2], name)
            begin, end = start // PS_PER_NS, (start + duration) // PS_PER_NS
            if key in ops:
                s0, d0 = ops[key]
                begin, end = min(begin, s0), max(end, s0 + d0)
            ops[key] = (begin, end - begin)
    return TaskTrace(os.fspath(source), ops, recv_start, recv_done)
