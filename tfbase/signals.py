"""Stopping at once, and cleanly, on SIGINT, SIGTERM and SIGHUP.

- :func:`stop_on_signals` (the CLI runs every command inside it): SIGINT raises
  ``KeyboardInterrupt`` and SIGTERM or SIGHUP :class:`~tfbase.errors.Terminated` in the main
  thread, wherever Python code is running, so that every ``with`` block and ``finally``
  unwinds: child processes are killed, staged outputs removed. The first signal also makes
  the handler ignore further ones, so that a second Ctrl-C cannot cut that cleanup short
  (it takes milliseconds). A signal that the process inherited as ignored (``nohup``, a
  background job of a non-interactive shell) stays ignored.
- A stop signal whose exception the handler raised inside a ``__del__`` or a weakref
  callback (where Python swallows exceptions) is raised again a millisecond later, from a
  SIGALRM timer, so that it is neither lost nor printed as "Exception ignored".
- A process that handled a SIGINT exits with its command's status (130), even when the
  KeyboardInterrupt passed through an ``exec`` of a string on its way (see
  ``_forget_interrupt_seen_by_exec``).
- :func:`deferred_signals`: a signal that arrives inside is acted on at its end, so that the
  renames committing a run's outputs are never cut in the middle.
- :func:`child_process_setup`: what a worker process does first: it ignores SIGINT (the
  parent decides when it stops, and kills it), takes SIGTERM's default action, and dies
  with its parent (``PR_SET_PDEATHSIG``), so that no worker outlives a parent killed outright.

Compiled code (the simulation's event loop) does not run Python's signal handlers until it
returns, so it runs only in child processes (:mod:`simulate.workers`); the process that
handles the signals only waits for them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

from tfbase.errors import Terminated

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
REDELIVER_AFTER_S = 0.001  # a swallowed stop signal is raised again this much later

_state = {"stopping": False, "deferring": 0, "pending": None, "unraisable_hook": sys.unraisablehook,
          "redeliver": None, "alarm_handler": signal.SIG_DFL, "received": None}


def stop_exception(signum: int) -> KeyboardInterrupt | Terminated:
    """The exception a stop signal becomes: KeyboardInterrupt for SIGINT, else Terminated."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _raise_for(signum: int) -> None:
    _state["received"] = signum
    raise stop_exception(signum)


def _swallowed(hook_args) -> None:
    """``sys.unraisablehook`` inside :func:`stop_on_signals`. A signal whose exception the
    handler raised inside a ``__del__`` or a weakref callback is swallowed there by Python
    (printed as "Exception ignored in ..."), and the program would go on as if never asked to
    stop: send the signal again, to be raised where it unwinds the program."""
    exc = hook_args.exc_value
    if _state["stopping"] and isinstance(exc, (Terminated, KeyboardInterrupt)):
        _state["stopping"] = False
        _state["redeliver"] = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else exc.signum
        # A moment later, by then out of the destructor: sent from here (or from a thread this
        # waits to start) the handler would run, and be swallowed, here again.
        _state["alarm_handler"] = signal.signal(signal.SIGALRM, _redeliver)
        signal.setitimer(signal.ITIMER_REAL, REDELIVER_AFTER_S)
        return
    _state["unraisable_hook"](hook_args)


def _redeliver(alarm, frame) -> None:
    signal.signal(signal.SIGALRM, _state["alarm_handler"])
    _handler(_state["redeliver"], frame)


def _handler(signum, frame) -> None:
    if _state["stopping"]:
        return  # already unwinding: let the cleanup finish
    if _state["deferring"]:
        _state["pending"] = _state["pending"] or signum
        return
    _state["stopping"] = True
    _raise_for(signum)


@contextlib.contextmanager
def stop_on_signals(*, then_ignore: bool = False) -> Iterator[None]:
    """Turn SIGINT into KeyboardInterrupt and SIGTERM/SIGHUP into Terminated while inside
    (main thread only; elsewhere this does nothing). Restores the previous handlers after, or,
    with ``then_ignore`` (a process about to exit), ignores the signals from then on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in STOP_SIGNALS:
        current = signal.getsignal(sig)
        if current is signal.SIG_IGN:
            continue  # ignored on purpose by whoever started us (nohup, a background job)
        previous[sig] = signal.signal(sig, _handler)
    saved = dict(_state)
    _state.update(stopping=False, deferring=0, pending=None, unraisable_hook=sys.unraisablehook, received=None)
    sys.unraisablehook = _swallowed
    try:
        yield
    finally:
        _state["stopping"] = True  # leaving: a signal from here on is not raised
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_IGN if then_ignore else old)
        sys.unraisablehook = _state["unraisable_hook"]
        _state.update(saved)
        if then_ignore:
            _forget_interrupt_seen_by_exec()


def _forget_interrupt_seen_by_exec() -> None:
    """Clear CPython's "unhandled KeyboardInterrupt" flag. ``exec`` or ``eval`` of a string
    (dataclasses and namedtuple build their methods so, on import) sets it when a
    KeyboardInterrupt leaves the string's code, even if a caller then handles it, and at exit
    the interpreter then kills itself with SIGINT instead of exiting with the status the
    command returned. Each such ``exec`` starts by clearing the flag: one that runs to its end
    leaves it clear."""
    exec("None")


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold a stop signal that arrives inside until the block ends, then act on it."""
    _state["deferring"] += 1
    try:
        yield
    finally:
        _state["deferring"] -= 1
        pending = _state["pending"]
        if not _state["deferring"] and pending is not None:
            _state["pending"] = None
            if not _state["stopping"]:
                _state["stopping"] = True
                _raise_for(pending)


def received_stop_signal() -> int | None:
    """The stop signal whose exception :func:`stop_on_signals` raised, if one was. Compiled code
    that calls back into Python can replace that exception with its own (matplotlib's renderer
    turns it into ``ValueError: Invalid affine transformation matrix``): the caller then still
    knows the error is the signal's doing."""
    return _state["received"]


def stopping() -> bool:
    """Whether a stop signal has been received (the process is unwinding)."""
    return bool(_state["stopping"])


@contextlib.contextmanager
def blocked_stop_signals() -> Iterator[None]:
    """Block SIGINT, SIGTERM and SIGHUP in this thread for the block (a fork inside it gives the
    child the mask; :func:`child_process_setup` lifts it there), then restore the mask: a
    signal that came meanwhile is delivered then."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def die_with_parent(parent_pid: int | None = None) -> None:
    """Have the kernel SIGKILL this process when its parent ends (``PR_SET_PDEATHSIG``); with
    ``parent_pid``, also end now if that parent has already gone (before the call took effect)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def wait_or_kill_group(process: subprocess.Popen, grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``process`` (asked to end by the caller) to exit, then SIGKILL
    its process group (a session leader's: :func:`own_session_dying_with_parent`) and reap it."""
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def own_session_dying_with_parent() -> None:
    """A ``preexec_fn``: the child leads a session (and process group) of its own, which can be
    stopped as one, and dies with the process that started it."""
    os.setsid()
    die_with_parent()


def child_process_setup(parent_pid: int) -> None:
    """In a freshly forked worker: ignore SIGINT, default SIGTERM/SIGHUP, die with the parent;
    then unblock the stop signals (a fork under :func:`blocked_stop_signals` keeps them blocked)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    _state.update(stopping=False, deferring=0, pending=None)
    die_with_parent(parent_pid)
