"""The records calibration needs, built from a capture's HTTP/2 frames.

Both backends deliver the same list of :class:`~netcapture.http2.Http2Frame` (in capture
order: packet number, then position in the packet); :func:`build_streams`,
:func:`build_flow_control` and :func:`summarise_connections` turn it into:

- :class:`StreamRecord`: one per HTTP/2 stream: the RPC, for ``RecvTensor`` the
  rendezvous key and tensor name, the request and response times, byte counts and the
  DATA frame timeline of each direction;
- :class:`FlowControlTimeline`: one per connection and direction of data: the receiver's
  SETTINGS (INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE) with their times, its WINDOW_UPDATEs,
  the PINGs (gRPC's BDP probes), and the sender's connection and stream windows after
  every change, as seen at the capture point.

Times are seconds since the epoch (floats from the exact nanosecond capture times), the
same clock as a TensorFlow trace taken on the capturing host. A frame's time is that of
the packet that completed it; "first" and "last" DATA frames are first and last in byte
order. Capture times are not always monotonic along a direction (see :mod:`netcapture.tcp`),
so the last DATA frame is not always the one with the latest timestamp: the frame timeline
has every frame's time for a caller who wants the maximum.

Window rules (RFC 9113 §6.9): a sender's connection window starts at 65,535 bytes and
only WINDOW_UPDATEs on stream 0 raise it; a stream window starts at the receiver's
INITIAL_WINDOW_SIZE in force when the stream appears, and a later change of that setting
moves every open stream window by the difference. DATA frames count with their full
payload length, padding included. A SETTINGS frame is applied when it is captured, not
when the peer acknowledges it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Iterable

from netcapture.grpc import RECV_TENSOR_PATH, RendezvousKey
from netcapture.http2 import (
    CONTINUATION,
    DATA,
    DECODED_TYPES,
    DEFAULT_INITIAL_WINDOW_BYTES,
    DEFAULT_MAX_FRAME_BYTES,
    FLAG_ACK,
    FLAG_END_STREAM,
    FRAME_TYPE_NAMES,
    HEADERS,
    PING,
    RST_STREAM,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_FRAME_SIZE,
    SETTINGS_NAMES,
    WINDOW_UPDATE,
    Http2Frame,
)
from netcapture.records import positional_maker
from netcapture.tcp import ConnectionId, Endpoint


@dataclasses.dataclass(frozen=True, slots=True)
class DataFrameEvent:
    """One DATA frame of a stream: the frame timeline calibration replays."""

    time_s: float
    packet_number: int
    length_bytes: int
    end_stream: bool


@dataclasses.dataclass(frozen=True)
class StreamRecord:
    """One HTTP/2 stream (one RPC).

    The client sent the request (HEADERS, then DATA); the server answers (HEADERS, DATA,
    trailers). For ``RecvTensor`` the tensor travels in the response, so
    ``tensor_direction`` is ``"server_to_client"``: the server is the tensor's sender.

    Times are ``None`` when the capture holds no such frame. ``*_data_bytes`` count DATA
    payload bytes (gRPC prefixes included, padding not); ``*_message_bytes`` the gRPC
    message bodies. ``tensor_content_bytes`` is the raw tensor size read from the
    RecvTensor response, which equals the trace's ``requested_bytes``.
    """

    connection: ConnectionId
    stream_id: int
    rpc_path: str | None
    content_type: str | None
    rendezvous_key: str | None
    tensor_name: str | None
    step_id: int | None
    src_device: str | None
    dst_device: str | None
    request_headers_time_s: float | None
    request_end_time_s: float | None
    response_headers_time_s: float | None
    response_first_data_time_s: float | None
    response_last_data_time_s: float | None
    response_end_time_s: float | None
    request_data_bytes: int
    response_data_bytes: int
    request_message_bytes: int
    response_message_bytes: int
    request_messages: int
    response_messages: int
    tensor_content_bytes: int | None
    grpc_status: int | None
    reset_error_code: int | None
    request_frames: tuple[DataFrameEvent, ...]
    response_frames: tuple[DataFrameEvent, ...]
    damaged: bool = False  # the capture lost some of its frames' bytes, or the HEADERS before its DATA

    @property
    def is_grpc(self) -> bool:
        """The stream carries gRPC (its content-type is application/grpc...)."""
        return bool(self.content_type and self.content_type.startswith("application/grpc"))

    @property
    def is_recv_tensor(self) -> bool:
        """The stream is a TensorFlow RecvTensor call (a tensor sent by the server)."""
        return self.rpc_path == RECV_TENSOR_PATH

    @property
    def tensor_direction(self) -> str | None:
        """Which way the tensor went: ``"server_to_client"`` for RecvTensor, else None."""
        return "server_to_client" if self.is_recv_tensor else None

    @property
    def client(self) -> Endpoint:
        return self.connection.client

    @property
    def server(self) -> Endpoint:
        return self.connection.server

    @property
    def complete(self) -> bool:
        """Request and response both ended inside the capture."""
        return self.request_end_time_s is not None and self.response_end_time_s is not None


@dataclasses.dataclass(frozen=True)
class SettingChange:
    """One SETTINGS parameter sent by a peer (not an ACK)."""

    time_s: float
    packet_number: int
    setting_id: int
    value: int

    @property
    def name(self) -> str:
        return SETTINGS_NAMES.get(self.setting_id, f"0x{self.setting_id:x}")


@dataclasses.dataclass(frozen=True, slots=True)
class WindowUpdateEvent:
    """A WINDOW_UPDATE from the receiver: stream 0 is the connection window."""

    time_s: float
    packet_number: int
    stream_id: int
    increment_bytes: int


@dataclasses.dataclass(frozen=True)
class PingEvent:
    """A PING or its ACK; gRPC's BDP probe is a PING from the data's receiver."""

    time_s: float
    packet_number: int
    from_receiver: bool
    ack: bool
    opaque: str


@dataclasses.dataclass(frozen=True, slots=True)
class WindowSample:
    """The sender's window after one event: stream 0 is the connection window.

    ``cause`` is ``"open"`` (a stream appears), ``"data"``, ``"window_update"`` or
    ``"settings"``. The window can go negative after a SETTINGS decrease.
    """

    time_s: float
    packet_number: int
    stream_id: int
    window_bytes: int
    cause: str


@dataclasses.dataclass(frozen=True)
class FlowControlTimeline:
    """Flow control of the data one side of a connection sends.

    ``data_from_client`` tells which side sends the data these windows limit; the other
    side (the receiver) sets them. For RecvTensor the tensors flow server to client, so
    the timeline with ``data_from_client=False`` is the one of the tensors.
    """

    connection: ConnectionId
    data_from_client: bool
    receiver_settings: tuple[SettingChange, ...]
    sender_settings_acks_s: tuple[float, ...]
    window_updates: tuple[WindowUpdateEvent, ...]
    pings: tuple[PingEvent, ...]
    connection_window: tuple[WindowSample, ...]
    stream_windows: tuple[WindowSample, ...]
    data_frames: int
    data_bytes: int

    @property
    def sender(self) -> Endpoint:
        return self.connection.client if self.data_from_client else self.connection.server

    @property
    def receiver(self) -> Endpoint:
        return self.connection.server if self.data_from_client else self.connection.client

    def setting_timeline(self, setting_id: int) -> tuple[tuple[float, int], ...]:
        """``(time_s, value)`` of every value the receiver sent for ``setting_id``."""
        return tuple((s.time_s, s.value) for s in self.receiver_settings if s.setting_id == setting_id)

    @property
    def initial_window_timeline(self) -> tuple[tuple[float, int], ...]:
        """(time, value) of every SETTINGS_INITIAL_WINDOW_SIZE the receiver announced."""
        return self.setting_timeline(SETTINGS_INITIAL_WINDOW_SIZE)

    @property
    def max_frame_timeline(self) -> tuple[tuple[float, int], ...]:
        """(time, value) of every SETTINGS_MAX_FRAME_SIZE the receiver announced."""
        return self.setting_timeline(SETTINGS_MAX_FRAME_SIZE)

    def initial_window_at(self, time_s: float) -> int:
        """The receiver's INITIAL_WINDOW_SIZE in force at ``time_s`` (by capture time)."""
        return _value_at(self.initial_window_timeline, time_s, DEFAULT_INITIAL_WINDOW_BYTES)

    def max_frame_at(self, time_s: float) -> int:
        """The receiver's MAX_FRAME_SIZE in force at ``time_s`` (by capture time)."""
        return _value_at(self.max_frame_timeline, time_s, DEFAULT_MAX_FRAME_BYTES)


def _value_at(timeline: tuple[tuple[float, int], ...], time_s: float, default: int) -> int:
    value = default
    for when, new in timeline:
        if when > time_s:
            break
        value = new
    return value


@dataclasses.dataclass(frozen=True)
class ConnectionSummary:
    """One decoded HTTP/2 connection: its span and how many frames of each type it carried."""

    connection: ConnectionId
    first_time_s: float
    last_time_s: float
    frames: int
    frames_by_type: tuple[tuple[str, int], ...]
    skipped_frames: int  # PRIORITY, PUSH/ALTSVC and unknown types: counted, not decoded


# The records made by the thousand: built without the frozen dataclasses' __init__ (netcapture.records).
_make_event = positional_maker(DataFrameEvent)
_make_sample = positional_maker(WindowSample)
_make_update = positional_maker(WindowUpdateEvent)
_make_record = positional_maker(StreamRecord)


# -- streams ------------------------------------------------------------------------------

def _header_facts(headers: tuple, cache: dict) -> tuple:
    """``(headers, first :path, first content-type, whether grpc-status came, the last one as an
    int or None)``: what :meth:`_StreamBuilder.add` takes from a header block, read once per
    tuple (the decoder hands a block sent again as the same tuple)."""
    facts = cache.get(id(headers))
    if facts is not None and facts[0] is headers:
        return facts
    path = content_type = status = None
    has_status = False
    for name, value in headers:
        if name == ":path":
            if path is None:
                path = value
        elif name == "content-type":
            if content_type is None:
                content_type = value
        elif name == "grpc-status":
            has_status = True
            try:
                status = int(value)
            except ValueError:
                status = None
    facts = cache[id(headers)] = (headers, path, content_type, has_status, status)
    return facts


class _StreamBuilder:
    def __init__(self, connection: ConnectionId, stream_id: int, header_facts: dict):
        self.connection, self.stream_id = connection, stream_id
        self.header_facts = header_facts  # shared by a capture's builders (_header_facts)
        self.path = self.content_type = self.key = None
        self.step_id = None
        self.request_headers = self.request_end = self.response_headers = self.response_end = None
        self.request_frames: list[DataFrameEvent] = []
        self.response_frames: list[DataFrameEvent] = []
        self.request_data = self.response_data = 0
        self.request_message_bytes = self.response_message_bytes = 0
        self.request_messages = self.response_messages = 0
        self.tensor_content = None
        self.grpc_status = self.reset = None
        self.damaged = False

    def add(self, frame: Http2Frame) -> None:
        time_s = frame.time_ns / 1e9  # Http2Frame.time_s
        if frame.damaged:
            self.damaged = True
        kind = frame.type
        if kind == DATA:
            self._data(frame, time_s)
        elif kind in (HEADERS, CONTINUATION):
            self._headers(frame, time_s)
        elif kind == RST_STREAM:
            self.reset = frame.error_code
            if self.request_end is None:
                self.request_end = time_s
            if self.response_end is None:
                self.response_end = time_s
        if kind in (DATA, HEADERS) and frame.flags & FLAG_END_STREAM:  # Http2Frame.end_stream
            if frame.from_client:
                self.request_end = time_s
            else:
                self.response_end = time_s

    def _headers(self, frame: Http2Frame, time_s: float) -> None:
        if frame.type == HEADERS:
            if frame.from_client and self.request_headers is None:
                self.request_headers = time_s
            elif not frame.from_client and self.response_headers is None:
                self.response_headers = time_s
        if not frame.headers:
            return
        # The first :path of the client, the first content-type, the server's last grpc-status.
        _, path, content_type, has_status, status = _header_facts(frame.headers, self.header_facts)
        if frame.from_client:
            if self.path is None and path is not None:
                self.path = path
        elif has_status:
            self.grpc_status = status
        if self.content_type is None and content_type is not None:
            self.content_type = content_type

    def _data(self, frame: Http2Frame, time_s: float) -> None:
        event = _make_event(time_s, frame.packet_number, frame.length, bool(frame.flags & FLAG_END_STREAM))
        for message in frame.grpc_messages:
            if frame.from_client:
                self.request_message_bytes += message.length_bytes
                self.request_messages += 1
                if message.rendezvous_key is not None and self.key is None:
                    self.key, self.step_id = message.rendezvous_key, message.step_id
            else:
                self.response_message_bytes += message.length_bytes
                self.response_messages += 1
                if message.tensor_content_bytes is not None and self.tensor_content is None:
                    self.tensor_content = message.tensor_content_bytes
        if frame.from_client:
            self.request_frames.append(event)
            self.request_data += frame.data_bytes
        else:
            self.response_frames.append(event)
            self.response_data += frame.data_bytes

    def record(self) -> StreamRecord:
        """The stream as a finished :class:`StreamRecord`: its tensor key, sizes and times."""
        parsed = RendezvousKey.parse(self.key) if self.key else None
        # Only a RecvTensor request yields a rendezvous key: it names the RPC when the headers
        # could not be decoded (a capture that began mid-connection).
        path = self.path if self.path is not None or self.key is None else RECV_TENSOR_PATH
        data_times = [e.time_s for e in self.response_frames if e.length_bytes]
        return _make_record(
            self.connection, self.stream_id, path, self.content_type, self.key,
            parsed.tensor_name if parsed else None, self.step_id,
            parsed.src_device if parsed else None, parsed.dst_device if parsed else None,
            self.request_headers, self.request_end, self.response_headers,
            data_times[0] if data_times else None, data_times[-1] if data_times else None, self.response_end,
            self.request_data, self.response_data, self.request_message_bytes, self.response_message_bytes,
            self.request_messages, self.response_messages, self.tensor_content, self.grpc_status, self.reset,
            tuple(self.request_frames), tuple(self.response_frames),
            self.damaged or bool(self.request_frames and self.request_headers is None)
            or bool(self.response_frames and self.response_headers is None),
        )


def build_streams(frames: Iterable[Http2Frame], damaged: Collection[tuple[ConnectionId, int]] = ()
                  ) -> tuple[StreamRecord, ...]:
    """One :class:`StreamRecord` per (connection, stream), in order of first appearance.

    ``damaged``: (connection, stream) pairs known to have lost frames that ``frames`` cannot
    show (whole frames the capture lost); their records are marked damaged.
    """
    builders: dict[tuple[ConnectionId, int], _StreamBuilder] = {}
    facts: dict[int, tuple] = {}
    for key in damaged:
        builders.setdefault(key, _StreamBuilder(*key, facts)).damaged = True
    # A connection's frames share its id object: look builders up by its identity first (a
    # ConnectionId hashes its five fields on every look-up).
    by_identity: dict[tuple[int, int], _StreamBuilder] = {}
    for frame in frames:
        stream_id = frame.stream_id
        if stream_id == 0:
            continue
        builder = by_identity.get((id(frame.connection), stream_id))
        if builder is None:
            key = (frame.connection, stream_id)
            builder = builders.get(key)
            if builder is None:
                builder = builders[key] = _StreamBuilder(frame.connection, stream_id, facts)
            by_identity[(id(frame.connection), stream_id)] = builder
        builder.add(frame)
    return tuple(b.record() for b in builders.values())


# -- flow control -------------------------------------------------------------------------

class _FlowBuilder:
    def __init__(self, connection: ConnectionId, data_from_client: bool):
        self.connection, self.data_from_client = connection, data_from_client
        self.settings: list[SettingChange] = []
        self.acks: list[float] = []
        self.updates: list[WindowUpdateEvent] = []
        self.pings: list[PingEvent] = []
        self.connection_window: list[WindowSample] = []
        self.stream_windows: list[WindowSample] = []
        self.window = DEFAULT_INITIAL_WINDOW_BYTES
        self.initial = DEFAULT_INITIAL_WINDOW_BYTES
        self.streams: dict[int, int] = {}
        self.closed: set[int] = set()
        self.data_frames = self.data_bytes = 0

    def _settings(self, frame: Http2Frame, time_s: float, number: int) -> None:
        for setting_id, value in frame.settings or ():
            self.settings.append(SettingChange(time_s, number, setting_id, value))
            if setting_id == SETTINGS_INITIAL_WINDOW_SIZE:
                delta, self.initial = value - self.initial, value
                for stream_id in self.streams:
                    if stream_id in self.closed:
                        continue
                    self.streams[stream_id] += delta
                    self.stream_windows.append(
                        _make_sample(time_s, number, stream_id, self.streams[stream_id], "settings"))

    def timeline(self) -> FlowControlTimeline:
        """The direction's flow-control events as an immutable :class:`FlowControlTimeline`."""
        return FlowControlTimeline(
            self.connection, self.data_from_client, tuple(self.settings), tuple(self.acks), tuple(self.updates),
            tuple(self.pings), tuple(self.connection_window), tuple(self.stream_windows),
            self.data_frames, self.data_bytes)


def build_flow_control(frames: Iterable[Http2Frame]) -> tuple[FlowControlTimeline, ...]:
    """Two :class:`FlowControlTimeline` per connection (client's data, then server's data).

    Each frame is looked at once, for both directions' builders: the direction whose data the
    frame's sender sends (``mine``: its DATA, its acknowledgements of SETTINGS, its streams'
    ends) and the other (``theirs``: the frame comes from its receiver, whose WINDOW_UPDATEs
    and SETTINGS rule it). Both open a stream at the same frame.
    """
    builders: dict[ConnectionId, tuple[_FlowBuilder, _FlowBuilder]] = {}
    by_identity: dict[int, tuple[_FlowBuilder, _FlowBuilder]] = {}  # a connection's frames share its id object
    for frame in frames:
        connection = frame.connection
        pair = by_identity.get(id(connection))
        if pair is None:
            pair = builders.get(connection)  # one look-up a frame: a ConnectionId hashes its five fields
            if pair is None:
                pair = builders[connection] = (_FlowBuilder(connection, True), _FlowBuilder(connection, False))
            by_identity[id(connection)] = pair
        client_data, server_data = pair
        mine, theirs = (client_data, server_data) if frame.from_client else (server_data, client_data)
        kind, stream_id, number = frame.type, frame.stream_id, frame.packet_number
        time_s = frame.time_ns / 1e9  # Http2Frame.time_s
        if stream_id and kind in DECODED_TYPES and stream_id not in client_data.streams:
            for builder in pair:  # both builders know the same streams
                builder.streams[stream_id] = builder.initial
                builder.stream_windows.append(_make_sample(time_s, number, stream_id, builder.initial, "open"))
        if kind == DATA:
            length = frame.length
            mine.data_frames += 1
            mine.data_bytes += length
            mine.window -= length
            mine.connection_window.append(_make_sample(time_s, number, 0, mine.window, "data"))
            streams = mine.streams
            if stream_id in streams:  # not so for DATA on stream 0, a protocol error
                streams[stream_id] -= length
                mine.stream_windows.append(_make_sample(time_s, number, stream_id, streams[stream_id], "data"))
            if frame.flags & FLAG_END_STREAM:
                mine.closed.add(stream_id)
        elif kind == WINDOW_UPDATE:
            increment = frame.window_increment or 0
            theirs.updates.append(_make_update(time_s, number, stream_id, increment))
            if stream_id == 0:
                theirs.window += increment
                theirs.connection_window.append(_make_sample(time_s, number, 0, theirs.window, "window_update"))
            elif stream_id in theirs.streams:
                streams = theirs.streams
                streams[stream_id] += increment
                theirs.stream_windows.append(
                    _make_sample(time_s, number, stream_id, streams[stream_id], "window_update"))
        elif kind == HEADERS:
            if frame.flags & FLAG_END_STREAM:
                mine.closed.add(stream_id)
        elif kind == PING:
            ack, opaque = bool(frame.flags & FLAG_ACK), frame.ping_opaque or ""
            client_data.pings.append(PingEvent(time_s, number, client_data is theirs, ack, opaque))
            server_data.pings.append(PingEvent(time_s, number, server_data is theirs, ack, opaque))
        elif kind == SETTINGS:
            if frame.flags & FLAG_ACK:
                mine.acks.append(time_s)
            else:
                theirs._settings(frame, time_s, number)
        elif kind == RST_STREAM:
            client_data.closed.add(stream_id)
            server_data.closed.add(stream_id)
    return tuple(builder.timeline() for pair in builders.values() for builder in pair)


def summarise_connections(frames: Iterable[Http2Frame]) -> tuple[ConnectionSummary, ...]:
    """Per connection: its first and last frame time and its frame counts by type."""
    seen: dict[ConnectionId, list] = {}  # connection -> [first time_ns, last time_ns, {frame type: count}]
    by_identity: dict[int, list] = {}  # as in build_streams
    for frame in frames:
        entry = by_identity.get(id(frame.connection))
        time_ns = frame.time_ns
        if entry is None:
            entry = seen.get(frame.connection)
            if entry is None:
                entry = seen[frame.connection] = [time_ns, time_ns, {frame.type: 1}]
                by_identity[id(frame.connection)] = entry
                continue
            by_identity[id(frame.connection)] = entry
        if time_ns < entry[0]:
            entry[0] = time_ns
        elif time_ns > entry[1]:
            entry[1] = time_ns
        counts = entry[2]
        counts[frame.type] = counts.get(frame.type, 0) + 1
    decoded = {FRAME_TYPE_NAMES[t] for t in DECODED_TYPES}
    summaries = []
    for connection, (first_ns, last_ns, by_type) in seen.items():
        counter = Counter({FRAME_TYPE_NAMES.get(t, f"UNKNOWN_{t}"): n for t, n in by_type.items()})
        skipped = sum(n for name, n in counter.items() if name not in decoded)
        # Times as Http2Frame.time_s gives them (the earliest float is the earliest integer's).
        summaries.append(ConnectionSummary(connection, first_ns / 1e9, last_ns / 1e9, sum(counter.values()),
                                           tuple(sorted(counter.items())), skipped))
    return tuple(summaries)


__all__ = [
    "ConnectionSummary", "DataFrameEvent", "FlowControlTimeline", "PingEvent", "SettingChange", "StreamRecord",
    "WindowSample", "WindowUpdateEvent", "build_flow_control", "build_streams", "summarise_connections",
]
