"""Bytes a TCP sender keeps in flight, from a capture taken at the sender's interface.

For each connection on which ``sender_ip`` sends payload, every data segment it sends is one
sample: the highest sequence number sent so far minus the highest acknowledgement received so
far, the bytes that have left the sender's interface and not yet come back acknowledged.
Seen at the sender's interface (tcpdump taps a packet as the interface sends it, after the
host's own queue), these are the bytes on the network path: in the switches' (or a shaper's)
queues and on the wire. docs/calibration.md §4.5 says what the model makes of them.

Sequence numbers wrap at 2^32; differences are taken modulo 2^32, and samples above 2^30 (a
reordered or lost acknowledgement seen before its data, a connection seen from its middle)
are dropped.

Examples
--------
>>> from netcapture.inflight import bytes_in_flight
>>> flights = bytes_in_flight("data/captures/wide_1gbit/capture.pcap.gz", "10.231.0.2")
>>> busiest = max(flights, key=lambda f: f.payload_bytes)
>>> busiest.sender_port, round(float(busiest.median_bytes) / 1e3)
(2223, 195)
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from netcapture.layers import ACK, decode_tcp
from netcapture.pcap import iter_packets

SEQUENCE_SPACE = 1 << 32
IMPLAUSIBLE_IN_FLIGHT = 1 << 30


@dataclasses.dataclass(frozen=True)
class InFlight:
    """The bytes in flight of one connection's data sent by the sender, one sample per segment."""

    sender_port: int
    receiver_ip: str
    receiver_port: int
    payload_bytes: int
    samples_bytes: np.ndarray

    @property
    def median_bytes(self) -> float:
        """The median of the sampled bytes in flight (0 without samples)."""
        return float(np.median(self.samples_bytes)) if len(self.samples_bytes) else 0.0


def _same_host(address: str, ip: str) -> bool:
    # IPv4 addresses may come as IPv4-mapped IPv6 ("::ffff:10.0.0.1").
    return address == ip or address.endswith(":" + ip)


def bytes_in_flight(path: str | os.PathLike, sender_ip: str) -> list[InFlight]:
    """Per connection on which ``sender_ip`` sent payload, its bytes in flight (see the module
    docstring). Connections are keyed by (sender port, receiver address, receiver port)."""
    sent: dict[tuple, int] = {}
    acked: dict[tuple, int] = {}
    payload: dict[tuple, int] = {}
    samples: dict[tuple, list[int]] = {}
    for packet in iter_packets(path, stop_at_damage=True):  # read_capture reports the damage
        segment = decode_tcp(packet.linktype, packet.data)
        if segment is None:
            continue
        if _same_host(segment.src_ip, sender_ip) and segment.payload:
            key = (segment.src_port, segment.dst_ip, segment.dst_port)
            end = (segment.seq + len(segment.payload)) % SEQUENCE_SPACE
            if key not in sent or (end - sent[key]) % SEQUENCE_SPACE < IMPLAUSIBLE_IN_FLIGHT:
                sent[key] = end
            payload[key] = payload.get(key, 0) + len(segment.payload)
            if key in acked:
                flight = (sent[key] - acked[key]) % SEQUENCE_SPACE
                if flight < IMPLAUSIBLE_IN_FLIGHT:
                    samples.setdefault(key, []).append(flight)
        elif _same_host(segment.dst_ip, sender_ip) and segment.flags & ACK:
            key = (segment.dst_port, segment.src_ip, segment.src_port)
            if key not in acked or (segment.ack - acked[key]) % SEQUENCE_SPACE < IMPLAUSIBLE_IN_FLIGHT:
                acked[key] = segment.ack
    return [InFlight(key[0], key[1], key[2], payload[key], np.array(samples.get(key, []), dtype=np.int64))
            for key in sorted(payload)]
