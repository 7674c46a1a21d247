"""An append-only journal of finished work, to resume a long run from what it wrote.

A journal is a text file of JSON lines (docs/formats.md §12). The first line names the format
and the *key* of the work it records: a digest (:func:`digest`) of every input that changes
the results, so that a journal is only ever resumed by the same work. Each further line is one
finished piece, ``{"id": ..., "value": ...}``, appended as it finishes: written with one
``write`` on a file opened for appending, flushed to the disk (``fsync``) before the next, and
never cut by a stop signal (:func:`tfbase.signals.deferred_signals`). A process killed outright,
or a machine that loses power, can still leave the last line cut short: that *torn tail* is
dropped when the journal is read (:attr:`JournalState.torn_tail`) and cut off before anything
is appended. Damage anywhere else is refused, naming the file and the line.

The journal is not one of a run's outputs (:mod:`tfbase.fileio`): it grows while the run
goes on and stays when the run fails or is stopped, which is its purpose; the outputs made
from it are still written all or none. While a run appends to it, the file is locked
(``flock``): a second run on the same journal is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import errno
import fcntl
import hashlib
import json
import os
import struct
from collections.abc import Mapping
from typing import Any

from tfbase.errors import InputError

JOURNAL_FORMAT = "tfsim.journal/1"


def digest(*values: Any) -> str:
    """A SHA-256 hex digest of ``values``, the same for equal values in any process.

    Takes None, bools, ints, floats (bit for bit), strings, bytes, paths, enums, numpy arrays
    and scalars, dataclass instances (their type's name and every field), mappings (in key
    order) and lists or tuples. Anything else is a :class:`TypeError`: a value whose digest
    could differ between equal inputs must never make one.

    Examples
    --------
    >>> digest(1, [0.5, "a"]) == digest(1, (0.5, "a"))
    True
    >>> digest(0.1 + 0.2) == digest(0.3)
    False
    """
    sha = hashlib.sha256()
    for value in values:
        _feed(sha, value)
    return sha.hexdigest()


def _feed(sha, value: Any) -> None:
    import numpy as np

    if value is None:
        sha.update(b"N")
    elif isinstance(value, (bool, np.bool_)):
        sha.update(b"T" if value else b"F")
    elif isinstance(value, enum.Enum):
        _tagged(sha, b"E", f"{type(value).__module__}.{type(value).__qualname__}".encode())
        _feed(sha, value.value)
    elif isinstance(value, (int, np.integer)):
        _tagged(sha, b"I", str(int(value)).encode())
    elif isinstance(value, (float, np.floating)):
        sha.update(b"D" + struct.pack("<d", float(value)))
    elif isinstance(value, str):
        _tagged(sha, b"S", value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, bytes):
        _tagged(sha, b"B", value)
    elif isinstance(value, os.PathLike):
        _tagged(sha, b"P", os.fsencode(value))
    elif isinstance(value, np.ndarray):
        _tagged(sha, b"A", f"{value.dtype.str}{value.shape}".encode())
        if value.dtype.hasobject:
            for item in value.ravel():
                _feed(sha, item)
        else:
            sha.update(np.ascontiguousarray(value).tobytes())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _tagged(sha, b"C", f"{type(value).__module__}.{type(value).__qualname__}".encode())
        for field in dataclasses.fields(value):
            _tagged(sha, b"F", field.name.encode())
            _feed(sha, getattr(value, field.name))
    elif isinstance(value, Mapping):
        items = sorted(((digest(k), v) for k, v in value.items()), key=lambda pair: pair[0])
        _tagged(sha, b"M", str(len(items)).encode())
        for key_digest, item in items:
            sha.update(key_digest.encode())
            _feed(sha, item)
    elif isinstance(value, (list, tuple)):
        _tagged(sha, b"L", str(len(value)).encode())
        for item in value:
            _feed(sha, item)
    else:
        raise TypeError(f"no stable digest of a {type(value).__name__}")


def _tagged(sha, tag: bytes, data: bytes) -> None:
    sha.update(tag + str(len(data)).encode() + b":" + data)


@dataclasses.dataclass(frozen=True)
class JournalState:
    """What a journal file holds (:func:`read_journal`).

    Attributes
    ----------
    records : dict
        Each whole record's ``value`` by its ``id``.
    good_bytes : int
        The length of the part to keep: the header and every whole record (0: nothing usable).
    torn_tail : bool
        Whether the file ends with a line cut short (an interrupted write), dropped here.
    """

    records: dict
    good_bytes: int
    torn_tail: bool


def read_journal(path: str | os.PathLike, key: str) -> JournalState | None:
    """The records of the journal at ``path`` for the work ``key``; None when there is no
    such file, or an empty one.

    Raises :class:`~tfbase.errors.InputError`, naming the file, when it is not a journal, when
    it records other work (another key), or when a line before the last is damaged.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (FileNotFoundError, NotADirectoryError):  # none there (check_journal_path says if one can be)
        return None
    except IsADirectoryError:
        raise InputError(path, "is a directory: a journal is a file") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    return _parse(path, data, key)


def check_journal_path(path: str | os.PathLike) -> None:
    """Refuse, naming it, a journal path that cannot be created: the nearest directory above it
    that exists must be a directory this process can write in."""
    probe = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise InputError(path, f"cannot write there: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(path, f"cannot write there: {probe} is not writable")


def _parse(path, data: bytes, key: str) -> JournalState | None:
    if not data:
        return None
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # ``tail`` is what follows the last newline
    if not complete:  # not even the header is whole: a journal whose first write was cut
        return JournalState({}, 0, True)
    try:
        header = json.loads(complete[0])
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != JOURNAL_FORMAT:
        raise InputError(path, f"is not a tfsim journal ({JOURNAL_FORMAT})")
    if header.get("key") != key:
        raise InputError(path, "records other work (another profile, cluster or option, or another version of "
                               "tfsim's simulation): give another journal file, or remove this one to start over")
    records: dict = {}
    good = len(complete[0]) + 1
    torn = bool(tail)
    for number, line in enumerate(complete[1:], start=2):
        record = _record(line)
        if record is None:  # a whole line (a record is written with its newline at once) that is not one
            raise InputError(path, f"line {number} is not a whole record: the journal is damaged (remove it to "
                                   "start over)")
        records[record[0]] = record[1]
        good += len(line) + 1
    return JournalState(records, good, torn)


def _record(line: bytes):
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or set(record) != {"id", "value"} or not isinstance(record["id"], str):
        return None
    return record["id"], record["value"]


def header_line(key: str, **about: Any) -> bytes:
    """A journal's first line, for the work ``key``; ``about`` adds fields for its readers
    (what the work is), which :func:`read_journal` does not check."""
    return (json.dumps({**about, "format": JOURNAL_FORMAT, "key": key}, sort_keys=True) + "\n").encode()


def record_line(record_id: str, value: Any) -> bytes:
    """One record as its journal line (compact, key-sorted JSON, NaN written as ``NaN``)."""
    return (json.dumps({"id": record_id, "value": value}, sort_keys=True, separators=(",", ":")) + "\n").encode()


class JournalWriter:
    """Appends records to the journal at ``path`` for the work ``key``, holding its lock.

    Opening creates the file (and its missing directories; ``about`` goes into its header,
    :func:`header_line`), or reads it under the lock as
    :func:`read_journal` does and cuts a torn tail off; :attr:`records` is what it held. Use as
    a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike, key: str, **about: Any):
        self.path = os.fspath(path)
        self._fd = None
        parent = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(parent, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)
        except IsADirectoryError:
            raise InputError(self.path, "is a directory: a journal is a file") from None
        except OSError as exc:
            raise InputError(self.path, f"cannot write there: {exc.strerror or exc}") from None
        self._fd = fd
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise InputError(self.path, "is in use by another tfsim run") from None
            chunks = []
            while chunk := os.pread(fd, 1 << 20, sum(len(c) for c in chunks)):
                chunks.append(chunk)
            state = _parse(self.path, b"".join(chunks), key)
            self.records = dict(state.records) if state is not None else {}
            if state is None or state.good_bytes == 0:
                os.ftruncate(fd, 0)
                self._write(header_line(key, **about))
            elif state.torn_tail:
                os.ftruncate(fd, state.good_bytes)
                os.fsync(fd)
        except BaseException:
            self.close()
            raise

    def append(self, record_id: str, value: Any) -> None:
        """Add one record, whole, and flush it to the disk before returning."""
        self._write(record_line(record_id, value))

    def _write(self, line: bytes) -> None:
        from tfbase.signals import deferred_signals

        with deferred_signals():  # a stop signal waits until the record is whole on the disk
            before = os.lseek(self._fd, 0, os.SEEK_END)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(self._fd, view):]
                os.fsync(self._fd)
            except OSError as exc:
                with contextlib.suppress(OSError):  # no half record left behind (a full disk)
                    os.ftruncate(self._fd, before)
                reason = "no space left on the device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
                raise InputError(self.path, f"cannot write: {reason}") from None

    def close(self) -> None:
        """Release the lock and close the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()
