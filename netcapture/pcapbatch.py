"""Read a pcap or pcapng file as batches of indexed packets, without copying their bytes.

:class:`BatchReader` is the fast path's reader (:mod:`netcapture.fastpath`). A plain file is
memory-mapped a window of :data:`WINDOW_BYTES` at a time; a gzip file is decompressed a chunk
of :data:`GZIP_CHUNK_BYTES` at a time through the same stream the reference reader uses
(:func:`netcapture.pcap.open_capture`). Over each buffer the compiled kernels of
:mod:`netcapture.pcapindex` index the records and decode their link, IP and TCP headers into
a :class:`PacketBatch` of arrays (at most :data:`BATCH_PACKETS` packets), which the consumer
handles before the next one is made; no packet's bytes are copied unless the consumer asks.
Memory stays flat in the capture's size: one window (or chunk) and one batch at a time.

In a pcapng file a kernel indexes the enhanced packet blocks; every other block (section
headers, interface descriptions, statistics, ...) is read by the reference reader's own code,
one block at a time (:class:`_PcapngBlocks`), which keeps the interfaces, byte order and
kernel drops as the reference reader would. The file's interfaces must share one link type
(one the kernels decode) and one snapshot length.

What it does not take, it leaves to the reference reader (:class:`netcapture.pcap.PcapReader`):

- files too short to hold a pcap file header, link types outside
  :data:`netcapture.layers.FAST_LINKTYPES` (or pcapng interfaces that differ in link type or
  snapshot length), and anything but a regular file (a pipe is read once, by the reference
  reader) raise :class:`Unavailable` before any packet is read: the caller decodes with the
  reference path. So does a file that cannot be memory-mapped.
- In a plain pcap file, a record the kernels stop at (cut by the end of the file, longer than a
  pcap record may be, or a second capture's file header: :data:`~netcapture.pcapindex.SCAN_STOP`)
  is read, and everything after it, by :meth:`PcapReader.resume_pcap`, which reports it
  exactly as it would have (the same error, message and packet count).
- In a gzip file the byte offsets of such a stop depend on how gzip's stream was read, so any
  damage at all (a cut or corrupt stream, or a stop) raises :class:`Unavailable` once some
  packets may have been handed out: the caller throws away what it decoded and starts again
  with the reference path. So does, in a pcapng file, plain or gzip, any block the fast reader
  would not read as the reference reader does (a packet block with options, a simple or
  obsolete packet block, a block cut, malformed or larger than :data:`MAX_PCAPNG_BLOCK_BYTES`).
"""

from __future__ import annotations

import dataclasses
import io
import mmap
import os
import stat
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from netcapture.errors import CaptureError
from netcapture.layers import FAST_LINKTYPES
from netcapture.pcap import (
    GZIP_MAGIC,
    MAX_PCAP_RECORD_BYTES,
    PCAP_FILE_HEADER_BYTES,
    PCAP_MAGICS,
    PCAP_RECORD_HEADER_BYTES,
    PCAPNG_MAGIC,
    Interface,
    PcapReader,
    RawPacket,
    open_capture,
)
from netcapture.pcapindex import (
    IPV4_ADDRESS_BYTES,
    IPV4_SRC_AT,
    IPV4_VERSION,
    IPV6_ADDRESS_BYTES,
    IPV6_SRC_AT,
    PCAPNG_EPB,
    SCAN_BLOCK,
    SCAN_END,
    SCAN_MORE,
    SCAN_STOP,
    FlowTable,
    assign_flows,
    decode_headers,
    scan_blocks,
    scan_records,
)

# A mapped window of a plain file. The pages of the window count in the process's RSS (the
# kernel maps 64 KiB around each page touched, so even reading only headers touches most):
# 64 MiB windows added some 60 MiB to the peak, and 8 MiB windows decode as fast.
WINDOW_BYTES = 8 << 20
# Decompressed bytes read from a gzip file at a time. Larger reads are slower: each is a fresh
# allocation, faulted in page by page (wide_1gbit: 0.65 s to read in 8 MiB pieces, 0.26 s in 1 MiB).
GZIP_CHUNK_BYTES = 1 << 20
BATCH_PACKETS = 1 << 15  # packets indexed per batch: bounds the arrays, amortises the calls
_LINKTYPE_BITS = 0x0FFFFFF  # netcapture.pcap: the upper bits of a pcap's link type may carry FCS information
_BIG_ENDIAN_MAGICS = (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d")
_SNAPLEN_AT, _LINKTYPE_AT = 16, 20  # fields of the pcap file header

if WINDOW_BYTES < 2 * (mmap.ALLOCATIONGRANULARITY + PCAP_RECORD_HEADER_BYTES + MAX_PCAP_RECORD_BYTES):
    raise ImportError("netcapture.pcapbatch.WINDOW_BYTES cannot hold the largest pcap record")
# pcapng: the largest block the fast reader takes (any window holds it; larger ones, which the
# reference reader takes up to netcapture.pcap.MAX_RECORD_BYTES, are left to it), and how much
# of the file's start is read for the interface that gives the link type.
MAX_PCAPNG_BLOCK_BYTES = WINDOW_BYTES // 2
PCAPNG_HEAD_BYTES = 64 << 10
_SHB_HEAD_BYTES = 12  # a section header block's type, length and byte-order magic
_BLOCK_HEAD_BYTES = 8  # any other block's type and length
_BYTE_ORDER_MAGICS = {b"\x1a\x2b\x3c\x4d": "big", b"\x4d\x3c\x2b\x1a": "little"}
_MAX_TICKS_PER_SECOND = 1_000_000_000  # pcapindex.scan_blocks' arithmetic holds up to nanoseconds
_MAX_OFFSET_S = 1 << 31


class Unavailable(Exception):
    """The fast reader does not read this file (or, for gzip, gave up on it): use the reference path."""


@dataclasses.dataclass(frozen=True, eq=False)
class PacketBatch:
    """Consecutive packets of a capture, as arrays of :mod:`netcapture.pcapindex`'s kernels.

    ``view`` is the buffer all offsets refer to (valid only until the consumer returns);
    packet ``i`` is number ``first_number + i``. TCP fields are set where ``kind`` is
    :data:`~netcapture.pcapindex.TCP`; ``flow`` numbers a direction of a connection (see
    :meth:`BatchReader.flow_of`).
    """

    view: memoryview
    first_number: int
    count: int
    caplen: np.ndarray
    wirelen: np.ndarray
    time_ns: np.ndarray
    kind: np.ndarray
    ip: np.ndarray
    version: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    seq: np.ndarray
    ack: np.ndarray
    flags: np.ndarray
    payload_start: np.ndarray
    payload_end: np.ndarray
    flow: np.ndarray


class _Arrays:
    """The arrays the kernels fill, allocated once per reader."""

    def __init__(self, size: int):
        self.data_start = np.empty(size, np.int64)
        self.caplen = np.empty(size, np.int64)
        self.wirelen = np.empty(size, np.int64)
        self.time_ns = np.empty(size, np.int64)
        self.kind = np.empty(size, np.int8)
        self.ip = np.empty(size, np.int64)
        self.version = np.empty(size, np.int8)
        self.sport = np.empty(size, np.int64)
        self.dport = np.empty(size, np.int64)
        self.seq = np.empty(size, np.int64)
        self.ack = np.empty(size, np.int64)
        self.flags = np.empty(size, np.int64)
        self.payload_start = np.empty(size, np.int64)
        self.payload_end = np.empty(size, np.int64)
        self.flow = np.empty(size, np.int64)


class BatchReader:
    """The packets of a pcap or pcapng file (plain or gzip) for :mod:`netcapture.fastpath`.

    ``reader`` is the :class:`~netcapture.pcap.PcapReader` whose attributes (``format``,
    ``interfaces``, ``packets_read``, ``notes``) the reader keeps current, as if it had read the
    file, and which reads on where the fast reader stops. Raises :class:`Unavailable` for a
    file it does not take (module docstring).
    """

    def __init__(self, path: str | os.PathLike, reader: PcapReader):
        self.path = Path(path)
        self.reader = reader
        try:
            if not stat.S_ISREG(self.path.stat().st_mode):
                raise Unavailable
            with open(self.path, "rb") as probe:
                self.compressed = probe.read(len(GZIP_MAGIC)) == GZIP_MAGIC
            with open_capture(self.path) as handle:
                header = handle.read(PCAP_FILE_HEADER_BYTES)
        except (CaptureError, OSError, EOFError, zlib.error):
            raise Unavailable from None  # the reference reader reports it
        self.flows = FlowTable()
        self._arrays = _Arrays(BATCH_PACKETS)
        if header[:4] == PCAPNG_MAGIC:
            self.format = "pcapng"
            self.header = b""
            self.linktype, self.snaplen = self._pcapng_link()
            self.blocks: _PcapngBlocks | None = None
            return
        if len(header) < PCAP_FILE_HEADER_BYTES or header[:4] not in PCAP_MAGICS:
            raise Unavailable  # no capture: the reference reader says what is wrong
        self.format = "pcap"
        self.header = header
        self.big_endian = header[:4] in _BIG_ENDIAN_MAGICS
        order = "big" if self.big_endian else "little"
        self.ns_per_tick = PCAP_MAGICS[header[:4]]
        self.linktype = int.from_bytes(header[_LINKTYPE_AT:_LINKTYPE_AT + 4], order) & _LINKTYPE_BITS
        self.snaplen = int.from_bytes(header[_SNAPLEN_AT:_SNAPLEN_AT + 4], order)
        if self.linktype not in FAST_LINKTYPES:
            raise Unavailable  # scapy's dissectors decode it, one packet at a time

    def _pcapng_link(self) -> tuple[int, int]:
        """The link type and snapshot length of a pcapng file's packets: those of the interfaces
        its first blocks describe, which must agree (and be a link type the kernels decode)."""
        try:
            with open_capture(self.path) as handle:
                head = handle.read(PCAPNG_HEAD_BYTES)
        except (CaptureError, OSError, EOFError, zlib.error):
            raise Unavailable from None
        blocks = _PcapngBlocks(PcapReader(self.path), None, None)
        position = 0
        while position < len(head) and (blocks.scapy is None or _block_type(head, position, blocks) != PCAPNG_EPB):
            position = blocks.take(head, position, len(head) < PCAPNG_HEAD_BYTES)
            if position is None:
                break
        links = {(i.linktype, i.snaplen_bytes) for i in blocks.interfaces}
        if len(links) != 1 or next(iter(links))[0] not in FAST_LINKTYPES:
            raise Unavailable
        return next(iter(links))

    def run(self, on_batch: Callable[[PacketBatch], None], on_packet: Callable[[RawPacket], None]) -> None:
        """Hand every packet to ``on_batch`` (batches) or, after a stop the reference reader reads
        on from, ``on_packet`` (one :class:`RawPacket` at a time). Raises what the reference
        reader raises there (:class:`~netcapture.errors.TruncatedCapture`,
        :class:`~netcapture.errors.CorruptTail`, ...), and :class:`Unavailable` for a damaged
        gzip file."""
        self.reader.format = self.format
        if self.format == "pcapng":
            self.blocks = _PcapngBlocks(self.reader, self.linktype, self.snaplen)
        else:
            self.reader.interfaces.append(Interface(self.linktype, self.snaplen, 1_000_000_000 // self.ns_per_tick))
        if self.compressed:
            self._run_gzip(on_batch)
        else:
            stop = self._run_plain(on_batch)
            if stop is not None:
                if self.format == "pcapng":
                    raise Unavailable  # the reference reader judges it, from the start
                for packet in self.reader.resume_pcap(self.header, stop):
                    on_packet(packet)
        if self.format == "pcapng":
            self.reader.kernel_drops = self.blocks.scapy.kernel_drops

    def flow_of(self, batch: PacketBatch, index: int) -> tuple[str, int, str, int]:
        """``(src_ip, src_port, dst_ip, dst_port)`` of packet ``index`` of ``batch``, as
        :func:`netcapture.layers.decode_tcp` gives them (addresses as ``inet_ntop`` text)."""
        import socket

        ip = int(batch.ip[index])
        if batch.version[index] == IPV4_VERSION:
            family, source, size = socket.AF_INET, ip + IPV4_SRC_AT, IPV4_ADDRESS_BYTES
        else:
            family, source, size = socket.AF_INET6, ip + IPV6_SRC_AT, IPV6_ADDRESS_BYTES
        view = batch.view
        return (socket.inet_ntop(family, view[source: source + size]), int(batch.sport[index]),
                socket.inet_ntop(family, view[source + size: source + 2 * size]), int(batch.dport[index]))

    # -- plain files: mapped windows ----------------------------------------------------

    def _run_plain(self, on_batch: Callable[[PacketBatch], None]) -> int | None:
        """Index the file window by window; returns the offset of a stop, or ``None`` at a clean end."""
        size = self.path.stat().st_size
        position = len(self.header)
        with open(self.path, "rb") as handle:
            while position < size:
                base = position - position % mmap.ALLOCATIONGRANULARITY
                length = min(WINDOW_BYTES, size - base)
                try:
                    window = mmap.mmap(handle.fileno(), length, access=mmap.ACCESS_READ, offset=base)
                except (OSError, ValueError):
                    raise Unavailable from None  # a file system without mmap: start again, packet by packet
                try:
                    position, verdict = self._index(window, base, position - base, base + length == size, on_batch)
                finally:
                    _close(window)
                if verdict == SCAN_STOP:
                    return position
                if verdict == SCAN_END:
                    return None
        return None

    # -- gzip files: decompressed chunks --------------------------------------------------

    def _run_gzip(self, on_batch: Callable[[PacketBatch], None]) -> None:
        base, pending = len(self.header), b""
        try:
            with open_capture(self.path) as handle:
                handle.read(len(self.header))
                while True:
                    data = handle.read(GZIP_CHUNK_BYTES)
                    at_eof = len(data) < GZIP_CHUNK_BYTES
                    buffer = pending + data if pending else data
                    reached, verdict = self._index(buffer, base, 0, at_eof, on_batch)
                    if verdict == SCAN_STOP:
                        raise Unavailable
                    if verdict == SCAN_END:
                        return
                    base, pending = reached, buffer[reached - base:]
        except (CaptureError, OSError, EOFError, zlib.error):
            raise Unavailable from None

    # -- both --------------------------------------------------------------------------

    def _index(self, buffer, base: int, position: int, at_eof: bool,
               on_batch: Callable[[PacketBatch], None]) -> tuple[int, int]:
        """Index and hand out the records of ``buffer`` (file offset ``base``) from ``position``;
        returns ``(file offset reached, verdict)``."""
        scan, decode, assign = scan_records, decode_headers, assign_flows
        arrays = self._arrays
        array = np.frombuffer(buffer, dtype=np.uint8)
        view = memoryview(buffer)
        blocks = self.blocks if self.format == "pcapng" else None
        try:
            while True:
                if blocks is None:
                    count, position, verdict = scan(array, position, at_eof, self.big_endian, self.ns_per_tick,
                                                    arrays.data_start, arrays.caplen, arrays.wirelen, arrays.time_ns)
                else:
                    count, position, verdict = scan_blocks(
                        array, position, at_eof, blocks.big_endian, MAX_PCAPNG_BLOCK_BYTES, blocks.ticks_per_second,
                        blocks.offset_ns, arrays.data_start, arrays.caplen, arrays.wirelen, arrays.time_ns)
                if count:
                    decode(array, count, arrays.data_start, arrays.caplen, self.linktype, arrays.kind, arrays.ip,
                           arrays.version, arrays.sport, arrays.dport, arrays.seq, arrays.ack, arrays.flags,
                           arrays.payload_start, arrays.payload_end)
                    self.flows.reserve(count)
                    self.flows.used = assign(array, count, arrays.kind, arrays.ip, arrays.version, arrays.sport,
                                             arrays.dport, self.flows.slots, self.flows.keys, self.flows.used,
                                             arrays.flow)
                    on_batch(PacketBatch(
                        view, self.reader.packets_read + 1, count, arrays.caplen[:count], arrays.wirelen[:count],
                        arrays.time_ns[:count], arrays.kind[:count], arrays.ip[:count], arrays.version[:count],
                        arrays.sport[:count], arrays.dport[:count], arrays.seq[:count], arrays.ack[:count],
                        arrays.flags[:count], arrays.payload_start[:count], arrays.payload_end[:count],
                        arrays.flow[:count]))
                    self.reader.packets_read += count
                if verdict == SCAN_BLOCK:
                    taken = blocks.take(buffer, position, at_eof)
                    if taken is None:  # the block goes on past the buffer
                        return base + position, SCAN_MORE
                    position = taken
                    continue
                if verdict == SCAN_STOP and blocks is not None:
                    raise Unavailable  # the reference reader judges it, from the start
                if verdict != SCAN_MORE or count < BATCH_PACKETS:
                    return base + position, verdict
        finally:
            view.release()
            del array


class _PcapngBlocks:
    """The blocks of a pcapng file other than enhanced packet blocks, read by the reference
    reader's own code (:class:`netcapture.pcap._PcapNgReader`, one block at a time), and what
    they tell :func:`~netcapture.pcapindex.scan_blocks`: the byte order, and per interface its
    timestamp resolution and offset. ``reader``'s interfaces are kept as the reference reader
    keeps them. A block that holds a packet, or that it cannot read as the reference reader
    reads it in the file, raises :class:`Unavailable`, as do interfaces of another link type or
    snapshot length than ``linktype`` and ``snaplen`` (``None``: any).
    """

    def __init__(self, reader: PcapReader, linktype: int | None, snaplen: int | None):
        self.reader = reader
        self.linktype, self.snaplen = linktype, snaplen
        self.scapy = None  # the reference reader's pcapng reader, once the section header is read
        self.big_endian = False
        self.interfaces: list[Interface] = []
        self.ticks_per_second = np.ones(0, np.int64)
        self.offset_ns = np.zeros(0, np.int64)

    def take(self, buffer, position: int, at_eof: bool) -> int | None:
        """Read the block at ``position`` of ``buffer``; return where the next block starts, or
        ``None`` when ``buffer`` ends inside it (and more of the file follows)."""
        from netcapture.pcap import _PcapNgReader

        size = len(buffer)
        head = bytes(buffer[position: position + _SHB_HEAD_BYTES])
        section = head[:4] == PCAPNG_MAGIC
        if len(head) < (_SHB_HEAD_BYTES if section else _BLOCK_HEAD_BYTES):
            if at_eof:
                raise Unavailable
            return None
        order = _BYTE_ORDER_MAGICS.get(head[_BLOCK_HEAD_BYTES:_SHB_HEAD_BYTES]) if section \
            else "big" if self.big_endian else "little"
        if order is None or (self.scapy is None and not section):
            raise Unavailable
        length = int.from_bytes(head[4:_BLOCK_HEAD_BYTES], order)
        if length < _SHB_HEAD_BYTES or length % 4 or length > MAX_PCAPNG_BLOCK_BYTES:
            raise Unavailable
        if position + length > size:
            if at_eof:
                raise Unavailable
            return None
        block = io.BytesIO(bytes(buffer[position: position + length]))
        try:
            if self.scapy is None:
                self.scapy = _PcapNgReader(block)  # reads the section header
            else:
                self.scapy.f = block
                if self.scapy._read_block(MAX_PCAPNG_BLOCK_BYTES) is not None:
                    raise Unavailable  # a packet in a block scan_blocks does not read
        except Exception:  # anything the reference reader reports: it reads the file from the start
            raise Unavailable from None
        if block.tell() != length:
            raise Unavailable
        self.big_endian = self.scapy.endian == ">"
        self._describe()
        return position + length

    def _describe(self) -> None:
        self.reader._sync_interfaces(self.scapy)
        interfaces = self.reader.interfaces
        if interfaces is self.interfaces:
            return
        for interface in interfaces:
            if (self.linktype is not None and interface.linktype != self.linktype) \
                    or (self.snaplen is not None and interface.snaplen_bytes != self.snaplen) \
                    or not 0 < interface.ticks_per_second <= _MAX_TICKS_PER_SECOND \
                    or abs(interface.offset_s) >= _MAX_OFFSET_S:
                raise Unavailable
        self.interfaces = interfaces
        self.ticks_per_second = np.array([i.ticks_per_second for i in interfaces], np.int64)
        self.offset_ns = np.array([i.offset_s * 1_000_000_000 for i in interfaces], np.int64)


def _block_type(buffer, position: int, blocks: _PcapngBlocks) -> int | None:
    """The type of the block at ``position`` (``None`` if cut)."""
    word = bytes(buffer[position: position + 4])
    return int.from_bytes(word, "big" if blocks.big_endian else "little") if len(word) == 4 else None


def _close(window: mmap.mmap) -> None:
    """Unmap a window; if something still holds a view of it, the collector will, later."""
    try:
        window.close()
    except BufferError:
        pass
