"""Stream packets out of pcap and pcapng files, gzip-compressed or not, in bounded memory.

Records are read by scapy's raw readers (:class:`scapy.utils.RawPcapReader`,
:class:`scapy.utils.RawPcapNgReader`), which stream a file object and do not dissect
packets. This module opens the file (through :mod:`gzip` when it starts with the gzip
magic), hands scapy the stream, and turns what scapy returns into :class:`RawPacket`
records numbered from 1 in file order (Wireshark's frame numbers), with their capture
time in integer nanoseconds (pcap: micro- or nanosecond magic; pcapng: ``if_tsresol``
and ``if_tsoffset``), so that no resolution is lost.

scapy ends its readers silently on most defects (``EOFError`` for a cut file and for a
corrupt block alike, ``Scapy_Exception`` at the file header, a swallowed ``OSError`` for
a corrupt gzip stream). The stream scapy reads, :class:`_Source`, counts the bytes it
hands out and notes where the file ended, so that each stop is classified:

- The file ends inside a record (tcpdump killed, a copy taken while it was writing, a cut
  gzip stream): :class:`~netcapture.errors.TruncatedCapture` after every complete record
  has been yielded. The message names the file and the number of packets read;
  :func:`netcapture.read_capture` turns it into a warning by default (``strict=False``),
  since every packet before the cut is valid.
- A packet cut by the snapshot length (``caplen < len``) is yielded as it is; see
  :func:`check_snaplen`, which the decoders call so that the error says "capture with
  -s 0".
- Anything else that cannot be right (bad magic, an impossible block length, mismatched
  block lengths, a packet longer than its block, a corrupt gzip stream):
  :class:`~netcapture.errors.MalformedCapture`, with scapy's reason when it gave one.

Memory stays bounded: no single read may exceed :data:`MAX_RECORD_BYTES`, and scapy's
pcap reader reads at most :data:`MAX_PCAP_RECORD_BYTES` of a record (4 x its MTU, above
the 65,549-byte frames of a loopback capture). A pcap record that claims more is reported
as malformed rather than cut short; tcpdump never writes one longer than its 262,144-byte
maximum snaplen, and only records of 262,141-262,144 bytes are lost to this bound.

On top of scapy's pcapng reader (:class:`_PcapNgReader`): a new section header forgets
the interfaces of the previous section, ``if_tsoffset`` is applied, interface statistics
blocks report kernel drops (``isb_ifdrop``, in :attr:`PcapReader.kernel_drops`), a packet
that names an undescribed interface or claims more bytes than its block holds is
malformed (scapy would skip or shorten it), and decryption-secret and process blocks are
skipped unread. A simple packet block has no timestamp: its packets get time 0, as in
Wireshark. scapy's own warnings about these files are kept off the console (the reason
goes into the error message instead).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import logging
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from scapy.data import MTU
from scapy.error import Scapy_Exception
from scapy.utils import RawPcapNgReader, RawPcapReader

from netcapture.errors import CaptureError, CorruptTail, MalformedCapture, SnaplenError, TruncatedCapture

GZIP_MAGIC = b"\x1f\x8b"
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": 1000,  # microseconds (little or big endian): ns per tick
    b"\xa1\xb2\xc3\xd4": 1000,
    b"\x4d\x3c\xb2\xa1": 1,  # nanoseconds
    b"\xa1\xb2\x3c\x4d": 1,
}
# Far above any real frame (64 KiB loopback, 256 KiB snaplen, GSO/BIG TCP up to ~512 KiB):
# a larger pcapng block means a corrupt file, and refusing it keeps memory bounded.
MAX_RECORD_BYTES = 16 << 20
# scapy's pcap reader reads at most this much of one record and skips the rest.
MAX_PCAP_RECORD_BYTES = 4 * MTU
_READ_BUFFER_BYTES = 1 << 18  # file reads (and gzip's output) go through a buffer this large
PCAP_FILE_HEADER_BYTES = 24
PCAP_RECORD_HEADER_BYTES = 16

# Link types (LINKTYPE_* values of the pcap/pcapng specification) the decoders know.
LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276


@dataclasses.dataclass(frozen=True, slots=True)
class RawPacket:
    """One captured packet as stored in the file.

    ``number`` counts packets from 1 in file order; ``time_ns`` is the capture time in
    nanoseconds since the epoch. ``caplen_bytes`` is what the file holds, ``wire_bytes``
    what was on the wire: they differ when the capture's snaplen cut the packet.
    """

    number: int
    time_ns: int
    linktype: int
    caplen_bytes: int
    wire_bytes: int
    data: bytes

    @property
    def time_s(self) -> float:
        return self.time_ns / 1e9


@dataclasses.dataclass(frozen=True)
class Interface:
    """A capture interface (pcap files have exactly one)."""

    linktype: int
    snaplen_bytes: int
    ticks_per_second: int  # timestamp resolution: 10**6 for microseconds, 10**9 for nanoseconds
    offset_s: int = 0

    def to_ns(self, ticks: int) -> int:
        return ticks * 1_000_000_000 // self.ticks_per_second + self.offset_s * 1_000_000_000


class _ScapyReasons(logging.Filter):
    """Keeps scapy's warnings about capture files off the console; :meth:`take` returns the first
    since the last :meth:`take` (later ones tend to repeat it without the detail)."""

    def __init__(self) -> None:
        super().__init__()
        self.last = ""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if not text.startswith(("Pcap:", "PcapNg:")):
            return True
        if self.last:
            return False
        try:
            self.last = record.getMessage()
        except (TypeError, ValueError):
            self.last = text
        return False

    def take(self) -> str:
        last, self.last = self.last, ""
        return last


_REASONS = _ScapyReasons()
# First in line, so that scapy's rate limit on repeated warnings does not hide a reason.
logging.getLogger("scapy.runtime").filters.insert(0, _REASONS)


class _RecordTooLarge(Exception):
    """A read longer than :data:`MAX_RECORD_BYTES`: the length field it comes from is corrupt."""


class _BadRecord(Exception):
    """A pcapng block that scapy would accept but that cannot be right (the message says why)."""


class _Source:
    """The stream scapy reads: it counts the bytes handed out and notes how the file ended.

    ``head`` holds bytes already read from ``handle`` (the magic), handed out first.
    After a read comes back short, :attr:`at_eof` is set; :attr:`gzip_cut` when gzip
    reported a compressed stream that ends early, :attr:`error` when the compressed data is
    corrupt (scapy swallows both). A read longer than :data:`MAX_RECORD_BYTES` raises
    :class:`_RecordTooLarge` instead of allocating it.
    """

    def __init__(self, handle: BinaryIO, head: bytes):
        self.name = str(getattr(handle, "name", ""))
        self._handle = handle
        self._head = head
        self.position = 0
        self.at_eof = False
        self.gzip_cut = False
        self.error: Exception | None = None
        if head:
            self.read = self._read_head  # type: ignore[method-assign]  # until the head is handed out

    def read(self, size: int = -1) -> bytes:
        if not 0 <= size <= MAX_RECORD_BYTES:
            raise _RecordTooLarge(size)
        try:
            data = self._handle.read(size)
        except EOFError:  # gzip: "Compressed file ended before the end-of-stream marker was reached"
            self.gzip_cut = True
            raise
        except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            self.error = exc
            raise
        self.position += len(data)
        if len(data) < size:
            self.at_eof = True
        return data

    def _read_head(self, size: int = -1) -> bytes:
        if not 0 <= size <= MAX_RECORD_BYTES:
            raise _RecordTooLarge(size)
        data, self._head = self._head[:size], self._head[size:]
        self.position += len(data)
        if not self._head:
            del self.read  # back to the class's read
        if len(data) < size:
            data += self.read(size - len(data))
        return data


class _PcapNgReader(RawPcapNgReader):
    """scapy's pcapng reader with the additions the module docstring lists."""

    def __init__(self, filename, fdesc=None, magic=None):
        self.drops_by_interface: dict[int, int] = {}
        self.kernel_drops: int | None = None
        self.last_interface = 0
        super().__init__(filename, fdesc, magic)
        self.blocktypes = {1: self._read_block_idb, 2: self._read_block_pkt, 3: self._read_block_spb,
                           5: self._read_block_isb, 6: self._read_block_epb}

    def _read_block_shb(self) -> None:
        super()._read_block_shb()
        self.interfaces = []  # interface numbers start again in each section
        self.drops_by_interface = {}

    def _read_block_idb(self, block: bytes, size: int) -> None:
        super()._read_block_idb(block, size)
        offset = self._read_options(block[8:]).get(14)  # if_tsoffset, seconds
        if isinstance(offset, bytes) and len(offset) == 8:
            self.interfaces[-1][2]["tsoffset"] = struct.unpack(self.endian + "q", offset)[0]

    def _read_block_epb(self, block: bytes, size: int):
        if len(block) >= 20:
            interface, caplen = struct.unpack_from(self.endian + "I8xI", block)
            self._check_packet(interface, caplen, len(block) - 20)
        return super()._read_block_epb(block, size)

    def _read_block_pkt(self, block: bytes, size: int):
        if len(block) >= 20:
            interface, caplen = struct.unpack_from(self.endian + "H10xI", block)
            self._check_packet(interface, caplen, len(block) - 20)
        return super()._read_block_pkt(block, size)

    def _read_block_spb(self, block: bytes, size: int):
        """Simple packet block. scapy cuts it to the interface's snaplen, where 0 means no limit."""
        self._check_packet(0, 0, 0)
        if len(block) < 4:
            raise _BadRecord("a simple packet block is too short")
        wirelen = struct.unpack_from(self.endian + "I", block)[0]
        linktype, snaplen, options = self.interfaces[0]
        data = block[4: 4 + min(wirelen, snaplen or wirelen)]
        return data, self.PacketMetadata(linktype=linktype, tsresol=options["tsresol"], tshigh=None, tslow=None,
                                          wirelen=wirelen, comments=None, ifname=None, direction=None,
                                          process_information={})

    def _read_block_isb(self, block: bytes, size: int) -> None:
        """Interface statistics block: ``isb_ifdrop`` is cumulative per interface."""
        if len(block) < 12:
            return None
        interface = struct.unpack_from(self.endian + "I", block)[0]
        drops = self._read_options(block[12:]).get(5)
        if isinstance(drops, bytes) and len(drops) == 8:
            self.drops_by_interface[interface] = struct.unpack(self.endian + "Q", drops)[0]
        self.kernel_drops = sum(self.drops_by_interface.values())
        return None

    def _check_packet(self, interface: int, caplen: int, available: int) -> None:
        if interface >= len(self.interfaces):
            raise _BadRecord(f"a packet refers to interface {interface}, which the file never described")
        if caplen > available:
            raise _BadRecord(f"a packet claims {caplen} captured bytes, its block holds {available}")
        self.last_interface = interface


class _GzipStream(io.RawIOBase):
    """A gzip file as a raw stream whose early end is an ``EOFError`` that loses no bytes.

    ``GzipFile.read(n)`` drops the bytes it has decompressed in the call when the compressed
    data ends before its end marker; ``read1`` decompresses one step at a time, so every
    byte before the cut is handed out before the ``EOFError``.
    """

    def __init__(self, path: Path):
        super().__init__()
        self._gzip = gzip.open(path, "rb")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._gzip.read1(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._gzip.close()
        super().close()


def open_capture(path: str | os.PathLike) -> BinaryIO:
    """Open ``path`` for streaming, decompressing gzip on the fly."""
    path = Path(path)
    try:
        with open(path, "rb") as probe:
            compressed = probe.read(2) == GZIP_MAGIC
        if compressed:
            # GzipFile.read is slow for many small reads; a C buffer in front of it is not.
            return io.BufferedReader(_GzipStream(path), buffer_size=_READ_BUFFER_BYTES)  # type: ignore[return-value]
        return open(path, "rb", buffering=_READ_BUFFER_BYTES)
    except OSError as exc:
        raise MalformedCapture(path, f"cannot open: {exc.strerror or exc}") from None


class PcapReader:
    """Iterate over the packets of one pcap or pcapng file (optionally gzip-compressed).

    Use as an iterator of :class:`RawPacket`; afterwards, :attr:`packets_read`,
    :attr:`format` (``"pcap"`` or ``"pcapng"``), :attr:`interfaces` and
    :attr:`kernel_drops` (from pcapng statistics blocks, ``None`` if the file has none)
    describe what was read. :attr:`interfaces` is current during the iteration too.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.packets_read = 0
        self.format = ""
        self.interfaces: list[Interface] = []
        self.kernel_drops: int | None = None
        self.notes: list[str] = []  # what reading had to work around, one line each
        self._described: list | None = None  # scapy's interface list that self.interfaces mirrors

    def __iter__(self) -> Iterator[RawPacket]:
        with open_capture(self.path) as handle:
            yield from self._classify_stops(self._read(handle))

    def resume_pcap(self, header: bytes, boundary: int) -> Iterator[RawPacket]:
        """Read on from byte ``boundary`` of the plain (not compressed) classic pcap at
        :attr:`path`, whose first :attr:`packets_read` packets were read by other means (the fast
        reader of :mod:`netcapture.pcapbatch`), ``header`` being its 24-byte file header.

        Everything from there on (the packets, a cut or corrupt tail, a second capture's file
        header) is read and reported exactly as :meth:`__iter__` would, with the same packet
        numbers and byte offsets.
        """
        with open(self.path, "rb", buffering=_READ_BUFFER_BYTES) as handle:
            handle.seek(boundary)
            source = _Source(handle, header)
            source.position = boundary - len(header)  # offsets in messages stay the file's
            yield from self._classify_stops(self._pcap(source, PCAP_MAGICS[header[:4]], describe=False))

    def _read(self, handle: BinaryIO) -> Iterator[RawPacket]:
        head = handle.read(4)
        source = _Source(handle, head)
        if head in PCAP_MAGICS:
            self.format = "pcap"
            yield from self._pcap(source, PCAP_MAGICS[head])
        elif head == PCAPNG_MAGIC:
            self.format = "pcapng"
            yield from self._pcapng(source)
        elif len(head) < 4:
            raise MalformedCapture(self.path, "empty or too short to be a pcap/pcapng capture")
        else:
            raise MalformedCapture(self.path, f"not a pcap or pcapng capture (starts with {head.hex()})")

    def _classify_stops(self, packets: Iterator[RawPacket]) -> Iterator[RawPacket]:
        """``packets``, with the internal reasons reading can stop turned into capture errors."""
        try:
            yield from packets
        except EOFError:
            raise self._truncated("the gzip stream ends early") from None
        except _RecordTooLarge as exc:
            raise self._damaged(None, f"a record after {self.packets_read} packets claims {exc} bytes") from None
        except _BadRecord as exc:
            raise self._damaged(None, f"after {self.packets_read} packets: {exc}") from None
        except (OSError, zlib.error) as exc:
            raise self._corrupt(exc) from None

    # -- pcap -----------------------------------------------------------------------------

    def _pcap(self, source: _Source, ns_per_tick: int, describe: bool = True) -> Iterator[RawPacket]:
        """The records of a classic pcap whose file header ``source`` starts with. ``describe``:
        add its interface to :attr:`interfaces` (not when resuming a file already described)."""
        _REASONS.take()
        try:
            reader = RawPcapReader(source)
        except Scapy_Exception:
            raise self._stopped(source, 0, "the file header") from None
        linktype = reader.linktype & 0x0FFFFFF  # the upper bits may carry FCS information
        if describe:
            self.interfaces.append(Interface(linktype, reader.snaplen, 1_000_000_000 // ns_per_tick))
        boundary = source.position
        while True:
            number = self.packets_read + 1
            try:
                data, meta = reader._read_packet(MAX_PCAP_RECORD_BYTES)
            except EOFError as exc:
                if self._clean_end(source, boundary):
                    return
                raise self._stopped(source, boundary, f"the header of packet {number}", exc) from None
            first_bytes = struct.pack(reader.endian + "IIII", meta.sec, meta.usec, meta.caplen, meta.wirelen)
            if first_bytes[:4] in PCAP_MAGICS and meta.caplen == 0:
                # A second capture's file header where a record should start: files written
                # back to back (cat a.pcap b.pcap). Read on with the second header.
                yield from self._next_pcap(source, boundary, first_bytes)
                return
            if len(data) < meta.caplen:
                if meta.caplen > MAX_PCAP_RECORD_BYTES:
                    raise self._damaged(boundary, f"packet {number} claims {meta.caplen} captured bytes, more than "
                                        f"a pcap record may hold ({MAX_PCAP_RECORD_BYTES})")
                raise self._stopped(source, boundary, f"packet {number}")
            boundary = source.position
            self.packets_read = number
            yield RawPacket(number, meta.sec * 1_000_000_000 + meta.usec * ns_per_tick, linktype, meta.caplen,
                            max(meta.wirelen, meta.caplen), data)

    def _next_pcap(self, source: _Source, boundary: int, first_bytes: bytes) -> Iterator[RawPacket]:
        """Read on in the capture whose file header starts at byte ``boundary`` (its first 16
        bytes, ``first_bytes``, already read)."""
        rest = source.read(8)
        if len(rest) < 8:
            raise self._truncated(f"the file header of a second capture at byte {boundary}")
        self.notes.append(f"a second capture's file header at byte {boundary}, after {self.packets_read} packets: "
                          "captures written back to back, read as one")
        inner = _Source(source, first_bytes + rest)
        inner.position = boundary  # offsets in messages stay the file's
        yield from self._pcap(inner, PCAP_MAGICS[first_bytes[:4]])

    # -- pcapng ---------------------------------------------------------------------------

    def _pcapng(self, source: _Source) -> Iterator[RawPacket]:
        _REASONS.take()
        try:
            reader = _PcapNgReader(source)
        except Scapy_Exception:
            raise self._stopped(source, 0, "the section header") from None
        try:
            while True:
                boundary = source.position
                _REASONS.last = ""
                try:
                    record = reader._read_block(MAX_RECORD_BYTES)
                except (EOFError, Scapy_Exception) as exc:  # Scapy_Exception: a later section header
                    if self._clean_end(source, boundary):
                        return
                    raise self._stopped(source, boundary, f"the pcapng block after packet {self.packets_read}",
                                        exc) from None
                if record is None:
                    continue
                data, meta = record
                self._sync_interfaces(reader)
                time_ns = 0 if meta.tshigh is None else \
                    self.interfaces[reader.last_interface].to_ns((meta.tshigh << 32) | meta.tslow)
                self.packets_read += 1
                yield RawPacket(self.packets_read, time_ns, meta.linktype, len(data), max(meta.wirelen, len(data)),
                                data)
        finally:
            self.kernel_drops = reader.kernel_drops
            self._sync_interfaces(reader)

    def _sync_interfaces(self, reader: _PcapNgReader) -> None:
        if len(self.interfaces) == len(reader.interfaces) and self._described is reader.interfaces:
            return
        self._described = reader.interfaces
        self.interfaces = [Interface(linktype, snaplen, options["tsresol"], options.get("tsoffset", 0))
                           for linktype, snaplen, options in reader.interfaces]

    # -- why reading stopped --------------------------------------------------------------

    @staticmethod
    def _clean_end(source: _Source, boundary: int) -> bool:
        """The file ended exactly where a record would start."""
        return source.at_eof and source.position == boundary and not source.gzip_cut and source.error is None

    def _stopped(self, source: _Source, boundary: int, where: str, exc: Exception | None = None) -> CaptureError:
        """The error for scapy stopping before a clean end, ``where`` being what it was reading.

        ``exc`` is scapy's exception; its message, or else scapy's first warning, is the reason.
        """
        reason = _REASONS.take()
        reason = str(exc) if exc is not None and str(exc) else reason
        if source.error is not None:
            return self._corrupt(source.error)
        if source.gzip_cut:
            return self._truncated("the gzip stream ends early")
        if source.at_eof and source.position > boundary:
            return self._truncated(f"inside {where}")
        return self._damaged(boundary, f"{where} is malformed" + (f" ({reason})" if reason else ""))

    def _damaged(self, boundary: int | None, problem: str) -> MalformedCapture:
        """A record that cannot be right: after readable packets a :class:`CorruptTail` (they are
        kept), else the file is no capture."""
        if self.packets_read:
            where = "" if boundary is None else f", at byte {boundary}"
            return CorruptTail(self.path, f"{problem}{where}: the file is damaged from there on; "
                               f"the {self.packets_read} packets before it are used")
        return MalformedCapture(self.path, f"{problem}; the file is corrupt")

    def _truncated(self, where: str) -> TruncatedCapture:
        return TruncatedCapture(self.path, f"{where}: the file is cut short after {self.packets_read} "
                                "complete packets (was tcpdump stopped cleanly?)")

    def _corrupt(self, exc: Exception) -> MalformedCapture:
        return MalformedCapture(self.path, f"corrupt compressed data after {self.packets_read} packets ({exc})")


def iter_packets(path: str | os.PathLike, stop_at_damage: bool = False) -> Iterator[RawPacket]:
    """The packets of ``path`` in file order (see :class:`PcapReader`). ``stop_at_damage``: end
    quietly where the file is cut or its tail is corrupt (for a second pass over a capture whose
    damage the first pass reported) instead of raising."""
    if not stop_at_damage:
        return iter(PcapReader(path))
    return _until_damage(PcapReader(path))


def _until_damage(reader: PcapReader) -> Iterator[RawPacket]:
    try:
        yield from reader
    except (TruncatedCapture, CorruptTail):
        return


def check_snaplen(path: str | os.PathLike, packet: RawPacket, snaplen_bytes: int | None = None) -> None:
    """Raise :class:`SnaplenError` if ``packet`` was cut by the capture's snapshot length."""
    if packet.caplen_bytes < packet.wire_bytes:
        limit = f" (snaplen {snaplen_bytes})" if snaplen_bytes else ""
        raise SnaplenError(path, f"packet {packet.number} was cut to {packet.caplen_bytes} of its "
                           f"{packet.wire_bytes} bytes by the capture's snapshot length{limit}, so TCP payload "
                           "is missing: capture with -s 0")


def salvage_copy(path: str | os.PathLike, destination: str | os.PathLike) -> tuple[int, list[str]]:
    """Write every packet of ``path`` that can be read to a clean nanosecond pcap at ``destination``:
    what comes before a cut or a corrupt tail, and the captures of a file holding several back
    to back. Returns ``(packets, notes)``, the notes saying what was worked around (one line
    each). For tools that reject a damaged file whole. Raises :class:`MalformedCapture` when
    the packets have more than one link type (a classic pcap holds one).
    """
    reader = PcapReader(path)
    notes: list[str] = []
    with open(destination, "wb") as handle:
        writer: PcapWriter | None = None
        linktype = None
        try:
            for packet in reader:
                if writer is None:
                    linktype = packet.linktype
                    writer = PcapWriter(handle, linktype, snaplen=MAX_PCAP_RECORD_BYTES, nanoseconds=True)
                elif packet.linktype != linktype:
                    raise MalformedCapture(Path(path), "packets of several link types cannot be salvaged into one "
                                           "pcap")
                writer.write(packet.time_ns, packet.data, packet.wire_bytes)
        except (TruncatedCapture, CorruptTail) as exc:
            notes.append(exc.problem)
    return reader.packets_read, reader.notes + notes


class PcapWriter:
    """Write a classic pcap file (microsecond or nanosecond timestamps), one record at a time.

    For building small test captures and filtered copies; not atomic (use
    :func:`tfbase.fileio.atomic_output` around it for outputs users keep).
    """

    def __init__(self, handle: BinaryIO, linktype: int = LINKTYPE_ETHERNET, snaplen: int = 262144,
                 nanoseconds: bool = False):
        self._handle = handle
        self._nano = nanoseconds
        magic = 0xA1B23C4D if nanoseconds else 0xA1B2C3D4
        handle.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))

    def write(self, time_ns: int, data: bytes, wire_bytes: int | None = None) -> None:
        sec, rest_ns = divmod(time_ns, 1_000_000_000)
        frac = rest_ns if self._nano else rest_ns // 1000
        wire = len(data) if wire_bytes is None else wire_bytes
        self._handle.write(struct.pack("<IIII", sec, frac, len(data), wire) + data)
