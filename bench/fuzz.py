"""Fuzz every reader of tfsim: ``python bench/fuzz.py --inputs 100000 --seed 1``.

The readers and their seed inputs are in :mod:`fuzz_targets`: pcap, pcapng and gzip
captures through the scapy backend, HTTP/2 frames, HPACK header blocks, gRPC messages,
RunMetadata (binary and text), Chrome traces, iperf3 JSON, profiles (``.npz``), cluster
files, prediction tables and priority TSVs.

Inputs are mutations of the seeds, in the style of Wireshark's ``editcap -E``: bit flips
and byte overwrites, truncation at a random offset or at a record boundary (a packet
record, a pcapng block, an HTTP/2 frame, a gRPC message), records duplicated and
reordered (for captures, whole TCP segments), length fields set to 0, 1, one too many or
huge, random bytes inserted and chunks deleted. JSON inputs are also mutated as JSON:
values replaced by values of other types, NaN, huge numbers or deep nesting, keys
deleted. Compressed targets are compressed after mutation, and the compressed bytes are
mutated too. Input ``i`` of target ``t`` depends only on ``(seed, t, i)``, so a run is
reproducible input by input, however the work is split.

Each input runs in a worker process with an address-space limit (``RLIMIT_AS``, the
worker's size after its imports plus ``--memory-mb``) and a time limit (``--input-seconds``,
a timer signal in the worker, and a watchdog in the parent that kills a worker that stops
making progress). The only acceptable outcomes are success and the reader's documented
exception types (:attr:`fuzz_targets.Target.accepted`); anything else, a timeout or a
``MemoryError`` is a failure, and a worker that dies is restarted after the input that
killed it. Failures are told apart by the exception type and the innermost frame of the
project's code; each distinct failure is kept with its input shrunk by truncation and by
bisection (deleting halves, quarters, ... while the failure stays the same).

Failures found earlier are regression cases in ``tests/fuzz_cases/`` (``cases.json``
lists them); every run replays them first and counts a case as fixed when its reader now
accepts it. The table (``bench/results/fuzz.json`` and ``fuzz.md``) gives, per reader,
the inputs tried, the distinct failures found (regression cases and new ones), those
fixed, and those open; new failures are written under ``--failures`` to become cases.

Whole commands (``--commands [NAMES] --runs N``): each run is a ``tfsim`` command line with
mutated input files and option values (:mod:`fuzz_commands`), run by ``tfsim.cli.main`` in a
child forked from a warm worker, in a process group of its own, under ``RLIMIT_AS`` and a time
limit, with ``TFSIM_MAX_OP_EVENTS`` set so that any run tfsim accepts fits in that time. A run
passes when it exits with 0 or 2 (not 1 from a traceback, not a signal, not a timeout), prints
exactly one line on stderr with exit 2, leaves no process of its group behind, and leaves no
stray file (nothing new or changed after exit 2; only its outputs, and no staged ``.*.tmp``,
after exit 0). Failures are kept whole (command line and files) as regression cases in
``tests/fuzz_cases/commands/`` and replayed first; results in ``fuzz-commands.json`` and
``fuzz-commands.md``.

Coverage guidance: atheris 3.0.0 installs and imports on this Python (3.11), but libFuzzer
runs one reader per process until the first failure and has no per-reader input count or
restart-and-continue for this table, so the campaign uses seeded, structure-aware mutation
instead; ``tests/test_fuzz_smoke.py`` adds hypothesis strategies (HTTP/2 frame sequences,
JSON documents) on top of a short seeded run.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import multiprocessing
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import fuzz_targets  # noqa: E402
from fuzz_targets import TARGETS, Target  # noqa: E402
from mutations import compress, mutate, mutate_json  # noqa: E402

CASES = ROOT / "tests" / "fuzz_cases"
CHUNK = 500  # inputs per task handed to a worker


class InputTimeout(BaseException):
    """Raised in a worker by the per-input timer (a BaseException: readers must not swallow it)."""


# -- mutation ---------------------------------------------------------------------------------

def input_rng(seed: int, target: str, index: int) -> random.Random:
    digest = hashlib.sha256(f"{seed}/{target}/{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def make_input(target: Target, seeds: list[bytes], seed: int, index: int) -> bytes:
    """Input ``index`` of ``target`` for the campaign ``seed``."""
    rng = input_rng(seed, target.name, index)
    data = rng.choice(seeds)
    if target.json and rng.random() < 0.3:
        data = mutate_json(data, rng)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4, 8))):
        data = mutate(data, rng, target)
    if target.compress:
        data = compress(data, rng)
    return data


# -- running one input ------------------------------------------------------------------------

def signature(exc: BaseException) -> str:
    """What tells failures apart: the exception type and the innermost frame of tfsim's code."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f.filename.startswith(str(ROOT)) and "/bench/" not in f.filename
            and "/.venv/" not in f.filename]
    where = ours[-1] if ours else (frames[-1] if frames else None)
    if where is None:
        place = "?"
    else:
        name = Path(where.filename)
        place = f"{name.relative_to(ROOT) if where.filename.startswith(str(ROOT)) else name.name}:{where.lineno}"
    return f"{type(exc).__name__} at {place}"


def run_one(target: Target, data: bytes, scratch: Path, accepted: tuple, seconds: float) -> str | None:
    """Run one input: ``None`` if the outcome is acceptable, else the failure's signature."""
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        target.run(data, scratch)
    except accepted:
        return None
    except InputTimeout as exc:
        return "timeout " + signature(exc)
    except BaseException as exc:  # everything else is a failure, MemoryError and RecursionError included
        return signature(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return None


def shrink(target: Target, data: bytes, failure: str, scratch: Path, accepted: tuple, seconds: float,
           budget: int = 300) -> bytes:
    """A smaller input with the same failure: the shortest failing prefix, then chunks deleted."""
    def fails(candidate: bytes) -> bool:
        nonlocal budget
        budget -= 1
        return run_one(target, candidate, scratch, accepted, seconds) == failure

    if failure.startswith("timeout"):
        budget = min(budget, 8)
    low, high = 0, len(data)  # the prefix of length high fails
    while low < high and budget > 0:
        middle = (low + high) // 2
        if fails(data[:middle]):
            high = middle
        else:
            low = middle + 1
    data = data[:high]
    chunk = max(1, len(data) // 2)
    while chunk >= 1 and budget > 0:
        position = 0
        while position < len(data) and budget > 0:
            candidate = data[:position] + data[position + chunk:]
            if candidate != data and fails(candidate):
                data = candidate
            else:
                position += chunk
        chunk //= 2
    return data


# -- worker processes ------------------------------------------------------------------------

def _on_alarm(signum, frame):
    raise InputTimeout()


def _limit_memory(extra_mb: int) -> None:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[0])
    size = pages * os.sysconf("SC_PAGE_SIZE") + extra_mb * (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (size, size))


def worker(tasks, results, progress, options: dict) -> None:
    """Run tasks ``(target, seed, start, stop)`` until told to stop (``None``)."""
    import warnings

    warnings.simplefilter("ignore")
    sys.setrecursionlimit(10_000)
    scratch = fuzz_targets.scratch_dir()
    seeds = {name: TARGETS[name].seeds() for name in options["targets"]}
    accepted = {name: TARGETS[name].accepted() for name in options["targets"]}
    for name in options["targets"]:  # warm every reader up before the memory limit
        run_one(TARGETS[name], seeds[name][0], scratch, accepted[name], 60.0)
    signal.signal(signal.SIGALRM, _on_alarm)
    _limit_memory(options["memory_mb"])
    while True:
        task = tasks.get()
        if task is None:
            return
        kind = task[0]
        if kind == "replay":
            _, case_id, name, data = task
            failure = run_one(TARGETS[name], data, scratch, accepted[name], options["input_seconds"])
            results.put(("replay", case_id, name, failure))
            continue
        _, name, seed, start, stop = task
        target, found = TARGETS[name], {}
        for index in range(start, stop):
            progress.value = index
            data = make_input(target, seeds[name], seed, index)
            failure = run_one(target, data, scratch, accepted[name], options["input_seconds"])
            if failure is not None and failure not in found:
                found[failure] = (index, shrink(target, data, failure, scratch, accepted[name],
                                                options["input_seconds"]))
        progress.value = -1
        results.put(("done", name, start, stop, found))


class Pool:
    """Worker processes with a watchdog: a worker silent for too long, or dead, is replaced."""

    def __init__(self, processes: int, options: dict, target=None):
        self.context = multiprocessing.get_context("fork")
        self.options = options
        self.target = target or worker
        self.results = self.context.Queue()
        self.slots = [self._start() for _ in range(processes)]

    def _start(self) -> dict:
        tasks = self.context.Queue()
        progress = self.context.Value("q", -1)
        process = self.context.Process(target=self.target, args=(tasks, self.results, progress, self.options),
                                       daemon=True)
        process.start()
        return {"process": process, "tasks": tasks, "progress": progress, "task": None, "since": 0.0,
                "last": -1}

    def close(self) -> None:
        for slot in self.slots:
            slot["tasks"].put(None)
        for slot in self.slots:
            slot["process"].join(timeout=10)
            if slot["process"].is_alive():
                slot["process"].kill()


def run_campaign(names: list[str], inputs: int, seed: int, processes: int, options: dict,
                 cases: list[dict]) -> dict:
    """Replay the regression cases, then run ``inputs`` inputs of every target."""
    pool = Pool(processes, options)
    pending = [("replay", case["id"], case["target"], (CASES / case["file"]).read_bytes()) for case in cases
               if case["target"] in names]
    pending += [("fuzz", name, seed, start, min(start + CHUNK, inputs)) for name in names
                for start in range(0, inputs, CHUNK)]
    report = {name: {"inputs": 0, "failures": {}, "replayed": {}} for name in names}
    outstanding = 0
    hard_limit = options["input_seconds"] * 400 + 60  # a whole shrink of one input, at most
    try:
        while pending or outstanding:
            for slot in pool.slots:
                if slot["task"] is None and pending:
                    slot["task"], slot["since"] = pending.pop(0), time.monotonic()
                    slot["tasks"].put(slot["task"])
                    outstanding += 1
            try:
                message = pool.results.get(timeout=1.0)
            except Exception:  # queue.Empty
                message = None
            if message is not None:
                outstanding -= 1
                _record(report, message)
                for slot in pool.slots:
                    if slot["task"] is not None and _same_task(slot["task"], message):
                        slot["task"] = None
            for position, slot in enumerate(pool.slots):
                outstanding += _watch(pool, position, slot, report, pending, options, hard_limit)
    finally:
        pool.close()
    return report


def _same_task(task: tuple, message: tuple) -> bool:
    if message[0] == "replay":
        return task[0] == "replay" and task[1] == message[1]
    return task[0] == "fuzz" and task[1] == message[1] and task[3] == message[2]


def _record(report: dict, message: tuple) -> None:
    if message[0] == "replay":
        _, case_id, name, failure = message
        report[name]["replayed"][case_id] = failure
        return
    _, name, start, stop, found = message
    report[name]["inputs"] += stop - start
    for failure, (index, data) in found.items():
        report[name]["failures"].setdefault(failure, (index, data))


def _watch(pool: Pool, position: int, slot: dict, report: dict, pending: list, options: dict,
           hard_limit: float) -> int:
    """Replace a worker that died or hangs; return the change in outstanding tasks."""
    task = slot["task"]
    if task is None:
        return 0
    now, index = time.monotonic(), slot["progress"].value
    if index != slot["last"]:
        slot["last"], slot["since"] = index, now
    alive = slot["process"].is_alive()
    if alive and now - slot["since"] < hard_limit:
        return 0
    slot["process"].kill()
    slot["process"].join()
    reason = "hang (killed by the watchdog)" if alive else f"worker died (exit {slot['process'].exitcode})"
    pool.slots[position] = pool._start()
    if task[0] == "replay":
        report[task[2]]["replayed"][task[1]] = reason
        return -1
    _, name, seed, start, stop = task
    index = max(index, start)
    target = TARGETS[name]
    data = make_input(target, target.seeds(), seed, index)
    report[name]["failures"].setdefault(reason, (index, data))
    report[name]["inputs"] += index + 1 - start
    if index + 1 < stop:
        pending.insert(0, ("fuzz", name, seed, index + 1, stop))
    return -1


# -- whole commands ---------------------------------------------------------------------------
#
# ``--commands``: each run is a command line of ``tfsim`` with its input files (made by
# :mod:`fuzz_commands` from the seed, the command and the run's number), run by
# ``tfsim.cli.main`` in a child forked from a worker that has imported everything (so that a run
# costs a fork, not an interpreter start), in a process group of its own, with an address-space
# limit and a time limit. A run passes when:
#
# - it exits with 0 or 2 (never 1 from a traceback, never killed by a signal, never a timeout);
# - on exit 2, stderr is exactly one line, ``tfsim: error: ...``;
# - no process of its group outlives it;
# - it leaves no stray file: after exit 2 nothing in its directory is new or changed; after
#   exit 0 only the outputs it was given are (each of them there), and no staged ``.*.tmp``.

COMMAND_CASES = CASES / "commands"


def snapshot(where: Path) -> dict[str, tuple]:
    """Every entry under ``where``: (kind, content digest or link target)."""
    out = {}
    for path in sorted(where.rglob("*")):
        rel = str(path.relative_to(where))
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir", "")
        elif path.is_file():
            out[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
        else:
            out[rel] = ("other", "")
    return out


def _normalise(text: str, where: Path) -> str:
    import re

    text = text.replace(str(where), "<run>").replace(str(where.parent), "<scratch>")
    text = re.sub(r"0x[0-9a-f]+", "0x?", text)
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
    return text[:160]


def _traceback_signature(err: str) -> str:
    """``Type at file:line`` of the innermost frame of the project's code in a printed traceback."""
    import re

    frames = re.findall(r'File "([^"]+)", line (\d+)', err)
    ours = [(f, n) for f, n in frames if f.startswith(str(ROOT)) and "/bench/" not in f and "/.venv/" not in f]
    where = ours[-1] if ours else (frames[-1] if frames else ("?", "?"))
    name = where[0][len(str(ROOT)) + 1:] if where[0].startswith(str(ROOT)) else Path(where[0]).name
    last = [ln for ln in err.strip().splitlines() if ln and not ln.startswith(" ")]
    kind = last[-1].split(":", 1)[0] if last else "?"
    return f"{kind} at {name}:{where[1]}"


def execute_command(run, where: Path, seconds: float, memory_mb: int, options_events: int = 50_000_000) -> dict:
    """Run one command line in a forked child (see above); what happened. The child's work limit
    (``TFSIM_MAX_OP_EVENTS``) is set so that any run tfsim accepts ends well within ``seconds``:
    a timeout then means the limit failed to bound the work."""
    import select

    from fuzz_commands import install_stub

    out_path, err_path = where.parent / (where.name + ".stdout"), where.parent / (where.name + ".stderr")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: becomes the command
        code = 99
        try:
            os.setpgid(0, 0)
            os.chdir(where)
            for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                    (2, err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                handle = os.open(path, flags, 0o644)
                os.dup2(handle, fd)
                os.close(handle)
            for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            import warnings

            warnings.resetwarnings()
            multiprocessing.current_process()._config.pop("daemon", None)  # may start its own workers
            os.environ["TFSIM_MAX_OP_EVENTS"] = str(options_events)  # what the planner lets through finishes in time
            os.environ.update(run.env)
            install_stub(run.stub)
            _limit_memory(memory_mb)
            from tfsim.cli import main as tfsim_main

            try:
                code = tfsim_main(run.argv, exiting=True)
            except SystemExit as exit_:  # argparse
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # the campaign's own setup failed: say so (exit 99)
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)
    started = time.monotonic()
    status, timed_out = None, False
    pidfd = os.pidfd_open(pid)
    try:
        while status is None:
            remaining = seconds - (time.monotonic() - started)
            if remaining <= 0:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                status = os.waitpid(pid, 0)[1]
                break
            select.select([pidfd], [], [], remaining)
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = raw
    finally:
        os.close(pidfd)
    took = time.monotonic() - started
    strays = _group_left(pid)
    err = err_path.read_text(errors="replace") if err_path.exists() else ""
    out = out_path.read_text(errors="replace") if out_path.exists() else ""
    for path in (out_path, err_path):
        path.unlink(missing_ok=True)
    return {"status": status, "timed_out": timed_out, "strays": strays, "err": err, "out": out, "seconds": took}


def _group_left(pgid: int) -> int:
    """Processes of the command's group still alive shortly after it exited (killed then)."""
    deadline = time.monotonic() + 1.0
    while True:
        with contextlib.suppress(ChildProcessError):  # reap orphans handed to us (we are their subreaper)
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return 0
        if time.monotonic() > deadline:
            alive = sum(1 for entry in os.listdir("/proc") if entry.isdigit() and _pgid_of(int(entry)) == pgid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            return max(alive, 1)
        time.sleep(0.01)


def _pgid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[3]) if fields[0] != "Z" else None
    except (OSError, IndexError, ValueError):
        return None


def judge(run, where: Path, before: dict, result: dict) -> str | None:
    """The run's failure (a signature that tells failures apart), or None when it passed."""
    status = result["status"]
    if result["timed_out"]:
        return "timeout"
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    code = os.WEXITSTATUS(status)
    err = result["err"]
    if code not in (0, 2):
        if "Traceback (most recent call last)" in err:
            return f"exit {code}: " + _traceback_signature(err)
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        return f"exit {code}: " + _normalise(lines[-1] if lines else "(no message)", where)
    if code == 2:
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        if len(lines) != 1 or not lines[0].startswith("tfsim: error: "):
            first = next((ln for ln in lines if not ln.startswith("tfsim: error")), lines[0] if lines else "")
            return f"exit 2 with {min(len(lines), 3)}+ stderr lines: " + _normalise(first, where)
    if result["strays"]:
        return "processes outlived the command"
    after = snapshot(where)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    staged = sorted(p for p in after if Path(p).name.startswith(".") and p.endswith(".tmp"))
    if staged:
        return f"exit {code}: staged file left: " + _normalise(staged[0], where)
    if code == 2 and changed:
        return "exit 2 but files changed: " + _normalise(sorted(changed)[0], where)
    if code == 0:
        allowed = _allowed_changes(run, where, before)
        stray = sorted(p for p in changed if p not in allowed)
        if stray:
            return "exit 0 with stray files: " + _normalise(stray[0], where)
        missing = sorted(o for o in run.outputs if not (where / o).exists())
        if missing:
            return "exit 0 without its output: " + _normalise(missing[0], where)
    return None


def _allowed_changes(run, where: Path, before: dict) -> set[str]:
    """What a successful run may create or change: its outputs, their directories, and the files
    that symlinks at output paths point to."""
    allowed = set()
    for output in run.outputs:
        parts = Path(output).parts
        allowed |= {str(Path(*parts[:k])) for k in range(1, len(parts) + 1)}
        path = where / output
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            with contextlib.suppress(ValueError):
                rel = target.relative_to(where.resolve())
                allowed |= {str(Path(*rel.parts[:k])) for k in range(1, len(rel.parts) + 1)}
        for parent in Path(output).parents:  # an output inside a symlinked directory
            if (where / parent).is_symlink():
                target = Path(os.path.realpath(where / parent)) / Path(output).relative_to(parent)
                with contextlib.suppress(ValueError):
                    rel = target.relative_to(where.resolve())
                    allowed |= {str(Path(*rel.parts[:k])) for k in range(1, len(rel.parts) + 1)}
    return allowed


def command_run(name: str, seed: int, index: int, scratch: Path, options: dict) -> tuple[str | None, dict]:
    """Make and run input ``index`` of command ``name``; (failure or None, the case to keep)."""
    from fuzz_commands import COMMAND_TARGETS

    where = scratch / f"{name}-{index}"
    if where.exists():
        shutil.rmtree(where)
    where.mkdir()
    try:
        run = COMMAND_TARGETS[name].make(input_rng(seed, "command/" + name, index), where)
    except Exception as exc:  # the campaign's own bug: a failure to see, not a crash of the worker
        from fuzz_commands import Run

        return f"harness error: {signature(exc)}", (Run([name], set(), set()), where)
    return _run_case(run, where, options), (run, where)


def _run_case(run, where: Path, options: dict) -> str | None:
    before = snapshot(where)
    result = execute_command(run, where, options["run_seconds"], options["memory_mb"])
    failure = judge(run, where, before, result)
    status = result["status"]
    _OUTCOMES[f"exit {os.WEXITSTATUS(status)}" if failure is None and os.WIFEXITED(status) else "failed"] += 1
    return failure


_OUTCOMES: collections.Counter = collections.Counter()


def pack_case(run, where: Path) -> dict:
    """A run as a regression case: its command line and every entry of its directory."""
    import base64

    entries = {}
    for path in sorted(where.rglob("*")):
        rel = str(path.relative_to(where))
        if path.is_symlink():
            entries[rel] = {"link": os.path.relpath(os.path.realpath(path), path.parent)
                            if os.path.realpath(path).startswith(str(where.resolve())) else os.readlink(path)}
        elif path.is_dir():
            entries[rel] = {"dir": True}
        else:
            entries[rel] = {"data": base64.b64encode(path.read_bytes()).decode()}
    return {"argv": run.argv, "inputs": sorted(run.inputs), "outputs": sorted(run.outputs), "stub": run.stub,
            "env": run.env, "entries": entries}


def unpack_case(case: dict, where: Path):
    """Recreate a packed case in ``where``; the :class:`fuzz_commands.Run` to run."""
    import base64

    from fuzz_commands import Run

    for rel, entry in case["entries"].items():
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if "dir" in entry:
            path.mkdir(exist_ok=True)
        elif "link" in entry:
            path.symlink_to(entry["link"])
        else:
            path.write_bytes(base64.b64decode(entry["data"]))
    return Run(case["argv"], set(case["inputs"]), set(case["outputs"]), case.get("stub"), case.get("env") or {})


def command_worker(tasks, results, progress, options: dict) -> None:
    """Run command tasks ``("fuzz", name, seed, start, stop)`` and ``("replay", id, name, case)``."""
    import ctypes
    import warnings

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the campaign's stop is for its parent, which tells us
    warnings.simplefilter("ignore")
    ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: a command's orphans come to us
    scratch = fuzz_targets.scratch_dir()
    try:
        _warm_up(scratch, options)
        _command_tasks(tasks, results, progress, options, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        from fuzz_commands import remove_seeds

        remove_seeds()


def _command_tasks(tasks, results, progress, options: dict, scratch: Path) -> None:
    while True:
        task = tasks.get()
        if task is None:
            return
        if task[0] == "replay":
            _, case_id, name, case = task
            where = scratch / f"replay-{case_id}"
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            failure = _run_case(unpack_case(case, where), where, options)
            shutil.rmtree(where, ignore_errors=True)
            results.put(("replay", case_id, name, failure))
            continue
        _, name, seed, start, stop = task
        found = {}
        _OUTCOMES.clear()
        for index in range(start, stop):
            if _STOP.is_set():  # the campaign was told to stop: report the runs made so far
                stop = index
                break
            progress.value = index
            failure, (run, where) = command_run(name, seed, index, scratch, options)
            if failure is not None and failure not in found:
                found[failure] = (index, pack_case(run, where))
            shutil.rmtree(where, ignore_errors=True)
        progress.value = -1
        results.put(("done", name, start, stop, found, dict(_OUTCOMES)))


def _warm_up(scratch: Path, options: dict) -> None:
    """Import what the commands import, so that every forked run starts warm."""
    import fuzz_commands
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot
    import pandas  # noqa: F401

    import calibration.calibrate  # noqa: F401
    import simulate.kernel
    import simulate.sweep  # noqa: F401
    import tfsim.cli
    import tfsim.demo
    import tfsim.report  # noqa: F401

    for name in options["targets"]:
        if name in ("calibrate", "profile"):
            fuzz_commands.small_run_dir()
    _warm_kernel()
    _warm_figures()


def _warm_kernel() -> None:
    """Run one small simulation here, so that the compiled event loop is in memory before any fork.

    Each simulation process of a run (a sweep's workers, a traced run's child) is forked from the
    run; without this, every one of them loads the loop from numba's on-disk cache again (some
    0.3 s of CPU each, most of a small run's cost)."""
    import warnings

    from simulate.cluster_file import resolve_cluster
    from simulate.sweep import _traced, plan_traced_run
    from tfprofile.profile_io import load_profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        profile = load_profile(fuzz_commands_data() / "profiles" / "tiny.npz")
        cluster = resolve_cluster(None, bandwidth_Bps=1.25e8)
        _traced(plan_traced_run(profile, cluster, workers=2, transfer="http2", priorities={}, steps=2))


def _warm_figures() -> None:
    """Draw and save one figure with text here, so that a run's figures find matplotlib's fonts
    and caches loaded (what every run would otherwise load again)."""
    from tfbase.figures import figure_bytes, pyplot

    fig, ax = pyplot().subplots(figsize=(3, 2), dpi=110)
    ax.plot([1, 2, 3], [1, 4, 2], label="warm-up")
    ax.set_title("warm-up")
    ax.legend()
    fig.tight_layout()
    figure_bytes(fig)


def fuzz_commands_data() -> Path:
    from fuzz_commands import DATA

    return DATA


def run_command_campaign(names: list[str], runs: int, seed: int, processes: int, options: dict,
                         cases: list[dict]) -> dict:
    """Replay the command regression cases, then ``runs`` runs of every command."""
    pool = Pool(processes, options, target=command_worker)
    pending = [("replay", case["id"], case["target"], json.loads((COMMAND_CASES / case["file"]).read_text()))
               for case in cases if case["target"] in names]
    chunk = options.get("chunk", 25)
    counts = {name: options.get("runs_of", {}).get(name, runs) for name in names}
    if options.get("in_turn"):  # one command after the other, in the order given
        pending += [("fuzz", name, seed, start, min(start + chunk, counts[name]))
                    for name in names for start in range(0, counts[name], chunk)]
    else:  # the commands side by side: a campaign stopped early has made about as many runs of each
        pending += [("fuzz", name, seed, start, min(start + chunk, counts[name]))
                    for start in range(0, max(counts.values(), default=0), chunk) for name in names
                    if start < counts[name]]
    report = {name: {"inputs": 0, "failures": {}, "replayed": {}} for name in names}
    outstanding = 0
    hard_limit = options["run_seconds"] * 3 + 120
    stopping = None  # when the stop came (SIGTERM or Ctrl-C)
    try:
        while pending or outstanding:
            if stopping is None and _STOP.is_set():
                stopping = time.monotonic()
                pending.clear()  # the workers end their tasks at the next run and report what they made
            if stopping is not None and time.monotonic() - stopping > options["run_seconds"] + 60:
                break  # a worker that does not answer: what it made is lost, the rest is written
            for slot in pool.slots:
                if slot["task"] is None and pending:
                    slot["task"], slot["since"] = pending.pop(0), time.monotonic()
                    slot["tasks"].put(slot["task"])
                    outstanding += 1
            try:
                message = pool.results.get(timeout=1.0)
            except Exception:  # queue.Empty
                message = None
            if message is not None:
                outstanding -= 1
                if message[0] == "done":
                    outcomes = report[message[1]].setdefault("outcomes", {})
                    for key, count in message[5].items():
                        outcomes[key] = outcomes.get(key, 0) + count
                    message = message[:5]
                known = {name: set(entry["failures"]) for name, entry in report.items()}
                _record(report, message)
                _log_progress(report, message, known)
                for slot in pool.slots:
                    if slot["task"] is not None and _same_task(slot["task"], message):
                        slot["task"] = None
            for position, slot in enumerate(pool.slots):
                outstanding += _watch_commands(pool, position, slot, report, pending, hard_limit)
    finally:
        pool.close()
    return report


def _log_progress(report: dict, message: tuple, known: dict) -> None:
    """One line on stderr per finished task: the command's runs so far, and each failure the first
    time it is seen (so that a long campaign can be followed, and its failures looked at, as it runs)."""
    stamp = time.strftime("%H:%M:%S")
    if message[0] == "replay":
        _, case_id, name, failure = message
        print(f"{stamp} replayed {case_id}: {'passes' if failure is None else failure}", file=sys.stderr, flush=True)
        return
    name = message[1]
    entry = report[name]
    print(f"{stamp} {name}: {entry['inputs']:,} runs, {dict(entry.get('outcomes', {}))}", file=sys.stderr,
          flush=True)
    for failure in sorted(set(entry["failures"]) - known[name]):
        print(f"{stamp} {name}: new failure at run {entry['failures'][failure][0]}: {failure}", file=sys.stderr,
              flush=True)


_STOP = multiprocessing.get_context("fork").Event()  # set by the campaign's SIGTERM (or Ctrl-C); seen by the workers


def _ask_stop(signum, frame) -> None:
    _STOP.set()


def _watch_commands(pool: Pool, position: int, slot: dict, report: dict, pending: list, hard_limit: float) -> int:
    task = slot["task"]
    if task is None:
        return 0
    now, index = time.monotonic(), slot["progress"].value
    if index != slot["last"]:
        slot["last"], slot["since"] = index, now
    alive = slot["process"].is_alive()
    if alive and now - slot["since"] < hard_limit:
        return 0
    slot["process"].kill()
    slot["process"].join()
    reason = "worker hang (killed by the watchdog)" if alive else f"worker died (exit {slot['process'].exitcode})"
    pool.slots[position] = pool._start()
    if task[0] == "replay":
        report[task[2]]["replayed"][task[1]] = reason
        return -1
    _, name, seed, start, stop = task
    index = max(index, start)
    report[name]["failures"].setdefault(reason, (index, None))
    report[name]["inputs"] += index + 1 - start
    if index + 1 < stop:
        pending.insert(0, ("fuzz", name, seed, index + 1, stop))
    return -1


def load_command_cases() -> list[dict]:
    path = COMMAND_CASES / "cases.json"
    return json.loads(path.read_text())["cases"] if path.is_file() else []


def summarise_commands(report: dict, cases: list[dict], seed: int, wall_s: float, failures_dir: Path) -> dict:
    rows = []
    for name, entry in report.items():
        known = [c for c in cases if c["target"] == name]
        fixed = [c for c in known if entry["replayed"].get(c["id"]) is None]
        known_signatures = {c["signature"] for c in known}
        new = {f: v for f, v in entry["failures"].items() if f not in known_signatures}
        reopened = {f for f in entry["failures"] if f in known_signatures}
        for failure, (index, case) in new.items():
            failures_dir.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256(failure.encode()).hexdigest()[:12]
            (failures_dir / f"{name}-{digest}.json").write_text(json.dumps(
                {"signature": failure, "run": index, "seed": seed, "case": case}, indent=1))
        outcomes = entry.get("outcomes", {})
        rows.append({"command": name, "runs": entry["inputs"], "failures_found": len(known) + len(new),
                     "failures_fixed": len(fixed), "open": len(known) - len(fixed) + len(new),
                     "exit_0": outcomes.get("exit 0", 0), "exit_2": outcomes.get("exit 2", 0),
                     "reopened": sorted(reopened), "new_failures": sorted(new)})
    return {"seed": seed, "wall_s": round(wall_s, 1), "cpus": os.cpu_count(), "rows": rows}


def adopt_commands(failures_dir: Path) -> int:
    """Make the command failures written by a run regression cases in ``tests/fuzz_cases/commands/``."""
    cases = load_command_cases()
    known = {case["id"] for case in cases}
    added = 0
    for note in sorted(failures_dir.glob("*.json")):
        case_id = note.stem
        data = json.loads(note.read_text())
        if case_id in known or data["case"] is None:
            continue
        COMMAND_CASES.mkdir(parents=True, exist_ok=True)
        (COMMAND_CASES / f"{case_id}.json").write_text(json.dumps(data["case"], indent=1) + "\n")
        cases.append({"id": case_id, "target": case_id.rsplit("-", 1)[0], "file": f"{case_id}.json",
                      "signature": data["signature"]})
        added += 1
    cases.sort(key=lambda case: case["id"])
    (COMMAND_CASES / "cases.json").write_text(json.dumps({"cases": cases}, indent=1) + "\n")
    return added


def markdown_commands(summary: dict, options: dict) -> str:
    lines = [f"# Whole-command fuzz campaign (seed {summary['seed']})", "",
             f"{summary['wall_s']:.0f} s wall time on {summary['cpus']} cores. Each run is one `tfsim` command line "
             "with mutated input files and option values (`bench/fuzz_commands.py`), run by `tfsim.cli.main` in a "
             f"forked child limited to {options['run_seconds']:.0f} s and {options['memory_mb']} MB of address space "
             "above the worker's size. A run fails when it exits with anything but 0 or 2, is killed by a signal or "
             "the time limit, prints more than one line on stderr with exit 2, leaves a process of its group "
             "behind, or leaves a stray file (anything new or changed after exit 2; anything but its outputs, or "
             "a staged `.*.tmp`, after exit 0). Failures found: distinct failures over all campaigns, each kept as "
             "a regression case in `tests/fuzz_cases/commands/`; fixed: cases that now pass; open: cases still "
             "failing and new failures of this run.", "",
             "| command | runs | exit 0 | exit 2 | failures found | fixed | open |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in summary["rows"]:
        lines.append(f"| {row['command']} | {row['runs']:,} | {row['exit_0']:,} | {row['exit_2']:,} | "
                     f"{row['failures_found']} | {row['failures_fixed']} | {row['open']} |")
    total = sum(r["runs"] for r in summary["rows"])
    lines += ["", f"{total:,} command runs in all (exit 0 and exit 2: runs that passed, by their status; runs that "
              "failed are counted under failures, once per distinct failure)."]
    if summary.get("stopped"):
        asked = sorted(set(summary.get("runs_asked", {}).values()))
        lines += ["", "The campaign was stopped (SIGTERM) before it made every run it was asked for"
                  + (f" ({', '.join(f'{n:,}' for n in asked)} per command)" if asked else "")
                  + "; the table counts the runs it made."]
    return "\n".join(lines) + "\n"


# -- the table --------------------------------------------------------------------------------

def load_cases() -> list[dict]:
    path = CASES / "cases.json"
    return json.loads(path.read_text())["cases"] if path.is_file() else []


def adopt(failures_dir: Path) -> int:
    """Make the failures written by a run (``failures_dir``) regression cases in ``tests/fuzz_cases/``."""
    cases = load_cases()
    known = {case["id"] for case in cases}
    added = 0
    for note in sorted(failures_dir.glob("*.txt")):
        case_id = note.stem
        if case_id in known:
            continue
        target = case_id.rsplit("-", 1)[0]
        CASES.mkdir(parents=True, exist_ok=True)
        (CASES / f"{case_id}.bin").write_bytes(note.with_suffix(".bin").read_bytes())
        cases.append({"id": case_id, "target": target, "file": f"{case_id}.bin",
                      "signature": note.read_text().splitlines()[0]})
        added += 1
    cases.sort(key=lambda case: case["id"])
    (CASES / "cases.json").write_text(json.dumps({"cases": cases}, indent=1) + "\n")
    return added


def summarise(report: dict, cases: list[dict], seed: int, wall_s: float, failures_dir: Path) -> dict:
    """The per-reader table, and the new failures written to ``failures_dir``."""
    rows = []
    for name, entry in report.items():
        known = [c for c in cases if c["target"] == name]
        fixed = [c for c in known if entry["replayed"].get(c["id"]) is None]
        known_signatures = {c["signature"] for c in known}
        new = {f: v for f, v in entry["failures"].items() if f not in known_signatures}
        reopened = {f for f in entry["failures"] if f in known_signatures}
        for failure, (index, data) in new.items():
            failures_dir.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256(data).hexdigest()[:12]
            (failures_dir / f"{name}-{digest}.bin").write_bytes(data)
            (failures_dir / f"{name}-{digest}.txt").write_text(f"{failure}\ninput {index} of seed {seed}\n")
        rows.append({"reader": name, "inputs": entry["inputs"], "failures_found": len(known) + len(new),
                     "failures_fixed": len(fixed), "open": len(known) - len(fixed) + len(new),
                     "reopened": sorted(reopened), "new_failures": sorted(new)})
    return {"seed": seed, "wall_s": round(wall_s, 1), "cpus": os.cpu_count(), "rows": rows}


def markdown(summary: dict, options: dict) -> str:
    lines = [f"# Fuzz campaign (seed {summary['seed']})", "",
             f"{summary['wall_s']:.0f} s wall time on {summary['cpus']} cores; each input limited to "
             f"{options['input_seconds']} s and {options['memory_mb']} MB of address space above the worker's size. "
             "Failures found: distinct failures over all campaigns, each kept as a regression case in "
             "`tests/fuzz_cases/`; fixed: cases the reader now accepts; open: cases still failing and "
             "new failures of this run.", "",
             "| reader | inputs | failures found | fixed | open |", "| --- | ---: | ---: | ---: | ---: |"]
    for row in summary["rows"]:
        lines.append(f"| {row['reader']} | {row['inputs']:,} | {row['failures_found']} | {row['failures_fixed']} | "
                     f"{row['open']} |")
    total = sum(r["inputs"] for r in summary["rows"])
    lines += ["", f"{total:,} inputs in all."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs per reader (default 100,000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated readers (default: all)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--input-seconds", type=float, default=2.0, help="time limit of one input")
    parser.add_argument("--memory-mb", type=int, default=1024, help="address space an input may add")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="directory for fuzz.json and fuzz.md")
    parser.add_argument("--failures", type=Path, default=Path(tempfile.gettempdir()) / "tfsim-fuzz-failures",
                        help="where new failures' shrunk inputs go")
    parser.add_argument("--adopt", type=Path, metavar="DIR",
                        help="make the failures in DIR (a --failures directory) regression cases, then exit")
    parser.add_argument("--commands", metavar="NAMES", nargs="?", const="all",
                        help="fuzz whole commands instead of readers (comma-separated, default all): "
                             "writes fuzz-commands.json and fuzz-commands.md")
    parser.add_argument("--runs", type=int, default=10_000, help="with --commands: runs per command")
    parser.add_argument("--runs-of", default="", metavar="NAME=N,...",
                        help="with --commands: another number of runs for some commands (e.g. demo=2000)")
    parser.add_argument("--run-seconds", type=float, default=120.0, help="with --commands: time limit of one run")
    parser.add_argument("--in-turn", action="store_true",
                        help="with --commands: run the commands one after the other, in the order given, instead "
                             "of side by side (SIGTERM or Ctrl-C stops a campaign, which then writes what it made)")
    args = parser.parse_args(argv)
    if args.commands:
        return _main_commands(args)
    if args.adopt:
        print(f"{adopt(args.adopt)} new regression cases in {CASES}")
        return 0
    names = [n for n in args.targets.split(",") if n]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        parser.error(f"unknown reader(s) {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    options = {"targets": names, "input_seconds": args.input_seconds, "memory_mb": args.memory_mb}
    cases = load_cases()
    started = time.monotonic()
    report = run_campaign(names, args.inputs, args.seed, max(1, args.processes), options, cases)
    summary = summarise(report, cases, args.seed, time.monotonic() - started, args.failures)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fuzz.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    (args.out / "fuzz.md").write_text(markdown(summary, options))
    print(markdown(summary, options))
    return 0 if all(row["open"] == 0 for row in summary["rows"]) else 1


def _main_commands(args) -> int:
    from fuzz_commands import COMMAND_TARGETS

    if args.adopt:
        print(f"{adopt_commands(args.adopt)} new command regression cases in {COMMAND_CASES}")
        return 0
    names = list(COMMAND_TARGETS) if args.commands == "all" else [n for n in args.commands.split(",") if n]
    unknown = [n for n in names if n not in COMMAND_TARGETS]
    if unknown:
        raise SystemExit(f"unknown command(s) {', '.join(unknown)}; known: {', '.join(COMMAND_TARGETS)}")
    memory = args.memory_mb if args.memory_mb != 1024 else 3072
    runs_of = {name: int(count) for name, _, count in (item.partition("=") for item in args.runs_of.split(",") if item)}
    options = {"targets": names, "run_seconds": args.run_seconds, "memory_mb": memory, "runs_of": runs_of,
               "in_turn": args.in_turn}
    cases = load_command_cases()
    started = time.monotonic()
    signal.signal(signal.SIGTERM, _ask_stop)
    signal.signal(signal.SIGINT, _ask_stop)
    report = run_command_campaign(names, args.runs, args.seed, max(1, args.processes), options, cases)
    summary = summarise_commands(report, cases, args.seed, time.monotonic() - started, args.failures)
    summary["runs_asked"] = {name: runs_of.get(name, args.runs) for name in names}
    summary["stopped"] = _STOP.is_set()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fuzz-commands.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    (args.out / "fuzz-commands.md").write_text(markdown_commands(summary, options))
    print(markdown_commands(summary, options))
    return 0 if all(row["open"] == 0 for row in summary["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
