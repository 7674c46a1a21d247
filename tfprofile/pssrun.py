"""Build a profile from a TF2 ParameterServerStrategy run directory (``tfsim collect --api tf2-pss``).

Such a run directory (docs/formats.md §2.8) holds, beside ``run.json``, ``variables.json`` and
``step_times.csv``:

- ``graphs/*.pbtxt.gz``: the step function's partition graphs, one per device, as TensorFlow
  dumped them on worker 0 after partitioning (GraphDef text). They play the part of a TF1
  RunMetadata's ``partition_graphs``: ops, data and control inputs, and a ``_Send``/``_Recv``
  pair with the same ``tensor_name`` for every tensor that crosses tasks.
- ``trace/<task>.xplane.pb.gz``: each task's profiler XSpace (:mod:`tfprofile.xspace`).
- ``tensors.json``: the size in bytes of every tensor of the step function (``"op:port"``),
  which the traces do not record.

A step is one step id that worker 0 ran: its ops come from every task's trace, and each
cross-task transfer spans from the receiver's ``_Recv`` request to its completion, as a TF1
``RecvTensor`` record does (docs/model.md §1.5). Steps at the trace window's edges, which lack a
receive, are left out. :func:`~tfprofile.build.build_profile` then builds the same DAG as for TF1.

What no trace holds is the time between a worker's steps, the coordinator's dispatch: it
hands the next step to a worker only once that worker has returned the last one, and the
worker's step starts a few milliseconds later (docs/model.md §1.5: about 6 ms of a 12.7 ms
step on the bundled run). The profile models it as one more WORKER op that every step starts
with (:data:`DISPATCH_OP`, op 0), lasting the median gap between a worker's consecutive steps
in ``step_times.csv`` (:func:`dispatch_gap_s`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from tfbase.errors import GraphError, RunDirError, TraceFormatError, TraceWarning
from tfbase.fileio import read_input
from tfprofile.build import (
    TRANSFER_OPS,
    GraphNode,
    StepRecords,
    TransferRecord,
    build_profile,
    parse_device,
    split_input,
)
from tfprofile.dag import DISPATCH_OP, MAX_TENSOR_BYTES, OpGraph, Profile, Resource
from tfprofile.runmetadata import nodes_of_graphs
from tfprofile.xspace import TaskTrace, read_xspace, task_trace

TENSORS_FORMAT = "tfsim.tensors/1"
MAX_GRAPH_BYTES = 256 * 2**20  # one partition graph, decompressed
MAX_RECORD_BYTES = 64 * 2**20  # tensors.json
TRACE_GLOB = "*.xplane.pb*"
_TRACE_NAME = re.compile(r"^(?P<job>ps|worker)(?P<task>\d+)\.xplane\.pb(?:\.gz)?$")


def read_partition_graphs(directory: str | os.PathLike) -> list[GraphNode]:
    """The nodes of every ``*.pbtxt[.gz]`` GraphDef in ``directory``, files in name order."""
    from google.protobuf import text_format
    from tensorboard.compat.proto import graph_pb2

    directory = Path(directory)
    files = sorted(directory.glob("*.pbtxt*"))
    if not files:
        raise RunDirError(directory, "holds no partition graph (*.pbtxt or *.pbtxt.gz)")
    nodes = []
    for path in files:
        data = read_input(path, limit=MAX_GRAPH_BYTES, error=TraceFormatError, what="partition graph")
        graph = graph_pb2.GraphDef()
        try:
            text_format.Parse(data.decode("utf-8"), graph)
        except (text_format.ParseError, UnicodeDecodeError) as exc:
            raise TraceFormatError(path, f"not a GraphDef in protobuf text format ({' '.join(str(exc).split())[:160]})"
                                   ) from None
        if not graph.node:
            raise TraceFormatError(path, "is a GraphDef without nodes")
        nodes.extend(nodes_of_graphs([graph], path))
    return nodes


def read_tensor_table(path: str | os.PathLike) -> tuple[dict[str, int], dict[str, str]]:
    """``tensors.json``: ``{"format": "tfsim.tensors/1", "tensors": {"op:port": bytes},
    "op_variables": {"op": "variable"}}``; returns the sizes and the op-to-variable links."""
    path = Path(path)
    raw = read_input(path, limit=MAX_RECORD_BYTES, error=RunDirError, what="tensor table")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise RunDirError(path, f"not valid JSON ({' '.join(str(exc).split())[:120]})") from None
    if not isinstance(data, dict) or data.get("format") != TENSORS_FORMAT:
        raise RunDirError(path, f"is not a tensor table (format {TENSORS_FORMAT!r})")
    table = data.get("tensors")
    if not isinstance(table, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_TENSOR_BYTES for v in table.values()):
        raise RunDirError(path, f"tensors must map names to sizes in bytes from 0 to {MAX_TENSOR_BYTES}")
    links = data.get("op_variables", {})
    if not isinstance(links, dict) or not all(isinstance(v, str) for v in links.values()):
        raise RunDirError(path, "op_variables must map op names to variable names")
    return {str(k): v for k, v in table.items()}, {str(k): v for k, v in links.items()}


def _task_device(nodes: list[GraphNode], source: str, job: str, task: int) -> str | None:
    """The device of the partition graph that runs on task ``job:task`` (None: no graph runs there)."""
    for node in nodes:
        dev = parse_device(source, node.device)
        if (dev.job, dev.task) == (job, task):
            return node.device
    return None


def _transfer_size(send: GraphNode, sizes: dict[str, int], by_key: dict[tuple[str, str], GraphNode]) -> int | None:
    """The bytes a ``_Send`` carries: its data input's size in the tensor table (None: unknown).

    A cross-task control edge is partitioned into a ``Const`` with only control inputs (an empty
    float tensor) sent to the other task: 0 bytes, as TF1's control transfers (docs/model.md §1.5).
    """
    for raw in send.inputs:
        producer, control = split_input(raw)
        if control:
            continue
        port = raw.rpartition(":")[2] if ":" in raw and raw.rpartition(":")[2].isdigit() else "0"
        if f"{producer}:{port}" in sizes:
            return sizes[f"{producer}:{port}"]
        node = by_key.get((send.device, producer))
        if node is not None and node.op == "Const" and all(split_input(i)[1] for i in node.inputs) and node.inputs:
            return 0
        return None
    return None


@dataclasses.dataclass(frozen=True)
class PssSteps:
    """The traced steps of a tf2-pss run directory, in time order, and what they are built on.

    ``nodes``: the partition graphs' nodes. ``steps``: one :class:`StepRecords` per whole step
    (its ``source`` is ``<worker trace>#step_id=<id>``). ``partial``: steps left out, cut by the
    trace window. ``unsized``: tensors the tensor table does not size (counted as 0 bytes).
    ``op_variables``: the tensor table's links of ops to the variables they read or update.
    """

    source: str
    nodes: tuple[GraphNode, ...]
    steps: tuple[StepRecords, ...]
    partial: int
    unsized: tuple[str, ...]
    op_variables: Mapping[str, str]


def read_pss_steps(path: str | os.PathLike) -> PssSteps:
    """Read a tf2-pss run directory's graphs, tensor table and traces into its whole steps.

    Raises :class:`~tfbase.errors.RunDirError` for missing parts, :class:`~tfbase.errors.TraceFormatError`
    for unreadable traces or graphs, and :class:`~tfbase.errors.GraphError` when no traced step
    pairs every transfer of the graphs with its receive events.
    """
    path = Path(path)
    nodes = read_partition_graphs(path / "graphs")
    source = os.fspath(path / "graphs")
    sizes, links = read_tensor_table(path / "tensors.json")
    traces: dict[str, TaskTrace] = {}
    for trace_path in sorted((path / "trace").glob(TRACE_GLOB)):
        match = _TRACE_NAME.match(trace_path.name)
        if not match:
            raise RunDirError(trace_path, "is not named <task>.xplane.pb[.gz], e.g. worker0.xplane.pb.gz")
        device = _task_device(nodes, source, match["job"], int(match["task"]))
        if device is not None:
            traces[device] = task_trace(read_xspace(trace_path), trace_path)
    worker = next((d for d in traces if parse_device(source, d).is_worker), None)
    if worker is None:
        raise RunDirError(path / "trace", "holds no trace of the worker that the partition graphs run on")

    by_key = {(n.device, n.name): n for n in nodes}
    sends = {(n.tensor_name, n.send_device, n.recv_device): n for n in nodes
             if n.op in TRANSFER_OPS and n.op.endswith("Send") and not n.client_terminated}
    computation = {(n.device, n.name) for n in nodes if n.op not in TRANSFER_OPS or n.client_terminated}
    receives = []  # (recv device, recv node name, send device, send node name, key, size) of transfers between tasks
    unsized = []
    for (device, name), n in by_key.items():
        if n.op in TRANSFER_OPS and n.op.endswith("Recv") and not n.client_terminated:
            snd, rcv = parse_device(source, n.send_device), parse_device(source, n.recv_device)
            if (snd.job, snd.task) == (rcv.job, rcv.task):
                continue
            key = (n.tensor_name, n.send_device, n.recv_device)
            if n.recv_device not in traces:
                raise RunDirError(path / "trace", f"holds no trace of {n.recv_device}, which receives "
                                                  f"{n.tensor_name!r}")
            if key not in sends:
                raise GraphError(source, f"_Recv of tensor {n.tensor_name!r} ({n.send_device} -> {n.recv_device}) has "
                                         "no _Send in the partition graphs")
            size = _transfer_size(sends[key], sizes, by_key)
            if size is None:
                unsized.append(n.tensor_name)
            receives.append((device, name, sends[key].device, sends[key].name, key, size or 0))

    steps, partial = [], 0
    for step_id in sorted(traces[worker].step_ids):
        ops = {}
        for device, trace in traces.items():
            for (sid, name), timing in trace.ops.items():
                if sid == step_id and (device, name) in computation:
                    ops[(device, name)] = timing
        if not any(d == worker for d, _ in ops):
            continue  # a step of another function (an iterator's, a fetch's): not the training step
        transfers = []
        for device, name, send_device, send_name, key, size in receives:
            start = traces[device].recv_start.get((step_id, name))
            done = traces[device].recv_done.get((step_id, name))
            if start is None or done is None:
                break
            # The receiver asks early (the PS for gradients at the step's start); the tensor can leave only
            # once its _Send has run: the later of the two, as in a TF1 RecvTensor record (docs/model.md §1.5).
            sent = traces[send_device].ops.get((step_id, send_name)) if send_device in traces else None
            if sent is not None:
                start = min(max(start, sent[0]), done)
            transfers.append(TransferRecord(*key, size, start, done - start))
        if len(transfers) == len(receives):
            steps.append(StepRecords(f"{traces[worker].source}#step_id={step_id}", ops, transfers))
        else:
            partial += 1  # cut by the trace window: a receive's request or completion fell outside it
    if not steps:
        raise GraphError(path / "trace", f"no traced step of the training function has every receive of its "
                                         f"{len(receives)} transfers ({partial} partial step(s)): trace longer "
                                         "(--trace-ms) or check that the graphs and traces are of one run")
    steps.sort(key=lambda s: min(t for t, _ in s.ops.values()))
    return PssSteps(source, tuple(nodes), tuple(steps), partial, tuple(sorted(set(unsized))), links)


@dataclasses.dataclass(frozen=True)
class DispatchGap:
    """The measured time between a worker's consecutive steps: ``duration_s`` (the median of
    ``gaps`` gaps), and which steps it was taken over (``"untraced"`` or ``"measured"``)."""

    duration_s: float
    gaps: int
    steps: str


def dispatch_gap_s(step_times: Iterable[Mapping]) -> DispatchGap | None:
    """The median gap between a worker's consecutive measured steps: the next step's start
    (the worker's ``tf.timestamp()`` before the model) minus this step's end (after the
    updates), over every worker, from ``step_times.csv``'s rows (as
    :func:`tfprofile.rundir.open_run_dir` reads them). Pairs of untraced steps when the run has
    any (what the job does unobserved, as the one-worker correction takes it), else every pair
    of measured steps. None when no worker ran two consecutive measured steps.

    Examples
    --------
    >>> rows = [{"worker": 0, "step": k, "measured": True, "traced": False, "start_unix_s": 0.01 * k,
    ...          "wall_s": 0.004} for k in range(4)]
    >>> gap = dispatch_gap_s(rows)
    >>> round(gap.duration_s, 6), gap.gaps, gap.steps
    (0.006, 3, 'untraced')
    """
    by_worker: dict[int, list[Mapping]] = {}
    for row in step_times:
        if row["measured"]:
            by_worker.setdefault(int(row["worker"]), []).append(row)
    pairs = []
    for rows in by_worker.values():
        rows.sort(key=lambda r: r["step"])
        pairs.extend((a, b) for a, b in zip(rows, rows[1:]) if b["step"] == a["step"] + 1)
    untraced = [(a, b) for a, b in pairs if not a["traced"] and not b["traced"]]
    chosen, which = (untraced, "untraced") if untraced else (pairs, "measured")
    if not chosen:
        return None
    gaps = [max(0.0, b["start_unix_s"] - (a["start_unix_s"] + a["wall_s"])) for a, b in chosen]
    return DispatchGap(float(np.median(gaps)), len(gaps), which)


def with_dispatch_op(profile: Profile, duration_s: float) -> Profile:
    """``profile`` with :data:`DISPATCH_OP` as op 0, a WORKER op of ``duration_s`` in every
    step with a control edge to every op that had no predecessor: nothing of the step, on the
    worker or on a PS, starts before the coordinator has handed the step over. Each step's
    makespan grows by ``duration_s``; the op's recorded start is unknown (NaN)."""
    if not (np.isfinite(duration_s) and duration_s >= 0):
        raise ValueError(f"a dispatch time must be finite and non-negative, not {duration_s}")
    g = profile.graph
    roots = np.flatnonzero(g.in_degree == 0) + 1
    graph = OpGraph(
        name=np.concatenate([[DISPATCH_OP], g.name]), op_type=np.concatenate([[DISPATCH_OP], g.op_type]),
        resource=np.concatenate([[int(Resource.WORKER)], g.resource]), server=np.concatenate([[-1], g.server]),
        size_bytes=np.concatenate([[0], g.size_bytes]), variable=np.concatenate([[-1], g.variable]),
        data_ptr=np.concatenate([[0], g.data_ptr]), data_idx=g.data_idx + 1,
        ctrl_ptr=np.concatenate([[0], g.ctrl_ptr + len(roots)]), ctrl_idx=np.concatenate([roots, g.ctrl_idx + 1]))
    steps = profile.n_steps
    return dataclasses.replace(
        profile, graph=graph,
        duration_s=np.concatenate([np.full((steps, 1), duration_s), profile.duration_s], axis=1),
        start_s=np.concatenate([np.full((steps, 1), np.nan), profile.start_s], axis=1),
        step_makespan_s=profile.step_makespan_s + duration_s)


def profile_from_pss_run(
    path: str | os.PathLike,
    *,
    batch_size: int,
    variables=None,
    step_wall_s=(),
    meta: dict | None = None,
    step_times: Iterable[Mapping] = (),
) -> Profile:
    """Build the profile of a tf2-pss run directory's traced steps (see the module's docstring),
    with the coordinator's dispatch as op 0 when ``step_times`` (``step_times.csv``'s rows)
    give a gap between two consecutive steps (:func:`dispatch_gap_s`; ``meta`` records it as
    ``coordinator_dispatch``).

    Raises what :func:`read_pss_steps` raises.
    """
    path = Path(path)
    read = read_pss_steps(path)
    if read.unsized:
        warnings.warn(TraceWarning(path / "tensors.json", f"{len(read.unsized)} transfer(s) of unknown size, counted "
                                                         f"as 0 bytes, e.g. {read.unsized[0]!r}"), stacklevel=2)
    gap = dispatch_gap_s(step_times)
    meta = {**(meta or {}), "api": "tf2-pss", "partial_steps_left_out": read.partial,
            "unsized_transfers": list(read.unsized),
            "coordinator_dispatch": dataclasses.asdict(gap) if gap is not None else None}
    profile = build_profile(read.source, list(read.nodes), list(read.steps), batch_size=batch_size,
                            variables=variables, step_wall_s=step_wall_s, meta=meta, node_variables=read.op_variables)
    return with_dispatch_op(profile, gap.duration_s) if gap is not None else profile
