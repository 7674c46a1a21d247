"""Does the default backend decode exactly as before? ``python bench/decode_check.py``.

Decodes a set of cases and compares everything :func:`netcapture.read_capture` returns (every
frame, stream, flow-control sample, loss record, warning, the packet count; or the error's type
and message) between two decoders:

- ``--paths`` (default): the fast path (:mod:`netcapture.fastpath`) against the reference
  path (``scapy_backend.decode(..., fast=False)``: scapy's streaming reader, the ``struct``
  header decoder, one packet at a time) in this process;
- ``--save DIR``: write this checkout's results to ``DIR`` (run another checkout's copy of this
  script, e.g. a worktree of an older commit, to save its); ``--against DIR``: compare this
  checkout's default decoder with them. The checkout's root and the cases' directory are
  compared as ``<tree>`` and ``<work>`` (:func:`portable`), so results of two checkouts, or
  of two ``--work`` directories, compare alike.

The cases: every bundled capture as bundled (gzip), decompressed, and decompressed without
server ports (connections found by their preface); damaged copies of two of them
(``tests/capture_damage.py``: a dropped packet, reordering, swapped packets, a late start, two
runs in one file, a garbage tail, two files back to back, a cut file, a cut gzip stream); and
copies of a small one with other link layers (Linux cooked v1 and v2, raw IP, BSD loopback,
802.1Q-tagged Ethernet), over IPv6 (with and without a hop-by-hop extension header), with
Ethernet padding and non-TCP packets (UDP, ARP, IP fragments, cut headers, random bytes) in
between, a big-endian microsecond pcap and a packet cut by the snapshot length. Exits 1 on
any difference.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import pickle
import random
import struct
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import capture_damage as damage  # noqa: E402

from netcapture import read_capture  # noqa: E402

CAPTURES = ROOT / "data" / "captures"
DAMAGED_FROM = ("tiny_100mbit_w2_ps", "wide_1gbit_smallwin")  # several connections; a large window
LINK_VARIANTS_FROM = "tiny_100mbit_w2_ps"
ETHERNET_HEADER_BYTES = 14
ETHERTYPE_IPV4 = 0x0800
LINKTYPE_RAW, LINKTYPE_NULL, LINKTYPE_SLL, LINKTYPE_SLL2 = 101, 0, 113, 276
AF_INET = 2
VLAN_TPID = 0x8100
SNAPLEN_CUT_BYTES = 100  # a packet cut to this length: SnaplenError
ETHERTYPE_IPV6, ETHERTYPE_ARP = 0x86DD, 0x0806
IPV6_PREFIX = bytes.fromhex("fd00000000000000" "00000000")  # fd00::/96, the IPv4 address after it
PROTO_TCP, PROTO_UDP, IPV6_HOP_BY_HOP = 6, 17, 0
ETHERNET_MIN_FRAME_BYTES = 60  # frames shorter than this are padded on the wire
IPV4_MORE_FRAGMENTS = 0x2000
EXTRA_EVERY = 37  # a non-TCP packet after every this many packets


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    path: Path
    ports: frozenset[int] | None


def _run_dirs() -> list[Path]:
    return sorted(p.parent for p in CAPTURES.glob("*/run.json"))


def _plain(source: Path, target: Path) -> Path:
    target.write_bytes(damage.plain_bytes(source))
    return target


def _relink(packets: list, linktype: int, header) -> list:
    """The IPv4 packets of an Ethernet capture behind another link header (``header(ip_packet)``)."""
    out = []
    for packet in packets:
        ip = packet.data[ETHERNET_HEADER_BYTES:]
        out.append(dataclasses.replace(packet, linktype=linktype, data=header(ip) + ip))
    return out


def _ipv6(packets: list, hop_by_hop: bool) -> list:
    """The Ethernet/IPv4 packets as IPv6 (fd00::/96 addresses), optionally with a hop-by-hop header."""
    out = []
    for packet in packets:
        data = packet.data
        ip = data[ETHERNET_HEADER_BYTES:]
        header = (ip[0] & 0x0F) * 4
        total = struct.unpack_from("!H", ip, 2)[0] or len(ip)
        payload = ip[header:total]
        extension = bytes([PROTO_TCP, 0]) + bytes(6) if hop_by_hop else b""
        first_next = IPV6_HOP_BY_HOP if hop_by_hop else ip[9]
        ipv6 = struct.pack("!IHBB", 6 << 28, len(extension) + len(payload), first_next, 64) \
            + IPV6_PREFIX + ip[12:16] + IPV6_PREFIX + ip[16:20] + extension + payload
        out.append(dataclasses.replace(packet, data=data[:12] + struct.pack("!H", ETHERTYPE_IPV6) + ipv6))
    return out


def _with_strangers(packets: list) -> list:
    """Frames padded to Ethernet's minimum, and after every ``EXTRA_EVERY`` packets one that is no
    TCP segment decode_tcp takes: UDP, ARP, an IP fragment, a cut TCP header, random bytes."""
    rng = random.Random(2)
    out = []
    for i, packet in enumerate(packets):
        data = packet.data + bytes(max(0, ETHERNET_MIN_FRAME_BYTES - len(packet.data)))
        out.append(dataclasses.replace(packet, data=data))
        if i % EXTRA_EVERY:
            continue
        ip = ETHERNET_HEADER_BYTES
        kind = (i // EXTRA_EVERY) % 5
        if kind == 0:
            extra = data[:ip + 9] + bytes([PROTO_UDP]) + data[ip + 10:]
        elif kind == 1:
            extra = data[:12] + struct.pack("!H", ETHERTYPE_ARP) + bytes(28)
        elif kind == 2:
            flags = struct.unpack_from("!H", data, ip + 6)[0] | IPV4_MORE_FRAGMENTS
            extra = data[:ip + 6] + struct.pack("!H", flags) + data[ip + 8:]
        elif kind == 3:
            extra = data[:ip + 20 + 5]
        else:
            extra = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80)))
        out.append(dataclasses.replace(packet, data=extra))
    return out


def _big_endian_microseconds(packets: list, path: Path) -> Path:
    with open(path, "wb") as out:
        out.write(struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, damage.SNAPLEN, packets[0].linktype))
        for packet in packets:
            sec, ns = divmod(packet.time_ns, 1_000_000_000)
            out.write(struct.pack(">IIII", sec, ns // 1000, len(packet.data), len(packet.data)) + packet.data)
    return path


def _snaplen_cut(packets: list, path: Path) -> Path:
    with open(path, "wb") as out:
        writer = damage.PcapWriter(out, packets[0].linktype, snaplen=SNAPLEN_CUT_BYTES, nanoseconds=True)
        for i, packet in enumerate(packets):
            cut = packet.data[:SNAPLEN_CUT_BYTES] if i == len(packets) // 2 else packet.data
            writer.write(packet.time_ns, cut, len(packet.data))
    return path


def build_cases(work: Path) -> list[Case]:
    """Write the cases' files into ``work``; see the module docstring."""
    cases = []
    for run_dir in _run_dirs():
        capture = next(run_dir.glob("capture.*"))
        ports = frozenset(damage.server_ports(run_dir))
        suffix = ".pcapng" if "pcapng" in capture.name else ".pcap"
        plain = _plain(capture, work / f"{run_dir.name}{suffix}")
        cases += [Case(f"{run_dir.name}/bundled", capture, ports), Case(f"{run_dir.name}/plain", plain, ports),
                  Case(f"{run_dir.name}/plain-no-ports", plain, None)]
    for name in DAMAGED_FROM:
        out = work / f"damaged-{name}"
        damage.main(str(CAPTURES / name), str(out))
        ports = frozenset(damage.server_ports(CAPTURES / name))
        for path in sorted(out.glob("*.pcap")):
            cases.append(Case(f"{name}/{path.stem}", path, ports))
        cut_gzip = out / "cut.pcap.gz"
        data = gzip.compress((out / "clean.pcap").read_bytes())
        cut_gzip.write_bytes(data[: len(data) // 2])
        cases.append(Case(f"{name}/cut-gzip", cut_gzip, ports))
    run_dir = CAPTURES / LINK_VARIANTS_FROM
    packets = damage.packets_of(next(run_dir.glob("capture.*")))
    ports = frozenset(damage.server_ports(run_dir))
    variants = {
        "linux-sll": _relink(packets, LINKTYPE_SLL, lambda ip: struct.pack("!HHH8sH", 0, 1, 6, b"\0" * 8,
                                                                           ETHERTYPE_IPV4)),
        "linux-sll2": _relink(packets, LINKTYPE_SLL2, lambda ip: struct.pack("!HHIHBB8s", ETHERTYPE_IPV4, 0, 2, 1,
                                                                             0, 6, b"\0" * 8)),
        "raw-ip": _relink(packets, LINKTYPE_RAW, lambda ip: b""),
        "bsd-loopback": _relink(packets, LINKTYPE_NULL, lambda ip: struct.pack("<I", AF_INET)),
        "vlan": [dataclasses.replace(p, data=p.data[:12] + struct.pack("!HH", VLAN_TPID, 7) + p.data[12:])
                 for p in packets],
    }
    variants["ipv6"] = _ipv6(packets, hop_by_hop=False)
    variants["ipv6-hop-by-hop"] = _ipv6(packets, hop_by_hop=True)
    variants["strangers"] = _with_strangers(packets)
    for name, relinked in variants.items():
        cases.append(Case(f"link/{name}", damage.write_pcap(work / f"{name}.pcap", relinked), ports))
    cases.append(Case("link/big-endian-us", _big_endian_microseconds(packets, work / "big-endian.pcap"), ports))
    cases.append(Case("link/snaplen-cut", _snaplen_cut(packets, work / "snaplen.pcap"), ports))
    return cases


def portable(text: str, work: Path) -> str:
    """``text`` with this checkout's root and the cases' directory written as ``<tree>`` and
    ``<work>``: a capture's records name the file they came from, and results saved by one
    checkout (``--save``) are compared with another's (``--against``)."""
    return text.replace(str(work), "<work>").replace(str(ROOT), "<tree>")


def outcome(case: Case, decode, work: Path) -> tuple[str, object]:
    """``(digest, what)`` of one decode: ``what`` is the capture, or the error's text; the
    digest is of its :func:`portable` text."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            capture = decode(case)
        except Exception as exc:
            what: object = f"{type(exc).__name__}: {exc}"
            return hashlib.sha256(portable(str(what), work).encode()).hexdigest(), what
    return hashlib.sha256(portable(repr(capture), work).encode()).hexdigest(), capture


def _default(case: Case):
    return read_capture(case.path, server_ports=case.ports)


def path_taken(case: Case) -> str:
    """Which path of the default backend decoded ``case``: ``fast``, or ``reference`` where the
    fast path does not apply or gave up (so that a fast path falling back unnoticed shows)."""
    from netcapture import pcapbatch, scapy_backend

    try:
        scapy_backend._decode(case.path, case.ports, strict=False, fast=True)
    except pcapbatch.Unavailable:
        return "reference"
    except Exception:  # the fast path raised what the reference path raises (compared in main)
        return "fast"
    return "fast"


def _reference(case: Case):
    from netcapture import capture as capture_module
    from netcapture import scapy_backend

    return capture_module.assemble(scapy_backend.decode(case.path, case.ports, fast=False))


def describe_difference(old: object, new: object) -> str:
    """The first field that differs between two outcomes, for a readable report."""
    if isinstance(old, str) or isinstance(new, str):
        return f"{old!r:.300} != {new!r:.300}"
    for field in dataclasses.fields(old):
        a, b = getattr(old, field.name), getattr(new, field.name)
        if a == b:
            continue
        if isinstance(a, tuple) and isinstance(b, tuple):
            if len(a) != len(b):
                return f"{field.name}: {len(a)} != {len(b)} items"
            index = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
            return f"{field.name}[{index}]: {a[index]!r:.400} != {b[index]!r:.400}"
        return f"{field.name}: {a!r:.300} != {b!r:.300}"
    return "the same fields, a different text (a float printed differently?)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--save", type=Path, help="write this decoder's results to DIR")
    mode.add_argument("--against", type=Path, help="compare with results saved in DIR")
    mode.add_argument("--paths", action="store_true", help="fast path against reference path (default)")
    parser.add_argument("--work", type=Path, help="directory for the cases' files (default: a temporary one)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        cases = build_cases(work)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            index = {}
            for i, case in enumerate(cases):
                digest, what = outcome(case, _default, work)
                index[case.name] = digest
                (args.save / f"{i}.pickle").write_bytes(pickle.dumps((case.name, what)))
                print(f"{case.name:45s} {digest[:12]}")
            (args.save / "index.json").write_text(json.dumps(index, indent=1))
            return 0
        failures = 0
        if args.against:
            saved = json.loads((args.against / "index.json").read_text())
            pickles = {}
            for file in args.against.glob("*.pickle"):
                name, what = pickle.loads(file.read_bytes())
                pickles[name] = what
        for case in cases:
            digest, what = outcome(case, _default, work)
            if args.against:
                if case.name not in saved:
                    print(f"{case.name:45s} no saved result")
                    failures += 1
                    continue
                expected_digest, expected = saved[case.name], pickles[case.name]
            else:
                expected_digest, expected = outcome(case, _reference, work)
            same = digest == expected_digest
            failures += not same
            note = "" if same else describe_difference(expected, what)
            print(f"{case.name:45s} {path_taken(case):9s} {'same' if same else 'DIFFERENT'} {note}")
        print(f"{len(cases) - failures} of {len(cases)} cases identical")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
