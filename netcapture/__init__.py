"""Decode tcpdump captures of TensorFlow's gRPC traffic into per-stream tensor records.

Layers, one module each: :mod:`~netcapture.pcap` (pcap/pcapng/gzip, streamed),
:mod:`~netcapture.layers` (link/IP/TCP headers), :mod:`~netcapture.tcp` (reassembly),
:mod:`~netcapture.http2` (frames, HPACK), :mod:`~netcapture.grpc` (messages, RecvTensor
protobuf), :mod:`~netcapture.streams` (the records), :mod:`~netcapture.runmatch`
(streams to a run's traced tensors), :mod:`~netcapture.iperf` (``iperf3 -J``).

Entry points::

    from netcapture import read_capture, match_run, run_server_ports
    capture = read_capture("capture.pcap.gz", server_ports=run_server_ports(run_dir))
    for m in match_run(capture, run_dir).matches:
        m.transfer.requested_bytes, m.stream.response_last_data_time_s, m.stream.response_frames
"""

from netcapture.capture import BACKENDS, Capture, read_capture
from netcapture.errors import (
    CaptureError, CaptureWarning, IperfError, MalformedCapture, MalformedFrame, MatchError, NoHttp2Error,
    SnaplenError, TruncatedCapture, TsharkError,
)
from netcapture.grpc import GrpcMessage, RendezvousKey
from netcapture.http2 import Http2Frame
from netcapture.iperf import IperfResult, IperfSummary, read_iperf, summarise_iperf
from netcapture.runmatch import (
    RunMatch, TensorMatch, TraceTransfer, match_run, read_trace_transfers, run_server_ports, run_tasks,
)
from netcapture.streams import (
    ConnectionSummary, DataFrameEvent, FlowControlTimeline, PingEvent, SettingChange, StreamRecord, WindowSample,
    WindowUpdateEvent,
)
from netcapture.tcp import ConnectionId, Endpoint, TcpDirectionStats, TcpGap

__all__ = [
    "BACKENDS", "Capture", "CaptureError", "CaptureWarning", "ConnectionId", "ConnectionSummary", "DataFrameEvent",
    "Endpoint", "FlowControlTimeline", "GrpcMessage", "Http2Frame", "IperfError", "IperfResult", "IperfSummary",
    "MalformedCapture", "MalformedFrame", "MatchError", "NoHttp2Error", "PingEvent", "RendezvousKey", "RunMatch",
    "SettingChange", "SnaplenError", "StreamRecord", "TcpDirectionStats", "TcpGap", "TensorMatch", "TraceTransfer",
    "TruncatedCapture", "TsharkError", "WindowSample", "WindowUpdateEvent", "match_run", "read_capture",
    "read_iperf", "read_trace_transfers", "run_server_ports", "run_tasks", "summarise_iperf",
]
