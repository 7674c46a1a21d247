"""Exception types of tfsim.

Every problem with a user's input raises a subclass of :class:`InputError`, which
names the offending file (or option) and says what is wrong in one line. The CLI turns
these into ``tfsim: error: ...`` on stderr and exit status 2; anything else is a bug
and exits with status 1.
"""

from __future__ import annotations

import os


class TfsimError(Exception):
    """Base class of every exception tfsim raises on purpose."""


class InputError(TfsimError):
    """Bad input: a file or an option that tfsim cannot use.

    ``source`` is the file (or option) at fault, or ``None`` when there is none.
    ``str(err)`` is a single line that starts with the source.
    """

    def __init__(self, source: str | os.PathLike | None, problem: str):
        self.source = None if source is None else os.fspath(source)
        self.problem = " ".join(str(problem).split())  # one line, always
        super().__init__(f"{self.source}: {self.problem}" if self.source else self.problem)

    def __reduce__(self):
        # Errors cross process boundaries (parallel sweeps): rebuild from the two fields,
        # not from the formatted message that ``args`` holds.
        return (type(self), (self.source, self.problem))


class TraceFormatError(InputError):
    """A trace (RunMetadata, Chrome trace JSON) that cannot be read."""


class GraphError(InputError):
    """A trace that reads but does not describe a valid step DAG (unpaired transfers, cycles)."""


class RunDirError(InputError):
    """A run directory that is missing files or was never completed."""


class ProfileFormatError(InputError):
    """A profile file that is not a tfsim profile, or of an unsupported format version."""


class UsageError(InputError):
    """A command-line option or API argument out of its valid range."""


class ClusterError(InputError):
    """A multi-host job that cannot run as given: a bad TF_CONFIG or cluster spec, a task
    outside the cluster, an unreachable task, tasks that disagree, or a capture that saw none
    of the job's traffic. ``source`` names the task (``worker0``, ``ps1``)."""


class CollectError(TfsimError):
    """A profiling run that failed: a task died, timed out, or was interrupted."""


class ChildProcessFailed(TfsimError):
    """A child process that tfsim ran work in (a simulation) died without an answer: killed by
    a signal (the kernel's out-of-memory killer, a user) or exited on its own."""


class Terminated(BaseException):
    """The process was asked to stop by SIGTERM or SIGHUP (SIGINT raises KeyboardInterrupt).

    A :class:`BaseException`, like KeyboardInterrupt, so that no ``except Exception`` swallows
    it: every ``with`` block and ``finally`` unwinds (child processes killed, staged outputs
    removed) and the command exits with ``128 + signum``.
    """

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(self.signal_name)

    @property
    def signal_name(self) -> str:
        import signal

        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    @property
    def exit_status(self) -> int:
        return 128 + self.signum

    def __reduce__(self):
        return (type(self), (self.signum,))


class TfsimWarning(UserWarning):
    """Something in the input that tfsim worked around; printed as ``tfsim: warning: ...``."""

    def __init__(self, source: str | os.PathLike | None, problem: str):
        self.source = None if source is None else os.fspath(source)
        self.problem = " ".join(str(problem).split())
        super().__init__(f"{self.source}: {self.problem}" if self.source else self.problem)

    def __reduce__(self):
        return (type(self), (self.source, self.problem))


class TraceWarning(TfsimWarning):
    """A trace with a defect that costs a step, not the whole profile."""
