"""Decode speed of netcapture's backends: ``python bench/decode_bench.py``.

Both backends read the same capture, the largest bundled one by default, in two forms: as
bundled (gzip) and decompressed to a temporary pcap, so that the cost of gzip shows. Each
figure is the best and the median of ``--repeat`` full ``read_capture`` calls; MB/s are
megabytes (10^6 bytes) of uncompressed capture per second. The stages of the scapy backend
are timed too: reading packets, decoding headers with the ``struct`` decoder, and with
scapy's dissectors (on the first 5,000 packets, for comparison). By default two captures are
timed: the largest, and the one with the most packets (MB/s fall with the packet size).
Writes ``bench/results/decode.json``.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timing import time_calls  # noqa: E402

from calibration.runmatch import run_server_ports  # noqa: E402
from netcapture import read_capture  # noqa: E402
from netcapture.layers import decode_tcp, decode_tcp_scapy  # noqa: E402
from netcapture.pcap import PcapWriter, iter_packets  # noqa: E402
from tfbase.fileio import write_json  # noqa: E402
from tfbase.machine import cpu_model  # noqa: E402

CAPTURES = ROOT / "data" / "captures"
SCAPY_SAMPLE = 5_000  # scapy's dissectors take ~1 ms a packet: time a sample


def largest_capture() -> Path:
    """The largest capture (uncompressed) of a completed bundled run (``*.incomplete`` excluded)."""
    files = [p for p in CAPTURES.glob("*/capture.*")
             if p.is_file() and not p.parent.name.endswith(".incomplete") and run_dir_of(p) is not None]
    return max(files, key=uncompressed_bytes)


def uncompressed_bytes(path: Path) -> int:
    """File size, or for gzip the size its trailer records (modulo 4 GiB, enough to rank)."""
    with open(path, "rb") as handle:
        if handle.read(2) != b"\x1f\x8b":
            return path.stat().st_size
        handle.seek(-4, os.SEEK_END)
        return int.from_bytes(handle.read(4), "little")


def run_dir_of(capture: Path) -> Path | None:
    """The run directory a capture belongs to: its own directory, or ``run/`` beside it."""
    for candidate in (capture.parent, capture.parent / "run"):
        if (candidate / "run.json").is_file():
            return candidate
    return None


def _seconds(function, repeat: int) -> dict[str, float]:
    best, median = time_calls(function, repeat)
    return {"best_s": best, "median_s": median}

def _rate(times: dict[str, float], megabytes: float) -> dict[str, float]:
    return {**times, "mb_per_s_best": megabytes / times["best_s"], "mb_per_s_median": megabytes / times["median_s"]}


def _tshark_version() -> str | None:
    import subprocess

    if shutil.which("tshark") is None:
        return None
    out = subprocess.run(["tshark", "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else None


def _write_head(source: Path, target: Path, count: int) -> None:
    """The first ``count`` packets of ``source`` as a classic pcap (nanosecond timestamps)."""
    packets = list(itertools.islice(iter_packets(source), count))
    with open(target, "wb") as handle:
        writer = PcapWriter(handle, linktype=packets[0].linktype, nanoseconds=True)
        for packet in packets:
            writer.write(packet.time_ns, packet.data)


def bench_capture(capture_path: Path, repeat: int) -> dict[str, object]:
    """Time both backends (and the scapy backend's stages) on one capture."""
    run_dir = run_dir_of(capture_path)
    ports = run_server_ports(run_dir) if run_dir is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "capture.pcap"
        with open(capture_path, "rb") as handle:
            compressed = handle.read(2) == b"\x1f\x8b"
        if compressed:
            with gzip.open(capture_path, "rb") as source, open(plain, "wb") as target:
                shutil.copyfileobj(source, target)
        else:
            shutil.copyfile(capture_path, plain)
        megabytes = plain.stat().st_size / 1e6
        packets = list(iter_packets(plain))
        reference = read_capture(plain, "scapy", server_ports=ports)
        result: dict = {
            "capture": str(capture_path.relative_to(ROOT) if capture_path.is_relative_to(ROOT) else capture_path),
            "capture_mb": round(megabytes, 3), "file_mb": round(capture_path.stat().st_size / 1e6, 3),
            "packets": len(packets), "mean_packet_bytes": round(megabytes * 1e6 / len(packets)),
            "http2_frames": len(reference.frames), "streams": len(reference.streams),
            "repeat": repeat, "backends": {}, "scapy_stages": {},
        }
        backends = ["scapy"] + (["tshark"] if shutil.which("tshark") else [])
        for backend in backends:
            for label, path in (("gzip", capture_path), ("plain", plain)):
                def decode(path=path, backend=backend):
                    return read_capture(path, backend, server_ports=ports)

                times = _seconds(decode, repeat)
                result["backends"][f"{backend}_{label}"] = _rate(times, megabytes)
        if "tshark" in backends:
            # tshark's start-up (dissectors, the .proto) is a fixed cost; measure it on the
            # first 100 packets and report the rate without it.
            head = Path(tmp) / "head.pcap"
            _write_head(plain, head, 100)
            fixed = _seconds(lambda: read_capture(head, "tshark", server_ports=ports, require_http2=False),
                             repeat)["median_s"]
            tshark = result["backends"]["tshark_plain"]
            result["tshark_startup_s"] = fixed
            result["tshark_plain_mb_per_s_without_startup"] = megabytes / max(tshark["median_s"] - fixed, 1e-9)
        stages = result["scapy_stages"]
        stages["read_packets"] = _rate(_seconds(lambda: sum(1 for _ in iter_packets(plain)), repeat), megabytes)
        stages["headers_struct"] = _rate(_seconds(lambda: [decode_tcp(p.linktype, p.data) for p in packets],
                                                  repeat), megabytes)
        stages["headers_struct"]["us_per_packet"] = stages["headers_struct"]["best_s"] / len(packets) * 1e6
        decode_tcp_scapy(packets[0].linktype, packets[0].data)  # import scapy outside the timing
        sample = packets[:SCAPY_SAMPLE]
        scapy_headers = _seconds(lambda: [decode_tcp_scapy(p.linktype, p.data) for p in sample], 1)
        stages["headers_scapy_dissectors"] = {
            "packets": len(sample), "best_s": scapy_headers["best_s"],
            "us_per_packet": scapy_headers["best_s"] / len(sample) * 1e6,
            "mb_per_s": sum(len(p.data) for p in sample) / 1e6 / scapy_headers["best_s"]}
    for name, figures in result["backends"].items():
        print(f"{result['capture']}: {name:14s} {figures['mb_per_s_median']:8.1f} MB/s  "
              f"({figures['median_s']:.3f} s for {megabytes:.1f} MB, {len(packets)} packets)")
    return result


def most_packets_capture() -> Path:
    files = [p for p in CAPTURES.glob("*/capture.*")
             if p.is_file() and not p.parent.name.endswith(".incomplete") and run_dir_of(p) is not None]
    return max(files, key=lambda p: sum(1 for _ in iter_packets(p)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, action="append",
                        help="capture file, repeatable (default: the largest bundled capture, and the one with "
                             "the most packets if that is another)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "decode.json")
    args = parser.parse_args(argv)

    captures = args.capture or list(dict.fromkeys([largest_capture(), most_packets_capture()]))
    runs = [bench_capture(path, args.repeat) for path in captures]
    write_json(args.out, {
        "largest": runs[0], "others": runs[1:],
        "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "tshark": _tshark_version()},
    })
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
