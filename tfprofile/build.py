"""Build a :class:`~tfprofile.dag.Profile` from traced steps (docs/model.md §1.3).

The input is neutral: partition graphs as :class:`GraphNode` lists and per-step
:class:`StepRecords`, which both the RunMetadata reader and the Chrome-trace reader
produce. The rules:

- An op on a ``/job:ps`` device is PS computation (server = its task index); an op on a
  ``/job:worker`` (or ``/job:chief``) device is WORKER computation.
- A ``_Send``/``_Recv`` pair with the same ``tensor_name``, ``send_device`` and
  ``recv_device`` on different tasks becomes one transfer op: DOWNLINK from a PS to the
  worker, UPLINK from the worker to a PS. Its predecessors are the ``_Send``'s inputs and
  the ``_Recv``'s control inputs; its successors are the ``_Recv``'s consumers. Its size
  and recorded times come from the receiver's ``RecvTensor`` record of that tensor.
- A pair within one task, or a client-terminated send or receive (feeds and fetches), is
  a computation op of that task with the time recorded for it (usually none).
- Data inputs (``x``, ``x:1``) and control inputs (``^x``) give data and control edges.
- An op listed in the graph but not in a step's stats takes duration 0 in that step. It is
  kept: dropping it could change the dependencies, and merging it into a neighbour could
  change which op waits behind which in a queue (see the README, "Why it is fast").
- The ops are numbered in a topological order: Kahn's algorithm that always emits the
  ready op seen first in the partition graphs, so the numbering is deterministic.
"""

from __future__ import annotations

import dataclasses
import heapq
import re
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tfbase.errors import GraphError, TraceWarning
from tfprofile.dag import MAX_SERVERS, OpGraph, Profile, Resource, VariableTable, csr_from_edges

TRANSFER_OPS = {"_Send", "_Recv", "_HostSend", "_HostRecv"}
VARIABLE_OPS = {"VarHandleOp", "VariableV2", "Variable"}
_DEVICE_RE = re.compile(r"^/job:(?P<job>[^/]+)/replica:(?P<replica>\d+)/task:(?P<task>\d+)(?:/device:(?P<dev>.+))?$")


@dataclasses.dataclass(frozen=True)
class GraphNode:
    """One node of a partition graph, as much of a ``NodeDef`` as the DAG needs."""

    name: str
    op: str
    device: str
    inputs: tuple[str, ...]
    tensor_name: str = ""
    send_device: str = ""
    recv_device: str = ""
    client_terminated: bool = False


@dataclasses.dataclass(frozen=True)
class TransferRecord:
    """A receiver's RecvTensor record: which tensor, how big, when (ns, absolute).

    ``start_ns`` is ``None`` when the trace format does not tell (Chrome traces).
    """

    tensor_name: str
    send_device: str
    recv_device: str
    size_bytes: int
    start_ns: int | None
    duration_ns: int


@dataclasses.dataclass
class StepRecords:
    """What one traced step recorded: op timings keyed by (device, node name), and transfers."""

    source: str
    ops: dict[tuple[str, str], tuple[int, int]]  # (device, name) -> (start_ns, duration_ns)
    transfers: list[TransferRecord]


@dataclasses.dataclass(frozen=True)
class Device:
    job: str
    task: int

    @property
    def is_ps(self) -> bool:
        return self.job == "ps"

    @property
    def is_worker(self) -> bool:
        return self.job in ("worker", "chief")


def parse_device(source: str, device: str) -> Device:
    match = _DEVICE_RE.match(device)
    if not match:
        raise GraphError(source, f"device {device!r} is not of the form /job:J/replica:R/task:T/device:D")
    job = match["job"]
    if job not in ("ps", "worker", "chief"):
        raise GraphError(source, f"device {device!r} belongs to job {job!r}; a profile needs jobs ps and worker")
    return Device(job, int(match["task"]))


def split_input(name: str) -> tuple[str, bool]:
    """``"x:1" -> ("x", False)``, ``"^x" -> ("x", True)``: producer node name and whether it is a control input."""
    if name.startswith("^"):
        return name[1:], True
    producer, _, port = name.rpartition(":")
    if producer and port.isdigit():
        return producer, False
    return name, False


class _Builder:
    def __init__(self, source: str, nodes: Sequence[GraphNode]):
        self.source = source
        self.names: list[str] = []
        self.types: list[str] = []
        self.resources: list[int] = []
        self.servers: list[int] = []
        self.keys: list[tuple] = []  # ("op", device, name) or ("transfer", tensor, send, recv)
        self.edges: list[tuple[int, int, bool]] = []
        self._build(nodes)

    def _add(self, name: str, op_type: str, resource: Resource, server: int, key: tuple) -> int:
        self.names.append(name)
        self.types.append(op_type)
        self.resources.append(int(resource))
        self.servers.append(server)
        self.keys.append(key)
        return len(self.names) - 1

    def _compute_resource(self, device: str) -> tuple[Resource, int]:
        dev = parse_device(self.source, device)
        return (Resource.PS, dev.task) if dev.is_ps else (Resource.WORKER, -1)

    def _build(self, nodes: Sequence[GraphNode]) -> None:
        source = self.source
        devices = {parse_device(source, n.device) for n in nodes}
        workers = {d for d in devices if d.is_worker}
        if len(workers) > 1:
            raise GraphError(source, f"the trace holds {len(workers)} worker tasks; a profile comes from a "
                                     "1-worker run")
        by_key: dict[tuple[str, str], GraphNode] = {}
        for n in nodes:
            if (n.device, n.name) in by_key:
                raise GraphError(source, f"node {n.name!r} appears twice on {n.device}")
            by_key[(n.device, n.name)] = n

        sends: dict[tuple[str, str, str], GraphNode] = {}
        recvs: dict[tuple[str, str, str], GraphNode] = {}
        node_op: dict[tuple[str, str], int] = {}  # (device, name) -> op index (sends and recvs map to their transfer)
        for n in nodes:
            if n.op in TRANSFER_OPS and not n.client_terminated:
                key = (n.tensor_name, n.send_device, n.recv_device)
                table = sends if n.op.endswith("Send") else recvs
                if key in table:
                    raise GraphError(source, f"two {n.op} nodes carry tensor {n.tensor_name!r}")
                table[key] = n
        for key in sorted(set(sends) ^ set(recvs)):
            side = "_Send" if key in sends else "_Recv"
            raise GraphError(source, f"{side} of tensor {key[0]!r} ({key[1]} -> {key[2]}) has no partner in the "
                                     "partition graphs")

        for n in nodes:
            if n.op in TRANSFER_OPS and not n.client_terminated:
                if n.op.endswith("Recv"):
                    continue  # the pair is added once, at its send
                key = (n.tensor_name, n.send_device, n.recv_device)
                recv = recvs[key]
                snd, rcv = parse_device(source, n.send_device), parse_device(source, n.recv_device)
                if (snd.job, snd.task) == (rcv.job, rcv.task):
                    resource, server = self._compute_resource(n.recv_device)
                    index = self._add(n.tensor_name, "LocalTransfer", resource, server, ("op", recv.device, recv.name))
                elif snd.is_ps and rcv.is_worker:
                    index = self._add(n.tensor_name, "Transfer", Resource.DOWNLINK, snd.task, ("transfer", *key))
                elif snd.is_worker and rcv.is_ps:
                    index = self._add(n.tensor_name, "Transfer", Resource.UPLINK, rcv.task, ("transfer", *key))
                else:
                    raise GraphError(source, f"tensor {n.tensor_name!r} goes from {n.send_device} to "
                                             f"{n.recv_device}; only PS<->worker transfers are modelled")
                node_op[(n.device, n.name)] = index
                node_op[(recv.device, recv.name)] = index
            else:
                resource, server = self._compute_resource(n.device)
                node_op[(n.device, n.name)] = self._add(n.name, n.op, resource, server, ("op", n.device, n.name))

        for n in nodes:
            consumer = node_op[(n.device, n.name)]
            for raw in n.inputs:
                producer_name, control = split_input(raw)
                producer = node_op.get((n.device, producer_name))
                if producer is None:
                    raise GraphError(source, f"node {n.name!r} on {n.device} has input {raw!r}, which is not a node "
                                             "of its partition graph")
                if producer != consumer:
                    self.edges.append((producer, consumer, control))

    def topological_order(self) -> np.ndarray:
        n = len(self.names)
        succ: list[list[int]] = [[] for _ in range(n)]
        indegree = [0] * n
        for a, b, _ in set(self.edges):
            succ[a].append(b)
            indegree[b] += 1
        ready = [i for i in range(n) if indegree[i] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for j in succ[i]:
                indegree[j] -= 1
                if indegree[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) < n:
            stuck = [self.names[i] for i in range(n) if indegree[i] > 0][:3]
            raise GraphError(self.source, f"the step graph has a cycle through {len(stuck)}+ ops, e.g. "
                                          f"{', '.join(repr(s) for s in stuck)}")
        return np.array(order, dtype=np.int64)


def _variable_of_ops(builder: _Builder, nodes: Sequence[GraphNode], perm_inverse: np.ndarray,
                     variables: VariableTable, node_variables: Mapping[str, str] | None = None) -> np.ndarray:
    """Index of the variable each op reads, updates or carries, or -1.

    A PS op with a variable node among its data inputs reads or updates that variable; so does
    a PS op that ``node_variables`` (node name -> variable name) links to one, for graphs whose
    variables come in as function arguments (TF2). A downlink carries the variable its PS-side
    producers read, an uplink the variable its PS-side consumers update, when that variable is
    unique.
    """
    node_variables = node_variables or {}
    var_index = {str(name): i for i, name in enumerate(variables.name)}
    n = len(builder.names)
    result = np.full(n, -1, dtype=np.int32)
    var_nodes = {(nd.device, nd.name) for nd in nodes if nd.op in VARIABLE_OPS}
    by_key = {(nd.device, nd.name): nd for nd in nodes}
    for k, key in enumerate(builder.keys):
        if key[0] == "op" and builder.resources[k] == Resource.PS:
            nd = by_key[(key[1], key[2])]
            if nd.op in VARIABLE_OPS:
                result[k] = var_index.get(nd.name, -1)
                continue
            if nd.name in node_variables:
                result[k] = var_index.get(node_variables[nd.name], -1)
                continue
            for raw in nd.inputs:
                producer, control = split_input(raw)
                if not control and (nd.device, producer) in var_nodes:
                    result[k] = var_index.get(producer, -1)
                    break
    neighbours: dict[int, set[int]] = defaultdict(set)
    for a, b, _ in builder.edges:
        if builder.keys[a][0] == "transfer" and builder.resources[a] == Resource.UPLINK:
            neighbours[a].add(b)
        if builder.keys[b][0] == "transfer" and builder.resources[b] == Resource.DOWNLINK:
            neighbours[b].add(a)
    for k, adjacent in neighbours.items():
        carried = {int(result[m]) for m in adjacent if builder.resources[m] == Resource.PS} - {-1}
        if len(carried) == 1:  # a tensor feeding several variables' updates (a learning rate) carries none
            result[k] = carried.pop()
    return result[perm_inverse]


def build_profile(
    source: str,
    nodes: Sequence[GraphNode],
    steps: Sequence[StepRecords],
    *,
    batch_size: int,
    variables: VariableTable | None = None,
    step_wall_s: Iterable[float] = (),
    meta: dict | None = None,
    node_variables: Mapping[str, str] | None = None,
) -> Profile:
    """Turn partition-graph nodes and per-step records into a :class:`Profile`.

    ``node_variables`` links nodes to the variables they read or update by name, where the graph
    has no variable nodes (see :func:`_variable_of_ops`).

    ``source`` names the input for error messages. Raises :class:`~tfbase.errors.GraphError`
    when the records do not fit the graph: a transfer without its RecvTensor record in a
    step, a record naming a transfer the graph does not have, or a cycle.
    """
    if not steps:
        raise GraphError(source, "no traced steps")
    variables = variables if variables is not None else VariableTable.empty()
    builder = _Builder(source, nodes)
    order = builder.topological_order()
    n = len(order)

    transfer_ops = {key[1:]: k for k, key in enumerate(builder.keys) if key[0] == "transfer"}
    op_keys = {key[1:]: k for k, key in enumerate(builder.keys) if key[0] == "op"}
    sizes = np.zeros(n, dtype=np.int64)
    size_known = np.zeros(n, dtype=bool)
    durations, starts, makespans, sources, dropped = [], [], [], [], []
    first_unpaired = None
    for step in steps:
        timed = [t for t in step.transfers if t.start_ns is not None]
        all_starts = [start for start, _ in step.ops.values()] + [t.start_ns for t in timed]
        all_ends = [start + d for start, d in step.ops.values()] + [t.start_ns + t.duration_ns for t in timed]
        if not all_starts:
            raise GraphError(step.source, "the step has no timing records")
        t0 = min(all_starts)
        duration = np.zeros(n)
        start = np.full(n, np.nan)
        for (device, name), (op_start, op_duration) in step.ops.items():
            k = op_keys.get((device, name))
            if k is not None:
                duration[k] = op_duration * 1e-9
                start[k] = (op_start - t0) * 1e-9
        seen = set()
        for rec in step.transfers:
            key = (rec.tensor_name, rec.send_device, rec.recv_device)
            k = transfer_ops.get(key)
            if k is None:
                if key not in op_keys:
                    raise GraphError(step.source, f"RecvTensor record of {rec.tensor_name!r} ({rec.send_device} -> "
                                                  f"{rec.recv_device}) matches no _Recv in the partition graphs: "
                                                  "are the trace and the graphs from the same run?")
                continue
            if k in seen:
                raise GraphError(step.source, f"two RecvTensor records of {rec.tensor_name!r} in one step")
            seen.add(k)
            if rec.start_ns is not None:
                duration[k] = rec.duration_ns * 1e-9
                start[k] = (rec.start_ns - t0) * 1e-9
            if not size_known[k]:
                sizes[k], size_known[k] = rec.size_bytes, True
        missing = set(transfer_ops.values()) - seen
        if missing:
            # TensorFlow now and then loses a device's RecvTensor records of a step: that step
            # cannot be used, but the others can.
            reason = (f"{len(missing)} transfer(s) have no RecvTensor record in this step, e.g. "
                      f"{builder.names[min(missing)]!r}")
            dropped.append({"source": step.source, "reason": reason})
            first_unpaired = first_unpaired or (step.source, reason)
            continue
        durations.append(duration)
        starts.append(start)
        makespans.append((max(all_ends) - t0) * 1e-9)
        sources.append(step.source)
    if not durations:
        raise GraphError(first_unpaired[0], f"{first_unpaired[1]}; no step pairs every transfer with its record: "
                                            "the trace and the partition graphs do not pair")
    for item in dropped:
        warnings.warn(TraceWarning(item["source"], f"step skipped: {item['reason']}"), stacklevel=2)
    durations, starts, makespans = np.array(durations), np.array(starts), np.array(makespans)
    if builder.servers and max(builder.servers) >= MAX_SERVERS:
        raise GraphError(source, f"an op runs on parameter server {max(builder.servers)}: at most {MAX_SERVERS}")
    try:
        return _assemble(builder, nodes, order, sizes, durations, starts, makespans, step_wall_s, batch_size,
                         variables, meta, dropped, node_variables)
    except (ValueError, TypeError, OverflowError) as exc:  # values a profile cannot hold (sizes, durations)
        raise GraphError(source, f"the trace holds values a profile cannot: {' '.join(str(exc).split())[:200]}"
                         ) from None


def _assemble(builder, nodes, order, sizes, durations, starts, makespans, step_wall_s, batch_size, variables, meta,
              dropped, node_variables=None) -> Profile:
    n = len(order)
    new_index = np.empty(n, dtype=np.int64)
    new_index[order] = np.arange(n)
    edges = np.array(sorted(set(builder.edges)), dtype=np.int64).reshape(-1, 3)
    src, dst, ctrl = new_index[edges[:, 0]], new_index[edges[:, 1]], edges[:, 2].astype(bool)
    # An edge present as both data and control is a data edge.
    data_pairs = set(zip(src[~ctrl].tolist(), dst[~ctrl].tolist()))
    ctrl_keep = np.array([(a, b) not in data_pairs for a, b in zip(src[ctrl].tolist(), dst[ctrl].tolist())], bool)
    data_ptr, data_idx = csr_from_edges(n, src[~ctrl], dst[~ctrl])
    ctrl_ptr, ctrl_idx = csr_from_edges(n, src[ctrl][ctrl_keep], dst[ctrl][ctrl_keep])
    graph = OpGraph(
        name=np.array(builder.names)[order],
        op_type=np.array(builder.types)[order],
        resource=np.array(builder.resources, dtype=np.int8)[order],
        server=np.array(builder.servers, dtype=np.int16)[order],
        size_bytes=sizes[order],
        variable=_variable_of_ops(builder, nodes, order, variables, node_variables),
        data_ptr=data_ptr, data_idx=data_idx, ctrl_ptr=ctrl_ptr, ctrl_idx=ctrl_idx,
    )
    return Profile(
        graph=graph,
        duration_s=durations[:, order],
        start_s=starts[:, order],
        step_makespan_s=makespans,
        step_wall_s=np.array(list(step_wall_s), dtype=np.float64),
        batch_size=batch_size,
        variables=variables,
        meta={**(meta or {}), "dropped_steps": dropped},
    )
