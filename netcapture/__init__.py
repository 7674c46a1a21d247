"""Decode tcpdump captures of TensorFlow's gRPC traffic into per-stream tensor records.

Layers, one module each: :mod:`~netcapture.pcap` (pcap/pcapng/gzip, streamed),
:mod:`~netcapture.layers` (link/IP/TCP headers), :mod:`~netcapture.tcp` (reassembly),
:mod:`~netcapture.http2` (frames, HPACK), :mod:`~netcapture.grpc` (messages, RecvTensor
protobuf), :mod:`~netcapture.streams` (the records), :mod:`~netcapture.iperf` (``iperf3 -J``).
The default backend's fast path reads pcap and pcapng through compiled kernels
(:mod:`~netcapture.pcapindex`, :mod:`~netcapture.pcapbatch`, :mod:`~netcapture.fastpath`) and
keeps large DATA payloads only where they are read (:mod:`~netcapture.sparse`).
Matching streams to a run's traced tensors joins a capture with a trace, so it lives above
both, in :mod:`calibration.runmatch`.

Entry points::

    from netcapture import read_capture
    capture = read_capture("capture.pcap.gz", server_ports={2222, 2223})
    for stream in capture.recv_tensor_streams():
        stream.tensor_name, stream.response_last_data_time_s, stream.response_frames
"""

from netcapture.backend import DirectionLoss
from netcapture.capture import BACKENDS, Capture, read_capture
from netcapture.errors import (
    CaptureError,
    CaptureWarning,
    CorruptTail,
    IperfError,
    MalformedCapture,
    MalformedFrame,
    NoHttp2Error,
    SnaplenError,
    TruncatedCapture,
    TsharkError,
)
from netcapture.grpc import GrpcMessage, RendezvousKey
from netcapture.http2 import Http2Frame
from netcapture.iperf import IperfResult, IperfSummary, read_iperf, summarise_iperf
from netcapture.streams import (
    ConnectionSummary,
    DataFrameEvent,
    FlowControlTimeline,
    PingEvent,
    SettingChange,
    StreamRecord,
    WindowSample,
    WindowUpdateEvent,
)
from netcapture.tcp import ConnectionId, Endpoint, TcpDirectionStats, TcpGap

__all__ = [
    "BACKENDS", "Capture", "CaptureError", "CaptureWarning", "ConnectionId", "ConnectionSummary", "CorruptTail",
    "DataFrameEvent", "DirectionLoss", "Endpoint", "FlowControlTimeline", "GrpcMessage", "Http2Frame", "IperfError",
    "IperfResult", "IperfSummary",
    "MalformedCapture", "MalformedFrame", "NoHttp2Error", "PingEvent", "RendezvousKey", "SettingChange",
    "SnaplenError", "StreamRecord", "TcpDirectionStats", "TcpGap", "TruncatedCapture", "TsharkError",
    "WindowSample", "WindowUpdateEvent", "read_capture", "read_iperf", "summarise_iperf",
]
