"""Stream packets out of pcap and pcapng files, gzip-compressed or not, in bounded memory.

:func:`iter_packets` reads one record at a time, so memory does not grow with the file.
It yields :class:`RawPacket` records numbered from 1 in file order (Wireshark's frame
numbers) with their capture time in integer nanoseconds, which keeps microsecond and
nanosecond captures exact.

Defects, and what happens:

- The file ends inside a record (tcpdump killed, a copy taken while it was writing, a cut
  gzip stream): :class:`~netcapture.errors.TruncatedCapture` after every complete record
  has been yielded. The message names the file and the number of packets read;
  :func:`netcapture.read_capture` turns it into a warning by default (``strict=False``),
  since every packet before the cut is valid.
- A packet cut by the snapshot length (``caplen < len``) is yielded as it is; see
  :func:`check_snaplen`, which the decoders call so that the error says "capture with
  -s 0".
- Anything else that cannot be right (bad magic, an impossible record length, a corrupt
  gzip stream): :class:`~netcapture.errors.MalformedCapture`.

pcapng: section header, interface description (link type, snaplen, ``if_tsresol``,
``if_tsoffset``), enhanced, simple and obsolete packet blocks, and interface statistics
(``isb_ifdrop``, reported in :attr:`PcapReader.kernel_drops`). Other blocks are skipped.
A simple packet block has no timestamp: its packets get time 0, as in Wireshark.

This module does not use scapy: scapy's readers cut records at 65,535 bytes by default
(loopback frames reach 65,549) and end silently on a truncated file.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import struct
import zlib
from pathlib import Path
from typing import BinaryIO, Iterator

from netcapture.errors import MalformedCapture, SnaplenError, TruncatedCapture

GZIP_MAGIC = b"\x1f\x8b"
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_BYTE_ORDER_MAGIC = 0x1A2B3C4D
# Far above any real frame (64 KiB loopback, 256 KiB snaplen, GSO/BIG TCP up to ~512 KiB):
# a larger record length means a corrupt file, and refusing it keeps memory bounded.
MAX_RECORD_BYTES = 16 << 20

_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),  # microseconds, little endian
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),  # nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1),
}

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
    """A pcapng interface (pcap files have exactly one)."""

    linktype: int
    snaplen_bytes: int
    ns_per_tick_num: int  # a timestamp tick is num/den nanoseconds
    ns_per_tick_den: int
    offset_s: int = 0

    def to_ns(self, ticks: int) -> int:
        return ticks * self.ns_per_tick_num // self.ns_per_tick_den + self.offset_s * 1_000_000_000


class _GzipStream(io.RawIOBase):
    """A gzip file as a raw stream whose early end is a flag, not an exception.

    ``gzip`` raises ``EOFError`` when the compressed data ends before its end marker; in a
    buffered read that exception would also drop the good bytes decompressed just before
    it. Here the stream simply ends, :attr:`cut_short` is set, and the reader decides.
    """

    def __init__(self, path: Path):
        super().__init__()
        self._gzip = gzip.open(path, "rb")
        self.cut_short = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.cut_short:
            return 0
        try:
            # read1: at most one decompression step, so an early end loses no decoded bytes
            data = self._gzip.read1(len(buffer))
        except EOFError:
            self.cut_short = True
            return 0
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
            return io.BufferedReader(_GzipStream(path), buffer_size=1 << 18)  # type: ignore[return-value]
        return open(path, "rb", buffering=1 << 18)
    except OSError as exc:
        raise MalformedCapture(path, f"cannot open: {exc.strerror or exc}") from None


def _cut_short(handle: BinaryIO) -> bool:
    return bool(getattr(getattr(handle, "raw", None), "cut_short", False))


class PcapReader:
    """Iterate over the packets of one pcap or pcapng file (optionally gzip-compressed).

    Use as an iterator of :class:`RawPacket`; afterwards, :attr:`packets_read`,
    :attr:`format` (``"pcap"`` or ``"pcapng"``), :attr:`interfaces` and
    :attr:`kernel_drops` (from pcapng statistics blocks, ``None`` if the file has none)
    describe what was read.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.packets_read = 0
        self.format = ""
        self.interfaces: list[Interface] = []
        self.kernel_drops: int | None = None
        self._drops_by_interface: dict[int, int] = {}

    def __iter__(self) -> Iterator[RawPacket]:
        with open_capture(self.path) as handle:
            try:
                magic = handle.read(4)
                if len(magic) < 4:
                    raise MalformedCapture(self.path, "empty or too short to be a pcap/pcapng capture")
                if magic in _PCAP_MAGICS:
                    self.format = "pcap"
                    yield from self._pcap(handle, magic)
                elif struct.unpack("<I", magic)[0] == PCAPNG_SHB:
                    self.format = "pcapng"
                    yield from self._pcapng(handle, magic)
                else:
                    raise MalformedCapture(self.path, f"not a pcap or pcapng capture (starts with {magic.hex()})")
            except EOFError:
                # gzip: "Compressed file ended before the end-of-stream marker was reached"
                raise self._truncated("the gzip stream ends early") from None
            except (zlib.error, gzip.BadGzipFile, OSError) as exc:
                raise MalformedCapture(self.path, f"corrupt compressed data after {self.packets_read} "
                                       f"packets ({exc})") from None

    def _truncated(self, where: str, handle: BinaryIO | None = None) -> TruncatedCapture:
        if handle is not None and _cut_short(handle):
            where += " (the gzip stream ends early)"
        return TruncatedCapture(self.path, f"{where}: the file is cut short after {self.packets_read} "
                                "complete packets (was tcpdump stopped cleanly?)")

    def _read_exact(self, handle: BinaryIO, n: int, what: str) -> bytes:
        data = handle.read(n)
        if len(data) < n:
            raise self._truncated(f"inside {what}", handle)
        return data

    # -- pcap -----------------------------------------------------------------------------

    def _pcap(self, handle: BinaryIO, magic: bytes) -> Iterator[RawPacket]:
        endian, ns_per_tick = _PCAP_MAGICS[magic]
        header = self._read_exact(handle, 20, "the file header")
        _major, _minor, _zone, _sigfigs, snaplen, network = struct.unpack(endian + "HHiIII", header)
        linktype = network & 0x0FFFFFF  # the upper bits may carry FCS information
        self.interfaces.append(Interface(linktype, snaplen, ns_per_tick, 1))
        record = struct.Struct(endian + "IIII")
        number = 0
        while True:
            head = handle.read(16)
            if not head:
                if _cut_short(handle):
                    raise self._truncated("the gzip stream ends early")
                return
            if len(head) < 16:
                raise self._truncated(f"inside the header of packet {number + 1}", handle)
            sec, frac, caplen, wirelen = record.unpack(head)
            if caplen > MAX_RECORD_BYTES:
                raise MalformedCapture(self.path, f"packet {number + 1} claims {caplen} captured bytes; "
                                       "the file is corrupt")
            data = self._read_exact(handle, caplen, f"packet {number + 1}")
            number += 1
            self.packets_read = number
            yield RawPacket(number, sec * 1_000_000_000 + frac * ns_per_tick, linktype, caplen,
                            max(wirelen, caplen), data)

    # -- pcapng ---------------------------------------------------------------------------

    def _pcapng(self, handle: BinaryIO, first: bytes) -> Iterator[RawPacket]:
        endian = "<"
        block_type_raw = first
        number = 0
        while True:
            if block_type_raw is None:
                block_type_raw = handle.read(4)
                if not block_type_raw:
                    if _cut_short(handle):
                        raise self._truncated("the gzip stream ends early")
                    return
                if len(block_type_raw) < 4:
                    raise self._truncated("inside a block header", handle)
            length_raw = self._read_exact(handle, 4, "a block header")
            if struct.unpack("<I", block_type_raw)[0] == PCAPNG_SHB:
                # A section header sets the byte order of everything up to the next one.
                bom = self._read_exact(handle, 4, "a section header")
                if bom == struct.pack("<I", PCAPNG_BYTE_ORDER_MAGIC):
                    endian = "<"
                elif bom == struct.pack(">I", PCAPNG_BYTE_ORDER_MAGIC):
                    endian = ">"
                else:
                    raise MalformedCapture(self.path, "pcapng section header with a bad byte-order magic")
                total = struct.unpack(endian + "I", length_raw)[0]
                self._check_block_length(total, 28)
                self._read_exact(handle, total - 12, "a section header")
                self.interfaces = []
                self._drops_by_interface = {}
                block_type_raw = None
                continue
            block_type = struct.unpack(endian + "I", block_type_raw)[0]
            total = struct.unpack(endian + "I", length_raw)[0]
            self._check_block_length(total, 12)
            body = self._read_exact(handle, total - 12, f"a block (type {block_type:#x})")
            trailer = self._read_exact(handle, 4, "a block trailer")
            if struct.unpack(endian + "I", trailer)[0] != total:
                raise MalformedCapture(self.path, f"pcapng block after packet {number} has mismatched lengths")
            block_type_raw = None
            if block_type == 1:
                self.interfaces.append(self._interface(body, endian))
            elif block_type in (6, 2, 3):
                packet = self._packet_block(block_type, body, endian, number + 1)
                number += 1
                self.packets_read = number
                yield packet
            elif block_type == 5:
                self._statistics(body, endian)

    def _check_block_length(self, total: int, minimum: int) -> None:
        if total < minimum or total % 4 or total > MAX_RECORD_BYTES:
            raise MalformedCapture(self.path, f"pcapng block of impossible length {total} after "
                                   f"{self.packets_read} packets")

    @staticmethod
    def _options(data: bytes, endian: str) -> Iterator[tuple[int, bytes]]:
        offset = 0
        while offset + 4 <= len(data):
            code, length = struct.unpack_from(endian + "HH", data, offset)
            if code == 0:
                return
            yield code, data[offset + 4: offset + 4 + length]
            offset += 4 + (length + 3) // 4 * 4

    def _interface(self, body: bytes, endian: str) -> Interface:
        if len(body) < 8:
            raise MalformedCapture(self.path, "pcapng interface block too short")
        linktype, _reserved, snaplen = struct.unpack_from(endian + "HHI", body)
        num, den, offset_s = 1000, 1, 0  # default resolution: microseconds
        for code, value in self._options(body[8:], endian):
            if code == 9 and value:  # if_tsresol
                resolution = value[0]
                if resolution & 0x80:
                    num, den = 1_000_000_000, 1 << (resolution & 0x7F)
                elif resolution <= 9:
                    num, den = 10 ** (9 - resolution), 1
                else:
                    num, den = 1, 10 ** (resolution - 9)
            elif code == 14 and len(value) == 8:  # if_tsoffset, seconds
                offset_s = struct.unpack(endian + "q", value)[0]
        return Interface(linktype, snaplen, num, den, offset_s)

    def _interface_at(self, index: int, packet_number: int) -> Interface:
        if index >= len(self.interfaces):
            raise MalformedCapture(self.path, f"packet {packet_number} refers to interface {index}, "
                                   "which the file never described")
        return self.interfaces[index]

    def _packet_block(self, block_type: int, body: bytes, endian: str, number: int) -> RawPacket:
        if block_type == 6:  # enhanced packet block
            if len(body) < 20:
                raise MalformedCapture(self.path, f"packet {number}: enhanced packet block too short")
            index, high, low, caplen, wirelen = struct.unpack_from(endian + "IIIII", body)
            start, time_ticks = 20, (high << 32) | low
        elif block_type == 2:  # obsolete packet block
            if len(body) < 20:
                raise MalformedCapture(self.path, f"packet {number}: packet block too short")
            index, _drops, high, low, caplen, wirelen = struct.unpack_from(endian + "HHIIII", body)
            start, time_ticks = 20, (high << 32) | low
        else:  # simple packet block: interface 0, no timestamp
            if len(body) < 4:
                raise MalformedCapture(self.path, f"packet {number}: simple packet block too short")
            index, start, time_ticks = 0, 4, None
            wirelen = struct.unpack_from(endian + "I", body)[0]
            interface = self._interface_at(0, number)
            caplen = min(wirelen, interface.snaplen_bytes or wirelen, len(body) - 4)
        interface = self._interface_at(index, number)
        if start + caplen > len(body):
            raise MalformedCapture(self.path, f"packet {number} claims {caplen} captured bytes, "
                                   f"its block holds {len(body) - start}")
        time_ns = 0 if time_ticks is None else interface.to_ns(time_ticks)
        return RawPacket(number, time_ns, interface.linktype, caplen, max(wirelen, caplen),
                         body[start: start + caplen])

    def _statistics(self, body: bytes, endian: str) -> None:
        if len(body) < 12:
            return
        index = struct.unpack_from(endian + "I", body)[0]
        for code, value in self._options(body[12:], endian):
            if code == 5 and len(value) == 8:  # isb_ifdrop: cumulative per interface
                self._drops_by_interface[index] = struct.unpack(endian + "Q", value)[0]
        self.kernel_drops = sum(self._drops_by_interface.values())


def iter_packets(path: str | os.PathLike) -> Iterator[RawPacket]:
    """The packets of ``path`` in file order (see :class:`PcapReader`)."""
    return iter(PcapReader(path))


def check_snaplen(path: str | os.PathLike, packet: RawPacket, snaplen_bytes: int | None = None) -> None:
    """Raise :class:`SnaplenError` if ``packet`` was cut by the capture's snapshot length."""
    if packet.caplen_bytes < packet.wire_bytes:
        limit = f" (snaplen {snaplen_bytes})" if snaplen_bytes else ""
        raise SnaplenError(path, f"packet {packet.number} was cut to {packet.caplen_bytes} of its "
                           f"{packet.wire_bytes} bytes by the capture's snapshot length{limit}, so TCP payload "
                           "is missing: capture with -s 0")


class PcapWriter:
    """Write a classic pcap file (microsecond or nanosecond timestamps), one record at a time.

    For building small test captures and filtered copies; not atomic (use
    :func:`tfsim.fileio.atomic_output` around it for outputs users keep).
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
