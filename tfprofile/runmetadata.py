"""Read TensorFlow ``RunMetadata`` files (binary or text protobuf, optionally gzip'd).

The protobuf definitions come from the ``tensorboard`` package, so reading traces does not
need TensorFlow. Only ``step_stats`` and ``partition_graphs`` are used.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tfbase.errors import TraceFormatError
from tfbase.fileio import read_input
from tfprofile.build import GraphNode, StepRecords, TransferRecord

GZIP_MAGIC = b"\x1f\x8b"


MAX_TRACE_BYTES = 256 * 2**20  # one trace file, decompressed


_TEXT_START = re.compile(rb"\A\s*(#|(step_stats|cost_graph|partition_graphs|function_graphs|session_metadata)\s*[{:])")


def _looks_like_text(data: bytes) -> bool:
    """Text format starts with a RunMetadata field name; binary starts with a tag byte."""
    return _TEXT_START.match(data[:256]) is not None


def read_run_metadata(path: str | os.PathLike):
    """Parse one RunMetadata file; return the ``config_pb2.RunMetadata`` message.

    Accepts binary protobuf (``.pb``), text format (``.pbtxt``), each optionally gzip'd.
    Raises :class:`~tfbase.errors.TraceFormatError` for a file that is not a traced
    RunMetadata: unreadable, truncated, of another message type, or without step stats.
    """
    from google.protobuf import message, text_format
    from tensorboard.compat.proto import config_pb2

    path = Path(path)
    data = read_input(path, limit=MAX_TRACE_BYTES, error=TraceFormatError, what="trace")
    metadata = config_pb2.RunMetadata()
    if _looks_like_text(data):
        try:
            text_format.Parse(data.decode("utf-8"), metadata)
        except (text_format.ParseError, UnicodeDecodeError) as exc:
            raise TraceFormatError(path, f"not a RunMetadata in protobuf text format ({exc})") from None
    else:
        try:
            metadata.ParseFromString(data)
        except message.DecodeError as exc:
            raise TraceFormatError(path, f"not a RunMetadata protobuf: truncated or corrupt ({exc})") from None
    if not metadata.step_stats.dev_stats:
        raise TraceFormatError(path, "has no step_stats: not a RunMetadata of a step run with FULL_TRACE")
    if metadata.ByteSize() == 0 or not any(d.node_stats for d in metadata.step_stats.dev_stats):
        raise TraceFormatError(path, "has no node stats: not a traced RunMetadata")
    return metadata


# "[4.0MB] [4.4Gb/s] edge_33_MatMul/ReadVariableOp from /job:ps/... to /job:worker/..."
_RECV_LABEL = re.compile(r"^(?:\[[^\]]*\]\s*)*(?P<tensor>\S+) from (?P<send>\S+) to (?P<recv>\S+)\s*$")


def graph_nodes(metadata, source: str | os.PathLike) -> list[GraphNode]:
    """The nodes of all partition graphs of ``metadata``, in file order."""
    if not metadata.partition_graphs:
        raise TraceFormatError(source, "has no partition_graphs: trace with output_partition_graphs=True")
    return nodes_of_graphs(metadata.partition_graphs, source)


def nodes_of_graphs(graphs, source: str | os.PathLike) -> list[GraphNode]:
    """The nodes of ``GraphDef`` messages (partition graphs), in order."""
    nodes = []
    for graph in graphs:
        for node in graph.node:
            attr = node.attr

            def text(key: str, node=node, attr=attr) -> str:
                if key not in attr:
                    return ""
                try:
                    return attr[key].s.decode("utf-8")
                except UnicodeDecodeError:
                    raise TraceFormatError(source, f"node {node.name[:80]!r}: its {key} is not UTF-8 text") from None

            nodes.append(GraphNode(
                name=node.name, op=node.op, device=node.device, inputs=tuple(node.input),
                tensor_name=text("tensor_name"), send_device=text("send_device"), recv_device=text("recv_device"),
                client_terminated=bool(attr["client_terminated"].b) if "client_terminated" in attr else False,
            ))
    return nodes


def _times_ns(stats) -> tuple[int, int]:
    if stats.all_start_nanos:
        return stats.all_start_nanos, stats.all_end_rel_nanos
    return stats.all_start_micros * 1000, stats.all_end_rel_micros * 1000


def step_records(metadata, source: str | os.PathLike) -> StepRecords:
    """Op timings and RecvTensor records of one traced step.

    ``dev_stats`` repeats device names (one entry for transfers, one for ops): entries are
    merged by device. An op listed twice keeps its earliest start and latest end.
    """
    ops: dict[tuple[str, str], tuple[int, int]] = {}
    transfers = []
    for dev in metadata.step_stats.dev_stats:
        for stats in dev.node_stats:
            start, duration = _times_ns(stats)
            if stats.node_name == "RecvTensor":
                match = _RECV_LABEL.match(stats.timeline_label)
                if not match:
                    raise TraceFormatError(source, f"RecvTensor record on {dev.device} has an unreadable label "
                                                   f"{stats.timeline_label[:80]!r}")
                size = 0
                if stats.output:
                    size = stats.output[0].tensor_description.allocation_description.requested_bytes
                transfers.append(TransferRecord(match["tensor"], match["send"], match["recv"], size, start, duration))
            elif stats.node_name not in ("_SOURCE", "_SINK"):
                key = (dev.device, stats.node_name)
                if key in ops:
                    s0, d0 = ops[key]
                    end = max(s0 + d0, start + duration)
                    start = min(s0, start)
                    duration = end - start
                ops[key] = (start, duration)
    return StepRecords(os.fspath(source), ops, transfers)
