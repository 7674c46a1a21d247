"""Journals of sweeps: a sweep that is stopped resumes from the configurations it finished.

A long sweep (many W x configurations, on this machine or a Dask cluster) records each
configuration's row in a journal file as it finishes (:mod:`tfbase.journal`: one whole
record at a time, flushed to the disk). Run again with the journal and ``resume``, it takes
those rows and simulates only the rest. Every row is a pure function of the sweep's inputs
(each simulation is deterministic for its seed), and a row read back from the journal is the
row that was written (JSON keeps a float to the last bit), so the tables, and every output
made from them, are byte for byte those of an uninterrupted run (docs/model.md §11.3).

A journal is keyed by a digest of everything that changes a row: the profile (every array),
the cluster (its calibration and what-ifs; not the file it was read from), every
configuration (its W, M, mode, sharing, transfer model and order) and every option (steps,
warm-up, seed, replicas, hosts, stragglers, enforcement, ...), and the source of the
simulation code (this package). A journal of anything else is refused, naming the file. Where
the configurations run (``jobs``, the executor) is not part of the key: a sweep started here
can be finished on a Dask cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
from collections.abc import Iterator, Sequence

from simulate.results import ROW_COLUMNS
from tfbase.errors import InputError, TfsimWarning, UsageError
from tfbase.journal import JournalWriter, check_journal_path, digest, read_journal

# The sweeps here are simulate.sweep.Sweep objects, not imported: that module imports this one.
ROW_KEYS = frozenset(ROW_COLUMNS) - {"saturated"}  # "saturated" is the table's, not a configuration's


@functools.cache
def code_digest() -> str:
    """A digest of the simulation code's source (every module of this package): a journal
    written by another version of it is not resumed."""
    sha = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith((".py", ".cpp")):  # the packet network's C++ too
            with open(os.path.join(here, name), "rb") as handle:
                sha.update(name.encode() + b"\0" + hashlib.sha256(handle.read()).digest())
    return sha.hexdigest()


def sweep_key(sweeps: Sequence[object]) -> str:
    """The journal key of ``sweeps`` (see the module docstring)."""
    try:
        return digest(code_digest(), [(sweep.profile, dataclasses.replace(sweep.cluster, source=""),
                                       sweep.scenarios, sweep.options) for sweep in sweeps])
    except TypeError as exc:  # an input without a stable digest: a colocation given as a plain function
        raise UsageError("journal", f"this sweep cannot be journalled: {exc} among its options (give the hosts "
                                    "as a Colocation or TaskHosts)") from None


def record_id(part: int, index: int) -> str:
    """A configuration's record id: its sweep's position and its own, ``"0/3"``."""
    return f"{part}/{index}"


@dataclasses.dataclass(frozen=True, eq=False)
class SweepJournal:
    """A journal checked against the sweeps it is for (:func:`open_journal`).

    Attributes
    ----------
    path : str
        The journal file.
    sweeps : tuple of Sweep
        The sweeps it records, in the order they run.
    key : str
        Their key (:func:`sweep_key`).
    resume : bool
        Whether the rows it holds are taken (else a journal holding rows is refused).
    finished : int
        The configurations it held when it was opened.
    """

    path: str
    sweeps: tuple[object, ...]
    key: str
    resume: bool
    finished: int = 0

    @property
    def total(self) -> int:
        """The configurations of all its sweeps."""
        return sum(len(sweep.scenarios) for sweep in self.sweeps)

    def rows(self, records: dict) -> dict[tuple[int, int], dict]:
        """The journal's records as rows by (sweep, configuration); a record that is not one
        of these sweeps' rows is refused, naming the file."""
        if records and not self.resume:
            raise UsageError("journal", f"{self.path} already holds {len(records)} of {self.total} configurations of "
                                        "this sweep: resume it, or remove the file to start over")
        out = {}
        for record, row in records.items():
            part, slash, index = record.partition("/")
            try:
                scenario = self.sweeps[int(part)].scenarios[int(index)] if slash else None
            except (ValueError, IndexError):
                scenario = None
            if (scenario is None or not isinstance(row, dict) or set(row) != ROW_KEYS
                    or row["workers"] != scenario.workers or row["policy"] != scenario.policy
                    or row["sharing"] != scenario.sharing.value):
                raise InputError(self.path, f"record {record!r} is not a row of this sweep: the journal is damaged "
                                            "(remove it to start over)")
            out[(int(part), int(index))] = row
        return out

    @contextlib.contextmanager
    def writing(self) -> Iterator[tuple[dict, object]]:
        """Open the journal to append to (locked), for the run: yields the rows it holds and
        ``append((part, index), row)``."""
        with JournalWriter(self.path, self.key, configurations=self.total) as writer:
            done = self.rows(writer.records)

            def append(item: tuple[int, int], row: dict) -> None:
                writer.append(record_id(*item), row)

            yield done, append


def open_journal(path: str | os.PathLike, sweeps: Sequence[object], *, resume: bool = False) -> SweepJournal:
    """Check the journal at ``path`` for ``sweeps`` before they run: what it holds must be
    theirs, and a journal that holds rows needs ``resume``. A missing file is a journal to
    start. A last record cut short (the run that wrote it was killed mid-write) is dropped,
    with a warning: that configuration runs again.

    Raises
    ------
    tfbase.errors.InputError
        The file is not a journal, records another sweep, or is damaged before its last line.
    tfbase.errors.UsageError
        ``journal``: it holds rows and ``resume`` is off, or the sweep's options have no
        stable digest.
    """
    if not isinstance(resume, bool):
        raise UsageError("resume", f"must be True or False, not {resume!r}")
    shown = os.fspath(path)
    journal = SweepJournal(shown, tuple(sweeps), sweep_key(sweeps), resume)
    state = read_journal(shown, journal.key)
    if state is None:
        check_journal_path(shown)
        return journal
    if state.torn_tail:
        import warnings

        warnings.warn(TfsimWarning(shown, "its last record was cut short (the run writing it was stopped "
                                          "mid-write): that configuration runs again"), stacklevel=2)
    return dataclasses.replace(journal, finished=len(journal.rows(state.records)))
