"""Packet capture and bandwidth measurement around a profiling run (``collect --capture``).

- :class:`Tcpdump` captures the job's gRPC traffic with a large kernel buffer and full
  snaplen (docs/calibration.md §2.8: the default buffer dropped 1,605 packets), and reports the kernel's
  drop count when it stops;
- :func:`measure_bandwidth` runs ``iperf3 -J`` from the worker's host to the PS's host in both
  directions, a few times each, and keeps every raw result.

Both need root (or the capture capabilities); tfsim says so before starting them. External
tools are always called with an argument list, never through a shell.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from tfbase.errors import CollectError, UsageError
from tfbase.signals import deferred_signals

IPERF_PORT = 5201


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise UsageError("capture", f"needs {', '.join(missing)} on PATH (Debian: apt-get install "
                                      f"{' '.join(missing)})")


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise UsageError("capture", f"{what} needs root (packet capture); run as root or drop --capture")


def capture_filter(ports: Sequence[int]) -> str:
    """BPF filter for the job's gRPC ports (every TCP connection between the tasks uses one)."""
    return "tcp and (" + " or ".join(f"port {int(p)}" for p in sorted(set(ports))) + ")"


_RUNNING: dict[int, Tcpdump] = {}  # every capture started and not yet stopped, by pid


def stop_running_captures() -> None:
    """Stop every tcpdump this process started and has not stopped: the ``finally`` of a run,
    which may not hold the capture if a stop signal came just as :meth:`Tcpdump.start` returned."""
    for capture in list(_RUNNING.values()):
        capture.stop()


@dataclasses.dataclass
class Tcpdump:
    """A running tcpdump writing ``path``; stop it with :meth:`stop`."""

    process: subprocess.Popen
    path: Path
    log_path: Path

    @classmethod
    def start(cls, path: Path, interface: str, ports: Sequence[int], prefix: Sequence[str] = (),
              timeout_s: float = 10.0, filter_text: str | None = None) -> Tcpdump:
        """Capture on ``interface`` with :func:`capture_filter` of ``ports``, or ``filter_text``."""
        log_path = path.with_suffix(".tcpdump.log")
        argv = [*prefix, "tcpdump", "-i", interface, "-B", "262144", "-s", "0", "-U", "-w", str(path),
                filter_text or capture_filter(ports)]
        capture = None
        try:
            # A stop signal that comes while tcpdump is being started is held until it is ours to
            # stop: raised inside Popen, it would leave a tcpdump that nothing knows of.
            with deferred_signals():
                log = open(log_path, "w")
                try:
                    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
                except OSError as exc:
                    raise CollectError(f"cannot start tcpdump: {exc}") from None
                finally:
                    log.close()
                capture = cls(process, path, log_path)
                _RUNNING[process.pid] = capture
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:  # tcpdump says "listening on" once the capture is armed
                if process.poll() is not None:
                    raise CollectError(f"tcpdump failed to start: {_last_line(log_path)} (log: {log_path})")
                if "listening on" in log_path.read_text(errors="replace"):
                    return capture
                time.sleep(0.05)
            raise CollectError(f"tcpdump did not start capturing within {timeout_s:.0f} s (log: {log_path})")
        except BaseException:  # failed, timed out, or interrupted while waiting: no tcpdump is left behind
            if capture is not None:
                capture.stop()
            raise

    def stop(self) -> dict:
        """Stop the capture; return tcpdump's own counts (captured, dropped by kernel)."""
        _RUNNING.pop(self.process.pid, None)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        counts = {key: int(m.group(1)) for key, pattern in (
            ("captured", r"(\d+) packets? captured"), ("received_by_filter", r"(\d+) packets? received by filter"),
            ("dropped_by_kernel", r"(\d+) packets? dropped by kernel"))
            if (m := re.search(pattern, text))}
        return counts


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(empty log)"


def gzip_file(path: Path) -> Path:
    """Compress ``path`` to ``path.gz`` in a streaming fashion; remove the original."""
    target = path.with_name(path.name + ".gz")
    with open(path, "rb") as src, gzip.GzipFile(target, "wb", compresslevel=6, mtime=0) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    path.unlink()
    return target


def measure_bandwidth(out_dir: Path, server_host: str, *, repeats: int = 3, seconds: float = 3.0,
                      server_prefix: Sequence[str] = (), client_prefix: Sequence[str] = (),
                      port: int = IPERF_PORT) -> list[Path]:
    """``iperf3 -J`` from the worker (client) to the PS (server): uplink plain, downlink with ``-R``.

    Writes ``out_dir/iperf3/{uplink,downlink}_K.json`` (raw iperf3 output) and returns the paths.
    """
    target = out_dir / "iperf3"
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(repeats):
        for direction, extra in (("uplink", []), ("downlink", ["-R"])):
            server = None
            try:
                # A stop signal while the server starts is held until ``server`` names it (see
                # Tcpdump.start), so that the ``finally`` below always stops it.
                with deferred_signals():
                    server = subprocess.Popen([*server_prefix, "iperf3", "-s", "-1", "-p", str(port)],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                              start_new_session=True)
                result = None
                for _ in range(50):  # the server needs a moment to listen
                    result = run_stoppable([*client_prefix, "iperf3", "-c", server_host, "-p", str(port), "-J",
                                            "-t", str(seconds), *extra], timeout_s=seconds + 30)
                    if '"error"' not in result.stdout or "Connection refused" not in result.stdout:
                        break
                    time.sleep(0.1)
                path = target / f"{direction}_{k}.json"
                path.write_text(result.stdout)
                try:
                    error = json.loads(result.stdout).get("error")
                except json.JSONDecodeError:
                    error = result.stderr.strip() or "no JSON output"
                if error:
                    raise CollectError(f"iperf3 {direction} run failed: {error}")
                paths.append(path)
            finally:
                if server is not None:
                    _kill_group(server)
    return paths


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL ``process``'s process group (it leads its own session) and reap it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_stoppable(argv: Sequence[str], *, timeout_s: float) -> subprocess.CompletedProcess:
    """:func:`subprocess.run` of ``argv`` (text output captured) in a session of its own, whose
    whole process group is killed if anything stops the wait: a stop signal, Ctrl-C, the
    timeout. The child is started with stop signals held, so it is never left unnamed."""
    with deferred_signals():
        process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except BaseException:
        _kill_group(process)
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def host_port_filter(pairs: Sequence[tuple[str, int]]) -> str:
    """BPF filter for TCP traffic with the given ``(host, port)`` endpoints.

    A chief worker's traffic with PS ``p`` runs over two connections (each side is a gRPC
    client of the other): one to the PS's port, one from the PS to the worker's own port. Pass
    both pairs, ``(ps_host, ps_port)`` and ``(ps_host, worker_port)``.
    """
    terms = [f"(host {host} and port {int(port)})" for host, port in dict.fromkeys(pairs)]
    return "tcp and (" + " or ".join(terms) + ")"


def interface_towards(ip: str) -> str:
    """The network interface this host uses to reach ``ip`` (``ip route get``)."""
    try:
        result = subprocess.run(["ip", "route", "get", ip], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError("capture_interface", f"cannot find the interface towards {ip} ({exc}); give it") from None
    match = re.search(r"\bdev (\S+)", result.stdout)
    if result.returncode != 0 or match is None:
        raise UsageError("capture_interface", f"no route to {ip} ({result.stderr.strip() or 'ip route get'}); "
                                                "give the interface")
    return match.group(1)


@dataclasses.dataclass
class IperfServer:
    """A persistent ``iperf3 -s`` on a PS host, serving the chief's measurements one by one."""

    process: subprocess.Popen

    @classmethod
    def start(cls, port: int = IPERF_PORT, settle_s: float = 0.5) -> IperfServer:
        require_tools("iperf3")
        try:
            with deferred_signals():
                process = subprocess.Popen(["iperf3", "-s", "-p", str(int(port))], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.PIPE, text=True, start_new_session=True)
        except OSError as exc:
            raise CollectError(f"cannot start the iperf3 server: {exc}") from None
        try:
            time.sleep(settle_s)
        except BaseException:
            _kill_group(process)
            raise
        if process.poll() is not None:
            message = (process.stderr.read() or "").strip().splitlines()
            raise UsageError("iperf_server", f"iperf3 -s -p {port} stopped at once: "
                                               f"{message[-1] if message else 'no message'} (port in use?)")
        return cls(process)

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


_RETRYABLE = ("Connection refused", "server is busy", "No route to host", "unable to connect")


def _iperf_once(host: str, port: int, seconds: float, extra: Sequence[str], deadline: float) -> str:
    """One ``iperf3 -J`` client run, retried while the server is not (yet) there, until ``deadline``."""
    while True:
        result = run_stoppable(["iperf3", "-c", host, "-p", str(port), "-J", "-t", str(seconds),
                                "--connect-timeout", "3000", *extra], timeout_s=seconds + 60)
        try:
            error = json.loads(result.stdout).get("error")
        except json.JSONDecodeError:
            error = result.stderr.strip() or "no JSON output"
        if not error:
            return result.stdout
        if not any(text in error for text in _RETRYABLE) or time.monotonic() > deadline:
            raise CollectError(f"iperf3 to {host}:{port} failed: {error}")
        time.sleep(0.5)


def measure_bandwidth_to(out_dir: Path, host: str, *, name: str = "", repeats: int = 3, seconds: float = 3.0,
                         port: int = IPERF_PORT, connect_timeout_s: float = 30.0) -> list[Path]:
    """``iperf3 -J`` from this host to the iperf3 server already running on ``host``:
    uplink plain, downlink with ``-R``.

    Writes ``out_dir/iperf3/{uplink,downlink}_{name}K.json`` (``name`` e.g. ``"ps1_"``;
    empty for PS 0, the layout ``tfsim calibrate`` reads) and returns the paths. Waits up
    to ``connect_timeout_s`` for the server to answer.
    """
    target = out_dir / "iperf3"
    target.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + connect_timeout_s
    paths = []
    for k in range(repeats):
        for direction, extra in (("uplink", []), ("downlink", ["-R"])):
            path = target / f"{direction}_{name}{k}.json"
            path.write_text(_iperf_once(host, port, seconds, extra, deadline))
            paths.append(path)
    return paths
