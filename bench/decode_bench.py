"""Decode speed of netcapture's backends: ``python bench/decode_bench.py [--baseline DIR]``.

By default every bundled capture is timed, each decompressed to a temporary pcap ("plain")
and as bundled ("gzip"), and classed by what its decoding costs (:func:`kind`): frame-dense
captures (small gRPC messages, many HTTP/2 frames per MB: the tiny model, the multi-worker
capture), large-packet captures, and small packets carrying large frames. MB/s are megabytes
(10^6 bytes) of uncompressed capture per second; each figure is the best and the median of
``--repeat`` full :func:`netcapture.read_capture` calls, records included, in wall time, and
for the decoders that run in this process (or the baseline's child) the median CPU time the
process spent (``cpu_median_s``, ``mb_per_cpu_s_median``): one core's own work, which other
work on the machine does not lengthen. The machine's load average is read before and after
each capture, and ``--note`` says what else ran. Per capture:

- ``scapy_fast``: the default backend as it runs (its fast path, :mod:`netcapture.fastpath`);
  ``scapy_reference``: the same backend's reference path (``fast=False``: scapy's reader,
  one packet at a time), on which the fast path is checked; ``tshark``: the tshark backend;
- ``baseline`` (with ``--baseline DIR``): the default backend of another source tree (e.g. a
  checkout of the commit before a change), timed in a child process in the same run, so that
  the ratio ``speedup_vs_baseline`` compares like with like;
- ``stages``: the fast path's compiled index pass alone (records, headers, flows over the
  whole file), and the reference path's reading and ``struct`` header decoding;
- ``peak_rss_mib``: the peak RSS of a child process decoding the plain capture (fast path);
- ``profile``: the functions with the most own time in one fast decode (cProfile, whose
  overhead inflates Python's share), which say what limits the rate.

``first_call`` says what the first decode in a process costs: importing netcapture, numba's
compilation of the kernels (with an empty cache, as after a fresh checkout) and loading them
from numba's on-disk cache (every later process). Writes ``bench/results/decode.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import itertools
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timing import time_calls  # noqa: E402

from calibration.runmatch import run_server_ports  # noqa: E402
from netcapture import read_capture  # noqa: E402
from netcapture.capture import assemble, collector_paused  # noqa: E402
from netcapture.layers import decode_tcp, decode_tcp_scapy  # noqa: E402
from netcapture.pcap import PcapReader, PcapWriter, iter_packets  # noqa: E402
from tfbase.fileio import write_json  # noqa: E402
from tfbase.machine import cpu_model  # noqa: E402

CAPTURES = ROOT / "data" / "captures"
SCAPY_SAMPLE = 5_000  # scapy's dissectors take ~1 ms a packet: time a sample
PROFILE_TOP = 8  # functions listed per capture
FIRST_CALL_CAPTURE = CAPTURES / "tiny_lo" / "capture.pcap.gz"
MIB = 1 << 20

# A child process: time read_capture from the source tree argv[1] on argv[2] (ports argv[3], a
# comma list or "-"), argv[4] times; print the times and its peak RSS as JSON. The peak is the
# kernel's VmHWM of the process since it started its program: wait4's ru_maxrss would count
# the pages of the (large) benchmark process it was forked from.
_CHILD = """
import json, sys, time, warnings
sys.path.insert(0, sys.argv[1])
started = time.perf_counter()
from netcapture import read_capture
imported = time.perf_counter() - started
ports = None if sys.argv[3] == "-" else {int(p) for p in sys.argv[3].split(",")}
times, cpu_times = [], []
for _ in range(int(sys.argv[4])):
    started, cpu_started = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        read_capture(sys.argv[2], server_ports=ports)
    times.append(time.perf_counter() - started)
    cpu_times.append(time.process_time() - cpu_started)
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"import_s": imported, "times_s": times, "cpu_times_s": cpu_times, "peak_rss_bytes": peak}))
"""


def bundled_captures() -> list[Path]:
    """The capture files of completed bundled runs (``*.incomplete`` excluded)."""
    return [p for p in sorted(CAPTURES.glob("*/capture.*"))
            if p.is_file() and not p.parent.name.endswith(".incomplete") and run_dir_of(p) is not None]


def run_dir_of(capture: Path) -> Path | None:
    """The run directory a capture belongs to: its own directory, or ``run/`` beside it."""
    for candidate in (capture.parent, capture.parent / "run"):
        if (candidate / "run.json").is_file():
            return candidate
    return None


def workers_of(capture: Path) -> int:
    run = json.loads((run_dir_of(capture) / "run.json").read_text())
    return len(run.get("cluster", {}).get("worker", []))


FRAME_DENSE_PER_MB = 100  # HTTP/2 frames per MB: the cost is per frame, not per byte
LARGE_PACKET_BYTES = 16_384  # mean captured packet (GSO super-packets of bulk tensor data)


def kind(frames_per_mb: float, mean_packet_bytes: float) -> str:
    """What limits a capture's decoding: many frames (small messages), or bytes in large or small packets."""
    if frames_per_mb >= FRAME_DENSE_PER_MB:
        return "frame-dense"
    return "large packets" if mean_packet_bytes >= LARGE_PACKET_BYTES else "small packets, large frames"


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (``/proc/loadavg``)."""
    with open("/proc/loadavg") as handle:
        return [float(v) for v in handle.read().split()[:3]]


def _seconds(function, repeat: int) -> dict[str, float]:
    best, median = time_calls(function, repeat)
    return {"best_s": best, "median_s": median}


def _seconds_and_cpu(function, repeat: int) -> dict[str, float]:
    """:func:`_seconds`, and the process's CPU time per call (``cpu_median_s``): what one core
    spent on a decode in this process, which other work on the machine does not lengthen."""
    cpu: list[float] = []

    def timed():
        started = time.process_time()
        function()
        cpu.append(time.process_time() - started)

    return {**_seconds(timed, repeat), "cpu_median_s": statistics.median(cpu)}


def _rate(times: dict[str, float], megabytes: float) -> dict[str, float]:
    rates = {**times, "mb_per_s_best": megabytes / times["best_s"], "mb_per_s_median": megabytes / times["median_s"]}
    if "cpu_median_s" in times:
        rates["mb_per_cpu_s_median"] = megabytes / times["cpu_median_s"]
    return rates


def _tshark_version() -> str | None:
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


def _decode(path: Path, backend: str, ports, fast: bool = True):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if backend == "scapy" and not fast:
            from netcapture import scapy_backend

            with collector_paused():  # as read_capture decodes
                return assemble(scapy_backend.decode(path, None if ports is None else frozenset(ports), fast=False))
        return read_capture(path, backend, server_ports=ports)


def _child(tree: Path, path: Path, ports, repeat: int, env: dict | None = None) -> dict:
    """Run :data:`_CHILD`; return its JSON."""
    argv = [sys.executable, "-c", _CHILD, str(tree), str(path),
            "-" if ports is None else ",".join(str(p) for p in sorted(ports)), str(repeat)]
    done = subprocess.run(argv, stdout=subprocess.PIPE, cwd=tree, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the child decoding {path} with {tree} failed")
    return json.loads(done.stdout)


def _profile(path: Path, ports) -> list[dict]:
    profiler = cProfile.Profile()
    profiler.enable()
    _decode(path, "scapy", ports)
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = sum(row[2] for row in stats.stats.values())  # own time of every function
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:PROFILE_TOP]
    top = []
    for (file, line, name), (_, calls, own, _, _) in rows:
        where = f"{Path(file).relative_to(ROOT)}:{line}" if file.startswith(str(ROOT)) else Path(file).name
        top.append({"function": f"{where}({name})", "calls": calls, "own_s": round(own, 4),
                    "share": round(own / total, 3)})
    return top


def _index_only(path: Path) -> None:
    from netcapture.pcapbatch import BatchReader

    BatchReader(path, PcapReader(path)).run(lambda batch: None, lambda packet: None)


def bench_capture(capture_path: Path, repeat: int, baseline: Path | None) -> dict[str, object]:
    """Time the backends, stages, memory and profile of one capture (module docstring)."""
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
        packet_count = sum(1 for _ in iter_packets(plain))
        decoded = _decode(plain, "scapy", ports)
        result: dict = {
            "capture": str(capture_path.relative_to(ROOT) if capture_path.is_relative_to(ROOT) else capture_path),
            "workers": workers_of(capture_path) if run_dir is not None else None,
            "capture_mb": round(megabytes, 3), "file_mb": round(capture_path.stat().st_size / 1e6, 3),
            "packets": packet_count, "mean_packet_bytes": round(megabytes * 1e6 / packet_count),
            "http2_frames": len(decoded.frames), "streams": len(decoded.streams),
            "frames_per_mb": round(len(decoded.frames) / megabytes, 1),
            "kind": kind(len(decoded.frames) / megabytes, megabytes * 1e6 / packet_count),
            "repeat": repeat, "load_before": load_average(), "backends": {}, "stages": {},
        }
        del decoded  # nothing large stays alive while timing: the collector would walk it
        runs = [("scapy_fast", "scapy", True), ("scapy_reference", "scapy", False)]
        if shutil.which("tshark"):
            runs.append(("tshark", "tshark", True))
        for name, backend, fast in runs:
            for label, path in (("plain", plain), ("gzip", capture_path)):
                def decode(path=path, backend=backend, fast=fast):
                    return _decode(path, backend, ports, fast)

                # tshark decodes in a child process: only the in-process decoders' CPU time is ours
                timing = _seconds if backend == "tshark" else _seconds_and_cpu
                result["backends"][f"{name}_{label}"] = _rate(timing(decode, repeat), megabytes)
        if baseline is not None:
            for label, path in (("plain", plain), ("gzip", capture_path)):
                child = _child(baseline, path, ports, repeat)
                times = child["times_s"]
                result["backends"][f"baseline_{label}"] = _rate(
                    {"best_s": min(times), "median_s": sorted(times)[len(times) // 2],
                     "cpu_median_s": sorted(child["cpu_times_s"])[len(times) // 2]}, megabytes)
        backends = result["backends"]
        for label in ("plain", "gzip"):
            fast = backends[f"scapy_fast_{label}"]["median_s"]
            result[f"speedup_vs_reference_{label}"] = round(backends[f"scapy_reference_{label}"]["median_s"] / fast, 2)
            if baseline is not None:
                result[f"speedup_vs_baseline_{label}"] = round(backends[f"baseline_{label}"]["median_s"] / fast, 2)
                result[f"cpu_speedup_vs_baseline_{label}"] = round(
                    backends[f"baseline_{label}"]["cpu_median_s"] / backends[f"scapy_fast_{label}"]["cpu_median_s"], 2)
        if "tshark_plain" in backends:
            # tshark's start-up (dissectors, the .proto) is a fixed cost; measure it on the
            # first 100 packets and report the rate without it.
            head = Path(tmp) / "head.pcap"
            _write_head(plain, head, 100)
            fixed = _seconds(lambda: read_capture(head, "tshark", server_ports=ports, require_http2=False),
                             repeat)["median_s"]
            result["tshark_startup_s"] = fixed
            # None when the start-up took as long as the whole file (a small file, a busy machine)
            rest = backends["tshark_plain"]["median_s"] - fixed
            result["tshark_plain_mb_per_s_without_startup"] = megabytes / rest if rest > 0 else None
        stages = result["stages"]
        from netcapture.pcapbatch import Unavailable

        try:
            stages["fast_index_pass"] = _rate(_seconds(lambda: _index_only(plain), repeat), megabytes)
        except Unavailable:  # a file the fast path leaves to the reference path
            stages["fast_index_pass"] = None
        stages["reference_read_packets"] = _rate(_seconds(lambda: sum(1 for _ in iter_packets(plain)), repeat),
                                                 megabytes)
        packets = list(iter_packets(plain))
        stages["reference_headers_struct"] = _rate(
            _seconds(lambda: [decode_tcp(p.linktype, p.data) for p in packets], repeat), megabytes)
        decode_tcp_scapy(packets[0].linktype, packets[0].data)  # import scapy outside the timing
        sample = packets[:SCAPY_SAMPLE]
        scapy_headers = _seconds(lambda: [decode_tcp_scapy(p.linktype, p.data) for p in sample], 1)
        stages["reference_headers_scapy_dissectors"] = {
            "packets": len(sample), "best_s": scapy_headers["best_s"],
            "us_per_packet": scapy_headers["best_s"] / len(sample) * 1e6,
            "mb_per_s": sum(len(p.data) for p in sample) / 1e6 / scapy_headers["best_s"]}
        packets = sample = None
        result["peak_rss_mib"] = round(_child(ROOT, plain, ports, 1)["peak_rss_bytes"] / MIB, 1)
        result["profile"] = _profile(plain, ports)
        result["load_after"] = load_average()
    for name, figures in result["backends"].items():
        print(f"{result['capture']}: {name:22s} {figures['mb_per_s_median']:8.1f} MB/s  "
              f"({figures['median_s']:.3f} s for {megabytes:.1f} MB, {result['packets']} packets)")
    print(f"{result['capture']}: peak RSS {result['peak_rss_mib']} MiB")
    return result


def first_call() -> dict[str, float]:
    """What the first decode in a process costs: numba compiling, or loading, the kernels."""
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "capture.pcap"
        with gzip.open(FIRST_CALL_CAPTURE, "rb") as source, open(plain, "wb") as target:
            shutil.copyfileobj(source, target)
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        cold = _child(ROOT, plain, None, 2, env)
        warm = _child(ROOT, plain, None, 2, env)
    return {"capture": str(FIRST_CALL_CAPTURE.relative_to(ROOT)), "import_netcapture_s": round(warm["import_s"], 3),
            "peak_rss_mib": round(warm["peak_rss_bytes"] / MIB, 1),
            "first_call_empty_cache_s": round(cold["times_s"][0], 3),
            "first_call_cached_s": round(warm["times_s"][0], 3), "later_call_s": round(warm["times_s"][1], 3),
            "numba_compile_s": round(cold["times_s"][0] - warm["times_s"][0], 3)}


def _tree_commit(tree: Path) -> str | None:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, action="append",
                        help="capture file, repeatable (default: every bundled capture)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", type=Path,
                        help="a source tree (e.g. a checkout of an earlier commit) whose default backend is timed too")
    parser.add_argument("--baseline-label", help="what the baseline is (default: its git commit, if it has one)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "decode.json")
    parser.add_argument("--md", type=Path, default=ROOT / "bench" / "results" / "decode.md",
                        help="the side-by-side table (default: bench/results/decode.md)")
    parser.add_argument("--note", help="what else ran on the machine meanwhile, for the published files")
    args = parser.parse_args(argv)

    captures = args.capture or bundled_captures()
    started, load_before = time.time(), load_average()
    runs = [bench_capture(path, args.repeat, args.baseline) for path in captures]
    document = {
        "captures": runs,
        "first_call": first_call(),
        "baseline": None if args.baseline is None else {
            "label": args.baseline_label or _tree_commit(args.baseline) or str(args.baseline)},
        "date": time.strftime("%Y-%m-%d", time.localtime(started)),
        "commit": _tree_commit(ROOT),
        "repeat": args.repeat,
        "load": {"before": load_before, "after": load_average(), "wall_s": round(time.time() - started, 1)},
        "note": args.note,
        "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "tshark": _tshark_version()},
    }
    write_json(args.out, document)
    args.md.write_text(markdown(document))
    print(f"wrote {args.out} and {args.md}")
    return 0


def markdown(document: dict) -> str:
    """The default backend's and tshark's rates side by side, by kind of capture."""
    load = document["load"]
    lines = [
        "# Decode speed: the default backend and tshark, in one run",
        "",
        f"{document['date']}, commit {document['commit']}, {document['machine']['cpu']} "
        f"({document['machine']['cpus']} CPUs), {(document['machine']['tshark'] or 'no tshark').rstrip('.')}. "
        "`python bench/decode_bench.py "
        f"--repeat {document['repeat']}`: each figure is the median of {document['repeat']} full `read_capture` "
        "calls (records included) on one core, in MB of uncompressed capture per second of wall time; the "
        "*CPU* columns per second of the decoding process's CPU time, one core's own work, which other work "
        "on the machine does not lengthen (tshark decodes in a child process: none); best-of and the "
        "stages are in `decode.json`. Load average (1, 5, 15 min) before the run "
        f"{', '.join(map(str, load['before']))}, after {', '.join(map(str, load['after']))} "
        f"({load['wall_s']:.0f} s); per capture in `decode.json` (`load_before`, `load_after`)."
        + (f" {document['note']}" if document.get("note") else ""),
        "",
    ]
    baseline = document.get("baseline")
    if baseline:
        lines += [f"Baseline: the default backend of {baseline['label']}, timed in a child process in the same run "
                  "(`--baseline`); *speed-up* is its median time over this commit's, plain (wall, and CPU).", ""]
    columns = ["kind", "capture", "workers", "MB", "mean packet", "frames/MB", "default plain", "default plain, CPU",
               "default gzip", "tshark plain", "tshark gzip", "tshark plain, start-up apart", "default/tshark (plain)"]
    if baseline:
        columns += ["baseline plain", "baseline plain, CPU", "speed-up", "speed-up, CPU"]
    lines += ["| " + " | ".join(columns) + " |", "| --- | --- |" + " ---: |" * (len(columns) - 2)]

    def rate(figures: dict | None, key: str = "mb_per_s_median") -> str:
        return f"{figures[key]:,.0f}" if figures and key in figures else "-"

    order = ("frame-dense", "small packets, large frames", "large packets")
    for run in sorted(document["captures"], key=lambda r: (order.index(r["kind"]), -r["frames_per_mb"])):
        b = run["backends"]
        apart = run.get("tshark_plain_mb_per_s_without_startup")
        cells = [run["kind"], f"`{Path(run['capture']).parent.name}`", str(run["workers"]), f"{run['capture_mb']:.1f}",
                 f"{run['mean_packet_bytes'] / 1e3:.1f} KB", f"{run['frames_per_mb']:.0f}",
                 rate(b.get("scapy_fast_plain")), rate(b.get("scapy_fast_plain"), "mb_per_cpu_s_median"),
                 rate(b.get("scapy_fast_gzip")), rate(b.get("tshark_plain")), rate(b.get("tshark_gzip")),
                 f"{apart:,.0f}" if apart is not None else "-",
                 f"{b['scapy_fast_plain']['mb_per_s_median'] / b['tshark_plain']['mb_per_s_median']:.1f}x"
                 if "tshark_plain" in b else "-"]
        if baseline:
            cpu_speedup = run.get("cpu_speedup_vs_baseline_plain")
            cells += [rate(b.get("baseline_plain")), rate(b.get("baseline_plain"), "mb_per_cpu_s_median"),
                      f"{run['speedup_vs_baseline_plain']:.2f}x",
                      f"{cpu_speedup:.2f}x" if cpu_speedup is not None else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Kinds (`decode_bench.kind`): *frame-dense*, at least 100 HTTP/2 frames per MB (small gRPC messages: "
        "the cost is per frame); *large packets*, a mean captured packet of 16 KB or more (bulk tensor data "
        "in GSO super-packets); *small packets, large frames*, the rest (MTU-sized packets of large messages). "
        "pcapng (`tiny16_lo_smallwin`) is read by the fast path as classic pcap is; the small "
        "captures' rates include each call's fixed costs; tshark's start-up (`tshark_startup_s`, timed on the "
        "capture's first 100 packets) is taken apart in its own column.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
