"""One entry point for every profile input: run directories, RunMetadata, Chrome traces."""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from pathlib import Path

from tfbase.errors import InputError, TraceFormatError, UsageError
from tfprofile.dag import Profile
from tfprofile.profile_io import load_profile, save_profile
from tfprofile.rundir import profile_from_run_dir, profile_from_traces, read_variables

__all__ = ["is_chrome_trace", "load_profile", "read_profile", "save_profile"]


def is_chrome_trace(path: str | os.PathLike) -> bool:
    """True if the file (optionally gzip'd) starts like JSON rather than a protobuf."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(2)
            handle.seek(0)
            if head == b"\x1f\x8b":
                with gzip.open(handle) as inner:
                    head = inner.read(64)
            else:
                head = handle.read(64)
    except (OSError, EOFError) as exc:
        raise TraceFormatError(path, f"cannot read: {exc}") from None
    return head.lstrip()[:1] in (b"{", b"[")


def read_profile(
    inputs: Sequence[str | os.PathLike] | str | os.PathLike,
    *,
    batch_size: int | None = None,
    variables: str | os.PathLike | None = None,
) -> Profile:
    """Build a profile from a run directory, or from trace files of one run.

    Parameters
    ----------
    inputs : path or sequence of paths
        A run directory written by ``tfsim collect``, or trace files of one run: RunMetadata
        (binary or text protobuf, optionally gzip'd) or Chrome trace JSON, all of one kind.
    batch_size : int, optional
        Examples per step and worker; required for trace files outside a run directory.
    variables : path, optional
        A ``variables.json`` giving the variable table, for trace files outside a run directory.

    Returns
    -------
    Profile
        The op DAG once (ops in topological order, CSR edges) and every traced step's
        timings (docs/model.md §1).

    Raises
    ------
    tfbase.errors.InputError
        A missing, incomplete or unreadable input (a subclass says which: ``RunDirError``,
        ``TraceFormatError``, ``GraphError``), naming the file.

    Examples
    --------
    >>> import tfprofile
    >>> profile = tfprofile.read_profile("data/runs/tiny")
    >>> profile.graph.n_ops, profile.n_steps, profile.batch_size
    (93, 30, 32)
    >>> step = tfprofile.read_profile(["data/raw/tiny_step.pb"], batch_size=32,
    ...                               variables="data/raw/tiny_variables.json")
    >>> step.n_steps
    1
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = [Path(p) for p in inputs]
    if not paths:
        raise InputError(None, "no input given")
    if len(paths) == 1 and paths[0].is_dir():
        return profile_from_run_dir(paths[0])
    for p in paths:
        if p.is_dir():
            raise InputError(p, "give one run directory, or trace files, not both")
        if not p.exists():
            raise InputError(p, "no such file")
    if batch_size is None:
        raise UsageError("batch_size", "trace files outside a run directory need the batch size")
    table = read_variables(variables) if variables is not None else None
    kinds = {is_chrome_trace(p) for p in paths}
    if kinds == {True}:
        from tfprofile.chrome import profile_from_chrome_traces

        return profile_from_chrome_traces(paths, batch_size=batch_size, variables=table)
    if kinds == {False}:
        return profile_from_traces(paths, batch_size=batch_size, variables=table,
                                   meta={"source": paths[0].name, "trace_files": [p.name for p in paths]})
    raise InputError(paths[0], "mixes Chrome trace JSON and RunMetadata files; give one kind")
