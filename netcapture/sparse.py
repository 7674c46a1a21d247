"""The payload of a large DATA frame, kept only where it will be read.

A DATA frame's payload matters to the decoder only in a few places: its pad length (the first
byte, for a PADDED frame), and the bytes the gRPC layer reads (each message's 5-byte prefix
and the first bytes of a message it keeps, :class:`netcapture.grpc.GrpcDeframer`). Tensors
travel in DATA frames of up to 16 MiB; copying them, as the frame splitter once did, cost
more than all the rest of decoding on large-packet captures. :class:`SparseBytes` holds a
payload's length and the pieces that were kept; :class:`netcapture.http2.FrameSplitter`
decides which (from a :class:`netcapture.grpc.NeedCursor`) as the bytes arrive.

Reading a byte that was not kept is a bug in that decision, not a property of the input: it
raises :class:`NotKept` rather than answer wrongly.
"""

from __future__ import annotations

import bisect


class NotKept(RuntimeError):
    """Bytes of a :class:`SparseBytes` were read that were never kept."""


class SparseBytes:
    """``length`` bytes of which only some pieces are known; the rest were skipped unread.

    ``len()``, indexing (an ``int``) and :meth:`read` (a ``bytes`` copy of a range that was
    kept) work as on ``bytes``; slicing returns a view (another :class:`SparseBytes`) without
    copying, so that a large payload can be cut (its padding removed) and handed on.
    """

    __slots__ = ("_length", "_offset", "_pieces", "_starts")

    def __init__(self, length: int, pieces: list[tuple[int, bytes]], offset: int = 0):
        # pieces: (start, bytes) in ascending order, none overlapping or adjacent to another
        self._length = length
        self._pieces = pieces
        self._starts = [start for start, _ in pieces]
        self._offset = offset  # where this view starts in the pieces' coordinates

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        kept = sum(len(piece) for _, piece in self._pieces)
        return f"SparseBytes({self._length} bytes, {kept} kept in {len(self._pieces)} pieces)"

    def __getitem__(self, key: int | slice) -> int | SparseBytes:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._length)
            if step != 1:
                raise ValueError("SparseBytes slices take no step")
            stop = max(start, stop)
            return SparseBytes(stop - start, self._pieces, self._offset + start) if start or stop != self._length \
                else self
        if key < 0:
            key += self._length
        if not 0 <= key < self._length:
            raise IndexError("index out of range")
        return self.read(key, key + 1)[0]

    def read(self, start: int, stop: int) -> bytes:
        """The bytes ``start:stop`` (clipped to the length, as a slice is), which must have been kept."""
        start, stop = max(0, min(start, self._length)), max(0, min(stop, self._length))
        if stop <= start:
            return b""
        at, end = self._offset + start, self._offset + stop
        index = bisect.bisect_right(self._starts, at) - 1
        if index >= 0:
            piece_start, piece = self._pieces[index]
            if end <= piece_start + len(piece):
                return piece[at - piece_start: end - piece_start]
        raise NotKept(f"bytes {start}-{stop} of a {self._length}-byte payload were skipped, not kept")


class SparseBuilder:
    """Collects the kept pieces of one payload as its bytes arrive, in order."""

    __slots__ = ("_pieces",)

    def __init__(self) -> None:
        self._pieces: list[tuple[int, bytearray]] = []

    def keep(self, start: int, data) -> None:
        """Keep ``data`` (bytes-like), which sits at ``start`` in the payload."""
        if not len(data):
            return
        if self._pieces:
            last_start, last = self._pieces[-1]
            if last_start + len(last) == start:
                last += data
                return
        self._pieces.append((start, bytearray(data)))

    def build(self, length: int) -> SparseBytes:
        return SparseBytes(length, [(start, bytes(piece)) for start, piece in self._pieces])
