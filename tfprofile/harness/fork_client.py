"""Run a task through a fork server: ``python -m tfprofile.harness.fork_client SOCKET PID_FILE -- MODULE ARGS...``.

Started where the task would have started (inside its cgroups, after ``ip netns exec``), it
asks the server (:mod:`tfprofile.harness.fork_server`) for a child that takes on this
process's context and runs ``MODULE``'s ``main(ARGS)``, hands it its standard streams,
writes the child's pid to PID_FILE, forwards the signals that stop a process to it, and
exits as it did (killed by the same signal, or with its status). A server that cannot be
reached or refuses leaves the task to this process: it replaces itself with
``python -m MODULE ARGS``.
Kept free of the project's imports: it starts once per task.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


class _Forwarder:
    """Signals that arrive before the child's pid is known are sent once it is."""

    def __init__(self) -> None:
        self.child: int | None = None
        self.pending: list[int] = []

    def __call__(self, signum, _frame) -> None:
        if self.child is None:
            self.pending.append(signum)
        else:
            _send(self.child, signum)

    def adopt(self, child: int) -> None:
        self.child = child
        for signum in self.pending:
            _send(child, signum)


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _run_task_here(module: str, task_args: list[str], why: str) -> int:
    print(f"tfsim fork client: {why}; running the task in this process", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", module, *task_args])
    return 127  # not reached


def _exit_as(status: int) -> int:
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m tfprofile.harness.fork_client SOCKET PID_FILE -- MODULE ARGS...", file=sys.stderr)
        return 2
    socket_path, pid_file, module, task_args = argv[0], argv[1], argv[3], argv[4:]
    forwarder = _Forwarder()
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forwarder)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(socket_path)
        socket.send_fds(connection, [json.dumps({"module": module, "argv": task_args}).encode() + b"\n"], [0, 1, 2])
        replies = connection.makefile("r")
        first = json.loads(replies.readline() or "{}")
    except (OSError, ValueError) as err:
        return _run_task_here(module, task_args, f"no fork server at {socket_path} ({err})")
    if "pid" not in first:
        return _run_task_here(module, task_args, f"the fork server refused: {first.get('error', 'no answer')}")
    child = int(first["pid"])
    partial = f"{pid_file}.partial"
    with open(partial, "w") as handle:
        handle.write(f"{child}\n")
    os.replace(partial, pid_file)
    forwarder.adopt(child)
    line = replies.readline()  # the status, once the child has ended
    if not line:  # the server is gone: so must the child be
        _send(child, signal.SIGKILL)
        print("tfsim fork client: the fork server stopped before the task ended", file=sys.stderr, flush=True)
        return 1
    return _exit_as(int(json.loads(line)["status"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
