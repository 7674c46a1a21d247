"""gRPC message framing and the protobuf of TensorFlow's ``RecvTensor`` RPC.

A gRPC message on an HTTP/2 stream is a 5-byte prefix (compressed flag, 4-byte big-endian
length) and the message; messages may span DATA frames and a DATA frame may hold several.
:class:`GrpcDeframer` splits one direction of one stream into messages without keeping
their bodies, except for what it is asked to keep: a whole small request, or the first
bytes of a large response.

TensorFlow's ``/tensorflow.WorkerService/RecvTensor``:

- request ``RecvTensorRequest``: ``step_id`` (field 1, int64) and ``rendezvous_key``
  (field 2, string), e.g. ``/job:ps/replica:0/task:0/device:CPU:0;c043bea3abd8f835;
  /job:worker/replica:0/task:0/device:CPU:0;edge_36_affine1/BiasAdd/ReadVariableOp;0:0``:
  source device, source incarnation, destination device, tensor (edge) name, frame and
  iteration. The edge name equals ``tensor_name`` of the ``_Send``/``_Recv`` pair in the
  partition graphs and the name in the trace's RecvTensor ``timeline_label``.
- response ``RecvTensorResponse``: TensorFlow writes it by hand for memcpy-able dtypes
  (``grpc_tensor_coding.cc``): the small fields first (``send_start_micros``, ...), then
  field 1 ``tensor`` whose last field is ``tensor_content`` (field 4) with the raw tensor
  bytes. So the message is ``requested_bytes`` of tensor data plus a header of a few dozen
  bytes, and the header is all that needs reading: :func:`tensor_content_bytes` reads the
  length of ``tensor_content`` from the message's first bytes.

The protobuf is walked by hand (varint and length-delimited fields): the worker protos are
not in ``tensorboard.compat.proto``, and only two fields are needed.
"""

from __future__ import annotations

import dataclasses

from netcapture.errors import MalformedFrame, NeedMoreData
from netcapture.records import positional_maker
from netcapture.sparse import SparseBytes

GRPC_PREFIX_BYTES = 5
RECV_TENSOR_PATH = "/tensorflow.WorkerService/RecvTensor"
# A RecvTensorRequest is ~150 bytes; anything far larger is not one and is not kept whole.
MAX_KEPT_REQUEST_BYTES = 64 << 10
# Response header: a few dozen bytes; TensorShapeProto of an 8-dimensional tensor stays < 200.
RESPONSE_PREFIX_BYTES = 1024
# The most a deframer keeps of a message (keep_bytes_for, or a request read without headers).
MAX_KEEP_BYTES = max(MAX_KEPT_REQUEST_BYTES, RESPONSE_PREFIX_BYTES)


@dataclasses.dataclass(frozen=True, slots=True)
class GrpcMessage:
    """One complete gRPC message, on the DATA frame that completed it.

    ``length_bytes`` is the message length from its prefix (the 5 prefix bytes excluded).
    For a RecvTensor request, ``step_id`` and ``rendezvous_key``; for a RecvTensor response,
    ``tensor_content_bytes`` (``None`` when the tensor is not sent as raw content, e.g. a
    string tensor).
    """

    length_bytes: int
    compressed: bool
    step_id: int | None = None
    rendezvous_key: str | None = None
    tensor_content_bytes: int | None = None


_make_message = positional_maker(GrpcMessage)  # one a gRPC message (netcapture.records)


@dataclasses.dataclass(frozen=True)
class RendezvousKey:
    """The parts of a TensorFlow rendezvous key."""

    src_device: str
    src_incarnation: str
    dst_device: str
    tensor_name: str
    frame_iter: str

    @classmethod
    def parse(cls, key: str) -> RendezvousKey | None:
        """A TensorFlow rendezvous key ``src;incarnation;dst;tensor;frame_iter``, or None if it has not five parts."""
        parts = key.split(";")
        if len(parts) != 5:
            return None
        return cls(*parts)


def tensor_name(key: str | None) -> str | None:
    """The ``edge_N_...`` tensor name of a rendezvous key, or ``None``."""
    parsed = RendezvousKey.parse(key) if key else None
    return parsed.tensor_name if parsed else None


class GrpcDeframer:
    """Split one direction of one HTTP/2 stream into gRPC messages.

    ``keep_bytes`` is how many leading bytes of each message body to keep (0: none), and
    ``feed`` returns, for each message completed by the data, ``(length, compressed, kept)``.
    """

    def __init__(self, keep_bytes: int = 0):
        self._keep = keep_bytes
        self._prefix = bytearray()
        self._remaining = -1  # body bytes still to come; -1: reading a prefix
        self._length = 0
        self._compressed = False
        self._kept = bytearray()

    @property
    def in_message(self) -> bool:
        """True between the first byte of a message and its last."""
        return self._remaining >= 0 or bool(self._prefix)

    def cursor(self) -> NeedCursor:
        """A :class:`NeedCursor` in this deframer's state: which of the stream's next bytes it will read."""
        return NeedCursor(self._keep, bytes(self._prefix), self._remaining, len(self._kept))

    def feed(self, data: bytes | SparseBytes) -> list[tuple[int, bool, bytes]]:
        """Take a stream's next DATA bytes; return the gRPC messages they complete, each as
        (length, compressed, its first bytes). Consumes all of ``data``; a message split across
        calls is completed by a later one. ``data`` may be a :class:`SparseBytes` that kept
        what a :class:`NeedCursor` in this deframer's state asked for."""
        position, size = 0, len(data)
        sparse = isinstance(data, SparseBytes)
        if not sparse and self._remaining < 0 and not self._prefix and size >= GRPC_PREFIX_BYTES \
                and data[0] <= 1 and int.from_bytes(data[1:GRPC_PREFIX_BYTES], "big") == size - GRPC_PREFIX_BYTES:
            # One whole message (gRPC's usual DATA frame): what the loop below does, in one step.
            self._compressed = bool(data[0])
            self._length = size - GRPC_PREFIX_BYTES
            self._kept.clear()
            self._kept += data[GRPC_PREFIX_BYTES: GRPC_PREFIX_BYTES + min(self._length, self._keep)]
            return [(self._length, self._compressed, bytes(self._kept))]
        done = []
        take_bytes = data.read if sparse else lambda start, stop: data[start:stop]
        while position < size:
            if self._remaining < 0:
                take = min(GRPC_PREFIX_BYTES - len(self._prefix), size - position)
                self._prefix += take_bytes(position, position + take)
                position += take
                if len(self._prefix) < GRPC_PREFIX_BYTES:
                    break
                flag = self._prefix[0]
                if flag > 1:
                    raise MalformedFrame(None, f"gRPC message prefix with compressed flag {flag}")
                self._compressed = bool(flag)
                self._length = int.from_bytes(self._prefix[1:5], "big")
                self._remaining = self._length
                self._prefix.clear()
                self._kept.clear()
            take = min(self._remaining, size - position)
            if len(self._kept) < self._keep:
                self._kept += take_bytes(position, position + min(take, self._keep - len(self._kept)))
            position += take
            self._remaining -= take
            if self._remaining == 0:
                done.append((self._length, self._compressed, bytes(self._kept)))
                self._remaining = -1
        return done


class NeedCursor:
    """Which bytes of a stream's DATA a :class:`GrpcDeframer` will read, told as they arrive.

    It follows the deframer's state machine (message prefixes, lengths, the bytes kept) without
    keeping anything, so that a frame splitter can skip the rest of a large DATA frame unread
    (:mod:`netcapture.sparse`). A cursor with a larger ``keep`` than the deframer that will
    read the bytes asks for a superset of what it reads, which is what a splitter needs when it
    cannot know yet which deframer that will be. ``dead``: nothing more will be read (the
    stream is not decoded, or its framing is broken).
    """

    __slots__ = ("dead", "keep", "kept", "prefix", "remaining")

    def __init__(self, keep: int, prefix: bytes = b"", remaining: int = -1, kept: int = 0, dead: bool = False):
        self.keep = keep
        self.prefix = prefix
        self.remaining = remaining  # body bytes of the current message still to come; -1: in a prefix
        self.kept = kept
        self.dead = dead

    def needed(self, data, limit: int) -> list[tuple[int, int]] | None:
        """Take the stream's next bytes ``data``; return the ranges of them the deframer will read,
        or ``None`` if they are more than ``limit`` (then the cursor's state is undefined)."""
        ranges: list[tuple[int, int]] = []
        position, size = 0, len(data)
        while position < size and not self.dead:
            if len(ranges) >= limit:
                return None
            if self.remaining < 0:
                take = min(GRPC_PREFIX_BYTES - len(self.prefix), size - position)
                ranges.append((position, position + take))
                self.prefix += bytes(data[position: position + take])
                position += take
                if len(self.prefix) < GRPC_PREFIX_BYTES:
                    break
                if self.prefix[0] > 1:  # the deframer raises MalformedFrame here and reads no further
                    self.dead = True
                    break
                self.remaining = int.from_bytes(self.prefix[1:5], "big")
                self.prefix = b""
                self.kept = 0
            take = min(self.remaining, size - position)
            if self.kept < self.keep:
                kept = min(take, self.keep - self.kept)
                ranges.append((position, position + kept))
                self.kept += kept
            position += take
            self.remaining -= take
            if self.remaining == 0:
                self.remaining = -1
        return ranges

    def unneeded_bytes(self) -> int:
        """How many of the next bytes the deframer certainly will not read (``-1``: none of them)."""
        if self.dead:
            return -1
        if self.remaining > 0 and self.kept >= self.keep:
            return self.remaining
        return 0

    def skip(self, count: int) -> None:
        """Pass over ``count`` bytes, at most :meth:`unneeded_bytes` of them."""
        if self.dead:
            return
        self.remaining -= count
        if self.remaining == 0:
            self.remaining = -1


# -- protobuf wire format -----------------------------------------------------------------

def _varint(data: bytes, position: int) -> tuple[int, int]:
    if position < len(data) and data[position] < 0x80:  # one byte: tags, small values
        return data[position], position + 1
    result, shift = 0, 0
    while True:
        if position >= len(data):
            raise NeedMoreData
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise MalformedFrame(None, "protobuf varint longer than 10 bytes")


def _field_at(data: bytes, position: int) -> tuple[int, int, int | None, int, int]:
    """The field whose tag is at ``position``: ``(number, wire_type, value, value_start, next)``, as
    :func:`_fields` yields them, and where the next field starts."""
    tag, position = _varint(data, position)
    number, wire_type = tag >> 3, tag & 7
    if wire_type == 0:
        value, position = _varint(data, position)
        return number, wire_type, value, position, position
    if wire_type == 2:
        length, position = _varint(data, position)
        return number, wire_type, length, position, position + length
    if wire_type == 1:
        return number, wire_type, None, position, position + 8
    if wire_type == 5:
        return number, wire_type, None, position, position + 4
    raise MalformedFrame(None, f"protobuf field {number} with wire type {wire_type}")


def _fields(data: bytes, start: int, end: int):
    """Yield ``(number, wire_type, value, value_start)`` of the fields in ``data[start:end]``.

    ``value`` is the integer for varints and the declared length for length-delimited
    fields (whose bytes may lie beyond ``data``: only the fields before the cut are read).
    Raises :class:`NeedMoreData` when ``data`` ends inside a field header.
    """
    position = start
    while position < end:
        number, wire_type, value, value_start, position = _field_at(data, position)
        yield number, wire_type, value, value_start


def _first_length_delimited(data: bytes, start: int, end: int, number: int) -> tuple[int, int] | None:
    """``(length, value_start)`` of the first length-delimited field ``number`` in ``data[start:end]``
    (as the first such of :func:`_fields`, which reads no further), or ``None``."""
    position = start
    while position < end:
        found, wire_type, value, value_start, position = _field_at(data, position)
        if found == number and wire_type == 2:
            return value, value_start
    return None


def parse_recv_tensor_request(body: bytes) -> tuple[int | None, str | None]:
    """``(step_id, rendezvous_key)`` of a serialised ``RecvTensorRequest``."""
    step_id, key = None, None
    position, end = 0, len(body)
    try:
        while position < end:
            number, wire_type, value, start, position = _field_at(body, position)
            if number == 1 and wire_type == 0:
                step_id = value - (1 << 64) if value >= 1 << 63 else value
            elif number == 2 and wire_type == 2:
                if start + value > end:
                    raise NeedMoreData
                key = body[start: start + value].decode("utf-8", errors="replace")
    except NeedMoreData:
        raise MalformedFrame(None, "RecvTensorRequest ends inside a field") from None
    return step_id, key


def tensor_content_bytes(prefix: bytes) -> int | None:
    """The length of ``tensor.tensor_content`` of a ``RecvTensorResponse`` from its first bytes.

    ``None`` if the response has no raw tensor content, or if ``prefix`` ends before it.
    """
    try:
        tensor = _first_length_delimited(prefix, 0, len(prefix), 1)  # tensor: TensorProto
        if tensor is None:
            return None
        length, start = tensor
        content = _first_length_delimited(prefix, start, start + length, 4)  # tensor_content
    except NeedMoreData:
        return None
    return None if content is None else content[0]


def describe_message(path: str | None, from_client: bool, length: int, compressed: bool,
                     kept: bytes) -> GrpcMessage:
    """The :class:`GrpcMessage` for a message of the RPC ``path`` (RecvTensor fields filled in)."""
    if path != RECV_TENSOR_PATH or compressed:
        return _make_message(length, compressed, None, None, None)
    if from_client:
        if len(kept) < length:
            return _make_message(length, compressed, None, None, None)
        step_id, key = parse_recv_tensor_request(kept)
        return _make_message(length, compressed, step_id, key, None)
    return _make_message(length, compressed, None, None, tensor_content_bytes(kept))


def looks_like_recv_tensor_request(body: bytes) -> bool:
    """Whether a request body that came without readable headers is a ``RecvTensorRequest``: its
    field 2 is a rendezvous key (``/job:...;incarnation;/job:...;tensor;frame:iter``). Used for
    a capture that began mid-connection, where ``:path`` refers to HPACK state never captured.

    >>> looks_like_recv_tensor_request(b"\\x08\\x07\\x12\\x05a;b;c")
    False
    """
    try:
        _, key = parse_recv_tensor_request(body)
    except MalformedFrame:
        return False
    parsed = RendezvousKey.parse(key) if key else None
    return parsed is not None and parsed.src_device.startswith("/job:") and parsed.dst_device.startswith("/job:")


def keep_bytes_for(path: str | None, from_client: bool) -> int:
    """How much of each message body :class:`GrpcDeframer` must keep for :func:`describe_message`."""
    if path != RECV_TENSOR_PATH:
        return 0
    return MAX_KEPT_REQUEST_BYTES if from_client else RESPONSE_PREFIX_BYTES
