"""Damage a real capture the way real clusters do: the rewriter behind the damaged-capture tests.

Each function takes the packets of a bundled capture (:func:`packets_of`) and returns a damaged
list; :func:`write_pcap` writes it as a classic nanosecond pcap. Byte-level damage (a cut file,
a garbage tail, two files back to back) works on the file's bytes.

Run as a script to write every damaged copy of one capture into a directory::

    python tests/capture_damage.py data/captures/wide_1gbit_smallwin /tmp/damaged
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
import sys
from pathlib import Path

from netcapture.layers import decode_tcp
from netcapture.pcap import PcapReader, PcapWriter

SNAPLEN = 262_144


@dataclasses.dataclass(frozen=True)
class Packet:
    time_ns: int
    linktype: int
    data: bytes


def packets_of(path: Path) -> list[Packet]:
    """Every packet of a pcap/pcapng(.gz) file, in file order."""
    return [Packet(p.time_ns, p.linktype, p.data) for p in PcapReader(path)]


def write_pcap(path: Path, packets: list[Packet]) -> Path:
    """A classic pcap with nanosecond stamps (one link type: the first packet's)."""
    with open(path, "wb") as out:
        writer = PcapWriter(out, packets[0].linktype, snaplen=SNAPLEN, nanoseconds=True)
        for packet in packets:
            writer.write(packet.time_ns, packet.data)
    return path


def server_ports(run_dir: Path) -> set[int]:
    run = json.loads((run_dir / "run.json").read_text())
    return {int(address.rsplit(":", 1)[1]) for tasks in run["cluster"].values() for address in tasks}


def payload_bytes(packet: Packet) -> int:
    segment = decode_tcp(packet.linktype, packet.data)
    return len(segment.payload) if segment is not None else 0


def from_server(packet: Packet, ports: set[int]) -> bool:
    segment = decode_tcp(packet.linktype, packet.data)
    return segment is not None and segment.src_port in ports and bool(segment.payload)


def largest_downlink_index(packets: list[Packet], ports: set[int]) -> int:
    """The largest data packet a server sent in the middle half of the capture (a tensor's bytes)."""
    lo, hi = len(packets) // 4, 3 * len(packets) // 4
    candidates = [i for i in range(lo, hi) if from_server(packets[i], ports)]
    return max(candidates, key=lambda i: (payload_bytes(packets[i]), -i))


def drop(packets: list[Packet], index: int) -> list[Packet]:
    return packets[:index] + packets[index + 1:]


def reorder(packets: list[Packet], window: int, seed: int = 0) -> list[Packet]:
    """Shuffle the file order inside consecutive windows of ``window`` packets (stamps kept)."""
    rng = random.Random(seed)
    out = []
    for start in range(0, len(packets), window):
        chunk = packets[start:start + window]
        rng.shuffle(chunk)
        out.extend(chunk)
    return out


def swap_adjacent(packets: list[Packet], every: int) -> list[Packet]:
    """Swap packets i and i+1 for every ``every``-th i (stamps kept with their packets)."""
    out = list(packets)
    for i in range(0, len(out) - 1, every):
        out[i], out[i + 1] = out[i + 1], out[i]
    return out


def start_late(packets: list[Packet], skip: int) -> list[Packet]:
    """The capture started ``skip`` packets late: connections are already open."""
    return packets[skip:]


def two_runs(packets: list[Packet], shift_s: float, isn_shift: int = 0) -> list[Packet]:
    """The same run twice in one file, the second ``shift_s`` later: every 4-tuple is reused.
    ``isn_shift``: add this to every sequence and acknowledgement number of the second run, as
    a new connection's initial sequence numbers would."""
    shift = int(shift_s * 1e9)
    return packets + [dataclasses.replace(p, time_ns=p.time_ns + shift, data=_shift_sequence(p, isn_shift))
                      for p in packets]


def _shift_sequence(packet: Packet, delta: int) -> bytes:
    if not delta:
        return packet.data
    from scapy.config import conf
    from scapy.layers.inet import TCP

    frame = conf.l2types[packet.linktype](packet.data)
    tcp = frame.getlayer(TCP)
    if tcp is None:
        return packet.data
    tcp.seq = (tcp.seq + delta) & 0xFFFFFFFF
    if tcp.flags.A:
        tcp.ack = (tcp.ack + delta) & 0xFFFFFFFF
    del tcp.chksum
    return bytes(frame)


def plain_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def main(run_dir: str, out_dir: str) -> None:
    run_dir, out = Path(run_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    capture = next(run_dir.glob("capture.pcap*"))
    packets, ports = packets_of(capture), server_ports(run_dir)
    write_pcap(out / "clean.pcap", packets)
    write_pcap(out / "dropped.pcap", drop(packets, largest_downlink_index(packets, ports)))
    write_pcap(out / "reordered.pcap", reorder(packets, 8))
    write_pcap(out / "swapped.pcap", swap_adjacent(packets, 50))
    write_pcap(out / "late.pcap", start_late(packets, len(packets) // 3))
    write_pcap(out / "two_runs.pcap", two_runs(packets, 30.0))
    write_pcap(out / "two_runs_new_isn.pcap", two_runs(packets, 30.0, isn_shift=123_456_789))
    clean = (out / "clean.pcap").read_bytes()
    (out / "garbage_tail.pcap").write_bytes(clean + bytes(random.Random(1).randrange(256) for _ in range(5000)))
    (out / "concatenated.pcap").write_bytes(clean + clean)
    (out / "cut.pcap").write_bytes(clean[: len(clean) * 2 // 3])


if __name__ == "__main__":
    main(*sys.argv[1:])
