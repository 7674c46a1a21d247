"""A process that has imported TensorFlow once and forks every task of the runs that follow.

Importing TensorFlow costs a task about 2.5 CPU seconds before it does any work. In the lab
every task runs under a CPU quota of a fraction of a core, and the W + 1 tasks of a run start
at once on a machine of two cores, so each run spent about 10 s importing; over a matrix of
150 runs that was a third of its time. A fork server pays the import once: a task's command
(:meth:`ForkServer.task_command`) starts :mod:`tfprofile.harness.fork_client` where the task
would have started, inside the task's cgroups and network namespace; the client hands the
server its standard streams, and the server forks a child that takes on the client's
cgroups, network and mount namespaces, working directory and environment, then runs the task
(:func:`tfprofile.harness.task.main`). The client stands in for the child to the launcher:
it forwards signals and exits as the child did. So everything the task does after the import
runs under its host's quota, as a task started from nothing does.

Only state that does not depend on the task is made before the fork (modules imported, no
TensorFlow runtime or session): the child reseeds Python's and numpy's random generators, and
a server is started for one environment only (:class:`ForkServers` keeps one per
environment), since TensorFlow reads some variables at import.

Run as ``python -m tfprofile.harness.fork_server SOCKET [MODULE...]``: it imports the
modules (by default TensorFlow and the task modules), prints ``ready`` once it listens and
serves until its standard input closes (or it is stopped); a child whose client is gone is
killed. A request names the module whose ``main(args)`` the child runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import json
import os
import random
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

from tfbase.errors import CollectError
from tfbase.signals import die_with_parent, own_session_dying_with_parent, wait_or_kill_group
from tfprofile.harness.taskcpu import cpu_seconds

READY_LINE = "ready"
DIRECTORY_PREFIX = "tfsim-fork-"  # then the launcher's pid: tfsim-fork-<pid>-<random>
CLIENT_MODULE = "tfprofile.harness.fork_client"
REQUEST_LIMIT_BYTES = 1 << 16  # a request is a JSON line naming a spec file: far below this
STANDARD_STREAMS = 3
CLONE_NEWNS = 0x00020000  # <sched.h>: os.setns arrives in Python 3.12 only
CLONE_NEWNET = 0x40000000
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
TASK_MODULE = "tfprofile.harness.task"
PRELOADED = ("tensorflow", TASK_MODULE, "tfprofile.harness.pss_task", "tfprofile.harness.zoo")
_START_TIMEOUT_S = 300.0  # a cold import under load; a normal one takes 3-4 s
_STOP_GRACE_S = 5.0


# ---------------------------------------------------------------- the launcher's side

class ForkServer:
    """One running fork server for one task environment; use as a context manager."""

    def __init__(self, env: Mapping[str, str], preload: tuple[str, ...] = PRELOADED) -> None:
        self.env = dict(env)
        # Private (0700): only root's tasks connect. Named after this process, so that a later lab
        # can remove it if this one is killed outright (:func:`remove_stale_directories`).
        self._dir = Path(tempfile.mkdtemp(prefix=f"{DIRECTORY_PREFIX}{os.getpid()}-"))
        self.socket_path = self._dir / "socket"
        self._log = open(self._dir / "server.log", "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(self.socket_path), *preload], env=self.env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, text=True, preexec_fn=own_session_dying_with_parent)
        self._wait_ready()

    def _wait_ready(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if selector.select(timeout=0.5):
                line = self.process.stdout.readline()
                if line.strip() == READY_LINE:
                    selector.close()
                    return
                if not line:
                    break
        selector.close()
        why = self._last_log_line()
        self.close()
        raise CollectError(f"the fork server did not start: {why}")

    def _last_log_line(self) -> str:
        with contextlib.suppress(OSError):
            lines = [ln for ln in (self._dir / "server.log").read_text(errors="replace").splitlines() if ln.strip()]
            if lines:
                return lines[-1][:300]
        return "no message"

    def task_command(self, task_args: list[str], pid_file: Path, module: str = TASK_MODULE) -> list[str]:
        """The command that runs ``python -m MODULE TASK_ARGS`` through this server; the
        child's pid is written to ``pid_file`` (the client's own pid is not the task's: its CPU
        time is the child's)."""
        return [sys.executable, "-m", CLIENT_MODULE, str(self.socket_path), str(pid_file), "--", module,
                *task_args]

    def cpu_s(self) -> float:
        """The server's own CPU time so far (its forks), which a caller counts as its own."""
        return cpu_seconds(self.process.pid) or 0.0

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()  # the server's signal to stop
            wait_or_kill_group(self.process, _STOP_GRACE_S)
        with contextlib.suppress(OSError):
            self.process.stdout.close()
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def remove_stale_directories(root: Path | None = None) -> list[Path]:
    """Remove the directories (socket, log) of fork servers whose launcher is gone: a lab
    killed outright (SIGKILL) takes its server with it but cannot remove them. Returns them.

    Examples
    --------
    >>> stale = Path(tempfile.mkdtemp()) / f"{DIRECTORY_PREFIX}999999999-x"
    >>> stale.mkdir()
    >>> remove_stale_directories(stale.parent) == [stale] and not stale.exists()
    True
    """
    removed = []
    for directory in sorted((root or Path(tempfile.gettempdir())).glob(f"{DIRECTORY_PREFIX}*-*")):
        owner = directory.name[len(DIRECTORY_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


class ForkServers:
    """Fork servers started on demand, one per task environment, all stopped on exit."""

    def __init__(self) -> None:
        remove_stale_directories()
        self._servers: dict[tuple, ForkServer] = {}

    def for_environment(self, env: Mapping[str, str]) -> ForkServer:
        key = tuple(sorted(env.items()))
        if key not in self._servers:
            self._servers[key] = ForkServer(env)
        return self._servers[key]

    def cpu_s(self) -> float:
        return sum(server.cpu_s() for server in self._servers.values())

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()

    def __enter__(self) -> ForkServers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------- the server

class _Served:
    """A forked child and the client connection that stands in for it."""

    def __init__(self, pid: int, connection: socket.socket) -> None:
        self.pid = pid
        self.connection = connection
        self.pidfd = os.pidfd_open(pid)  # readable once the child has ended


_START_DIRECTORY = os.getcwd()  # where ``python -m`` started the server: its sys.path[0]


class _Server:
    """The server's loop: one thread (the children are forked from it), one selector whose
    keys carry the method that handles them."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(socket_path)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, self._accept)
        self.selector.register(sys.stdin, selectors.EVENT_READ, self._read_stdin)
        self.served: dict[int, _Served] = {}
        self.done = False

    def run(self) -> None:
        print(READY_LINE, flush=True)
        try:
            while not self.done:
                for key, _ in self.selector.select():
                    key.data()
        finally:
            for child in self.served.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)

    def _read_stdin(self) -> None:
        self.done = not sys.stdin.readline()  # the launcher closes it to stop the server

    def _accept(self) -> None:
        connection, _ = self.listener.accept()
        open_here = [self.listener, self.selector, *(c.connection for c in self.served.values()),
                     *(c.pidfd for c in self.served.values())]
        child = _fork_for(connection, open_here)
        if child is not None:
            self.served[child.pid] = child
            self.selector.register(child.pidfd, selectors.EVENT_READ, functools.partial(self._ended, child))
            self.selector.register(connection, selectors.EVENT_READ, functools.partial(self._client_spoke, child))

    def _client_spoke(self, child: _Served) -> None:
        """The client sends nothing after its request: readable now means it has gone, and
        its task goes with it."""
        with contextlib.suppress(OSError):
            if child.connection.recv(1):
                return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        self.selector.unregister(child.connection)

    def _ended(self, child: _Served) -> None:
        _, status = os.waitpid(child.pid, 0)
        with contextlib.suppress(OSError):
            child.connection.sendall(json.dumps({"status": status}).encode() + b"\n")
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(child.connection)
        self.selector.unregister(child.pidfd)
        child.connection.close()
        os.close(child.pidfd)
        del self.served[child.pid]


def serve(socket_path: str, preload: tuple[str, ...] = PRELOADED) -> int:
    """Import ``preload``, listen at ``socket_path``, fork a child per request until
    standard input closes; return the exit status."""
    for module in preload:
        importlib.import_module(module)
    _Server(socket_path).run()
    return 0


def _fork_for(connection: socket.socket, server_files: list) -> _Served | None:
    """Read one request from ``connection``, fork its child; None if the request is unusable."""
    fds: list[int] = []
    try:
        request, fds, _, _ = socket.recv_fds(connection, REQUEST_LIMIT_BYTES, STANDARD_STREAMS)
        peer_pid, _, _ = _PEERCRED.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                _PEERCRED.size))
        asked = json.loads(request)
        module, argv = asked["module"], asked["argv"]
        if len(fds) != STANDARD_STREAMS or not all(isinstance(a, str) for a in [module, *argv]):
            raise ValueError("a request names a module, its arguments and carries three standard streams")
    except (OSError, ValueError, KeyError, TypeError) as err:
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            connection.sendall(json.dumps({"error": str(err)}).encode() + b"\n")
        connection.close()
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    server_pid = os.getpid()
    try:
        pid = os.fork()
    except OSError as err:
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            connection.sendall(json.dumps({"error": f"cannot fork: {err.strerror or err}"}).encode() + b"\n")
        connection.close()
        return None
    if pid == 0:
        _run_child(peer_pid, server_pid, fds, module, argv, [connection, *server_files])
    for fd in fds:
        os.close(fd)
    connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    return _Served(pid, connection)


def _run_child(peer_pid: int, server_pid: int, fds: list[int], module: str, argv: list[str],
               server_files: list) -> None:
    """In the forked child: become the task the client at ``peer_pid`` would have been, and
    run ``module``'s ``main(argv)``; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's handler is not the task's
        # The server kills a child whose client has gone; if the server itself is killed, its
        # children must go with it.
        die_with_parent(server_pid)
        for item in server_files:
            with contextlib.suppress(OSError, ValueError):
                item.close() if hasattr(item, "close") else os.close(item)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.setsid()
        _take_on_context(peer_pid)
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        task = importlib.import_module(module)
        sys.argv = [task.__file__, *argv]
        result = task.main(argv)  # the TF task exits the process itself
        code = result if isinstance(result, int) else 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # a child must never return into the server's loop
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _take_on_context(peer_pid: int) -> None:
    """Join ``peer_pid``'s cgroups and network and mount namespaces, go to its working
    directory and take its environment (the cgroups first: they are written through the
    server's /sys, which a new mount namespace may replace)."""
    proc = Path("/proc") / str(peer_pid)
    own = dict(_cgroup_places(Path("/proc/self")))
    for controllers, place in _cgroup_places(proc):
        if own.get(controllers) != place:
            (_cgroup_directory(controllers, place) / "cgroup.procs").write_text(str(os.getpid()))
    cwd = os.readlink(proc / "cwd")
    environ = (proc / "environ").read_bytes()
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    for kind, flag in (("net", CLONE_NEWNET), ("mnt", CLONE_NEWNS)):
        if os.readlink(proc / "ns" / kind) == os.readlink(f"/proc/self/ns/{kind}"):
            continue
        fd = os.open(proc / "ns" / kind, os.O_RDONLY)
        try:
            if libc.setns(fd, flag) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"cannot join the client's {kind} namespace: {os.strerror(errno)}")
        finally:
            os.close(fd)
    os.chdir(cwd)
    if sys.path and sys.path[0] == _START_DIRECTORY:
        sys.path[0] = cwd
    os.environ.clear()
    for item in environ.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            os.environb[name] = value


def _cgroup_places(proc: Path) -> list[tuple[str, str]]:
    """(controllers, path) of each hierarchy a process is in, as ``/proc/PID/cgroup`` gives
    them (controllers "" is the unified hierarchy)."""
    places = []
    for line in (proc / "cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        places.append((controllers, path))
    return places


def _cgroup_directory(controllers: str, place: str, mountinfo: Path = Path("/proc/self/mountinfo")) -> Path:
    """The directory of cgroup ``place`` in the hierarchy of ``controllers`` (a
    ``/proc/PID/cgroup`` key such as ``cpu,cpuacct``, ``name=systemd`` or "" for v2), through
    the mount whose superblock options name them."""
    wanted = set(controllers.split(",")) if controllers else set()
    for line in mountinfo.read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        parts, described = fields.split(), (tail.split() + ["", "", ""])[:3]
        fstype, options = described[0], set(described[2].split(","))
        root, mount_point = parts[3], Path(parts[4])
        if (fstype == "cgroup2" and not wanted) or (fstype == "cgroup" and wanted and wanted <= options):
            if place == root or place.startswith(root.rstrip("/") + "/"):
                return mount_point / place[len(root.rstrip("/")):].lstrip("/")
    raise OSError(f"no mount of the cgroup hierarchy {controllers or 'v2'!r} holds {place}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m tfprofile.harness.fork_server SOCKET [MODULE...]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    return serve(argv[0], tuple(argv[1:]) or PRELOADED)


if __name__ == "__main__":
    sys.exit(main())
