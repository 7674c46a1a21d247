"""SIGINT and SIGTERM at random (seeded) points of predict, report, calibrate and demo.

Each command runs as a child process of this worktree's code, writing into a directory whose
output paths hold a symbolic link (to a file outside, with old content), a FIFO (with a reader)
and an existing file. A signal is sent after a seeded delay: SIGINT to the whole process group,
as a terminal's Ctrl-C does, or SIGTERM to the command alone, as ``kill`` and ``timeout`` do.
Then:

- the exit status is 130 (SIGINT) or 143 (SIGTERM), or 0 when the command had finished;
- no process the command started is left (its descendants are watched while it runs);
- no staged file (``.*.tmp``) is left, and the outputs are all old or all new: the symbolic
  link is still a link to the same file, the FIFO still a FIFO, and what they hold is either
  untouched or the complete new output;
- stderr has no traceback.

Timing is measured and reported, never asserted (the machine is shared); a command that does
not stop within a minute fails the test as a hang.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from shared_fixtures import alive

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
SEED = 21
POINTS = 3  # random signal times per command and signal
OLD = "old content\n"


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out




class FifoReader:
    """Drains a FIFO in a thread; :meth:`finish` unblocks it when nobody ever wrote."""

    def __init__(self, path: Path):
        self.path, self.data = path, None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb") as handle:
            self.data = handle.read()

    def finish(self) -> bytes:
        if self.thread.is_alive():  # no writer came: open one ourselves so that the reader returns
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        self.thread.join(timeout=10)
        return self.data or b""


def setup_outputs(tmp: Path, command: str) -> dict:
    """The command line and the output paths of ``command`` in ``tmp``, with a symlink, a FIFO and an
    existing file among them. Returns {"argv", "link", "link_target", "fifo", "file", "fresh"}."""
    out = tmp / "out"
    outside = tmp / "outside"
    outside.mkdir()
    target = outside / "target"
    target.write_text(OLD)

    def link(path: Path) -> Path:
        path.symlink_to(target)
        return path

    def existing(path: Path) -> Path:
        path.write_text(OLD)
        return path

    if command == "predict":
        out.mkdir()
        paths = {"link": link(out / "p.json"), "fifo": out / "p.csv", "file": existing(out / "p.png"),
                 "fresh": out / "t.json"}
        argv = ["predict", DATA / "profiles" / "resnet50.npz", "--cluster", DATA / "clusters" / "lab-1gbit.json",
                "--workers", "1-4", "--steps", "200", "--json", paths["link"], "--csv", paths["fifo"],
                "--plot", paths["file"], "--trace-out", paths["fresh"]]
    elif command == "report":
        out.mkdir()
        paths = {"link": link(out / "report.json"), "fifo": out / "prediction.csv",
                 "file": existing(out / "report.html"), "fresh": out / "orderings.csv"}
        argv = ["report", DATA / "profiles" / "alexnet.npz", "--cluster", DATA / "clusters" / "lab-1gbit.json",
                "--workers", "1-4", "--steps", "100", "--warmup", "10", "--out", out]
    elif command == "calibrate":
        (out / "plots").mkdir(parents=True)
        paths = {"link": link(out / "c.json"), "fifo": out / "plots" / "streams.png",
                 "file": existing(out / "plots" / "overhead.png"), "fresh": None}
        argv = ["calibrate", DATA / "captures" / "tiny_lo", "-o", paths["link"], "--plots", out / "plots"]
    else:
        out.mkdir()
        paths = {"link": link(out / "demo.json"), "fifo": out / "findings.txt",
                 "file": existing(out / "report.html"), "fresh": out / "throughput.png"}
        argv = ["demo", "--out", out, "--steps", "60"]
    os.mkfifo(paths["fifo"])
    return {"argv": [str(a) for a in argv], "link_target": target, **paths}


def check_after(tmp: Path, setup: dict, fifo_data: bytes, code: int) -> str:
    """The invariants after the command ended; returns "old" or "new" (which outputs it left)."""
    assert not list(tmp.rglob(".*.tmp")), list(tmp.rglob(".*.tmp"))
    link, target = setup["link"], setup["link_target"]
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert setup["fifo"].is_fifo()
    link_new = target.read_text() != OLD
    states = {"link": link_new, "fifo": bool(fifo_data), "file": setup["file"].read_bytes() != OLD.encode()}
    if setup["fresh"] is not None:
        states["fresh"] = setup["fresh"].exists()
    assert len(set(states.values())) == 1, f"some outputs new, some not: {states}"
    if code == 0:
        assert link_new, "a command that succeeded left its outputs old"
    return "new" if link_new else "old"


CASES = [(command, sig) for command in ("predict", "report", "calibrate", "demo")
         for sig in ("SIGINT", "SIGTERM")]
DELAYS = {"predict": 2.0, "report": 2.0, "calibrate": 1.5, "demo": 4.0}  # most of a run here


@pytest.mark.parametrize("command, sig", CASES)
def test_a_signal_at_a_random_point(tmp_path, command, sig):
    rng = random.Random(f"{SEED}/{command}/{sig}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    for point in range(POINTS):
        tmp = tmp_path / f"point{point}"
        tmp.mkdir()
        setup = setup_outputs(tmp, command)
        reader = FifoReader(setup["fifo"])
        delay = rng.uniform(0.6, DELAYS[command])
        proc = subprocess.Popen([sys.executable, "-m", "tfsim", *setup["argv"]], cwd=tmp, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        seen: set[int] = set()
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and proc.poll() is None:
            seen |= descendants(proc.pid)
            time.sleep(0.02)
        sent = time.monotonic()
        if proc.poll() is None:
            if sig == "SIGINT":
                os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
            else:
                proc.send_signal(signal.SIGTERM)  # kill, timeout: the command alone
        try:
            while proc.poll() is None:
                seen |= descendants(proc.pid)
                if time.monotonic() - sent > 60:
                    raise AssertionError(f"{command} did not stop within 60 s of {sig}")
                time.sleep(0.01)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            err = proc.stderr.read()
            proc.wait()
        took = time.monotonic() - sent
        code = proc.returncode
        expected = 130 if sig == "SIGINT" else 143
        assert code in (0, expected), (code, err[-2000:])
        assert "Traceback" not in err, err[-2000:]
        if code == expected:
            assert err.strip().splitlines()[-1] == ("tfsim: interrupted" if sig == "SIGINT"
                                                    else "tfsim: terminated by SIGTERM")
        time.sleep(0.05)
        left = {pid for pid in seen if alive(pid)}
        assert not left, f"processes outlived {command}: {left}"
        state = check_after(tmp, setup, reader.finish(), code)
        print(f"{command} {sig} after {delay:.2f} s: exit {code} {took:.3f} s after the signal, outputs {state}, "
              f"{len(seen)} child processes seen")


def test_a_signal_raised_inside_a_destructor_still_stops_the_program():
    # Python swallows an exception raised in __del__ (printing "Exception ignored in"): the
    # signal must come again where it unwinds the program, not be lost.
    code = (
        "import os, signal\n"
        "from tfbase.errors import Terminated\n"
        "from tfbase.signals import stop_on_signals\n"
        "class Bomb:\n"
        "    def __del__(self):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        for _ in range(1000): pass\n"
        "try:\n"
        "    with stop_on_signals():\n"
        "        Bomb()\n"
        "        for _ in range(10**6): pass\n"
        "    print('went on')\n"
        "except Terminated:\n"
        "    print('stopped')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.strip() == "stopped"
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr


def test_an_interrupt_that_left_an_exec_of_a_string_still_exits_with_the_command_status(tmp_path):
    # A KeyboardInterrupt leaving exec("...") (dataclasses build methods so while a module is
    # imported) sets CPython's "unhandled KeyboardInterrupt" flag even though the command then
    # handles it; run with -m, as `python -m tfsim`, the interpreter would then kill itself with
    # SIGINT at exit (status -2) instead of exiting with the command's status.
    (tmp_path / "interrupted_exec.py").write_text(
        "from tfbase.signals import stop_on_signals\n"
        "status = 0\n"
        "with stop_on_signals(then_ignore=True):\n"
        "    try:\n"
        "        print('ready', flush=True)\n"
        "        exec('import time\\ntime.sleep(30)')\n"
        "    except KeyboardInterrupt:\n"
        "        status = 130\n"
        "raise SystemExit(status)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "interrupted_exec"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, env=env)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err


def test_a_signal_whose_exception_compiled_code_replaced_still_stops_with_the_signal_status():
    # matplotlib's renderer turns any exception raised in a callback into its own
    # "ValueError: Invalid affine transformation matrix": the command must still end as the
    # signal asked (143, one line), not as a crash (1, a traceback).
    code = (
        "import os, signal, sys\n"
        "import tfsim.cli as cli\n"
        "def renderer(args):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        for _ in range(10**6): pass\n"
        "    except BaseException:\n"
        "        raise ValueError('Invalid affine transformation matrix') from None\n"
        "    return 0\n"
        "build = cli.build_parser\n"
        "def build_parser():\n"
        "    parser = build()\n"
        "    cli._subparser(parser, 'demo').set_defaults(handler=renderer)\n"
        "    return parser\n"
        "cli.build_parser = build_parser\n"
        "sys.exit(cli.main(['demo'], exiting=True))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 143, (done.returncode, done.stderr)
    assert done.stderr.strip() == "tfsim: terminated by SIGTERM"


def test_an_error_with_no_signal_behind_it_is_still_raised():
    code = (
        "import sys\n"
        "import tfsim.cli as cli\n"
        "def broken(args):\n"
        "    raise ValueError('a bug')\n"
        "build = cli.build_parser\n"
        "def build_parser():\n"
        "    parser = build()\n"
        "    cli._subparser(parser, 'demo').set_defaults(handler=broken)\n"
        "    return parser\n"
        "cli.build_parser = build_parser\n"
        "sys.exit(cli.main(['demo'], exiting=True))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1 and "ValueError: a bug" in done.stderr


def test_a_progress_bar_starts_no_monitor_thread():
    """tqdm's monitor is a daemon thread that outlives a command stopped mid-bar; one that wakes
    while the interpreter finalizes can abort the exit (tfbase.progress)."""
    import io
    import threading

    from tfbase.progress import progress_bar

    def monitors():
        return {t.ident for t in threading.enumerate() if t.name == "tqdm_monitor"}

    before = monitors()
    bar = progress_bar(total=3, file=io.StringIO())
    bar.update(1)
    assert monitors() == before
    bar.close()
