"""``read_capture``: a capture file in, every record calibration needs out.

>>> capture = read_capture("data/captures/tiny_lo/capture.pcap.gz")        # doctest: +SKIP
>>> [s.tensor_name for s in capture.recv_tensor_streams()][:2]              # doctest: +SKIP
['edge_8_tfsim_ready_DequeueMany', 'edge_6_tfsim_go_Dequeue']

Backends (same records from both; the tests hold them to frame-for-frame agreement):

- ``"scapy"`` (default): decodes in this process (:mod:`netcapture.scapy_backend`; classic
  pcap through compiled kernels, :mod:`netcapture.fastpath`).
- ``"tshark"``: Wireshark's dissectors do TCP reassembly, HTTP/2, HPACK, gRPC and the
  RecvTensor protobuf fields (:mod:`netcapture.tshark_backend`); needs ``tshark``. A
  connection the HTTP/2 dissector cannot decode whole (a lost segment, a start not
  captured or out of order, a 4-tuple reused with the same sequence numbers) is decoded
  from tshark's TCP payload by the default backend's decoder, with a warning.

pyshark is not offered: it drives tshark's PDML output packet by packet and took 8 s on a
2 MB capture and more than 10 minutes on 88 MB here, where the ``tshark`` backend reads the
fields output directly.

Bad input: a snaplen-cut capture raises :class:`~netcapture.errors.SnaplenError`
("capture with -s 0"); a capture with no decodable HTTP/2 connection raises
:class:`~netcapture.errors.NoHttp2Error`; a file cut short gives a
:class:`~netcapture.errors.CaptureWarning` with the number of packets read and
``Capture.truncated`` (``strict=True``: :class:`~netcapture.errors.TruncatedCapture`
instead); TCP gaps, kernel drops and HTTP/2 that is not gRPC give warnings and are kept in
``Capture.gaps`` and ``Capture.warnings``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from netcapture import scapy_backend, tshark_backend
from netcapture.backend import BackendResult, DirectionLoss
from netcapture.errors import CaptureWarning, NoHttp2Error, TruncatedCapture
from netcapture.http2 import Http2Frame
from netcapture.streams import (
    ConnectionSummary,
    FlowControlTimeline,
    StreamRecord,
    build_flow_control,
    build_streams,
    summarise_connections,
)
from netcapture.tcp import TcpDirectionStats, TcpGap
from tfbase.errors import UsageError

BACKENDS = ("scapy", "tshark")


@dataclasses.dataclass(frozen=True)
class Capture:
    """Everything decoded from one capture file.

    ``frames`` are all HTTP/2 frames in capture order; ``streams`` one record per HTTP/2
    stream; ``flow_control`` two timelines per connection (one per direction of data);
    ``connections`` a summary per HTTP/2 connection. ``tcp`` (reassembly statistics per
    direction) and ``gaps`` come from netcapture's reassembly: every connection of the scapy
    backend, the tshark backend's rerouted ones (tshark reassembles the others on its own);
    ``losses`` says per direction of each connection what a damaged capture cost
    (:class:`~netcapture.backend.DirectionLoss`); ``warnings`` lists every defect noticed,
    one line each.
    """

    path: str
    backend: str
    packets: int
    file_format: str
    truncated: bool
    kernel_drops: int | None
    connections: tuple[ConnectionSummary, ...]
    frames: tuple[Http2Frame, ...]
    streams: tuple[StreamRecord, ...]
    flow_control: tuple[FlowControlTimeline, ...]
    tcp: tuple[TcpDirectionStats, ...]
    gaps: tuple[TcpGap, ...]
    warnings: tuple[str, ...]
    losses: tuple[DirectionLoss, ...] = ()

    def recv_tensor_streams(self) -> tuple[StreamRecord, ...]:
        """The RecvTensor streams, in order of their request."""
        return tuple(s for s in self.streams if s.is_recv_tensor)

    def streams_by_tensor(self) -> dict[str, list[StreamRecord]]:
        """RecvTensor streams by tensor name (one per step that transferred the tensor)."""
        named: dict[str, list[StreamRecord]] = {}
        for stream in self.recv_tensor_streams():
            if stream.tensor_name is not None:
                named.setdefault(stream.tensor_name, []).append(stream)
        return named

    def flow_control_of(self, stream: StreamRecord, data_from_client: bool = False) -> FlowControlTimeline:
        """The flow-control timeline that limited ``stream``'s response (or request) data."""
        for timeline in self.flow_control:
            if timeline.connection == stream.connection and timeline.data_from_client == data_from_client:
                return timeline
        raise KeyError(stream.connection)


def read_capture(path: str | os.PathLike, backend: str = "scapy", *, server_ports: Iterable[int] | None = None,
                 strict: bool = False, require_http2: bool = True, stopped_mid_run: bool = False) -> Capture:
    """Decode the HTTP/2 (gRPC) traffic in the pcap/pcapng file ``path`` (gzip allowed).

    ``server_ports``: the servers' TCP ports (e.g. from a run's ``run.json`` cluster);
    ``None`` finds HTTP/2 connections by their connection preface. ``strict``: raise
    :class:`TruncatedCapture` for a file cut short instead of warning.
    ``require_http2``: raise :class:`NoHttp2Error` when nothing decodes (else return an
    empty capture). ``stopped_mid_run``: the capture was stopped while the job still sent (a
    collected run's capture stops where its traced steps end), so the frames it ends inside are
    expected and not warned about; they are in ``Capture.losses`` as ``unfinished_bytes``
    either way. Warnings are issued as :class:`CaptureWarning` and kept in
    ``Capture.warnings``.
    """
    path = Path(path)
    ports = None if server_ports is None else frozenset(int(p) for p in server_ports)
    if backend not in BACKENDS:
        raise UsageError("backend", f"must be one of {', '.join(BACKENDS)}, not {backend!r}")
    with collector_paused():
        if backend == "scapy":
            result = scapy_backend.decode(path, ports, strict=strict)
        else:
            result = tshark_backend.decode(path, ports, strict=strict)
        return assemble(result, require_http2=require_http2, stopped_mid_run=stopped_mid_run)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (as it was, after).

    Decoding makes a few Python objects per HTTP/2 frame and keeps them (the records), so the
    collector's passes walk ever more live objects and find nothing: they took up to a quarter
    of the time (wide_1gbit_smallwin). The only cycles decoding makes are its own
    per-connection state, freed once at the end (when the collector runs again), so memory
    does not grow with the collector off.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def assemble(result: BackendResult, require_http2: bool = True, stopped_mid_run: bool = False) -> Capture:
    """Build the :class:`Capture` records from a backend's frames (``stopped_mid_run`` as for
    :func:`read_capture`)."""
    if not result.frames and require_http2:
        others = f"{result.other_tcp_connections} TCP connection(s), none" if result.other_tcp_connections \
            else "no TCP connection with data; none"
        raise NoHttp2Error(result.path, f"no HTTP/2 traffic in {result.packets} packets ({others} opening with the "
                           "HTTP/2 connection preface): capture the gRPC ports from before the job starts, "
                           "on the interface the tasks use (lo for a single machine)")
    notes = list(result.warnings)
    if not stopped_mid_run:
        notes += [f"{loss.src} -> {loss.dst}: the capture ends inside an HTTP/2 frame ({loss.unfinished_bytes} "
                  "bytes of it captured)" for loss in result.losses if loss.unfinished_bytes]
    if result.kernel_drops:
        notes.append(f"the capture's statistics report {result.kernel_drops} packets dropped by the kernel "
                     "(capture with a larger buffer, e.g. tcpdump -B 262144)")
    streams = build_streams(result.frames, damaged=result.damaged_streams)
    if result.frames and not any(s.is_grpc or s.is_recv_tensor for s in streams):
        notes.append("the HTTP/2 streams carry no gRPC (no content-type application/grpc)")
    for note in notes:
        warnings.warn(CaptureWarning(result.path, note), stacklevel=3)
    return Capture(
        path=str(result.path), backend=result.backend, packets=result.packets, file_format=result.file_format,
        truncated=result.truncated, kernel_drops=result.kernel_drops,
        connections=summarise_connections(result.frames), frames=result.frames, streams=streams,
        flow_control=build_flow_control(result.frames), tcp=result.tcp, gaps=result.gaps, warnings=tuple(notes),
        losses=result.losses,
    )


__all__ = ["BACKENDS", "BackendResult", "Capture", "DirectionLoss", "TruncatedCapture", "assemble", "read_capture"]
