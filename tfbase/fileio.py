"""Output files: checked before any work, staged beside their targets, committed together.

One run of a command writes a set of files (:class:`Outputs`). Each is planned before the
command computes anything, so that a path tfsim cannot write fails at once, with one line
naming it; each is written to a staging file beside its target while the run goes on; and
at the end every staged file is renamed onto its target, or, when anything failed or the
run was interrupted, every staged file is removed and no target is touched: all or none.

What a path means (docs/formats.md §1):

- ``-`` is standard output (text outputs only; at most one output per run). Its bytes are
  held until the run commits, so that a failed run prints none of them.
- A symbolic link is followed (each link of a chain), and its final target is replaced
  atomically; the link itself stays.
- A regular file, or a path that does not exist yet (its missing directories are created,
  and removed again if the run fails), is replaced atomically: the staged file is renamed
  over it.
- A character device (``/dev/null``, a terminal) or a FIFO, and ``/dev/stdout``,
  ``/dev/fd/N`` or ``/proc/PID/fd/N``, is written to as a stream when the run commits, never
  renamed or replaced.
- A directory, a block device or a socket is refused before any work.

:func:`atomic_output`, :func:`write_bytes`, :func:`write_text` and :func:`write_json` write
one file the same way; given a planned :class:`Output` instead of a path, they write its
staged content and leave the commit to its :class:`Outputs`.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tfbase.errors import InputError

STDOUT = "-"
STAGING_SUFFIX = ".tmp"  # staged files are ``.<name>.<random>.tmp`` beside their target
_FD_LINK = re.compile(r"^/proc/(?:self|thread-self|\d+)/fd/\d+$")
_MAX_LINKS = 40


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _resolve(path: str) -> tuple[str, str]:
    """``(kind, resolved path)``: kind ``file`` (replace atomically) or ``stream`` (write in place).

    Follows symbolic links one by one, so that a link into ``/proc/PID/fd`` (``/dev/stdout``)
    is seen for what it is: whatever the descriptor points at is written as a stream, not
    replaced (that would swap the file under the shell that opened it).
    """
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        head, tail = os.path.split(current)
        current = os.path.join(os.path.realpath(head), tail)
        if _FD_LINK.match(current):
            return "stream", current
        if not os.path.islink(current):
            break
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    else:
        raise InputError(path, "too many levels of symbolic links")
    try:
        mode = os.stat(current).st_mode
    except FileNotFoundError:
        return "file", current
    except OSError as exc:
        raise InputError(path, f"cannot write there: {_reason(exc)}") from None
    if stat.S_ISREG(mode):
        return "file", current
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "stream", current
    kind = ("a directory" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    raise InputError(path, f"is {kind}: an output must be a file, a character device, a FIFO or -")


class Output:
    """One planned output file of a run (:meth:`Outputs.file`)."""

    def __init__(self, outputs: Outputs, path: str | os.PathLike, what: str, binary: bool):
        self.shown = os.fspath(path)
        self.what = what
        self.binary = binary
        self.written = False
        self._outputs = outputs
        self._staged: str | None = None
        self._buffer: bytes | None = None
        if self.shown == STDOUT:
            if binary:
                raise InputError(what, "writes binary data, not text: give a file name, not - (standard output)")
            self.kind, self.target = "stdout", None
            return
        self.kind, self.target = _resolve(self.shown)
        if self.kind == "stream":
            if not os.access(self.target, os.W_OK):
                raise InputError(self.shown, "cannot write there: permission denied")
            return
        self._stage()

    def _stage(self) -> None:
        """Create the staging file beside the target (and any missing directory): this is the
        check that the target can be written at all."""
        parent = os.path.dirname(self.target)
        missing = []
        probe = parent
        while probe and not os.path.lexists(probe):
            missing.append(probe)
            probe = os.path.dirname(probe)
        try:
            for directory in reversed(missing):
                os.mkdir(directory)
                self._outputs._created_dirs.append(directory)
            fd, self._staged = tempfile.mkstemp(prefix=f".{os.path.basename(self.target)}.", suffix=STAGING_SUFFIX,
                                                dir=parent)
            os.close(fd)
            os.chmod(self._staged, 0o666 & ~_umask())  # mkstemp's 0600 would surprise anyone sharing results
        except OSError as exc:
            raise InputError(self.shown, f"cannot write there: {_reason(exc)}") from None

    @property
    def name(self) -> str:
        """The target's file name (what a format is told by: ``.png``, ``.svg``)."""
        return os.path.basename(self.target or self.shown)

    def __repr__(self) -> str:
        return f"Output({self.shown!r}, {self.kind})"

    @contextlib.contextmanager
    def open(self, mode: str = "w") -> Iterator[IO[Any]]:
        """A handle writing this output's staged content (replacing what was written before)."""
        if mode not in ("w", "wb"):
            raise ValueError(f"an output opens with mode 'w' or 'wb', not {mode!r}")
        try:
            if self._staged is not None:
                with open(self._staged, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as handle:
                    yield handle
                    handle.flush()
                    os.fsync(handle.fileno())
            else:
                raw = io.BytesIO()
                handle = raw if mode == "wb" else io.TextIOWrapper(raw, encoding="utf-8", newline="")
                yield handle
                handle.flush()
                self._buffer = raw.getvalue()
        except OSError as exc:
            raise InputError(self.shown, f"cannot write: {_reason(exc)}") from None
        self.written = True

    def _deliver(self) -> None:
        """Write a held stream's bytes to its device, FIFO or standard output."""
        data = self._buffer or b""
        try:
            if self.kind == "stdout":
                stream = sys.stdout
                stream.flush()
                if hasattr(stream, "buffer"):
                    stream.buffer.write(data)
                    stream.buffer.flush()
                else:  # a text stream that has no bytes underneath (a test's capture)
                    stream.write(data.decode("utf-8"))
                    stream.flush()
                return
            fd = os.open(self.target, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise InputError(self.shown, f"cannot write: {_reason(exc)}") from None

    def _discard(self) -> None:
        if self._staged is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._staged)
            self._staged = None
        self._buffer = None


class OutputDirectory:
    """A directory of a run's outputs (``report --out DIR``): files planned inside it."""

    def __init__(self, outputs: Outputs, path: str | os.PathLike, what: str):
        self.shown = os.fspath(path)
        self.what = what
        if self.shown == STDOUT:
            raise InputError(what, "is a directory of files: give a directory, not - (standard output)")
        self.path = Path(path)
        self._outputs = outputs
        self.files: dict[str, Output] = {}
        target = os.path.realpath(self.shown)
        if os.path.lexists(target) and not os.path.isdir(target):
            raise InputError(self.shown, "exists and is not a directory")

    def file(self, name: str, *, binary: bool = False) -> Output:
        """Plan ``DIR/name``."""
        output = self._outputs.file(self.path / name, f"{self.what} file {name}", binary=binary)
        self.files[name] = output
        return output

    def __truediv__(self, name: str) -> Output:
        return self.files[name]


class Outputs:
    """The output files of one run: planned up front, committed together (see the module docstring).

    Use as a context manager: leaving it with an exception (an error, Ctrl-C, SIGTERM)
    removes every staged file and every directory the plan created; :meth:`commit` puts
    every written output in place.
    """

    def __init__(self) -> None:
        self._outputs: list[Output] = []
        self._created_dirs: list[str] = []
        self._done = False

    def file(self, path: str | os.PathLike, what: str = "output", *, binary: bool = False) -> Output:
        """Plan one output file; :class:`~tfbase.errors.InputError` if it cannot be written."""
        shown = os.fspath(path)
        if shown == STDOUT:
            taken = next((o for o in self._outputs if o.kind == "stdout"), None)
            if taken is not None:
                raise InputError(what, f"standard output is already taken by {taken.what}: only one output can be -")
        output = Output(self, path, what, binary)
        same = next((o for o in self._outputs if o.target is not None and o.target == output.target), None)
        if same is not None:
            output._discard()
            raise InputError(shown, f"is also the {same.what}: give each output its own file")
        self._outputs.append(output)
        return output

    def directory(self, path: str | os.PathLike, what: str = "output directory") -> OutputDirectory:
        """Plan a directory whose files are then planned with :meth:`OutputDirectory.file`."""
        return OutputDirectory(self, path, what)

    def output_at(self, path: str | os.PathLike) -> Output | None:
        """The planned output that writes ``path`` (followed through symbolic links), if any."""
        target = os.path.realpath(os.fspath(path))
        return next((o for o in self._outputs if o.target is not None and os.path.realpath(o.target) == target), None)

    @property
    def to_stdout(self) -> bool:
        """Whether one of the outputs is standard output (so the command prints its own text elsewhere)."""
        return any(o.kind == "stdout" for o in self._outputs)

    def commit(self) -> None:
        """Put every written output in place: streams first (they can fail, a full device or a
        closed pipe, and cannot be undone), then the staged files, renamed one after another
        with stop signals held until the last is in place. Outputs never written are dropped."""
        from tfbase.signals import deferred_signals

        try:
            for output in self._outputs:
                if output.written and output.kind != "file":
                    output._deliver()
            with deferred_signals():
                for output in self._outputs:
                    if output.written and output.kind == "file" and output._staged is not None:
                        try:
                            os.replace(output._staged, output.target)
                        except OSError as exc:
                            raise InputError(output.shown, f"cannot write: {_reason(exc)}") from None
                        output._staged = None
        except BaseException:
            self.discard()
            raise
        self._done = True
        self._remove_staged()

    def discard(self) -> None:
        """Remove every staged file, and the directories the plan created (when empty)."""
        self._remove_staged()
        for directory in reversed(self._created_dirs):
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        self._created_dirs.clear()

    def _remove_staged(self) -> None:
        for output in self._outputs:
            output._discard()

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or not self._done:
            self.discard()


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike | Output, mode: str = "w") -> Iterator[IO[Any]]:
    """A handle writing ``path``: staged beside it, put in place when the block ends without an error.

    ``mode`` is ``"w"`` (text, UTF-8) or ``"wb"``. On an exception the staged file is removed
    and ``path`` is left untouched. ``path`` may be a planned :class:`Output`: then only its
    staged content is written, and its :class:`Outputs` commits it with the rest of the run.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_output mode must be 'w' or 'wb', not {mode!r}")
    if isinstance(path, Output):
        with path.open(mode) as handle:
            yield handle
        return
    with Outputs() as outputs:
        output = outputs.file(path, binary=mode == "wb")
        with output.open(mode) as handle:
            yield handle
        outputs.commit()


def output_name(path: str | os.PathLike | Output) -> str:
    """The file name of a path or a planned output."""
    return path.name if isinstance(path, Output) else os.path.basename(os.fspath(path))


def write_bytes(path: str | os.PathLike | Output, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_output(path, "wb") as handle:
        handle.write(data)


def write_text(path: str | os.PathLike | Output, text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_output(path, "w") as handle:
        handle.write(text)


def read_input(path: str | os.PathLike, *, limit: int, error: type[InputError] = InputError,
               what: str = "file", gunzip: bool = True) -> bytes:
    """The bytes of an input file, gzip'd or not (decompressed, with ``gunzip``), refusing with
    ``error`` one that is, or expands to, more than ``limit`` bytes: a small file never makes
    tfsim allocate more."""
    import gzip
    import zlib

    try:
        size = os.stat(path).st_size
        if size > limit:
            raise error(path, f"is {size:,} bytes, more than a {what} may be ({limit:,})")
        with open(path, "rb") as handle:
            raw = handle.read(limit + 1)
    except FileNotFoundError:
        raise error(path, "no such file") from None
    except OSError as exc:
        raise error(path, f"cannot read: {_reason(exc)}") from None
    if raw[:2] != b"\x1f\x8b" or not gunzip:
        return raw
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as stream:
            data = stream.read(limit + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise error(path, f"corrupt or truncated gzip data ({exc})") from None
    if len(data) > limit:
        raise error(path, f"expands to more than {limit:,} bytes, more than a {what} may be")
    return data


def json_ready(value: Any) -> Any:
    """``value`` with every float that JSON cannot hold (NaN, ±inf: a median of no sample)
    replaced by None, through dicts and lists.

    Examples
    --------
    >>> json_ready({"a": [1.0, float("nan")], "b": {"c": float("inf")}})
    {'a': [1.0, None], 'b': {'c': None}}
    """
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_text(obj: Any) -> str:
    """``obj`` as indented, key-sorted JSON with a final newline: equal objects give equal bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_json(path: str | os.PathLike | Output, obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON, atomically, so that equal objects give equal bytes."""
    write_text(path, json_text(obj))
