"""Run a command inside cgroups: ``python -m tfsim.lab.cgexec PROCS_FILE... -- COMMAND ARGS...``.

Writes this process's pid into each ``cgroup.procs`` file, then replaces itself with the
command, which so starts (and leaves its children) inside the groups. It runs before
``ip netns exec``, whose new mount namespace remounts /sys, so the files are the host's.
Kept free of the project's imports: it starts once per task.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: python -m tfsim.lab.cgexec PROCS_FILE... -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    split = argv.index("--")
    procs_files, command = argv[:split], argv[split + 1:]
    if not command:
        print("tfsim.lab.cgexec: no command to run", file=sys.stderr)
        return 2
    for path in procs_files:
        try:
            with open(path, "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as err:
            print(f"tfsim.lab.cgexec: cannot join {path}: {err.strerror or err}", file=sys.stderr)
            return 2
    try:
        os.execvp(command[0], command)
    except OSError as err:
        print(f"tfsim.lab.cgexec: cannot run {command[0]}: {err.strerror or err}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
