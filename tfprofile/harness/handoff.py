"""The end of one repetition of a repeated cluster job (``tfsim collect --role ... --repeat N``).

A repetition ends as a single run does: every worker reports done on each PS's done queue
(:mod:`tfprofile.harness.task`), and each PS's task exits. Its ``collect`` process then listens
on the task's own port until every worker's ``collect`` has said that the repetition is over
on its host too. That is the barrier between repetitions (no worker starts the next one while
a PS of the last still serves, and each PS starts its next task only once every worker is
done) and the way every host's load reaches the chief:

1. on each connection the PS sends one line, ``TFSIM-HANDOFF {json}``: its task's label, the
   repetition and its host's load (:meth:`tfbase.load.LoadSample.as_dict`);
2. a worker answers with one such line of its own;
3. the PS closes a worker's connection at once, and the chief's once every worker has
   answered, after a last line with every worker's load (``"hosts"``);
4. the PS starts the next repetition's task, or exits after the last.

A tf2-pss job (:mod:`tfprofile.harness.pss_role`) ends a repetition the same way with its
servers' roles turned around: the coordinator writes each server's done file, and each PS's
and worker's ``collect`` then holds its task's port, greeting with its host's load, until
the coordinator's ``collect`` has answered with its own; it alone reports, and no line is
relayed. The coordinator thus has every host's load, and starts the next repetition only once
each server's task of the last is gone.

A connection that sends nothing (a probe: does the PS serve?) is closed and not counted, so
:func:`handing_over` can tell this listener from a task's gRPC server. This module does not
import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import socket
import time
from collections.abc import Collection

from tfbase.errors import ClusterError, CollectError
from tfprofile.harness.tfconfig import split_address

PREFIX = b"TFSIM-HANDOFF "
LINE_LIMIT_BYTES = 1 << 16  # a line holds a few hosts' loads; anything longer is not ours
PROBE_WAIT_S = 1.0  # how long a probe waits for a greeting (a gRPC server sends none, or other bytes)
REPLY_WAIT_S = 5.0  # how long the PS waits for a worker's line once it has greeted it
CONNECT_WAIT_S = 3.0  # as a worker's wait for a PS: a connection not made by then is retried
RETRY_S = 0.1
CHIEF_LABEL = "worker0"  # a TF1 job's chief, to which each PS relays every worker's load


@dataclasses.dataclass(frozen=True)
class Handoff:
    """What one host says at the end of a repetition: its task, the repetition (from 1) and
    its load while the task ran."""

    label: str
    repetition: int
    host_load: dict

    def line(self, **more) -> bytes:
        record = {"label": self.label, "repetition": self.repetition, "host_load": self.host_load, **more}
        return PREFIX + json.dumps(record, sort_keys=True).encode() + b"\n"


def parse_line(buffer: bytes) -> tuple[bool, dict | None]:
    """What the bytes received so far say: ``(complete, record)``. Complete with a record: a
    handoff line; complete without: anything else (a gRPC server's or client's bytes, a line too
    long or not JSON); not complete: a handoff line may still follow."""
    head = buffer[:len(PREFIX)]
    if PREFIX[:len(head)] != head or len(buffer) > LINE_LIMIT_BYTES:
        return True, None
    if b"\n" not in buffer:
        return False, None
    try:
        record = json.loads(buffer.split(b"\n", 1)[0][len(PREFIX):])
    except ValueError:
        return True, None
    return True, record if isinstance(record, dict) and isinstance(record.get("label"), str) else None


def read_line(sock: socket.socket, deadline: float) -> dict | None:
    """One handoff line from ``sock`` before ``deadline`` (``time.monotonic()``); ``None`` when
    the peer closes, sends nothing in time, or sends anything else."""
    buffer = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(4096)
        except OSError:  # including the timeout
            return None
        if not chunk:
            return None
        buffer += chunk
        complete, record = parse_line(buffer)
        if complete:
            return record


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
    except OSError:
        return False
    return True


@dataclasses.dataclass
class _Reply:
    """A connection the PS has greeted, and what it has answered so far."""

    conn: socket.socket
    opened: float
    buffer: bytes = b""


def serve_handoff(port: int, own: Handoff, reporters: Collection[str], timeout_s: float, *,
                  relay_to: str | None = CHIEF_LABEL) -> dict[str, dict]:
    """A server's side: listen on ``port`` until each of the ``reporters`` (task labels: a TF1
    job's workers, a tf2-pss job's coordinator) has reported the end of ``own.repetition``
    and, given ``relay_to`` (one of them: the TF1 chief), that one has had every reporter's
    load; return those loads by task label. Every connection is greeted at once, however
    many are open.

    Raises :class:`~tfbase.errors.CollectError` when a reporter does not report within
    ``timeout_s`` or the port is taken, :class:`~tfbase.errors.ClusterError` when one reports
    another repetition.
    """
    expected = set(reporters)
    loads: dict[str, dict] = {}
    chief: socket.socket | None = None
    deadline = time.monotonic() + timeout_s
    try:  # SO_REUSEADDR (create_server's default): the task's connections linger in TIME_WAIT
        listener = socket.create_server(("", port))
    except OSError as exc:
        raise CollectError(f"{own.label}: cannot hold the task's port {port} between repetitions: "
                           f"{os.strerror(exc.errno) if exc.errno else exc} (has another process taken it?)") from None
    with listener, selectors.DefaultSelector() as selector:
        listener.setblocking(False)
        selector.register(listener, selectors.EVENT_READ)
        try:
            while not expected <= loads.keys():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    missing = ", ".join(sorted(expected - loads.keys()))
                    raise CollectError(f"{own.label}: {missing} did not report the end of repetition "
                                       f"{own.repetition} within {timeout_s:.0f} s (see its messages)")
                for key, _ in selector.select(min(remaining, REPLY_WAIT_S)):
                    if key.data is None:
                        _greet(listener, selector, own)
                        continue
                    record = _answer(key.data, selector)
                    if record is None:
                        continue  # not complete yet, or a probe
                    if record["label"] not in expected or record.get("repetition") != own.repetition:
                        key.data.conn.close()
                    if record["label"] not in expected:
                        continue  # not one of this job's reporters
                    if record.get("repetition") != own.repetition:
                        raise ClusterError(own.label, f"{record['label']} ended repetition "
                                                      f"{record.get('repetition')} while this task ended repetition "
                                                      f"{own.repetition}: give every task the same repeat")
                    loads[record["label"]] = record.get("host_load")
                    if record["label"] == relay_to:
                        chief = key.data.conn  # answered once every reporter has reported
                    else:
                        key.data.conn.close()
                for key in list(selector.get_map().values()):  # a greeted connection that stays silent
                    if key.data is not None and time.monotonic() - key.data.opened > REPLY_WAIT_S:
                        selector.unregister(key.fileobj)
                        key.data.conn.close()
            if chief is not None:
                chief.settimeout(REPLY_WAIT_S)
                _send(chief, own.line(hosts=loads))
            return loads
        finally:
            for key in list(selector.get_map().values()):
                if key.data is not None:
                    key.data.conn.close()
            if chief is not None:
                chief.close()


def _greet(listener: socket.socket, selector: selectors.BaseSelector, own: Handoff) -> None:
    try:
        conn, _ = listener.accept()
    except OSError:  # gone before it was accepted
        return
    conn.settimeout(REPLY_WAIT_S)
    if not _send(conn, own.line()):
        conn.close()
        return
    conn.setblocking(False)
    selector.register(conn, selectors.EVENT_READ, _Reply(conn, time.monotonic()))


def _answer(reply: _Reply, selector: selectors.BaseSelector) -> dict | None:
    """Read what a greeted connection sent; its handoff record once complete (the connection
    then leaves the selector, and stays open), else ``None`` (closed if it will never be one)."""
    try:
        chunk = reply.conn.recv(4096)
    except BlockingIOError:
        return None
    except OSError:
        chunk = b""
    reply.buffer += chunk
    complete, record = parse_line(reply.buffer) if chunk else (True, None)
    if complete:
        selector.unregister(reply.conn)
        if record is None:
            reply.conn.close()
    return record


def hand_over(address: str, who: str, own: Handoff, *, relay: bool, timeout_s: float) -> dict:
    """A TF1 worker's side (or a tf2-pss coordinator's): tell the server ``who`` at ``address``
    that ``own.repetition`` has ended here; return the server's record (its ``label``,
    ``repetition`` and ``host_load``) and, with ``relay`` (the TF1 chief), every worker's load
    under ``"hosts"``.

    Waits for the server's task of this repetition to exit (its listener takes the port over);
    raises :class:`~tfbase.errors.CollectError` if it has not within ``timeout_s``.
    """
    host, port = split_address(address)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=CONNECT_WAIT_S) as sock:
                greeting = read_line(sock, min(deadline, time.monotonic() + PROBE_WAIT_S))
                if greeting is not None:
                    if greeting.get("repetition") != own.repetition:
                        raise ClusterError(own.label, f"{who} ended repetition {greeting.get('repetition')} while "
                                                      f"this task ended repetition {own.repetition}: give every "
                                                      "task the same repeat")
                    if _send(sock, own.line()):
                        if not relay:
                            return greeting
                        final = read_line(sock, deadline)
                        if final is not None and isinstance(final.get("hosts"), dict):
                            return {**greeting, "hosts": final["hosts"]}
        except OSError:
            pass  # refused: between the task's exit and the listener
        time.sleep(RETRY_S)
    raise CollectError(f"{own.label}: {who} at {address} did not hand over the end of repetition {own.repetition} "
                       f"within {timeout_s:.0f} s: did its task fail? (see its messages)")


def handing_over(sock: socket.socket) -> bool:
    """Whether a fresh connection to a PS's port reached its handoff listener (still between
    two repetitions) rather than its task's gRPC server."""
    return read_line(sock, time.monotonic() + PROBE_WAIT_S) is not None
