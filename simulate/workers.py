"""Simulations in child processes that can be stopped at once.

The compiled event loop (:mod:`simulate.kernel`) runs to its end before Python sees a
signal: a Ctrl-C during a long simulation would wait for it. So no simulation runs in the
process that handles signals. :class:`WorkerPool` forks worker processes that run the
simulations while the parent only waits for their answers; on any exception in the parent
(an error, ``KeyboardInterrupt``, :class:`~tfbase.errors.Terminated`) every worker is killed
(SIGKILL) and reaped before the exception goes on, which takes milliseconds. Workers ignore
SIGINT (a Ctrl-C reaches the whole process group; the parent decides) and die with their
parent even when it is killed outright (:func:`tfbase.signals.child_process_setup`).

Workers are forked, so what they need (the profile, the cluster) is handed over at the fork,
not pickled; only each task and its result cross a pipe. :func:`run_in_child` runs one call
the same way. Inside a worker both run in-process (no nested pools).
"""

from __future__ import annotations

import collections
import multiprocessing
import multiprocessing.connection
import os
import signal
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from tfbase.errors import ChildProcessFailed
from tfbase.signals import blocked_stop_signals, child_process_setup

MAX_JOBS = 256  # more processes than this is a typo, not a machine
_in_worker = False


def in_worker() -> bool:
    """Whether this process is a worker of a :class:`WorkerPool`."""
    return _in_worker


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker (chained as its cause)."""

    def __str__(self) -> str:
        return self.args[0] if self.args else ""


def _worker_main(conn, parent_pid: int, shared) -> None:
    global _in_worker
    _in_worker = True
    child_process_setup(parent_pid)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            break
        if task is None:
            break
        key, fn, item = task
        try:
            reply = ("ok", key, fn(shared, item))
        except BaseException as exc:  # handed to the parent, which decides
            reply = ("error", key, exc, traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as exc:  # the result or the exception does not pickle
            conn.send(("error", key, RuntimeError(f"a worker's answer could not be sent back: {exc!r}"),
                       traceback.format_exc()))
    conn.close()


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


class WorkerPool:
    """``processes`` forked workers sharing ``shared``; see the module docstring.

    Use as a context manager: leaving it normally lets the workers exit; leaving it with an
    exception kills them at once.
    """

    def __init__(self, processes: int, shared: Any = None):
        context = multiprocessing.get_context("fork")
        self._workers = []
        try:
            for _ in range(max(1, int(processes))):
                parent_end, child_end = context.Pipe()
                process = context.Process(target=_worker_main, args=(child_end, os.getpid(), shared), daemon=True)
                # Stop signals are blocked across the fork: one that came in the child before its
                # handlers are its own would raise inside the interpreter's at-fork hooks (and
                # print a traceback); here it waits, and acts once the mask is restored.
                with blocked_stop_signals():
                    process.start()
                child_end.close()
                self._workers.append((process, parent_end))
        except BaseException:
            self.kill()
            raise

    def map(self, fn: Callable[[Any, Any], Any], items: Iterable,
            on_result: Callable[[int, Any], None] | None = None) -> list:
        """``[fn(shared, item) for item in items]``, run in the workers, in the order given.

        ``fn`` must be a module-level function (it is pickled); an exception raised by ``fn``
        is raised here, with the worker's traceback as its cause. ``on_result(index, result)`` is
        called as each result arrives (``index`` in ``items``).
        """
        pending = collections.deque(enumerate(items))
        results: dict[int, Any] = {}
        busy: dict[int, int] = {}  # worker position -> item index
        total = len(pending)
        while len(results) < total:
            for position, (_, conn) in enumerate(self._workers):
                if position not in busy and pending:
                    index, item = pending.popleft()
                    conn.send((index, fn, item))
                    busy[position] = index
            watched = {}
            for position in busy:
                process, conn = self._workers[position]
                watched[conn] = position
                watched[process.sentinel] = position
            for ready in multiprocessing.connection.wait(list(watched), timeout=1.0):
                position = watched[ready]
                if position not in busy:
                    continue  # its answer was taken through the other handle
                process, conn = self._workers[position]
                if not conn.poll():
                    process.join(timeout=5)
                    raise ChildProcessFailed(f"a simulation process {_describe_exit(process.exitcode)} "
                                             "(out of memory?)")
                try:
                    reply = conn.recv()
                except (EOFError, OSError):
                    process.join(timeout=5)
                    raise ChildProcessFailed(f"a simulation process {_describe_exit(process.exitcode)} "
                                             "(out of memory?)") from None
                del busy[position]
                if reply[0] == "error":
                    _, _, exc, text = reply
                    raise exc from RemoteTraceback(text)
                results[reply[1]] = reply[2]
                if on_result is not None:
                    on_result(reply[1], reply[2])
        return [results[i] for i in range(total)]

    def close(self) -> None:
        """Let the workers exit (after their current task), then reap them."""
        for _process, conn in self._workers:
            try:
                conn.send(None)
            except OSError:
                pass
        for process, conn in self._workers:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
            conn.close()
        self._workers = []

    def kill(self) -> None:
        """Kill every worker now (SIGKILL) and reap it."""
        for process, _ in self._workers:
            if process.is_alive():
                process.kill()
        for process, conn in self._workers:
            process.join()
            conn.close()
        self._workers = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.kill()


def _call(shared, _item):
    fn, args, kwargs = shared
    return fn(*args, **kwargs)


def run_in_child(fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a forked child process (in-process inside a worker): a
    signal stops it at once, however long ``fn`` runs compiled code."""
    if _in_worker:
        return fn(*args, **kwargs)
    with WorkerPool(1, shared=(fn, args, kwargs)) as pool:
        return pool.map(_call, [None])[0]
