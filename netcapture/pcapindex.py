"""Compiled passes over a buffer of pcap records or pcapng blocks: where each packet is, what its TCP header says.

The fast reader (:mod:`netcapture.pcapbatch`) hands these kernels a buffer of a capture's
bytes (a memory-mapped window of the file, or decompressed gzip output) and gets back arrays,
one entry per packet, that the decoder (:mod:`netcapture.fastpath`) reads instead of
dissecting packets in Python:

- :func:`scan_records` walks the records: where each packet's data starts, its captured and
  wire length, its time in nanoseconds. It stops at anything the reference reader
  (:class:`netcapture.pcap.PcapReader`) would have to judge: a record cut by the end of the
  file, one longer than :data:`~netcapture.pcap.MAX_PCAP_RECORD_BYTES`, a second capture's
  file header. The reference reader then reads on from that byte, so every error and note is
  its own. :func:`scan_blocks` does the same for a pcapng file's enhanced packet blocks, and
  stops at any other block (the caller reads it) or any it would not read as the reference
  reader does.
- :func:`decode_headers` does what :func:`netcapture.layers.decode_tcp` does for the link types
  of :data:`netcapture.layers.FAST_LINKTYPES`, byte for byte (the same bounds checks, the same
  packets rejected), without making strings or copying payload: it records where the IP
  header and the TCP payload lie in the buffer.
- :func:`assign_flows` numbers each direction of each TCP connection (IP version, addresses and
  ports) with an open-addressing hash table that persists across buffers, so that Python looks
  up a small integer instead of building address strings for every packet.

This module imports numba (some 0.2 s): it is imported when a capture is first decoded, not
with :mod:`netcapture`. The kernels are compiled with ``cache=True``, so only their first use
in a checkout pays for compiling them (a few seconds, ``first_call_s`` in
``bench/results/decode.json``); later processes load them from numba's on-disk cache.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from netcapture.pcap import (
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    MAX_PCAP_RECORD_BYTES,
    PCAP_RECORD_HEADER_BYTES,
)

# scan_records' verdicts
SCAN_MORE = 0  # the buffer ends inside a record, or the arrays are full: call again with more
SCAN_END = 1  # the file ends on a record boundary
SCAN_STOP = 2  # a record the reference reader must judge starts at the returned offset

# decode_headers' verdicts per packet
NOT_TCP = 0  # decode_tcp returns None
TCP = 1

# A pcap file magic (its first four bytes, read as a little-endian word) where a record's
# seconds field should be: files written back to back. netcapture.pcap.PCAP_MAGICS.
_MAGIC_WORDS = (0xA1B2C3D4, 0xD4C3B2A1, 0xA1B23C4D, 0x4D3CB2A1)
_NS_PER_S = 1_000_000_000
# A pcap record header: seconds, fraction (micro- or nanoseconds), captured and wire length.
_SECONDS_AT, _FRACTION_AT, _CAPLEN_AT, _WIRELEN_AT = 0, 4, 8, 12

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
_VLAN_TAGS = (0x8100, 0x88A8, 0x9100)
_IPV6_EXTENSIONS = (0, 43, 60, 135, 139, 140)
PROTO_TCP = 6
_AF_INET = 2
_AF_INET6 = (10, 24, 28, 30)  # Linux, BSDs, macOS
# Link headers: their length, and where the network protocol's ethertype sits.
_ETHERNET_HEADER_BYTES, _ETHERNET_TYPE_AT = 14, 12
_VLAN_TAG_BYTES, _VLAN_TYPE_AT = 4, 2  # a tag's inner ethertype follows its control field
_SLL_HEADER_BYTES, _SLL_TYPE_AT = 16, 14
_SLL2_HEADER_BYTES, _SLL2_TYPE_AT = 20, 0
_ETHERTYPE_BYTES = 2
_NULL_HEADER_BYTES = 4  # the address family, a 32-bit word
_VERSION_SHIFT = 4  # IP's version is the first byte's upper nibble
IPV4_VERSION, IPV6_VERSION = 4, 6
# IPv4 (decode_tcp unpacks its first 10 bytes: up to the protocol)
_IPV4_FIXED_BYTES = 10
_IPV4_LENGTH_MASK, _HEADER_WORD_BYTES = 0x0F, 4  # header length in 32-bit words, the first byte's lower nibble
_IPV4_TOTAL_LENGTH_AT, _IPV4_FRAGMENT_AT, _IPV4_PROTOCOL_AT = 2, 6, 9
_IPV4_FRAGMENT_BITS = 0x3FFF  # more-fragments flag and fragment offset
IPV4_SRC_AT, IPV4_ADDRESS_BYTES = 12, 4
# IPv6 (decode_tcp unpacks its first 7 bytes: version word, payload length, next header)
_IPV6_FIXED_BYTES = 7
_IPV6_PAYLOAD_LENGTH_AT, _IPV6_NEXT_HEADER_AT = 4, 6
_IPV6_HEADER_BYTES = 40
IPV6_SRC_AT, IPV6_ADDRESS_BYTES = 8, 16
_IPV6_EXTENSION_UNIT = 8  # an extension header's length field counts 8-byte units beyond the first
_IPV6_EXTENSION_FIXED_BYTES = 2  # its next header and length
# TCP: ports, sequence and acknowledgement numbers, data offset (in words) and flags
_TCP_FIXED_BYTES = 14
_TCP_SPORT_AT, _TCP_DPORT_AT, _TCP_SEQ_AT, _TCP_ACK_AT, _TCP_OFFSET_FLAGS_AT = 0, 2, 4, 8, 12
_TCP_DATA_OFFSET_SHIFT = 12
_TCP_MIN_HEADER_BYTES = 20
_TCP_FLAG_BITS = 0x1FF

# Flow table: the key words of one direction, and the hash table's load limit.
FLOW_KEY_WORDS = 5  # source address (2 words), destination address (2), version and ports
FLOW_TABLE_MIN_SLOTS = 1 << 12
_EMPTY = -1
_HASH_MULTIPLIER = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: spreads the words' bits
_HASH_FOLD = 29  # folds the product's high bits into the low ones the mask keeps
_BYTE_BITS = 8
_WORD_BYTES = 8
_VERSION_AT_BIT, _SPORT_AT_BIT = 32, 16  # where the version and source port sit in a key's last word


_inline = njit(inline="always", cache=True)


@_inline
def u16be(buf, at):
    return (np.int64(buf[at]) << 8) | np.int64(buf[at + 1])


@_inline
def u32be(buf, at):
    return (np.int64(buf[at]) << 24) | (np.int64(buf[at + 1]) << 16) | (np.int64(buf[at + 2]) << 8) \
        | np.int64(buf[at + 3])


@_inline
def u32le(buf, at):
    return (np.int64(buf[at + 3]) << 24) | (np.int64(buf[at + 2]) << 16) | (np.int64(buf[at + 1]) << 8) \
        | np.int64(buf[at])


@_inline
def u32(buf, at, big_endian):
    return u32be(buf, at) if big_endian else u32le(buf, at)


@njit(cache=True)
def scan_records(buf, position, at_eof, big_endian, ns_per_tick, out_data, out_caplen, out_wirelen,
                 out_time):
    """Index the records from ``position``; returns ``(packets, next position, verdict)``."""
    size = buf.shape[0]
    capacity = out_data.shape[0]
    count = 0
    while count < capacity:
        if size - position < PCAP_RECORD_HEADER_BYTES:
            if at_eof and position == size:
                return count, position, SCAN_END
            return count, position, (SCAN_STOP if at_eof else SCAN_MORE)
        caplen = u32(buf, position + _CAPLEN_AT, big_endian)
        seconds_word = u32le(buf, position + _SECONDS_AT)
        if caplen == 0 and (seconds_word == _MAGIC_WORDS[0] or seconds_word == _MAGIC_WORDS[1]
                            or seconds_word == _MAGIC_WORDS[2] or seconds_word == _MAGIC_WORDS[3]):
            return count, position, SCAN_STOP
        if caplen > MAX_PCAP_RECORD_BYTES:
            return count, position, SCAN_STOP
        end = position + PCAP_RECORD_HEADER_BYTES + caplen
        if end > size:
            return count, position, (SCAN_STOP if at_eof else SCAN_MORE)
        out_data[count] = position + PCAP_RECORD_HEADER_BYTES
        out_caplen[count] = caplen
        out_wirelen[count] = u32(buf, position + _WIRELEN_AT, big_endian)
        out_time[count] = u32(buf, position + _SECONDS_AT, big_endian) * _NS_PER_S \
            + u32(buf, position + _FRACTION_AT, big_endian) * ns_per_tick
        count += 1
        position = end
    return count, position, SCAN_MORE


# pcapng (scan_blocks): an enhanced packet block is its type and length, the interface, the
# timestamp's two words, the captured and wire lengths, the packet (padded to 4 bytes), no
# options, and its length again.
SCAN_BLOCK = 3  # a block scan_blocks leaves to the caller starts at the returned offset
PCAPNG_EPB = 6
_BLOCK_FIXED_BYTES = 12  # type, length, trailing length
_EPB_FIXED_BYTES = 20  # interface, timestamp (high, low), captured length, wire length
_EPB_INTERFACE_AT, _EPB_TS_HIGH_AT, _EPB_CAPLEN_AT, _EPB_WIRELEN_AT = 8, 12, 20, 24
_EPB_DATA_AT = 28
_BLOCK_ALIGN = 4
_TS_HIGH_LIMIT = 1 << 31  # timestamps of 2**63 ticks or more are left to the reference reader
_TIME_LIMIT_S = 1 << 33  # ... and times past the year 2242


@njit(cache=True)
def scan_blocks(buf, position, at_eof, big_endian, max_block_bytes, ticks_per_second, offset_ns, out_data,
                out_caplen, out_wirelen, out_time):
    """Index the pcapng enhanced packet blocks from ``position`` as :func:`scan_records` indexes pcap
    records; returns ``(packets, next position, verdict)``.

    ``ticks_per_second`` and ``offset_ns`` describe the section's interfaces (``if_tsresol``,
    ``if_tsoffset``). Any other block is the caller's (:data:`SCAN_BLOCK`); a packet block the
    reference reader would not read as it is read here (options, an interface not described, a
    length that does not add up, a block cut by the end of the file) is :data:`SCAN_STOP`.
    """
    size = buf.shape[0]
    capacity = out_data.shape[0]
    interfaces = ticks_per_second.shape[0]
    count = 0
    while count < capacity:
        if size - position < 2 * _BLOCK_ALIGN:
            if at_eof and position == size:
                return count, position, SCAN_END
            return count, position, (SCAN_STOP if at_eof else SCAN_MORE)
        if u32(buf, position, big_endian) != PCAPNG_EPB:
            return count, position, SCAN_BLOCK
        length = u32(buf, position + _BLOCK_ALIGN, big_endian)
        if length < _BLOCK_FIXED_BYTES + _EPB_FIXED_BYTES or length % _BLOCK_ALIGN \
                or length - _BLOCK_FIXED_BYTES > max_block_bytes:
            return count, position, SCAN_STOP
        end = position + length
        if end > size:
            return count, position, (SCAN_STOP if at_eof else SCAN_MORE)
        if u32(buf, end - _BLOCK_ALIGN, big_endian) != length:
            return count, position, SCAN_STOP
        interface = u32(buf, position + _EPB_INTERFACE_AT, big_endian)
        caplen = u32(buf, position + _EPB_CAPLEN_AT, big_endian)
        padded = caplen + (-caplen) % _BLOCK_ALIGN
        high = u32(buf, position + _EPB_TS_HIGH_AT, big_endian)
        if interface >= interfaces or _BLOCK_FIXED_BYTES + _EPB_FIXED_BYTES + padded != length \
                or high >= _TS_HIGH_LIMIT:
            return count, position, SCAN_STOP
        ticks = (high << 32) | u32(buf, position + _EPB_TS_HIGH_AT + _BLOCK_ALIGN, big_endian)
        per_second = ticks_per_second[interface]
        seconds = ticks // per_second
        if seconds >= _TIME_LIMIT_S:
            return count, position, SCAN_STOP
        # Interface.to_ns without the overflow of ticks * 10**9: (ticks % per_second) * 10**9 fits
        # (ticks_per_second is at most 10**9).
        out_time[count] = seconds * _NS_PER_S + (ticks % per_second) * _NS_PER_S // per_second + offset_ns[interface]
        wirelen = u32(buf, position + _EPB_WIRELEN_AT, big_endian)
        out_data[count] = position + _EPB_DATA_AT
        out_caplen[count] = caplen
        out_wirelen[count] = max(wirelen, caplen)
        count += 1
        position = end
    return count, position, SCAN_MORE


@_inline
def link_layer(buf, start, end, linktype):
    """(ethertype, offset) as netcapture.layers._link; ethertype -1: decode_tcp gives None."""
    length = end - start
    if linktype == LINKTYPE_ETHERNET:
        if length < _ETHERNET_HEADER_BYTES:
            return -1, 0
        ethertype = u16be(buf, start + _ETHERNET_TYPE_AT)
        offset = _ETHERNET_HEADER_BYTES
        while ethertype == _VLAN_TAGS[0] or ethertype == _VLAN_TAGS[1] or ethertype == _VLAN_TAGS[2]:
            if length < offset + _VLAN_TAG_BYTES:
                return -1, 0
            ethertype = u16be(buf, start + offset + _VLAN_TYPE_AT)
            offset += _VLAN_TAG_BYTES
        return ethertype, offset
    if linktype == LINKTYPE_LINUX_SLL:
        if length < _SLL_HEADER_BYTES:
            return -1, 0
        return u16be(buf, start + _SLL_TYPE_AT), _SLL_HEADER_BYTES
    if linktype == LINKTYPE_LINUX_SLL2:
        if length < _SLL2_TYPE_AT + _ETHERTYPE_BYTES:
            return -1, 0
        return u16be(buf, start + _SLL2_TYPE_AT), _SLL2_HEADER_BYTES
    if linktype == LINKTYPE_NULL or linktype == LINKTYPE_LOOP:
        if length < _NULL_HEADER_BYTES:
            return -1, 0
        # NULL stores the address family in the capturing host's byte order: try both.
        for attempt in range(1 if linktype == LINKTYPE_LOOP else 2):
            big = linktype == LINKTYPE_LOOP or attempt == 1
            family = u32be(buf, start) if big else u32le(buf, start)
            if family == _AF_INET:
                return ETHERTYPE_IPV4, _NULL_HEADER_BYTES
            if family == _AF_INET6[0] or family == _AF_INET6[1] or family == _AF_INET6[2] \
                    or family == _AF_INET6[3]:
                return ETHERTYPE_IPV6, _NULL_HEADER_BYTES
        return 0, _NULL_HEADER_BYTES
    if linktype == LINKTYPE_IPV4:
        return ETHERTYPE_IPV4, 0
    if linktype == LINKTYPE_IPV6:
        return ETHERTYPE_IPV6, 0
    if length < 1:  # raw IP: the version nibble says which
        return -1, 0
    version = buf[start] >> _VERSION_SHIFT
    return (ETHERTYPE_IPV4 if version == IPV4_VERSION else ETHERTYPE_IPV6 if version == IPV6_VERSION else 0), 0


@njit(cache=True)
def decode_headers(buf, count, data_start, caplen, linktype, out_kind, out_ip, out_version, out_sport,
                   out_dport, out_seq, out_ack, out_flags, out_payload_start, out_payload_end):
    """netcapture.layers.decode_tcp for ``count`` packets; offsets are the buffer's."""
    for i in range(count):
        start = data_start[i]
        end = start + caplen[i]
        out_kind[i] = NOT_TCP
        ethertype, offset = link_layer(buf, start, end, linktype)
        ip = start + offset
        if ethertype == ETHERTYPE_IPV4:
            if ip + _IPV4_FIXED_BYTES > end or buf[ip] >> _VERSION_SHIFT != IPV4_VERSION:
                continue
            if buf[ip + _IPV4_PROTOCOL_AT] != PROTO_TCP \
                    or u16be(buf, ip + _IPV4_FRAGMENT_AT) & _IPV4_FRAGMENT_BITS:
                continue
            if ip + IPV4_SRC_AT + 2 * IPV4_ADDRESS_BYTES > end:  # inet_ntop of a cut address
                continue
            total = u16be(buf, ip + _IPV4_TOTAL_LENGTH_AT)
            ip_end = min(ip + total if total else end, end)  # 0: a GSO/BIG TCP packet, to the end
            tcp = ip + (buf[ip] & _IPV4_LENGTH_MASK) * _HEADER_WORD_BYTES
            version = IPV4_VERSION
        elif ethertype == ETHERTYPE_IPV6:
            if ip + _IPV6_FIXED_BYTES > end or buf[ip] >> _VERSION_SHIFT != IPV6_VERSION:
                continue
            if ip + IPV6_SRC_AT + 2 * IPV6_ADDRESS_BYTES > end:
                continue
            payload_length = u16be(buf, ip + _IPV6_PAYLOAD_LENGTH_AT)
            ip_end = min(ip + _IPV6_HEADER_BYTES + payload_length if payload_length else end, end)  # 0: jumbo
            next_header = np.int64(buf[ip + _IPV6_NEXT_HEADER_AT])
            tcp = ip + _IPV6_HEADER_BYTES
            cut = False
            while next_header == _IPV6_EXTENSIONS[0] or next_header == _IPV6_EXTENSIONS[1] \
                    or next_header == _IPV6_EXTENSIONS[2] or next_header == _IPV6_EXTENSIONS[3] \
                    or next_header == _IPV6_EXTENSIONS[4] or next_header == _IPV6_EXTENSIONS[5]:
                if tcp + _IPV6_EXTENSION_FIXED_BYTES > end:
                    cut = True
                    break
                next_header = np.int64(buf[tcp])
                tcp += (np.int64(buf[tcp + 1]) + 1) * _IPV6_EXTENSION_UNIT
            if cut or next_header != PROTO_TCP:
                continue
            version = IPV6_VERSION
        else:
            continue
        if tcp < start or tcp + _TCP_FIXED_BYTES > end:
            continue
        offset_flags = u16be(buf, tcp + _TCP_OFFSET_FLAGS_AT)
        header = (offset_flags >> _TCP_DATA_OFFSET_SHIFT) * _HEADER_WORD_BYTES
        if header < _TCP_MIN_HEADER_BYTES:
            continue
        out_kind[i] = TCP
        out_ip[i] = ip
        out_version[i] = version
        out_sport[i] = u16be(buf, tcp + _TCP_SPORT_AT)
        out_dport[i] = u16be(buf, tcp + _TCP_DPORT_AT)
        out_seq[i] = u32be(buf, tcp + _TCP_SEQ_AT)
        out_ack[i] = u32be(buf, tcp + _TCP_ACK_AT)
        out_flags[i] = offset_flags & _TCP_FLAG_BITS
        payload_start = min(tcp + header, ip_end)
        out_payload_start[i] = payload_start
        out_payload_end[i] = ip_end


@_inline
def address_words(buf, at, length):
    """An address as two 64-bit words (IPv4: the low word only)."""
    high = np.uint64(0)
    low = np.uint64(0)
    for k in range(length):
        byte = np.uint64(buf[at + k])
        if length - k > _WORD_BYTES:
            high = (high << np.uint64(_BYTE_BITS)) | byte
        else:
            low = (low << np.uint64(_BYTE_BITS)) | byte
    return high, low


@njit(cache=True)
def assign_flows(buf, count, kind, ip, version, sport, dport, slots, keys, used, out_flow):
    """Number the TCP packets' directions (new ones in order of appearance); returns how many
    directions the table holds. The caller keeps ``slots`` at most half full."""
    mask = np.uint64(slots.shape[0] - 1)
    directions = used
    for i in range(count):
        if kind[i] != TCP:
            out_flow[i] = _EMPTY
            continue
        if version[i] == IPV4_VERSION:
            src_high, src_low = address_words(buf, ip[i] + IPV4_SRC_AT, IPV4_ADDRESS_BYTES)
            dst_high, dst_low = address_words(buf, ip[i] + IPV4_SRC_AT + IPV4_ADDRESS_BYTES, IPV4_ADDRESS_BYTES)
        else:
            src_high, src_low = address_words(buf, ip[i] + IPV6_SRC_AT, IPV6_ADDRESS_BYTES)
            dst_high, dst_low = address_words(buf, ip[i] + IPV6_SRC_AT + IPV6_ADDRESS_BYTES, IPV6_ADDRESS_BYTES)
        tail = (np.uint64(version[i]) << np.uint64(_VERSION_AT_BIT)) \
            | (np.uint64(sport[i]) << np.uint64(_SPORT_AT_BIT)) | np.uint64(dport[i])
        mixed = np.uint64(0)
        for word in (src_high, src_low, dst_high, dst_low, tail):
            mixed = (mixed ^ word) * np.uint64(_HASH_MULTIPLIER)
            mixed ^= mixed >> np.uint64(_HASH_FOLD)
        slot = mixed & mask
        while True:
            flow = slots[slot]
            if flow == _EMPTY:
                flow = directions
                directions += 1
                slots[slot] = flow
                keys[flow, 0] = src_high
                keys[flow, 1] = src_low
                keys[flow, 2] = dst_high
                keys[flow, 3] = dst_low
                keys[flow, 4] = tail
                break
            if keys[flow, 0] == src_high and keys[flow, 1] == src_low and keys[flow, 2] == dst_high \
                    and keys[flow, 3] == dst_low and keys[flow, 4] == tail:
                break
            slot = (slot + np.uint64(1)) & mask
        out_flow[i] = flow
    return directions


@njit(cache=True)
def rehash(keys, used, slots):
    """Fill the empty table ``slots`` with the ``used`` directions of ``keys``."""
    mask = np.uint64(slots.shape[0] - 1)
    for flow in range(used):
        mixed = np.uint64(0)
        for k in range(FLOW_KEY_WORDS):
            mixed = (mixed ^ keys[flow, k]) * np.uint64(_HASH_MULTIPLIER)
            mixed ^= mixed >> np.uint64(_HASH_FOLD)
        slot = mixed & mask
        while slots[slot] != _EMPTY:
            slot = (slot + np.uint64(1)) & mask
        slots[slot] = flow


class FlowTable:
    """The directions of TCP connections seen so far, numbered from 0 (see :func:`assign_flows`)."""

    def __init__(self) -> None:
        self.slots = np.full(FLOW_TABLE_MIN_SLOTS, _EMPTY, dtype=np.int64)
        self.keys = np.zeros((FLOW_TABLE_MIN_SLOTS // 2, FLOW_KEY_WORDS), dtype=np.uint64)
        self.used = 0

    def reserve(self, more: int) -> None:
        """Make room for ``more`` new directions, keeping the table at most half full."""
        needed = self.used + more
        if 2 * needed <= self.slots.shape[0]:
            return
        size = self.slots.shape[0]
        while 2 * needed > size:
            size *= 2
        keys = np.zeros((size // 2, FLOW_KEY_WORDS), dtype=np.uint64)
        keys[: self.used] = self.keys[: self.used]
        self.keys = keys
        self.slots = np.full(size, _EMPTY, dtype=np.int64)
        rehash(self.keys, self.used, self.slots)
