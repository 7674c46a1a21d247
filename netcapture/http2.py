"""HTTP/2 frames (RFC 9113) of one direction of a connection, with HPACK header blocks.

:class:`Http2Frame` is the record both backends produce, one per frame, on the packet
that completed the frame. :class:`FrameSplitter` cuts a direction's reassembled byte
stream into frames (the client's stream starts with the 24-byte connection preface);
:class:`DirectionDecoder` decodes each frame's body:

- DATA: payload length and padding (the payload itself goes to the gRPC layer, never into
  the record);
- HEADERS, PUSH_PROMISE and CONTINUATION: header block fragments are joined until
  END_HEADERS and decoded with the ``hpack`` package (one dynamic table per direction);
  the headers are attached to the frame that ended the block;
- SETTINGS, WINDOW_UPDATE, PING, RST_STREAM, GOAWAY: their fields (bodies parsed by
  ``hyperframe``);
- PRIORITY and unknown types: kept as frames (type, stream, length, flags), nothing more.

DATA bodies are sliced by hand rather than through ``hyperframe``, which copies them: a
frame may carry up to 16 MiB. A splitter that is told which DATA bytes will be read
(:attr:`FrameSplitter.body_needs`, set by the decoder) does not copy a large DATA frame's body
at all: it keeps the pieces the gRPC layer will read (:mod:`netcapture.sparse`) and lets the
rest pass (:meth:`FrameSplitter.skip`), so that tensors are counted, never copied.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator

from netcapture.errors import MalformedFrame, NeedMoreData
from netcapture.grpc import GrpcMessage, NeedCursor
from netcapture.records import positional_maker
from netcapture.sparse import SparseBuilder, SparseBytes
from netcapture.tcp import ConnectionId

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER_BYTES = 9
MAX_FRAME_PAYLOAD_BYTES = (1 << 24) - 1

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
FRAME_TYPE_NAMES = {
    DATA: "DATA", HEADERS: "HEADERS", PRIORITY: "PRIORITY", RST_STREAM: "RST_STREAM", SETTINGS: "SETTINGS",
    PUSH_PROMISE: "PUSH_PROMISE", PING: "PING", GOAWAY: "GOAWAY", WINDOW_UPDATE: "WINDOW_UPDATE",
    CONTINUATION: "CONTINUATION",
}
DECODED_TYPES = frozenset({DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE,
                           CONTINUATION})

FLAG_END_STREAM = 0x01
FLAG_ACK = 0x01
FLAG_END_HEADERS = 0x04
FLAG_PADDED = 0x08
FLAG_PRIORITY = 0x20

SETTINGS_HEADER_TABLE_SIZE = 1
SETTINGS_ENABLE_PUSH = 2
SETTINGS_MAX_CONCURRENT_STREAMS = 3
SETTINGS_INITIAL_WINDOW_SIZE = 4
SETTINGS_MAX_FRAME_SIZE = 5
SETTINGS_MAX_HEADER_LIST_SIZE = 6
SETTINGS_NAMES = {
    SETTINGS_HEADER_TABLE_SIZE: "HEADER_TABLE_SIZE", SETTINGS_ENABLE_PUSH: "ENABLE_PUSH",
    SETTINGS_MAX_CONCURRENT_STREAMS: "MAX_CONCURRENT_STREAMS", SETTINGS_INITIAL_WINDOW_SIZE: "INITIAL_WINDOW_SIZE",
    SETTINGS_MAX_FRAME_SIZE: "MAX_FRAME_SIZE", SETTINGS_MAX_HEADER_LIST_SIZE: "MAX_HEADER_LIST_SIZE",
    8: "ENABLE_CONNECT_PROTOCOL", 0xFE03: "GRPC_ALLOW_TRUE_BINARY_METADATA",
}
DEFAULT_INITIAL_WINDOW_BYTES = 65_535
DEFAULT_MAX_FRAME_BYTES = 16_384

Headers = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Http2Frame:
    """One HTTP/2 frame, stamped with the packet that completed it.

    ``length`` is the payload length from the frame header (padding included, as flow
    control counts it); ``data_bytes`` the DATA payload without padding. Type-specific
    fields are ``None`` on other frame types. ``headers`` is set on the frame that ended a
    header block (END_HEADERS), in wire order, pseudo-headers included.
    """

    packet_number: int
    time_ns: int
    connection: ConnectionId
    from_client: bool
    type: int
    flags: int
    stream_id: int
    length: int
    data_bytes: int = 0
    headers: Headers | None = None
    settings: tuple[tuple[int, int], ...] | None = None
    window_increment: int | None = None
    ping_opaque: str | None = None  # 8 bytes, hex
    error_code: int | None = None
    last_stream_id: int | None = None
    grpc_messages: tuple[GrpcMessage, ...] = ()
    damaged: bool = False  # the capture lost part of its payload: header fields only

    @property
    def time_s(self) -> float:
        return self.time_ns / 1e9

    @property
    def type_name(self) -> str:
        return FRAME_TYPE_NAMES.get(self.type, f"UNKNOWN_{self.type}")

    @property
    def end_stream(self) -> bool:
        return self.type in (DATA, HEADERS) and bool(self.flags & FLAG_END_STREAM)

    @property
    def ack(self) -> bool:
        return self.type in (SETTINGS, PING) and bool(self.flags & FLAG_ACK)

    def key(self) -> tuple:
        """What the backends must agree on for every frame: where, when, and its header."""
        return (self.packet_number, self.time_ns, self.connection, self.from_client, self.type,
                self.stream_id, self.length, self.flags)


@dataclasses.dataclass(frozen=True, slots=True)
class RawFrame:
    """A frame cut out of the byte stream: header fields, its offset, and its payload.

    ``declared_length`` is set only on a *damaged* frame, one whose bytes the capture lost in
    part: its header is known, its payload is not (``payload`` is empty). A large DATA frame's
    payload may be a :class:`~netcapture.sparse.SparseBytes` (see :class:`FrameSplitter`).
    """

    offset: int
    type: int
    flags: int
    stream_id: int
    payload: bytes | SparseBytes
    declared_length: int | None = None

    @property
    def damaged(self) -> bool:
        return self.declared_length is not None

    @property
    def length(self) -> int:
        """The payload length from the frame header."""
        return len(self.payload) if self.declared_length is None else self.declared_length


_make_raw = positional_maker(RawFrame)


def parse_frame(buffer: bytes | bytearray, position: int, max_payload: int = MAX_FRAME_PAYLOAD_BYTES
                ) -> tuple[int, int, int, int, int]:
    """Parse the frame header at ``buffer[position:]``: ``(type, flags, stream_id, length, consumed)``.

    ``consumed`` is the header plus payload length. Raises :class:`NeedMoreData` unless the
    whole frame is in the buffer, and :class:`MalformedFrame` for a length over ``max_payload``.
    """
    if len(buffer) - position < FRAME_HEADER_BYTES:
        raise NeedMoreData
    high, low, frame_type, flags, stream_id = _FRAME_HEADER.unpack_from(buffer, position)
    length = (high << 16) | low
    if length > max_payload:
        raise MalformedFrame(None, f"frame of {length} bytes exceeds the limit of {max_payload}")
    if len(buffer) - position < FRAME_HEADER_BYTES + length:
        raise NeedMoreData
    return frame_type, flags, stream_id & _STREAM_ID_BITS, length, FRAME_HEADER_BYTES + length


# What a frame header of each type may carry (RFC 9113 §6): the flags it defines, whether
# its stream id must be 0 (True), non-zero (False) or either (None), and its fixed length.
_ALLOWED_FLAGS = {DATA: FLAG_END_STREAM | FLAG_PADDED,
                  HEADERS: FLAG_END_STREAM | FLAG_END_HEADERS | FLAG_PADDED | FLAG_PRIORITY,
                  PRIORITY: 0, RST_STREAM: 0, SETTINGS: FLAG_ACK, PUSH_PROMISE: FLAG_END_HEADERS | FLAG_PADDED,
                  PING: FLAG_ACK, GOAWAY: 0, WINDOW_UPDATE: 0, CONTINUATION: FLAG_END_HEADERS}
_STREAM_ZERO = {DATA: False, HEADERS: False, PRIORITY: False, RST_STREAM: False, SETTINGS: True,
                PUSH_PROMISE: False, PING: True, GOAWAY: True, WINDOW_UPDATE: None, CONTINUATION: False}
_FIXED_LENGTH = {PRIORITY: 5, RST_STREAM: 4, PING: 8, WINDOW_UPDATE: 4}
RESYNC_CHAIN_FRAMES = 3  # consecutive plausible headers that make a resynchronisation point
# A DATA frame larger than HTTP/2's default maximum frame size is kept sparsely
# (FrameSplitter.body_needs): only a receiver that raised SETTINGS_MAX_FRAME_SIZE gets one, as
# gRPC's do for tensors. A smaller one is copied whole, which costs less than deciding what to
# keep of it (on wide_1gbit_smallwin's 16 KiB frames: 785 MB/s copied, 690 MB/s kept sparsely).
SPARSE_MIN_BYTES = DEFAULT_MAX_FRAME_BYTES + 1
# A frame whose body the gRPC layer would read in more pieces than this (many small messages,
# or, for a stream with no deframer yet, bytes that only look like message prefixes) is kept
# whole from there on: deciding piece by piece would cost more than copying.
SPARSE_MAX_PIECES = 64
_STREAM_ID_BITS = 0x7FFFFFFF
_FRAME_HEADER = struct.Struct("!BHBBI")  # length (high byte, low 16 bits), type, flags, stream id


def plausible_header(buffer: bytes | bytearray, position: int, max_payload: int) -> int | None:
    """The frame length if the 9 bytes at ``position`` can be a frame header a gRPC peer sends,
    else ``None``: a known type, only the flags that type defines, the reserved bit clear, the
    stream id and length that type requires, a length within ``max_payload``.

    >>> plausible_header(bytes.fromhex("000004080000000000"), 0, 16384)  # WINDOW_UPDATE, stream 0
    4
    >>> plausible_header(bytes(9), 0, 16384) is None                    # DATA on stream 0
    True
    """
    high, low, frame_type, flags, stream_word = _FRAME_HEADER.unpack_from(buffer, position)
    length = (high << 16) | low
    if frame_type > CONTINUATION or length > max_payload or stream_word >> 31 or flags & ~_ALLOWED_FLAGS[frame_type]:
        return None
    zero = _STREAM_ZERO[frame_type]
    if zero is not None and zero != (stream_word == 0):
        return None
    fixed = _FIXED_LENGTH.get(frame_type)
    if fixed is not None and length != fixed:
        return None
    if frame_type == SETTINGS and (length % 6 or (flags & FLAG_ACK and length)):
        return None
    if frame_type == GOAWAY and length < 8:
        return None
    return length


class FrameSplitter:
    """Cut one direction's byte stream into :class:`RawFrame` objects as bytes arrive.

    ``expect_preface``: the stream must start with the client connection preface
    (:class:`MalformedFrame` otherwise). ``synchronised=False``: the stream starts at an
    unknown point (a capture that began mid-connection); the splitter first looks for a frame
    boundary, as after a loss.

    Lost bytes (:meth:`lose`) cost only the frames they touch. A frame whose header was
    captured ends where its header says: it comes out *damaged* (header, no payload) and
    cutting goes on after it. A loss that covers a frame header leaves the boundary
    unknown: the splitter resynchronises on the first of ``RESYNC_CHAIN_FRAMES``
    consecutive plausible headers (:func:`plausible_header`), each where the previous one
    ends. :attr:`lost_bytes` counts bytes never captured, :attr:`skipped_bytes` captured
    bytes that could not be framed or belonged to a damaged frame.

    With :attr:`body_needs` set (``body_needs(stream_id)`` returns a
    :class:`~netcapture.grpc.NeedCursor` in the state of the gRPC deframer that will read the
    stream's next DATA bytes, or ``None`` if none will), a DATA frame of ``SPARSE_MIN_BYTES``
    or more is neither buffered nor copied: its payload comes out as a
    :class:`~netcapture.sparse.SparseBytes` holding the bytes the cursor asks for (and the pad
    length), and :attr:`skippable` says how many of the next bytes need not be fed at all
    (:meth:`skip` passes over them). The cursor is asked for when the frame's header is cut
    (:meth:`cut`), after the frames before it have been taken.
    """

    def __init__(self, expect_preface: bool, synchronised: bool = True,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        self.body_needs: Callable[[int], NeedCursor | None] | None = None
        self.skippable = 0  # the next bytes that may be passed to skip() rather than feed()
        self._sparse: _SparseFrame | None = None  # the DATA frame being kept sparsely
        self._buffer = bytearray()
        self._buffer_offset = 0  # stream offset of _buffer[0] (in a sparse frame: of the next byte)
        self._need_preface = expect_preface and synchronised
        self._synchronised = synchronised
        self.max_frame_bytes = max_frame_bytes  # what the receiver allows (its SETTINGS may raise it)
        self._damaged: RawFrame | None = None  # a frame cut by a loss, ending at _damaged_end
        self._damaged_end = 0
        self.lost_bytes = 0
        self.skipped_bytes = 0
        self.damaged_frames = 0
        self.resyncs = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes received of the frame in progress (or that could not be framed yet)."""
        sparse = self._sparse
        return len(self._buffer) + (FRAME_HEADER_BYTES + sparse.received if sparse is not None else 0)

    @property
    def synchronised(self) -> bool:
        return self._synchronised

    def feed(self, data: bytes) -> list[RawFrame]:
        """Take a direction's next bytes (after the client preface, if any); return the frames they
        complete. A frame cut by the end of ``data`` waits for the next call."""
        return list(self.cut(data))

    def cut(self, data) -> Iterator[RawFrame]:
        """:meth:`feed`, one frame at a time: the frames ``data`` completes, each cut when the
        previous one has been taken (so a consumer decodes each before the next is cut: a large
        DATA frame's body is judged, :attr:`body_needs`, once every frame before it is decoded).

        The work before the first frame (the end of a damaged or sparse frame, finding a frame
        boundary, the client preface) is done by this call, which raises
        :class:`MalformedFrame` for a client that does not start with the preface. The
        iterator must be run to its end before the splitter is used again.
        """
        ready: list[RawFrame] = []
        if self._damaged is not None:
            take = min(len(data), self._damaged_end - self._buffer_offset)
            self.skipped_bytes += take
            self._buffer_offset += take
            data = data[take:]
            if self._buffer_offset < self._damaged_end:
                return iter(ready)
            ready.append(self._end_damaged())
        if self._sparse is not None:
            data = self._feed_sparse(data, ready)
            if self._sparse is not None or not len(data):
                return iter(ready)
        if self._synchronised and not self._need_preface:
            if not self._buffer:
                return self._cut(ready, data, 0)  # nothing buffered: cut straight from the caller's bytes
            rest = self._complete_buffered(data, ready)
            if rest is not None:
                return self._cut(ready, rest, 0)
        self._buffer += data
        if not self._synchronised and not self._resynchronise():
            return iter(ready)
        position = 0
        if self._need_preface:
            if len(self._buffer) < len(PREFACE):
                if PREFACE.startswith(bytes(self._buffer)):
                    return iter(ready)
                raise MalformedFrame(None, "the client did not start with the HTTP/2 connection preface")
            if self._buffer[: len(PREFACE)] != PREFACE:
                raise MalformedFrame(None, "the client did not start with the HTTP/2 connection preface")
            position = len(PREFACE)
            self._need_preface = False
        return self._cut(ready, self._buffer, position)

    def _complete_buffered(self, data, ready: list[RawFrame]) -> memoryview | None:
        """Complete the buffered frame with the first bytes of ``data`` (appended to ``ready``) and
        return the rest of ``data``; or ``None``, touching nothing, when ``data`` does not complete
        it or its header is not all buffered (then ``data`` joins the buffer).

        Only the missing bytes are copied, not all of ``data`` (which would be copied again as
        each frame after it is cut); the buffer becomes the frame's payload, and a new one starts.
        """
        buffer = self._buffer
        held = len(buffer)
        if held < FRAME_HEADER_BYTES:
            return None
        high, low, frame_type, flags, stream_id = _FRAME_HEADER.unpack_from(buffer, 0)
        length = (high << 16) | low
        missing = FRAME_HEADER_BYTES + length - held
        sparse_from = SPARSE_MIN_BYTES if self.body_needs is not None else MAX_FRAME_PAYLOAD_BYTES + 1
        if not 0 < missing <= len(data) or (frame_type == DATA and length >= sparse_from):
            return None
        view = memoryview(data)
        buffer += view[:missing]
        self._buffer = bytearray()
        ready.append(_make_raw(self._buffer_offset, frame_type, flags, stream_id & _STREAM_ID_BITS,
                               memoryview(buffer)[FRAME_HEADER_BYTES:], None))
        self._buffer_offset += FRAME_HEADER_BYTES + length
        return view[missing:]

    def _cut(self, ready: list[RawFrame], source, position: int) -> Iterator[RawFrame]:
        """Yield ``ready``, then the frames in ``source`` (the buffer, or the caller's bytes when
        nothing was buffered; ``self._buffer_offset`` is the stream offset of ``source[0]``) from
        ``position`` on; keep what is left of ``source`` for the next call.

        A frame cut from the caller's bytes has a view of them as its payload, not a copy: a
        consumer reads a frame's payload before it takes the next frame and keeps no view of it.
        The buffer's frames are copied (the buffer is cut down after the last one)."""
        yield from ready
        size = len(source)
        view = None if source is self._buffer else memoryview(source)
        sparse_from = SPARSE_MIN_BYTES if self.body_needs is not None else MAX_FRAME_PAYLOAD_BYTES + 1
        while size - position >= FRAME_HEADER_BYTES:
            high, low, frame_type, flags, stream_id = _FRAME_HEADER.unpack_from(source, position)
            length = (high << 16) | low
            if frame_type == DATA and length >= sparse_from:
                frame = self._start_sparse(source, position, flags, stream_id & _STREAM_ID_BITS, length)
                if frame is None:  # it goes on in the next calls
                    position = size
                    break
                position += FRAME_HEADER_BYTES + length
                yield frame
                continue
            if size - position < FRAME_HEADER_BYTES + length:
                break
            start = position + FRAME_HEADER_BYTES
            payload = bytes(source[start: start + length]) if view is None else view[start: start + length]
            frame = _make_raw(self._buffer_offset + position, frame_type, flags, stream_id & _STREAM_ID_BITS, payload,
                              None)
            position += FRAME_HEADER_BYTES + length
            yield frame
        # One deletion per call, not per frame: small frames in front of a large partial one
        # would otherwise move the partial frame again and again.
        if source is self._buffer:
            del self._buffer[:position]
        else:
            self._buffer += view[position:]
        self._buffer_offset += position

    def skip(self, count: int) -> None:
        """Pass over the next ``count`` bytes, at most :attr:`skippable`, without feeding them."""
        sparse = self._sparse
        sparse.received += count
        sparse.unskipped += count  # told to the cursor when it is next asked (one call less a packet)
        self._buffer_offset += count
        self.skippable -= count

    def _start_sparse(self, source, position: int, flags: int, stream_id: int, length: int) -> RawFrame | None:
        """Begin keeping the DATA frame whose header is at ``source[position:]`` sparsely; return it
        if ``source`` holds all of it (else it goes on in :meth:`_feed_sparse`)."""
        cursor = self.body_needs(stream_id)
        sparse = _SparseFrame(self._buffer_offset + position, flags, stream_id, length,
                              NeedCursor(0, dead=True) if cursor is None else cursor)
        body = position + FRAME_HEADER_BYTES
        available = min(len(source) - body, length)
        done: list[RawFrame] = []
        self._sparse = sparse
        with memoryview(source) as view:
            self._feed_sparse(view[body: body + available], done)
        # _feed_sparse counted the body bytes into the offset; _cut counts them with the position.
        self._buffer_offset -= available
        return done[0] if done else None

    def _feed_sparse(self, data, frames: list[RawFrame]):
        """Take the sparse frame's next bytes out of ``data``; return what follows the frame."""
        sparse = self._sparse
        if sparse.unskipped:
            sparse.cursor.skip(sparse.unskipped)
            sparse.unskipped = 0
        take = min(len(data), sparse.length - sparse.received)
        chunk, start = data[:take], sparse.received
        lead = max(0, min(take, sparse.content_start - start))  # the pad length, always kept
        ranges = None if sparse.keep_all else sparse.cursor.needed(chunk[lead:], SPARSE_MAX_PIECES - sparse.pieces)
        if ranges is None:
            sparse.keep_all = True
            sparse.builder.keep(start, chunk)
        else:
            if lead:
                sparse.builder.keep(start, chunk[:lead])
            for first, last in ranges:
                sparse.builder.keep(start + lead + first, chunk[lead + first: lead + last])
            sparse.pieces += len(ranges)
        sparse.received += take
        self._buffer_offset += take
        if sparse.received == sparse.length:
            frames.append(RawFrame(sparse.offset, DATA, sparse.flags, sparse.stream_id,
                                   sparse.builder.build(sparse.length)))
            self._sparse = None
            self.skippable = 0
        else:
            self.skippable = sparse.skippable()
        return data[take:]

    def lose(self, missing_bytes: int) -> list[RawFrame]:
        """The next ``missing_bytes`` of the stream were never captured; returns the damaged frame
        this completes, if any. Cutting goes on after the missing bytes."""
        self.lost_bytes += missing_bytes
        gap_end = self._buffer_offset + len(self._buffer) + missing_bytes
        frames: list[RawFrame] = []
        if self._sparse is not None:
            # As below for a buffered frame: its header is known, so it ends where that says.
            sparse, self._sparse = self._sparse, None
            self.skippable = 0
            self._damaged = RawFrame(sparse.offset, DATA, sparse.flags, sparse.stream_id, b"", sparse.length)
            self._damaged_end = sparse.offset + FRAME_HEADER_BYTES + sparse.length
            self.skipped_bytes += FRAME_HEADER_BYTES + sparse.received
            self._buffer_offset = sparse.offset
        if self._damaged is None and self._synchronised and not self._need_preface \
                and len(self._buffer) >= FRAME_HEADER_BYTES:
            # The frame in progress has its header: it ends where the header says.
            high, low, frame_type, flags, stream_id = _FRAME_HEADER.unpack_from(self._buffer, 0)
            length = (high << 16) | low
            self._damaged = RawFrame(self._buffer_offset, frame_type, flags, stream_id & _STREAM_ID_BITS, b"", length)
            self._damaged_end = self._buffer_offset + FRAME_HEADER_BYTES + length
            self.skipped_bytes += len(self._buffer)
            self._buffer.clear()
        if self._damaged is not None:
            if gap_end < self._damaged_end:
                self._buffer_offset = gap_end
                return frames
            frames.append(self._end_damaged())
            if gap_end == self._damaged_end:
                return frames
        # The next frame header is in the missing bytes: the boundary after them is unknown.
        self.skipped_bytes += len(self._buffer)
        self._buffer.clear()
        self._buffer_offset = gap_end
        self._synchronised = False
        self._need_preface = False
        return frames

    def _end_damaged(self) -> RawFrame:
        frame, self._damaged = self._damaged, None
        self._buffer_offset = self._damaged_end
        self.damaged_frames += 1
        return frame

    def _resynchronise(self) -> bool:
        """Find a frame boundary in the buffer; drop (and count) the bytes before it."""
        buffer, limit = self._buffer, self.max_frame_bytes
        position = 0
        while len(buffer) - position >= FRAME_HEADER_BYTES:
            verdict = self._chain_from(position, limit)
            if verdict is None:  # the chain runs past the buffer: wait for more bytes
                break
            if verdict:
                self.skipped_bytes += position
                del buffer[:position]
                self._buffer_offset += position
                self._synchronised = True
                self.resyncs += 1
                return True
            position += 1
        else:
            position = max(0, len(buffer) - (FRAME_HEADER_BYTES - 1))
        self.skipped_bytes += position
        del buffer[:position]
        self._buffer_offset += position
        return False

    def _chain_from(self, position: int, limit: int) -> bool | None:
        """Whether plausible headers chain from ``position`` (``None``: not enough bytes to tell)."""
        for _ in range(RESYNC_CHAIN_FRAMES):
            if len(self._buffer) - position < FRAME_HEADER_BYTES:
                return None
            length = plausible_header(self._buffer, position, limit)
            if length is None:
                return False
            position += FRAME_HEADER_BYTES + length
        return True


class _SparseFrame:
    """A DATA frame whose body a :class:`FrameSplitter` keeps sparsely, as it arrives.

    ``received``: body bytes so far; ``cursor``: which of the next ones the gRPC layer will
    read; ``builder``: the pieces kept (``pieces`` of them asked for by the cursor);
    ``keep_all``: from now on every byte is kept (``SPARSE_MAX_PIECES``); ``unskipped``: bytes
    skipped that the cursor has not been told of yet.
    """

    __slots__ = ("builder", "content_start", "cursor", "flags", "keep_all", "length", "offset", "pieces",
                 "received", "stream_id", "unskipped")

    def __init__(self, offset: int, flags: int, stream_id: int, length: int, cursor: NeedCursor):
        self.offset, self.flags, self.stream_id, self.length = offset, flags, stream_id, length
        self.received = 0
        self.content_start = 1 if flags & FLAG_PADDED else 0  # after the pad length
        self.cursor = cursor
        self.builder = SparseBuilder()
        self.pieces = 0
        self.keep_all = False
        self.unskipped = 0

    def skippable(self) -> int:
        """How many of the next bytes may be skipped: none the cursor needs, and never the last
        byte (feeding it completes the frame)."""
        if self.received < self.content_start or self.keep_all:
            return 0
        last = self.length - self.received - 1
        unneeded = self.cursor.unneeded_bytes()
        return max(0, last if unneeded < 0 else min(unneeded, last))


def split_padding(flags: int, payload: bytes | SparseBytes) -> tuple[int, int]:
    """``(start, end)`` of the content of a padded DATA or HEADERS payload."""
    if not flags & FLAG_PADDED:
        return 0, len(payload)
    if not payload:
        raise MalformedFrame(None, "PADDED frame without a pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise MalformedFrame(None, f"padding of {pad} bytes in a {len(payload)}-byte frame")
    return 1, len(payload) - pad


@dataclasses.dataclass(frozen=True)
class FrameDetails:
    """The decoded body of one frame (fields of :class:`Http2Frame`)."""

    data_bytes: int = 0
    headers: Headers | None = None
    settings: tuple[tuple[int, int], ...] | None = None
    window_increment: int | None = None
    ping_opaque: str | None = None
    error_code: int | None = None
    last_stream_id: int | None = None


class DirectionDecoder:
    """Decode the frames of one direction: HPACK state and header-block assembly."""

    def __init__(self) -> None:
        import hpack

        self._hpack = hpack.Decoder()
        self._hpack_error = hpack.HPACKError
        # A passive observer must accept whatever the peers agreed on.
        self._hpack.max_allowed_table_size = 1 << 32
        self._hpack.max_header_list_size = 1 << 30
        self._block = bytearray()
        self._block_stream: int | None = None
        self._block_lost = False  # the open block lost a fragment: swallow it to its end
        self.hpack_failed = False
        self.table_uncertain = False  # a lost header block may have changed the dynamic table
        # gRPC sends the same few header blocks again and again once their fields are indexed:
        # a block that left the table as it was decodes the same until the table changes.
        self._unchanged_blocks: dict[bytes, Headers] = {}

    def lose_frame(self, frame: RawFrame) -> FrameDetails:
        """What is left of a damaged frame (:attr:`RawFrame.damaged`): a DATA frame's length, no
        header block (and the block it belongs to is lost), no control fields."""
        if frame.type == DATA:
            return FrameDetails(data_bytes=frame.length)
        if frame.type in (HEADERS, PUSH_PROMISE, CONTINUATION):
            self.lose_header_blocks()
            if not frame.flags & FLAG_END_HEADERS:
                self._block_stream, self._block_lost = frame.stream_id, True
        return FrameDetails()

    def lose_header_blocks(self) -> None:
        """Header blocks went missing (a damaged frame, or bytes skipped to a new frame boundary):
        the open block is dropped, and the table is uncertain from now on."""
        self._block.clear()
        self._block_stream, self._block_lost = None, False
        self.table_uncertain = True

    def decode(self, frame: RawFrame) -> FrameDetails:
        """Decode ``frame``'s body; raises :class:`MalformedFrame` for a broken frame."""
        kind = frame.type
        if kind == DATA:
            if frame.stream_id == 0:
                raise MalformedFrame(None, "DATA frame on stream 0")
            start, end = split_padding(frame.flags, frame.payload)
            return FrameDetails(data_bytes=end - start)
        if kind in (HEADERS, PUSH_PROMISE, CONTINUATION):
            return FrameDetails(headers=self.header_block(frame))
        if kind in (SETTINGS, WINDOW_UPDATE, PING, RST_STREAM, GOAWAY):
            return self._control(frame)
        return FrameDetails()

    def _control(self, frame: RawFrame) -> FrameDetails:
        from hyperframe.exceptions import HyperframeError
        from hyperframe.frame import FRAMES

        try:
            parsed = FRAMES[frame.type](frame.stream_id)
            parsed.parse_flags(frame.flags)
            parsed.parse_body(memoryview(frame.payload))
        except HyperframeError as exc:
            raise MalformedFrame(None, f"{FRAME_TYPE_NAMES[frame.type]} frame: {exc}") from None
        if frame.type == SETTINGS:
            # hyperframe keeps a dict (the last value of a repeated id wins, as in RFC 9113);
            # read the pairs directly to keep their wire order.
            pairs = tuple(struct.unpack_from("!HI", frame.payload, i) for i in range(0, len(frame.payload), 6))
            return FrameDetails(settings=pairs)
        if frame.type == WINDOW_UPDATE:
            return FrameDetails(window_increment=parsed.window_increment)
        if frame.type == PING:
            return FrameDetails(ping_opaque=bytes(parsed.opaque_data).hex())
        if frame.type == RST_STREAM:
            return FrameDetails(error_code=parsed.error_code)
        return FrameDetails(error_code=parsed.error_code, last_stream_id=parsed.last_stream_id)

    def header_block(self, frame: RawFrame) -> Headers | None:
        """Take a HEADERS, PUSH_PROMISE or CONTINUATION frame's fragment; the headers of the block
        it ends, or ``None`` (the block goes on, or was lost). Raises :class:`MalformedFrame`."""
        payload = frame.payload
        if frame.type == CONTINUATION:
            if self._block_stream != frame.stream_id:
                raise MalformedFrame(None, f"CONTINUATION on stream {frame.stream_id} without a header block open")
            fragment = payload
        else:
            if self._block_lost:  # the lost block's last fragment was lost too
                self._block_stream, self._block_lost = None, False
            if self._block_stream is not None:
                raise MalformedFrame(None, f"new header block on stream {frame.stream_id} before the block of "
                                     f"stream {self._block_stream} ended")
            start, end = split_padding(frame.flags, payload)
            if frame.type == HEADERS and frame.flags & FLAG_PRIORITY:
                start += 5
            elif frame.type == PUSH_PROMISE:
                start += 4
            if start > end:
                raise MalformedFrame(None, f"{FRAME_TYPE_NAMES[frame.type]} frame too short")
            if frame.flags & FLAG_END_HEADERS and not self._block:  # a whole block: nothing to join
                return self._hpack_decode(bytes(payload[start:end]))
            fragment = payload[start:end]
            self._block_stream = frame.stream_id
        self._block += fragment
        if not frame.flags & FLAG_END_HEADERS:
            return None
        block = bytes(self._block)
        self._block.clear()
        self._block_stream = None
        if self._block_lost:
            self._block_lost = False
            return None
        return self._hpack_decode(block)

    def _hpack_decode(self, block: bytes) -> Headers | None:
        if self.hpack_failed:
            return None  # the dynamic table is lost for the rest of this direction
        cached = self._unchanged_blocks.get(block)
        if cached is not None:
            return cached
        table = self._hpack.header_table
        entries = table.dynamic_entries
        before = (len(entries), entries[0] if entries else None, table.maxsize)  # holds the newest entry
        try:
            pairs = self._hpack.decode(block, raw=True)
        except (self._hpack_error, IndexError, ValueError) as exc:
            self.hpack_failed = True
            cause = " after header blocks were lost" if self.table_uncertain else ""
            raise MalformedFrame(None, f"HPACK header block cannot be decoded{cause} ({exc}); "
                                 "headers of this direction are not decoded from here on") from None
        headers = tuple((name.decode("utf-8", "replace"), value.decode("utf-8", "replace")) for name, value in pairs)
        if self.table_uncertain and not _well_formed(headers):
            # A lost insertion shifts the indices of older entries: such a block decodes, wrongly.
            self.hpack_failed = True
            raise MalformedFrame(None, "a header block decoded after header blocks were lost is not well formed; "
                                 "headers of this direction are not decoded from here on")
        if (len(entries), entries[0] if entries else None, table.maxsize) == before and \
                (entries[0] if entries else None) is before[1]:
            self._unchanged_blocks[block] = headers
        else:
            self._unchanged_blocks.clear()  # decoded against another table from now on
        return headers


def _well_formed(headers: Headers) -> bool:
    """RFC 9113 §8.2-8.3: names lowercase tokens, pseudo-headers first, a response or trailers
    block (``:status`` or ``grpc-status``) or a request (``:path``)."""
    names = [name for name, _ in headers]
    pseudo_done = False
    for name in names:
        if not name or name != name.lower() or any(c.isspace() for c in name):
            return False
        if name.startswith(":"):
            if pseudo_done:
                return False
        else:
            pseudo_done = True
    return any(n in (":status", ":path", "grpc-status") for n in names)
