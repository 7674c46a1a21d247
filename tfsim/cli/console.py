"""What a command prints on stderr besides its error: warnings and stage lines, held until the
command's inputs are checked.

A command that fails on its input prints exactly one line, its error. So the lines a command
says before it knows its inputs are good (a warning about the cluster, ``[1/4] reading ...``)
are held; :meth:`Console.release` prints them once every input has been checked, and from then
on lines are printed as they come. On an input error the held lines are dropped; on success
or on a failure of the run itself they are printed.

The command's own text (tables, summaries) goes to standard output, or to standard error when
one of its outputs is ``-`` (standard output carries that output): :attr:`Console.out`.
"""

from __future__ import annotations

import sys


class Console:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new command: hold again, nothing held, text to standard output."""
        self._held: list[str] = []
        self._holding = True
        self.text_to_stderr = False

    def say(self, line: str) -> None:
        """A line on stderr (a stage of the work, a warning): held until :meth:`release`."""
        if self._holding:
            self._held.append(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def warn(self, text: str) -> None:
        self.say(f"tfsim: warning: {text}")

    def release(self) -> None:
        """The inputs are checked: print what was held, and every line from now on as it comes."""
        held, self._held, self._holding = self._held, [], False
        for line in held:
            print(line, file=sys.stderr, flush=True)

    def drop(self) -> None:
        """The command fails on its input: forget the held lines (its error is the one line)."""
        self._held.clear()

    @property
    def out(self):
        """Where the command's own text goes: stdout, or stderr when an output is ``-``."""
        return sys.stderr if self.text_to_stderr else sys.stdout


console = Console()
