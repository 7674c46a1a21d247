"""Following a task of a multi-host job, and what its host records: shared by TF1's roles
(:mod:`tfprofile.harness.role`) and tf2-pss's (:mod:`tfprofile.harness.pss_role`).

A task reports its progress on stdout (``PROGRESS_PREFIX`` lines: steps, finished, errors);
:func:`watch_task` follows it to its end under the run's timeouts, :func:`say_host_load` says
how loaded its host was, and :func:`hosts_record` is run.json's ``hosts``. :func:`wait_serving`
waits for the servers a task connects to, and :func:`repetition_name` names a repeated job's
run directories.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import shutil
import socket
import sys
import time
from pathlib import Path

from tfbase.errors import ClusterError, CollectError
from tfbase.load import OUTSIDE_LOAD_LIMIT_CORES, LoadSample
from tfbase.progress import progress_bar
from tfprofile.harness.handoff import handing_over
from tfprofile.harness.launcher import INCOMPLETE_SUFFIX, CollectConfig, _Task
from tfprofile.harness.role_options import RoleOptions
from tfprofile.harness.task import DISAGREEMENT_STATUS
from tfprofile.harness.task_common import PROGRESS_PREFIX
from tfprofile.harness.tfconfig import split_address


@dataclasses.dataclass
class TaskProgress:
    """What the task reported so far on its progress channel."""

    steps: int = 0
    finished: bool = False
    batch_size: int = 0
    error: dict | None = None


def watch_task(task: _Task, lines: queue.Queue, config: CollectConfig, bar=None) -> TaskProgress:
    """Follow the task until it exits; enforce the startup and run timeouts."""
    state, started, ended = TaskProgress(), time.monotonic(), False
    while True:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            line = ""
        if line is None:
            ended = True
        elif line.startswith(PROGRESS_PREFIX):
            _apply(state, json.loads(line[len(PROGRESS_PREFIX):]), bar)
        code = task.process.poll()
        if code is not None and ended:
            break
        elapsed = time.monotonic() - started
        if task.role == "worker" and state.steps == 0 and elapsed > config.startup_timeout_s:
            raise CollectError(f"{task.label}: no training step within {config.startup_timeout_s:.0f} s: the tasks "
                               f"could not start or reach each other (log: {task.log_path})")
        if elapsed > config.timeout_s:
            raise CollectError(f"{task.label}: did not finish within {config.timeout_s:.0f} s (--timeout); "
                               f"log: {task.log_path}")
    if state.error is not None and state.error["status"] == DISAGREEMENT_STATUS:
        raise ClusterError(None, state.error["message"])
    if state.error is not None:
        raise CollectError(state.error["message"])
    if task.process.returncode != 0:
        raise CollectError(f"task {task.label} exited with status {task.process.returncode}: "
                           f"{task.last_error_line()} (log: {task.log_path})")
    return state


def _apply(state: TaskProgress, event: dict, bar) -> None:
    if event["kind"] == "step":
        state.steps = event["step"]
        if bar is not None:
            bar.update(event["step"] - bar.n)
            bar.set_postfix(step_s=f"{event['wall_s']:.3f}", traced=event["traced"])
    elif event["kind"] == "finished":
        state.finished, state.batch_size = True, event["batch_size"]
    elif event["kind"] == "error":
        state.error = event


def repetition_name(k: int) -> str:
    """The directory of repetition ``k`` (from 1) of a repeated job: ``r1``, ``r2``, ..."""
    return f"r{k}"


def repetition_text(role: RoleOptions, k: int) -> str:
    """``"repetition K of N"`` in a repeated job, else nothing (messages add it)."""
    return f"repetition {k} of {role.repeat}" if role.repeat > 1 else ""


def wait_serving(role: RoleOptions, servers: list[tuple[str, str]]) -> None:
    """Wait until each of ``servers`` (task label, ``host:port``) accepts a TCP connection, or
    fail after ``connect_timeout_s`` naming the task that did not answer. In a repeated job a
    server's host that is still ending the last repetition (:mod:`tfprofile.harness.handoff`)
    does not count as serving, nor as silent: it waits for the other hosts, as long as its own
    timeout allows."""
    deadline = time.monotonic() + role.connect_timeout_s
    for label, address in servers:
        host, port = split_address(address)
        while True:
            try:
                with socket.create_connection((host, port), timeout=min(3.0, role.connect_timeout_s)) as sock:
                    if role.repeat == 1 or not handing_over(sock):
                        break
                # it waits for another host to end the last repetition: its own timeout bounds that
                deadline = time.monotonic() + role.connect_timeout_s
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise ClusterError(role.task.label, f"{label} at {address} is unreachable "
                                                        f"({exc.strerror or exc}) after {role.connect_timeout_s:g} s "
                                                        f"(--connect-timeout): is its task started and TCP port "
                                                        f"{port} open?") from None
            time.sleep(0.25)


def say_host_load(label: str, sample: LoadSample, repetition: str = "") -> None:
    """One stderr line: this host's load while its task ran (in ``repetition`` of a repeated
    job), and how much of it was not the task."""
    where = f" ({repetition})" if repetition else ""
    print(f"tfsim: host of {label}{where}: {sample.machine_cores:.2f} cores busy while the task ran, "
          f"{sample.outside_cores:.2f} beyond the task's own"
          + (f" (more than {OUTSIDE_LOAD_LIMIT_CORES:g}: this run was measured on a loaded host)"
             if sample.flagged else ""), file=sys.stderr, flush=True)


def hosts_record(role: RoleOptions) -> dict:
    """run.json's ``hosts``: every task's address as given and as resolved, and this host's name."""
    resolved = role.cluster.resolved()
    hosts = {}
    for job in ("ps", "worker", "chief"):  # a tf2-pss job's coordinator is the "chief"
        for i, (given, ip) in enumerate(zip(getattr(role.cluster, job), getattr(resolved, job))):
            hosts[f"{job}{i}"] = {"address": given, "ip": split_address(ip)[0]}
    hosts[role.task.label]["hostname"] = socket.gethostname()
    return hosts


def fresh_partial_dir(out: Path) -> Path:
    """The directory a chief or coordinator writes its run into before it is complete
    (``out`` + :data:`INCOMPLETE_SUFFIX`), emptied, with its ``trace`` and ``logs``."""
    partial = out.with_name(out.name + INCOMPLETE_SUFFIX)
    if partial.exists():
        shutil.rmtree(partial)
    (partial / "trace").mkdir(parents=True)
    (partial / "logs").mkdir()
    return partial


def step_bar(config: CollectConfig, who: str):
    """A progress bar over the run's steps, on stderr."""
    return progress_bar(total=config.warmup_steps + config.steps, desc=f"collect {config.model} ({who})",
                        unit="step", file=sys.stderr, dynamic_ncols=True)


def publish_run_dir(partial: Path, out: Path) -> None:
    """Put the complete run directory in place of ``out`` (replacing an older one)."""
    if out.exists():
        shutil.rmtree(out)
    os.replace(partial, out)
