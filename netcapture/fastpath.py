"""The default backend's fast path: indexed packets into the decoder, the common ones in a few steps.

:func:`read_packets` reads a pcap or pcapng file through
:class:`netcapture.pcapbatch.BatchReader` and hands each TCP packet to the decoder of
:mod:`netcapture.scapy_backend`. Most packets of a capture of TensorFlow's traffic are one of
two kinds, which this module handles itself, with the same effect on the decoder's state as
:meth:`_Decoder.segment` (the reference path):

- a segment without payload or SYN (an acknowledgement) of a known connection: the
  connection's latest time, and the direction's segment count, time reversals and FIN flag;
- a data segment, without SYN, FIN or RST, of an HTTP/2 connection, that is the next one in
  sequence of a direction with nothing buffered out of order and nothing held back: it is
  delivered at once. When it lies inside the body of a large DATA frame and holds nothing
  the gRPC layer will read (:attr:`netcapture.http2.FrameSplitter.skippable`), it is only
  counted: its bytes are never touched, let alone copied.

Every other packet (a SYN, a segment out of order, a new connection, one not yet known to be
HTTP/2, ...) goes to :meth:`_Decoder.segment` as a :class:`~netcapture.layers.TcpSegment`,
as the reference path would hand it. ``bench/decode_check.py`` and
``tests/test_netcapture_fastpath.py`` hold the two paths to identical results.

The lab's timeline wraps :meth:`_Decoder.frames_from` to see every delivery
(:func:`tfsim.lab.timeline.read_capture_with_first_bytes`); while it is wrapped, no delivery is
skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from netcapture.layers import FIN, RST, SYN, TcpSegment
from netcapture.pcap import PcapReader, RawPacket, check_snaplen
from netcapture.pcapbatch import BatchReader, PacketBatch, Unavailable
from netcapture.pcapindex import TCP
from netcapture.tcp import Endpoint

SEQUENCE_MASK = 0xFFFFFFFF
_NOT_IN_STRIDE = SYN | FIN | RST  # flags that send a data segment down the reference path

__all__ = ["Unavailable", "read_packets"]


class _Pair:
    """The connection currently on one 4-tuple (shared by its two directions' flows)."""

    __slots__ = ("connection", "key")

    def __init__(self, key: frozenset):
        self.key = key
        self.connection = None


class _Flow:
    """One direction of a 4-tuple, as :class:`netcapture.pcapindex.FlowTable` numbers them."""

    __slots__ = ("direction", "dst", "dst_ip", "dst_port", "ignored", "owner", "pair", "src", "src_ip",
                 "src_port", "tuple_key")

    def __init__(self, src_ip: str, src_port: int, dst_ip: str, dst_port: int, pair: _Pair, ignored: bool):
        self.src_ip, self.src_port, self.dst_ip, self.dst_port = src_ip, src_port, dst_ip, dst_port
        self.src, self.dst = Endpoint(src_ip, src_port), Endpoint(dst_ip, dst_port)
        self.tuple_key = (self.src, self.dst)
        self.pair = pair
        self.ignored = ignored  # the reference path drops its packets on arrival
        self.owner = None  # the connection self.direction belongs to
        self.direction = None


class _Feeder:
    """Hands a :class:`BatchReader`'s batches to a decoder (see the module docstring)."""

    def __init__(self, decoder, path: Path, loop, batches: BatchReader, *, may_skip: bool):
        self.decoder = decoder
        self.path = path
        self.loop = loop
        self.batches = batches
        self.flows: list[_Flow] = []
        self.pairs: dict[frozenset, _Pair] = {}
        self.may_skip = may_skip

    def _new_flow(self, batch: PacketBatch, index: int) -> _Flow:
        src_ip, src_port, dst_ip, dst_port = self.batches.flow_of(batch, index)
        ports = self.decoder.server_ports
        ignored = (ports is not None and not (dst_port in ports or src_port in ports)) \
            or (src_ip, src_port) == (dst_ip, dst_port)
        key = frozenset(((src_ip, src_port), (dst_ip, dst_port)))
        pair = self.pairs.get(key)
        if pair is None:
            pair = self.pairs[key] = _Pair(key)
            pair.connection = self.decoder.connections.get(key)
        return _Flow(src_ip, src_port, dst_ip, dst_port, pair, ignored)

    def batch(self, batch: PacketBatch) -> None:
        decoder, flows, loop, view = self.decoder, self.flows, self.loop, batch.view
        may_skip = self.may_skip
        first = batch.first_number
        cut = np.flatnonzero(batch.caplen < batch.wirelen)
        if cut.size:
            # The reference path raises at the first packet the snapshot length cut; what it
            # did with the packets before that is thrown away with the decoder.
            index = int(cut[0])
            check_snaplen(self.path, RawPacket(first + index, int(batch.time_ns[index]), self.batches.linktype,
                                               int(batch.caplen[index]), int(batch.wirelen[index]), b""),
                          self.batches.snaplen)
        non_tcp = 0
        for index, time_ns, kind, flow_number, flags, seq, start, end in zip(
                range(batch.count), batch.time_ns.tolist(), batch.kind.tolist(), batch.flow.tolist(),
                batch.flags.tolist(), batch.seq.tolist(), batch.payload_start.tolist(), batch.payload_end.tolist(),
                strict=True):
            if kind != TCP:
                non_tcp += 1
                continue
            if flow_number == len(flows):
                flows.append(self._new_flow(batch, index))
            flow = flows[flow_number]
            if flow.ignored:
                continue
            connection = flow.pair.connection
            if connection is not None and not flags & SYN:
                if flow.owner is connection:
                    direction = flow.direction
                else:
                    direction = flow.direction = connection.directions[flow.tuple_key]
                    flow.owner = connection
                reassembler = direction.reassembler
                size = end - start
                # The next data segment in sequence of an HTTP/2 direction with nothing held or pending.
                in_stride = size and not flags & _NOT_IN_STRIDE and connection.state == "http2" \
                    and reassembler._held is None and not reassembler._pending and reassembler._base is not None \
                    and not (seq - reassembler._base - reassembler._next) & SEQUENCE_MASK
                if not size or in_stride:
                    # What every segment counts: as _Connection.add and DirectionReassembler._add.
                    if time_ns > connection.last_time_ns:
                        connection.last_time_ns = time_ns
                    reassembler.segments += 1
                    latest = reassembler._latest_ns
                    if time_ns < latest:
                        reassembler.time_reversals += 1
                        if latest - time_ns > reassembler.max_time_reversal_ns:
                            reassembler.max_time_reversal_ns = latest - time_ns
                    else:
                        reassembler._latest_ns = time_ns
                    if not size:  # an acknowledgement
                        if flags & FIN:
                            reassembler.fin_seen = True
                        continue
                    # Delivered at once: as DirectionReassembler._emit.
                    offset = reassembler._next
                    reassembler._next = offset + size
                    splitter = direction.splitter
                    if may_skip and size <= splitter.skippable and not direction.broken:
                        splitter.skip(size)
                    else:
                        decoder.frames_from(direction, view[start:end], offset, first + index, time_ns)
                    continue
            decoder.segment(TcpSegment(flow.src_ip, flow.src_port, flow.dst_ip, flow.dst_port, seq,
                                       int(batch.ack[index]), flags, view[start:end].tobytes()),
                            first + index, time_ns)
            flow.pair.connection = decoder.connections.get(flow.pair.key)  # a new one on this 4-tuple?
        loop.non_tcp += non_tcp
        loop.last_number, loop.last_time = first + batch.count - 1, int(batch.time_ns[batch.count - 1])


def read_packets(decoder, path: str | os.PathLike, loop, *, may_skip: bool) -> PcapReader:
    """Read ``path``'s packets into ``decoder`` (``loop``: the reference path's per-packet state,
    :class:`netcapture.scapy_backend._PacketLoop`, whose counters this keeps and which takes any
    packet the fast reader leaves to the reference reader). ``may_skip``: whether deliveries
    nobody reads may be skipped (only while the decoder's own ``frames_from`` is in place; the
    caller knows). Raises :class:`Unavailable` when the file is not one the fast path reads
    (then nothing was decoded), or a gzip file turned out damaged (then the decoder must be
    thrown away)."""
    path = Path(path)
    batches = BatchReader(path, loop.reader)
    feeder = _Feeder(decoder, path, loop, batches, may_skip=may_skip)
    batches.run(feeder.batch, loop.packet)
    return loop.reader
