"""Start a real TF1 parameter-server job on this machine and collect its traces.

:func:`collect` starts every PS and worker task as a separate process
(``python -m tfprofile.harness.task``), shows a progress bar while the chief worker
steps, and leaves a complete run directory (docs/formats.md §2) or none at all:

- ports are chosen free on loopback;
- every task runs in its own process group and dies with the launcher (``PR_SET_PDEATHSIG``);
- on success, failure, timeout or Ctrl-C all tasks are stopped (SIGTERM, then SIGKILL);
- the run is written to ``RUN_DIR.incomplete`` and renamed to ``RUN_DIR`` only when
  complete; a failed run stays ``.incomplete`` with its logs, and readers refuse it.

This module does not import TensorFlow: only the task processes do.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import enum
import errno
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tfbase.errors import CollectError, UsageError
from tfbase.fileio import write_json
from tfbase.machine import machine_description
from tfbase.progress import progress_bar
from tfbase.signals import own_session_dying_with_parent, wait_or_kill_group
from tfprofile.harness.capture import (
    Tcpdump,
    capture_filter,
    gzip_file,
    measure_bandwidth,
    require_root,
    require_tools,
    stop_running_captures,
)
from tfprofile.harness.fork_server import ForkServers
from tfprofile.harness.task_common import PROGRESS_PREFIX
from tfprofile.harness.taskcpu import TASK_CPU_FILE, TaskCpuSampler

RUN_FORMAT = "tfsim.run/1"
INCOMPLETE_SUFFIX = ".incomplete"
ZOO_MODELS = ("tiny", "alexnet", "vgg11", "resnet50", "inception3", "wide_mlp")

# replica_device_setter's variable placements over PS tasks; the first is TensorFlow's default.
PLACEMENTS = ("round_robin", "greedy")


class TrainingApi(enum.Enum):
    """How the collected job trains (docs/formats.md §2).

    ``TF1_GRAPH``: graph mode through ``tf.compat.v1``, a session per worker, variables placed by
    ``replica_device_setter``; traced as RunMetadata. ``TF2_PSS``: TensorFlow 2's
    ``ParameterServerStrategy`` with a ``ClusterCoordinator`` scheduling ``tf.function`` steps
    on the workers; traced as one XSpace per task by TensorFlow's profiler servers.
    """

    TF1_GRAPH = "tf1"
    TF2_PSS = "tf2-pss"


class CaptureSite(enum.Enum):
    """Where ``collect --capture`` runs tcpdump.

    ``CHIEF_WORKER``: on the chief worker's host, the one-worker calibration run's view (its
    transfers to and from every PS). ``PS``: on PS 0's host, where every worker's transfers
    to that PS cross one link: the view of a W-worker run that the timeline reads.
    """

    CHIEF_WORKER = "chief-worker"
    PS = "ps"


@dataclasses.dataclass(frozen=True)
class CollectConfig:
    """Options of one profiling run; validated on construction.

    ``model`` names a zoo model, or ``model_fn`` is ``"module:function"`` (then ``model``
    is only a label). Steps count measured steps, after ``warmup_steps`` untimed ones; of the
    measured steps, every ``trace_every``-th (starting with the first) is traced. With
    ``traced_steps`` N, only the first N measured steps are traced (a tf1 job: every
    ``trace_every``-th of them; a tf2-pss job: all N, while its profiler's window lasts) and the
    rest run untraced, with the tasks' CPU read again where they begin (docs/formats.md §2.3.1).
    """

    out_dir: Path
    model: str = "tiny"
    model_fn: str | None = None
    batch_size: int = 32
    image_size: int = 0
    num_classes: int = 0
    steps: int = 20
    warmup_steps: int = 5
    trace_every: int = 1
    workers: int = 1
    ps_tasks: int = 1
    placement: str = "round_robin"
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    learning_rate: float = 0.01
    timeout_s: float = 1800.0
    startup_timeout_s: float = 180.0
    env: tuple[tuple[str, str], ...] = ()
    capture: bool = False
    capture_site: CaptureSite = CaptureSite.CHIEF_WORKER
    zero_init: bool = False
    iperf_repeats: int = 3
    iperf_seconds: float = 3.0
    api: TrainingApi = TrainingApi.TF1_GRAPH
    trace_ms: int = 1500
    traced_steps: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        if not isinstance(self.api, TrainingApi):
            raise UsageError("api", f"must be a TrainingApi, not {self.api!r}")
        if self.trace_ms < 1:
            raise UsageError("trace_ms", f"must be at least 1, not {self.trace_ms}")
        if self.traced_steps is not None and not 0 <= self.traced_steps <= self.steps:
            raise UsageError("traced_steps", f"must be from 0 to the {self.steps} measured steps, "
                                             f"not {self.traced_steps}")
        if self.traced_steps == 0 and self.api is not TrainingApi.TF2_PSS:
            raise UsageError("traced_steps", "a tf1 job traces at least its first measured step: give 1 or more")
        if self.traced_steps == 0 and self.warmup_steps < 2:
            raise UsageError("traced_steps", "0 traces the warm-up's later steps: give at least 2 warm-up steps")
        if self.model_fn is None and self.model not in ZOO_MODELS:
            raise UsageError("model", f"unknown model {self.model!r}; choose from {', '.join(ZOO_MODELS)}"
                             " or give --model-fn MODULE:FUNCTION")
        if self.model_fn is not None and ":" not in self.model_fn:
            raise UsageError("model_fn", f"{self.model_fn!r} is not of the form MODULE:FUNCTION")
        for name in ("batch_size", "steps", "trace_every", "workers", "ps_tasks"):
            if getattr(self, name) < 1:
                raise UsageError(name, f"must be at least 1, not {getattr(self, name)}")
        if not isinstance(self.capture_site, CaptureSite):
            raise UsageError("capture_site", f"must be a CaptureSite, not {self.capture_site!r}")
        if self.capture_site is not CaptureSite.CHIEF_WORKER and not self.capture:
            raise UsageError("capture_site", "applies to a capture: give capture too")
        for name in ("warmup_steps", "image_size", "num_classes", "intra_op_threads", "inter_op_threads",
                     "iperf_repeats"):
            if getattr(self, name) < 0:
                raise UsageError(name, f"must not be negative, not {getattr(self, name)}")
        if self.placement not in PLACEMENTS:
            raise UsageError("placement", f"must be {' or '.join(PLACEMENTS)}, not {self.placement!r}")
        if not (self.timeout_s > 0 and self.startup_timeout_s > 0):
            raise UsageError("timeout_s", "timeouts must be positive")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports that were free a moment ago.

    The sockets are held open until all are chosen, so the ports differ from each other.
    """
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclasses.dataclass
class _Task:
    role: str
    index: int
    process: subprocess.Popen
    log_path: Path
    pid_file: Path | None = None  # where a fork server's client writes the task's own pid

    def cpu_pid(self) -> int:
        """The pid whose threads do the task's work: the process started, or its forked stand-in."""
        if self.pid_file is not None:
            with contextlib.suppress(OSError, ValueError):
                return int(self.pid_file.read_text())
        return self.process.pid

    @property
    def label(self) -> str:
        return f"{self.role}{self.index}"

    def stop(self, grace_s: float = 5.0) -> None:
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        wait_or_kill_group(self.process, grace_s)

    def last_error_line(self) -> str:
        """The most telling line of the task's log: a Python or TF error, else its last line."""
        try:
            lines = [ln.strip() for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "(no log)"
        for line in reversed(lines):
            if "Error" in line or "error:" in line:
                return line[:300]
        return lines[-1][:300] if lines else "(empty log)"


def _task_command(spec_path: Path, prefix: Sequence[str]) -> list[str]:
    return [*prefix, sys.executable, "-m", "tfprofile.harness.task", str(spec_path)]


def _read_lines(stream, sink: queue.Queue, keep: Path | None = None) -> None:
    """Pass ``stream``'s lines to ``sink`` (then None); with ``keep``, also append its progress
    lines there: the chief's stdout comes here, not to its log, and a run that stops or hangs
    then shows how far it got."""
    with contextlib.ExitStack() as stack:
        kept = stack.enter_context(open(keep, "a")) if keep is not None else None
        for line in iter(stream.readline, ""):
            if kept is not None and line.startswith(PROGRESS_PREFIX):
                kept.write(line if line.endswith("\n") else line + "\n")
                kept.flush()
            sink.put(line)
    sink.put(None)


def collect(
    config: CollectConfig,
    *,
    progress: bool = True,
    overwrite: bool = False,
    hosts: Sequence[str] | None = None,
    command_prefixes: Sequence[Sequence[str]] | None = None,
    task_wrappers: Sequence[Sequence[str]] | None = None,
    capture_interface: str = "lo",
    on_event: Callable[[dict], None] | None = None,
    run_record: dict | None = None,
    fork_servers: ForkServers | None = None,
) -> Path:
    """Run the job described by ``config``; return the completed run directory.

    ``hosts`` (one address per task, PS tasks first) and ``command_prefixes`` (e.g.
    ``["ip", "netns", "exec", NS]`` per task) let the same launcher run tasks inside
    network namespaces; by default every task listens on 127.0.0.1. ``task_wrappers`` (one
    argv per task, before its prefix) wrap the TensorFlow tasks only, not the measuring tools
    (the lab's CPU quota: ``python -m tfsim.lab.cgexec ...``). ``run_record``: more keys for
    ``run.json`` (the lab's ``link``). ``fork_servers``: start each task as a child of a
    process that has already imported TensorFlow (:mod:`tfprofile.harness.fork_server`; the
    lab, which starts many runs), recorded as run.json ``launch: fork-server``.

    With ``config.capture``, iperf3 first measures the link from the chief worker's host to
    PS 0's host (both directions, raw results in ``iperf3/``; ``iperf_repeats = 0`` skips it),
    then tcpdump captures the job's traffic on ``capture_interface`` of the host that
    ``config.capture_site`` names (the chief worker's, or PS 0's) into ``capture.pcap.gz``: in a
    job with ``traced_steps`` until the traced steps end (a tf2-pss job's once its trace has
    ended and the steps after it have settled), so that the untraced ones run uncaptured
    (docs/calibration.md §4.8).

    Raises :class:`~tfbase.errors.UsageError` for bad options and
    :class:`~tfbase.errors.CollectError` when the run fails; ``KeyboardInterrupt`` is
    re-raised after every task has been stopped.
    """
    out = config.out_dir
    if out.exists() and not overwrite:
        raise UsageError(out, "already exists; choose another --out or pass --force")
    if config.capture:
        tools = ("tcpdump", "iperf3") if config.iperf_repeats else ("tcpdump",)
        require_tools(*tools)
        require_root("collect --capture")
        print(f"tfsim: collect --capture runs {' and '.join(tools)} as root", file=sys.stderr, flush=True)
    pss = config.api is TrainingApi.TF2_PSS
    ntasks = config.ps_tasks + config.workers
    # A tf2-pss job has one more task, the coordinator (the cluster's "chief"): given hosts then
    # name it last (the lab's emulated hosts); by default every task is on loopback.
    given = ntasks + 1 if pss else ntasks
    hosts = list(hosts) if hosts else ["127.0.0.1"] * given
    prefixes = [list(p) for p in command_prefixes] if command_prefixes else [[] for _ in range(given)]
    wrappers = [list(w) for w in task_wrappers] if task_wrappers else [[] for _ in range(given)]
    if len(hosts) != given or len(prefixes) != given or len(wrappers) != given:
        raise UsageError("hosts", f"need one host, one command prefix and one wrapper per task ({given}"
                                  f"{', the coordinator last' if pss else ''})")
    profiler_ports: dict[str, int] = {}
    profiler_hosts: dict[str, str] = {}
    if pss:  # each server also has a profiler port
        chosen = free_ports(2 * ntasks + 1)
        ports = chosen[: ntasks + 1]
        labels = [f"ps{i}" for i in range(config.ps_tasks)] + [f"worker{i}" for i in range(config.workers)]
        profiler_ports = dict(zip(labels, chosen[ntasks + 1:]))
        profiler_hosts = dict(zip(labels, hosts))
    else:
        ports = free_ports(ntasks) if all(h == "127.0.0.1" for h in hosts) else [2222 + i for i in range(ntasks)]
    addresses = [f"{h}:{p}" for h, p in zip(hosts, ports)]
    cluster = {"ps": addresses[: config.ps_tasks], "worker": addresses[config.ps_tasks:ntasks]}
    if pss:
        cluster["chief"] = addresses[ntasks:]

    partial = out.with_name(out.name + INCOMPLETE_SUFFIX)
    if partial.exists():
        shutil.rmtree(partial)
    (partial / "trace").mkdir(parents=True)
    (partial / "logs").mkdir()

    base_spec = {
        "cluster": cluster, "model": config.model, "model_fn": config.model_fn,
        "batch_size": config.batch_size, "image_size": config.image_size, "num_classes": config.num_classes,
        "steps": config.steps, "warmup_steps": config.warmup_steps, "trace_every": config.trace_every,
        "workers": config.workers, "placement": config.placement,
        "intra_op_threads": config.intra_op_threads, "inter_op_threads": config.inter_op_threads,
        "learning_rate": config.learning_rate, "out_dir": str(partial.resolve()), "zero_init": config.zero_init,
        "api": config.api.value,
        "traced_steps": config.steps if config.traced_steps is None else config.traced_steps,
    }
    if pss:
        base_spec.update(profiler_ports=profiler_ports, profiler_hosts=profiler_hosts, trace_ms=config.trace_ms,
                         graph_dump_dir=str((partial / "graph_dump").resolve()))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1"), **dict(config.env)}
    # The task processes import this project by module name: keep it importable from anywhere.
    project_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [project_root, env.get("PYTHONPATH", "")]))

    server = fork_servers.for_environment(env) if fork_servers is not None else None
    tasks: list[_Task] = []
    started = time.monotonic()
    bar = None
    tcpdump = None
    capture_counts = None  # tcpdump's own counts once it has stopped
    capture_record = None
    try:
        chief_k = config.ps_tasks
        capture_k = 0 if config.capture_site is CaptureSite.PS else chief_k
        if config.capture:  # tcpdump first, so that a capture that cannot start fails before iperf3 runs
            tcpdump = Tcpdump.start(partial / "capture.pcap", capture_interface, ports, prefix=prefixes[capture_k])
            if config.iperf_repeats:
                measure_bandwidth(partial, hosts[0], repeats=config.iperf_repeats, seconds=config.iperf_seconds,
                                  server_prefix=prefixes[0], client_prefix=prefixes[chief_k])
        roles = [("ps", i) for i in range(config.ps_tasks)] + [("worker", i) for i in range(config.workers)]
        roles += [("coordinator", 0)] if pss else []
        for k, (role, index) in enumerate(roles):
            spec_path = partial / "logs" / f"{role}{index}.spec.json"
            spec = {**base_spec, "role": role, "task_index": index}
            if pss and role in ("ps", "worker") and (role, index) != ("worker", 0):
                del spec["graph_dump_dir"]  # worker 0's partition graphs are the profile's; the coordinator reads them
            spec_path.write_text(json.dumps(spec, indent=2))
            log_path = partial / "logs" / f"{role}{index}.log"
            pid_file = partial / "logs" / f"{role}{index}.pid" if server is not None else None
            command = (_task_command(spec_path, prefixes[k]) if server is None else
                       [*prefixes[k], *server.task_command([str(spec_path)], pid_file)])
            # The task whose progress lines drive the bar: TF1's chief worker, or TF2's coordinator.
            chief = role == "coordinator" if pss else role == "worker" and index == 0
            with open(log_path, "w") as log:
                proc = subprocess.Popen(
                    [*wrappers[k], *command], env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE if chief else log, stderr=log, text=True,
                    preexec_fn=own_session_dying_with_parent,
                )
            tasks.append(_Task(role, index, proc, log_path, pid_file))
        chief_task = next(t for t in tasks if (t.role == "coordinator" if pss else t.role == "worker" and t.index == 0))
        # The tasks' pids are read at the first reading: a forked task's is known by then.
        cpu = TaskCpuSampler(lambda: {t.label: t.cpu_pid() for t in tasks})
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_read_lines, args=(chief_task.process.stdout, lines,
                                                   chief_task.log_path.with_suffix(".progress")), daemon=True).start()

        total = config.warmup_steps + config.steps
        if progress:
            bar = progress_bar(total=total, desc=f"collect {config.model}", unit="step", file=sys.stderr,
                               dynamic_ncols=True)
        first_step_seen, finished = False, False
        batch_size = config.batch_size
        while True:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                line = ""
            if line and line.startswith(PROGRESS_PREFIX):
                event = json.loads(line[len(PROGRESS_PREFIX):])
                if on_event:
                    on_event(event)
                if event["kind"] == "step":
                    if event["step"] in (config.warmup_steps + 1, total):
                        # Twice only, around the measured steps: a reading at every step slowed
                        # the tasks' steps by 7% on the lab (tfprofile/harness/taskcpu.py).
                        cpu.sample(event["step"])
                    first_step_seen = True
                    if bar is not None:
                        bar.update(event["step"] - bar.n)
                        bar.set_postfix(step_s=f"{event['wall_s']:.3f}", traced=event["traced"])
                elif event["kind"] == "untraced":
                    # The traced steps are over: a third reading (docs/formats.md §2.3.1).
                    cpu.sample(event["step"])
                    if tcpdump is not None:
                        # Calibration reads the traced steps' packets only; the untraced tail, whose
                        # step time and CPU per step the one-worker correction and the PS CPU bound
                        # take, runs as the job runs uncaptured (a captured tail cost the lab's 0.29-core
                        # tasks a third more CPU per step: bench/results/capture-cost-2026-11-28).
                        capture_counts = {**tcpdump.stop(), "stopped_at_step": event["step"]}
                        tcpdump = None
                elif event["kind"] == "finished":
                    finished = True
                    batch_size = event["batch_size"]
            elapsed = time.monotonic() - started
            failed = [t for t in tasks if t.process.poll() not in (None, 0)]
            if failed:
                t = failed[0]
                if _no_space_left(partial, t):
                    raise CollectError(f"no space left on {_mount_point(partial)}: task {t.label} "
                                       f"{_exit_text(t.process.returncode)} (log: {t.log_path})")
                raise CollectError(f"task {t.label} {_exit_text(t.process.returncode)}: "
                                   f"{t.last_error_line()} (log: {t.log_path})")
            # A TF2 job's servers serve until stopped: the coordinator's exit ends the run.
            workers_done = (chief_task.process.poll() == 0 if pss else
                            all(t.process.poll() == 0 for t in tasks if t.role == "worker"))
            if workers_done and finished:
                break
            if workers_done and line is None:
                raise CollectError(f"chief worker exited without finishing (log: {chief_task.log_path})")
            if not first_step_seen and elapsed > config.startup_timeout_s:
                raise CollectError(f"no training step within {config.startup_timeout_s:.0f} s: the tasks could "
                                   f"not start or reach each other (logs: {partial / 'logs'})")
            if elapsed > config.timeout_s:
                raise CollectError(f"run did not finish within {config.timeout_s:.0f} s (--timeout); "
                                   f"logs: {partial / 'logs'}")
        # The PS tasks exit on their own once every worker has reported done.
        deadline = time.monotonic() + 30
        for t in tasks:
            if t.role == "ps" and not pss:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    t.process.wait(max(0.1, deadline - time.monotonic()))
        if bar is not None:
            bar.close()
            bar = None
        if tcpdump is not None:
            capture_counts = tcpdump.stop()
            tcpdump = None
        if capture_counts is not None:
            (partial / "capture.tcpdump.log").unlink(missing_ok=True)
            capture_record = {"file": gzip_file(partial / "capture.pcap").name, "interface": capture_interface,
                              "host": "ps0" if config.capture_site is CaptureSite.PS else "worker0",
                              "filter": capture_filter(ports), **capture_counts}
        (partial / TASK_CPU_FILE).write_text(cpu.csv_text(), encoding="utf-8")
        launch = {"launch": "fork-server"} if server is not None else {}
        _finish_run_dir(partial, config, cluster, batch_size, time.monotonic() - started, capture_record,
                        {**(run_record or {}), "task_cpu": cpu.record(), **launch})
        if out.exists():
            shutil.rmtree(out)
        os.replace(partial, out)
        return out
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise CollectError(f"no space left on {_mount_point(partial)} (writing {exc.filename or partial}); "
                               f"the unfinished run is {partial}") from None
        raise
    finally:
        if bar is not None:
            bar.close()
        for t in tasks:
            t.stop()
        if tcpdump is not None:
            tcpdump.stop()
        stop_running_captures()


def _exit_text(returncode: int) -> str:
    """How a task ended, in words: ``exited with status 1`` or ``was killed by SIGKILL``."""
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with status {returncode}"


def _mount_point(path: Path) -> Path:
    """The mount point of the file system that holds ``path``."""
    path = path.resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def _no_space_left(run_dir: Path, task: _Task, free_floor_bytes: int = 1 << 20) -> bool:
    """Whether ``task`` most likely failed for want of disk space: its log says so, or the run
    directory's file system has less than ``free_floor_bytes`` left (a full disk also eats the log)."""
    with contextlib.suppress(OSError):
        if "No space left on device" in task.log_path.read_text(errors="replace"):
            return True
    try:
        stats = os.statvfs(run_dir)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < free_floor_bytes


def _merge_step_times(run_dir: Path, workers: int) -> None:
    rows = []
    for w in range(workers):
        part = run_dir / f"step_times.worker{w}.csv"
        if not part.exists():
            raise CollectError(f"worker {w} wrote no step times ({part})")
        with open(part, newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader)
            rows.extend(reader)
        part.unlink()
    rows.sort(key=lambda r: (int(r[0]), int(r[1])))
    with open(run_dir / "step_times.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def _finish_run_dir(run_dir: Path, config: CollectConfig, cluster: dict, batch_size: int, wall_s: float,
                    capture: dict | None = None, extra: dict | None = None) -> None:
    """Merge the step times and write ``run.json`` (with ``extra``'s keys added)."""
    _merge_step_times(run_dir, config.workers)
    versions_path = run_dir / "versions.json"
    versions = json.loads(versions_path.read_text()) if versions_path.exists() else {}
    versions_path.unlink(missing_ok=True)
    pattern = "*.xplane.pb.gz" if config.api is TrainingApi.TF2_PSS else "step_*.pb.gz"
    traces = sorted(p.name for p in (run_dir / "trace").glob(pattern))
    shutil.rmtree(run_dir / "graph_dump", ignore_errors=True)
    if not traces:
        raise CollectError(f"the run traced no step ({run_dir / 'trace'})")
    config_record = {k: (str(v) if isinstance(v, Path) else v.value if isinstance(v, enum.Enum) else v)
                     for k, v in dataclasses.asdict(config).items()}
    config_record["env"] = dict(config.env)
    config_record.pop("out_dir")
    write_json(run_dir / "run.json", {
        "format": RUN_FORMAT,
        "status": "complete",
        "config": config_record,
        "batch_size": batch_size,
        "cluster": cluster,
        "versions": versions,
        "machine": machine_description(),
        "traced_steps": traces,
        "capture": capture,
        "iperf3": sorted(p.name for p in (run_dir / "iperf3").glob("*.json")) if (run_dir / "iperf3").is_dir() else [],
        "wall_time_s": round(wall_s, 3),
        "created_unix_s": round(time.time(), 3),
        **(extra or {}),
    })
