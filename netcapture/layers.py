"""Link, IP and TCP headers of a captured packet: just enough to reassemble TCP.

:func:`decode_tcp` returns a :class:`TcpSegment` or ``None`` for anything that is not a
TCP segment (ARP, UDP, IP fragments, ...).

Two decoders produce the same :class:`TcpSegment`:

- a ``struct`` decoder for the link types captures of TensorFlow jobs have (Ethernet
  with or without 802.1Q/802.1ad tags, Linux cooked v1/v2, BSD loopback, raw IP) and
  IPv4/IPv6 with extension headers. It is kept because scapy's dissection is too slow for
  whole captures: on ``data/captures/wide_1gbit/capture.pcap.gz`` (10,802 packets, 418 MB,
  best of two passes) this decoder takes 29 us a packet (1,330 MB/s), scapy's ``Ether(raw)``
  alone 454 us (85 MB/s), and :func:`decode_tcp_scapy` 1,830 us (21 MB/s). On a capture of
  1,500-byte packets scapy's rate would fall to a few MB/s;
- scapy's dissectors (:func:`decode_tcp_scapy`), used for every other link type, and by
  the tests as the reference for the first.

A loopback or GSO capture holds IPv4 packets larger than 64 KiB with a total-length field
of 0 (BIG TCP); the IP payload then ends where the captured data ends.
"""

from __future__ import annotations

import dataclasses
import socket
import struct

from netcapture.pcap import (
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
_VLAN_TAGS = (0x8100, 0x88A8, 0x9100)
_IPV6_EXTENSIONS = (0, 43, 60, 135, 139, 140)  # hop-by-hop, routing, destination, mobility, HIP, shim6
_IPV6_FRAGMENT = 44
PROTO_TCP = 6

# TCP flag bits
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


class _Skip(Exception):
    """Not a TCP segment this module decodes."""


@dataclasses.dataclass(frozen=True, slots=True)
class TcpSegment:
    """The parts of a TCP segment that reassembly needs. Addresses are text (``inet_ntop``)."""

    src_ip: str
    src_port: int
    dst_ip: str
    dst_port: int
    seq: int
    ack: int
    flags: int
    payload: bytes

    @property
    def syn(self) -> bool:
        return bool(self.flags & SYN)

    @property
    def fin(self) -> bool:
        return bool(self.flags & FIN)

    @property
    def rst(self) -> bool:
        return bool(self.flags & RST)


FAST_LINKTYPES = frozenset({LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, LINKTYPE_NULL,
                            LINKTYPE_LOOP, LINKTYPE_RAW, 12, 14, LINKTYPE_IPV4, LINKTYPE_IPV6})


def decode_tcp(linktype: int, data: bytes) -> TcpSegment | None:
    """The TCP segment in one captured frame, or ``None`` if there is none."""
    if linktype not in FAST_LINKTYPES:
        return decode_tcp_scapy(linktype, data)
    try:
        ethertype, offset = _link(linktype, data)
        if ethertype == ETHERTYPE_IPV4:
            return _ipv4(data, offset)
        if ethertype == ETHERTYPE_IPV6:
            return _ipv6(data, offset)
        return None
    except (_Skip, struct.error, IndexError, ValueError):  # ValueError: inet_ntop of a cut address
        return None


def _link(linktype: int, data: bytes) -> tuple[int, int]:
    """(ethertype of the network layer, its offset)."""
    if linktype == LINKTYPE_ETHERNET:
        ethertype, offset = struct.unpack_from("!H", data, 12)[0], 14
        while ethertype in _VLAN_TAGS:
            ethertype, offset = struct.unpack_from("!H", data, offset + 2)[0], offset + 4
        return ethertype, offset
    if linktype == LINKTYPE_LINUX_SLL:
        return struct.unpack_from("!H", data, 14)[0], 16
    if linktype == LINKTYPE_LINUX_SLL2:
        return struct.unpack_from("!H", data, 0)[0], 20
    if linktype in (LINKTYPE_NULL, LINKTYPE_LOOP):
        # NULL stores the address family in the capturing host's byte order: try both.
        for fmt in ((">I",) if linktype == LINKTYPE_LOOP else ("<I", ">I")):
            family = struct.unpack_from(fmt, data, 0)[0]
            if family == 2:
                return ETHERTYPE_IPV4, 4
            if family in (10, 24, 28, 30):  # AF_INET6 on Linux, BSDs, macOS
                return ETHERTYPE_IPV6, 4
        return 0, 4
    if linktype == LINKTYPE_IPV4:
        return ETHERTYPE_IPV4, 0
    if linktype == LINKTYPE_IPV6:
        return ETHERTYPE_IPV6, 0
    version = data[0] >> 4  # raw IP
    return (ETHERTYPE_IPV4 if version == 4 else ETHERTYPE_IPV6 if version == 6 else 0), 0


def _ipv4(data: bytes, offset: int) -> TcpSegment | None:
    first, _tos, total, _ident, fragment, _ttl, proto = struct.unpack_from("!BBHHHBB", data, offset)
    if first >> 4 != 4:
        raise _Skip
    if proto != PROTO_TCP or fragment & 0x3FFF:  # more-fragments flag or a fragment offset
        return None
    header = (first & 0x0F) * 4
    end = offset + total if total else len(data)
    return _tcp(socket.inet_ntop(socket.AF_INET, data[offset + 12: offset + 16]),
                socket.inet_ntop(socket.AF_INET, data[offset + 16: offset + 20]),
                data, offset + header, min(end, len(data)))


def _ipv6(data: bytes, offset: int) -> TcpSegment | None:
    first, payload_len, next_header = struct.unpack_from("!IHB", data, offset)
    if first >> 28 != 6:
        raise _Skip
    src = socket.inet_ntop(socket.AF_INET6, data[offset + 8: offset + 24])
    dst = socket.inet_ntop(socket.AF_INET6, data[offset + 24: offset + 40])
    end = offset + 40 + payload_len if payload_len else len(data)  # 0: jumbogram / BIG TCP
    position = offset + 40
    while next_header in _IPV6_EXTENSIONS:
        next_header, length = data[position], data[position + 1]
        position += (length + 1) * 8
    if next_header != PROTO_TCP:
        return None  # UDP, ICMPv6, or a fragment (TCP is never fragmented in practice)
    return _tcp(src, dst, data, position, min(end, len(data)))


def _tcp(src: str, dst: str, data: bytes, offset: int, end: int) -> TcpSegment:
    sport, dport, seq, ack, offset_flags = struct.unpack_from("!HHIIH", data, offset)
    header = (offset_flags >> 12) * 4
    if header < 20:
        raise _Skip
    return TcpSegment(src, sport, dst, dport, seq, ack, offset_flags & 0x1FF, data[offset + header: end])


def decode_tcp_scapy(linktype: int, data: bytes) -> TcpSegment | None:
    """The same as :func:`decode_tcp`, through scapy's dissectors (any link type scapy knows)."""
    from scapy.config import conf
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6

    layer = conf.l2types.get(linktype)
    if layer is None:
        return None
    packet = layer(data)
    tcp = packet.getlayer(TCP)
    if tcp is None:
        return None
    ip = tcp.underlayer
    if isinstance(ip, IP):
        if ip.frag or ip.flags.MF:
            return None
        ip_end = len(ip.original) if not ip.len else ip.len
    elif isinstance(ip, IPv6):
        ip_end = len(ip.original) if not ip.plen else 40 + ip.plen
    else:  # IPv6 extension header between IPv6 and TCP
        ipv6 = packet.getlayer(IPv6)
        ip, ip_end = ipv6, (len(ipv6.original) if not ipv6.plen else 40 + ipv6.plen)
    # Offsets from the dissected layers' original bytes: the TCP payload runs from the end
    # of the TCP header to the end of the IP packet (Ethernet padding excluded).
    ip_start = len(data) - len(ip.original)
    tcp_start = len(data) - len(tcp.original)
    end = min(ip_start + ip_end, len(data))
    payload = data[tcp_start + tcp.dataofs * 4: end]
    return TcpSegment(ip.src, tcp.sport, ip.dst, tcp.dport, tcp.seq, tcp.ack, int(tcp.flags), payload)
