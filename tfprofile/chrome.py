"""Read Chrome trace JSON (TensorFlow's ``Timeline``) into a profile: the weaker format.

TensorFlow's ``timeline.Timeline(step_stats).generate_chrome_trace_format()`` (also what
``tf_cnn_benchmarks --trace_file`` and ``ProfilerHook`` write) keeps, for every executed
op, its device (process name ``"<device> Compute"``), start, duration, type and inputs
(``args.input0``, ...). It loses what a transfer is: ``RecvTensor`` events carry neither
the tensor nor its size, and no ``_Send``/``_Recv`` node appears. So this reader:

- rebuilds each partition graph from the op events and their inputs;
- treats an input that names no op of the consumer's device as a received tensor (TF 2.x
  names a ``_Recv`` after its tensor plus ``_S<n>``); its sender is the op of that name,
  without the suffix, on the other task. The transfer is named ``<sender>->_<recv>``;
- sizes a downlink by the variable its sender reads and an uplink by the variable its
  consumers update (from ``variables.json``), a transfer that only feeds control inputs
  (grappler's ``ctrl`` tokens) as 0 bytes, and any other as 0 bytes, counted in
  ``meta["chrome_unsized_transfers"]``;
- records no transfer timings (``start_s`` is NaN, ``duration_s`` 0): calibration and the
  multiplexing-model check need RunMetadata.

Prefer RunMetadata (``tfsim collect`` writes it) whenever you have it.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from tfbase.errors import GraphError, TraceFormatError
from tfbase.fileio import read_input
from tfprofile.build import GraphNode, StepRecords, TransferRecord, build_profile, parse_device, split_input
from tfprofile.dag import Profile, VariableTable
from tfprofile.runmetadata import MAX_TRACE_BYTES

_RECV_SUFFIX = re.compile(r"_S\d+$")
_APPLY_PREFIX = ("ResourceApply", "ApplyGradient", "Apply", "ResourceSparseApply", "SparseApply", "AssignSub",
                 "AssignAdd", "ResourceScatter")


def _load_events(path: Path) -> list[dict]:
    raw = read_input(path, limit=MAX_TRACE_BYTES, error=TraceFormatError, what="trace")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceFormatError(path, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise TraceFormatError(path, "not a Chrome trace (JSON nested too deeply)") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceFormatError(path, "not a Chrome trace: no traceEvents list")
    return events


def _hashable(pid: object) -> bool:
    """Whether ``pid`` can key the device table (a JSON list or object cannot)."""
    return isinstance(pid, (int, float, str)) or pid is None


def _parse_step(path: Path) -> tuple[dict[tuple[str, str], dict], list[tuple[str, int, int]]]:
    """Ops keyed by (device, name) with type, inputs and times (ns); RecvTensor events."""
    events = _load_events(path)
    devices: dict[object, str] = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name":
            args = e.get("args")
            label = str(args.get("name", "")) if isinstance(args, dict) else ""
            if label.endswith(" Compute") and _hashable(e.get("pid")):
                devices[e.get("pid")] = label[: -len(" Compute")]
    if not devices:
        raise TraceFormatError(path, "no '<device> Compute' process: not a TensorFlow timeline trace")
    ops: dict[tuple[str, str], dict] = {}
    recvs: list[tuple[str, int, int]] = []
    for k, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X" or not _hashable(e.get("pid")) or e.get("pid") not in devices:
            continue
        args = e.get("args")
        try:
            start_ns, dur_ns = round(float(e["ts"]) * 1000), round(float(e["dur"]) * 1000)
            name, op = str(args["name"]), str(args["op"])
        except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: an infinite ts or dur
            raise TraceFormatError(path, f"event {k} lacks ts, dur, args.name or args.op") from None
        if dur_ns < 0:
            raise TraceFormatError(path, f"event {k} has a negative duration")
        device = devices[e["pid"]]
        if name == "RecvTensor":
            recvs.append((device, start_ns, dur_ns))
            continue
        if name in ("_SOURCE", "_SINK"):
            continue
        inputs = []
        i = 0
        while f"input{i}" in args:
            inputs.append(str(args[f"input{i}"]))
            i += 1
        key = (device, name)
        if key in ops:  # the same op under a repeated device entry: merge the spans
            first = ops[key]
            end = max(first["start_ns"] + first["dur_ns"], start_ns + dur_ns)
            first["start_ns"] = min(first["start_ns"], start_ns)
            first["dur_ns"] = end - first["start_ns"]
        else:
            ops[key] = {"op": op, "inputs": tuple(inputs), "start_ns": start_ns, "dur_ns": dur_ns}
    if not ops:
        raise TraceFormatError(path, "no op events with args.name and args.op")
    return ops, recvs


def _task(device: str) -> str:
    return device.split("/device:")[0]


def _graph_from_ops(path: Path, ops: dict[tuple[str, str], dict],
                    variables: VariableTable) -> tuple[list[GraphNode], dict[str, int], int]:
    """Partition-graph nodes with synthesised _Send/_Recv pairs; transfer sizes; count unsized."""
    var_bytes = {str(n): int(b) for n, b in zip(variables.name, variables.size_bytes)}
    names_on: dict[str, set[str]] = defaultdict(set)
    for device, name in ops:
        names_on[device].add(name)
    consumers: dict[tuple[str, str], list[tuple[str, bool, str]]] = defaultdict(list)
    for (device, name), info in ops.items():
        for raw in info["inputs"]:
            producer, control = split_input(raw)
            consumers[(device, producer)].append((name, control, info["op"]))

    def only_control(device: str, name: str, depth: int = 0) -> bool:
        # The timeline drops the control inputs of Const ops, so an Identity of a control
        # token may appear to have no consumer at all: that counts as control too.
        return depth < 8 and all(
            control or (op == "Identity" and only_control(device, consumer, depth + 1))
            for consumer, control, op in consumers.get((device, name), []))

    nodes: list[GraphNode] = []
    sizes: dict[str, int] = {}
    unsized = 0
    synthesised: set[tuple[str, str]] = set()
    for (device, name), info in ops.items():
        for raw in info["inputs"]:
            producer, _ = split_input(raw)
            if producer in names_on[device] or (device, producer) in synthesised:
                continue
            sender_name = _RECV_SUFFIX.sub("", producer)
            senders = [d for d in names_on if _task(d) != _task(device) and sender_name in names_on[d]]
            if len(senders) != 1:
                raise GraphError(path, f"input {raw!r} of {name!r} on {device} names no op of its device, and no "
                                       f"single op {sender_name!r} on another task sends it")
            sender = senders[0]
            tensor = f"{sender_name}->{producer}"
            synthesised.add((device, producer))
            nodes.append(GraphNode(f"{producer}/_send", "_Send", sender, (sender_name,), tensor, sender, device))
            nodes.append(GraphNode(producer, "_Recv", device, (), tensor, sender, device))
            if only_control(device, producer):
                sizes[tensor] = 0
                continue
            sender_info = ops[(sender, sender_name)]
            if parse_device(os.fspath(path), sender).is_ps:  # a downlink: the variable its sender reads
                carried = {split_input(x)[0] for x in sender_info["inputs"][:1]}
            else:  # an uplink: the variable its consumers update
                carried = {ops[(device, c)]["inputs"][0] for c, control, op in consumers[(device, producer)]
                           if not control and op.startswith(_APPLY_PREFIX) and ops[(device, c)]["inputs"]}
            carried = {split_input(v)[0] for v in carried} & set(var_bytes)
            if len(carried) == 1:
                sizes[tensor] = var_bytes[carried.pop()]
            else:
                sizes[tensor] = 0
                unsized += 1
    for (device, name), info in ops.items():
        nodes.append(GraphNode(name, info["op"], device, info["inputs"]))
    return nodes, sizes, unsized


def profile_from_chrome_traces(paths: Sequence[str | os.PathLike], *, batch_size: int,
                               variables: VariableTable | None = None) -> Profile:
    """Build a profile from Chrome trace files, one per step, of one 1-worker run."""
    paths = [Path(p) for p in paths]
    variables = variables if variables is not None else VariableTable.empty()
    parsed = [_parse_step(p) for p in paths]
    first_ops = parsed[0][0]
    nodes, sizes, unsized = _graph_from_ops(paths[0], first_ops, variables)
    for device in {d for d, _ in first_ops}:
        parse_device(os.fspath(paths[0]), device)
    transfers_by_tensor = {n.tensor_name: n for n in nodes if n.op == "_Recv"}
    steps = []
    for path, (ops, recvs) in zip(paths, parsed):
        if set(ops) != set(first_ops):
            raise GraphError(path, f"its ops differ from those of {paths[0].name}: not the same graph")
        # The format does not say which RecvTensor event is which tensor: transfers get no timing.
        records = [TransferRecord(t, n.send_device, n.recv_device, sizes[t], None, 0)
                   for t, n in transfers_by_tensor.items()]
        step_ops = {k: (v["start_ns"], v["dur_ns"]) for k, v in ops.items()}
        # Unnamed RecvTensor events still bound the step's span.
        step_ops.update({(device, f"RecvTensor#{i}"): (start, dur) for i, (device, start, dur) in enumerate(recvs)})
        steps.append(StepRecords(os.fspath(path), step_ops, records))
    profile = build_profile(os.fspath(paths[0]), nodes, steps, batch_size=batch_size, variables=variables,
                            meta={"source": paths[0].name, "trace_files": [p.name for p in paths],
                                  "trace_format": "chrome", "chrome_unsized_transfers": unsized})
    return profile
