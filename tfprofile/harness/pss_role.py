"""One task of a TF2 ParameterServerStrategy job on hosts of its own:
``tfsim collect --api tf2-pss --role ps|worker|chief``.

The cluster comes from ``TF_CONFIG`` or ``--cluster-spec`` as for a TF1 job
(:mod:`tfprofile.harness.tfconfig`), with one more job, ``chief``: the coordinator, as
TensorFlow names it. Each host runs one ``tfsim collect`` for its task:

- a **PS** or **worker** starts its server (:func:`tfprofile.harness.pss_task.run_server`),
  whose profiler listens on the task's port plus :data:`PROFILER_PORT_OFFSET`, and serves
  until the coordinator says the job is over: it writes :func:`done_file` on the task's host
  through TensorFlow itself (an op placed on that task), and the task's ``tfsim collect``
  then stops the server and exits 0 (or 2 when the coordinator wrote that it failed). Worker
  0 dumps the step function's partition graphs into :func:`graph_dump_dir` on its host;
- the **chief** waits until every PS's and worker's port answers, runs the coordinator
  (:func:`tfprofile.harness.pss_task.run_coordinator`), which traces every task through its
  profiler port, reads worker 0's partition graphs through an op placed on worker 0, and
  alone writes the run directory.

The transfers cross the links between the workers and the PS tasks, not the coordinator's:
with ``config.capture`` tcpdump runs on worker 0's host (capture site ``chief-worker``) or on
PS 0's (``ps``), with ``iperf`` (given to the coordinator) iperf3 runs from worker 0's host to
every PS host (each with ``iperf_server``), and the coordinator fetches both into its run
directory through the same ops (:mod:`tfprofile.harness.pss_handoff`), which ``tfsim
calibrate`` then reads as a one-host run.

With ``repeat`` N > 1 every task runs N times in step, each time afresh (new servers on the
same ports, a new coordinator process): once released, each server's ``tfsim collect`` holds
its task's port until the coordinator's has reported the end of the repetition
(:mod:`tfprofile.harness.handoff`, which brings every host's load to the coordinator), so that
the next repetition's coordinator waits for new servers, not the last one's; the coordinator
writes repetition K's run directory as ``out_dir/rK`` (the summary is ``tfsim``'s). Every
server says its N in its manifest, and the coordinator refuses a job whose tasks disagree
before the first step. This module does not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tfbase.errors import ClusterError, CollectError, UsageError
from tfbase.load import LoadMeter, LoadSample, reaped_children_s
from tfbase.signals import own_session_dying_with_parent
from tfprofile.harness.capture import IperfServer, stop_running_captures
from tfprofile.harness.capture_site import CaptureDuty, pss_capture_duty
from tfprofile.harness.handoff import Handoff, hand_over, serve_handoff
from tfprofile.harness.launcher import (
    INCOMPLETE_SUFFIX,
    CollectConfig,
    _finish_run_dir,
    _read_lines,
    _Task,
    _task_command,
)
from tfprofile.harness.pss_handoff import (
    SERVERS_DONE,
    SERVERS_FAILED,
    HandoffHost,
    coordinator_spec,
    read_record,
    safe_name,
    task_device,
)
from tfprofile.harness.role_options import RoleOptions
from tfprofile.harness.role_watch import (
    fresh_partial_dir,
    hosts_record,
    publish_run_dir,
    repetition_name,
    repetition_text,
    say_host_load,
    step_bar,
    wait_serving,
    watch_task,
)
from tfprofile.harness.taskcpu import cpu_seconds
from tfprofile.harness.tfconfig import COORDINATOR_ROLE, ClusterSpec, TaskId, split_address

PROFILER_PORT_OFFSET = 10_000  # a server's profiler port: its gRPC port plus this
DONE_POLL_S = 0.25
SERVER_JOBS = ("ps", "worker")
COORDINATOR_LABEL = TaskId(COORDINATOR_ROLE, 0).label  # the one coordinator, which ends each repetition


def profiler_port(address: str) -> int:
    """The profiler port of the task at ``address`` (``host:port``)."""
    return split_address(address)[1] + PROFILER_PORT_OFFSET


def graph_dump_dir(cluster: ClusterSpec) -> str:
    """Where worker 0 dumps the partition graphs on its host, and the coordinator reads them:
    a path both compute from the cluster spec."""
    return f"/tmp/tfsim-pss-graphs-{safe_name(cluster.worker[0])}"


def done_file(cluster: ClusterSpec, task: TaskId) -> str:
    """The file on ``task``'s host whose appearance ends the task: the coordinator writes it."""
    return f"/tmp/tfsim-pss-done-{task.label}-{safe_name(cluster.address(task.role, task.index))}"


def server_tasks(cluster: ClusterSpec) -> list[TaskId]:
    return [TaskId(job, i) for job in SERVER_JOBS for i in range(len(cluster.as_dict()[job]))]


def check_profiler_ports(cluster: ClusterSpec, where: str) -> None:
    """Every server's profiler port must be a TCP port and differ from every task's address."""
    addresses = {a for job in cluster.as_dict().values() for a in job}
    for task in server_tasks(cluster):
        address = cluster.address(task.role, task.index)
        host, _ = split_address(address)
        port = profiler_port(address)
        if port > 65535:
            raise ClusterError(where, f"{task.label}'s port is above {65535 - PROFILER_PORT_OFFSET}: its profiler "
                                      f"listens on the port plus {PROFILER_PORT_OFFSET}")
        if f"{host}:{port}" in addresses:
            raise ClusterError(where, f"{task.label}'s profiler port {port} is another task's address")


def _spec(config: CollectConfig, role: RoleOptions, out_dir: Path) -> dict:
    cluster = role.cluster
    labels = {t.label: cluster.address(t.role, t.index) for t in server_tasks(cluster)}
    spec = {
        "cluster": cluster.as_dict(), "model": config.model, "model_fn": config.model_fn,
        "batch_size": config.batch_size, "image_size": config.image_size, "num_classes": config.num_classes,
        "steps": config.steps, "warmup_steps": config.warmup_steps, "trace_every": config.trace_every,
        "workers": len(cluster.worker), "placement": config.placement,
        "intra_op_threads": config.intra_op_threads, "inter_op_threads": config.inter_op_threads,
        "learning_rate": config.learning_rate, "out_dir": str(out_dir.resolve()), "zero_init": config.zero_init,
        "api": config.api.value, "trace_ms": config.trace_ms,
        "traced_steps": config.steps if config.traced_steps is None else config.traced_steps,
        "role": "coordinator" if role.task.is_coordinator else role.task.role, "task_index": role.task.index,
        "profiler_ports": {label: profiler_port(a) for label, a in labels.items()},
        "profiler_hosts": {label: split_address(a)[0] for label, a in labels.items()},
    }
    if role.task.is_coordinator:
        spec["graph_dump_dir"] = graph_dump_dir(cluster)
        spec["graph_dump_device"] = task_device(TaskId("worker", 0))
        spec["done_files"] = {task_device(t): done_file(cluster, t) for t in server_tasks(cluster)}
        spec["handoff"] = coordinator_spec(config, role)
    elif role.task.is_chief:  # worker 0
        spec["graph_dump_dir"] = graph_dump_dir(cluster)
    return spec


def _task_env(config: CollectConfig) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1"), **dict(config.env)}
    env.pop("TF_CONFIG", None)  # the task's cluster is in its spec; TF must not read a second one
    project_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [project_root, env.get("PYTHONPATH", "")]))
    return env


def _start(config: CollectConfig, role: RoleOptions, work: Path, out_dir: Path) -> tuple[_Task, queue.Queue]:
    spec = _spec(config, role, out_dir)
    # The worker index of a step comes from the worker's command line, which names its spec file.
    spec_path = work / "logs" / f"{spec['role']}{role.task.index}.spec.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    log_path = work / "logs" / f"{spec['role']}{role.task.index}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_task_command(spec_path, []), env=_task_env(config), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=own_session_dying_with_parent)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
    return _Task(spec["role"], role.task.index, proc, log_path), lines


def wait_servers(role: RoleOptions) -> None:
    """Wait until every PS's and worker's gRPC port accepts a connection (the coordinator
    creates their contexts at once), or fail after ``connect_timeout_s`` naming the task; in a
    repeated job, until each serves the next repetition (:func:`wait_serving`)."""
    wait_serving(role, [(t.label, role.cluster.address(t.role, t.index)) for t in server_tasks(role.cluster)])


def run_pss_task(config: CollectConfig, role: RoleOptions, *, progress: bool = True,
                 overwrite: bool = False) -> Path | None:
    """Run this host's task of a tf2-pss job (``role.repeat`` times, in step with the other
    hosts); return the run directory (the coordinator; with repeat, the directory of the
    repetitions' run directories ``r1``, ``r2``, ...) or None."""
    duty = pss_capture_duty(config, role)
    if role.iperf and not role.task.is_coordinator:
        raise UsageError("iperf", f"in a tf2-pss job the coordinator has worker0's host measure the links: give "
                                  f"it to the coordinator, not to {role.task.label}")
    check_profiler_ports(role.cluster, role.task.label)
    if role.task.is_coordinator:
        if role.repeat == 1:
            return _run_coordinator(config, role, progress=progress, overwrite=overwrite)
        return _run_coordinator_repeated(config, role, progress=progress, overwrite=overwrite)
    server = IperfServer.start(role.iperf_port) if role.iperf_server else None
    try:
        for k in range(1, role.repeat + 1):
            sample = _run_server(config, role, duty, server)
            say_host_load(role.task.label, sample, repetition_text(role, k))
            if role.repeat > 1:  # hold the port until the coordinator has ended the repetition too
                port = split_address(role.cluster.address(role.task.role, role.task.index))[1]
                serve_handoff(port, Handoff(role.task.label, k, sample.as_dict()), [COORDINATOR_LABEL],
                              config.startup_timeout_s, relay_to=None)
            where = f" ({repetition_text(role, k)})" if role.repeat > 1 else ""
            print(f"tfsim: {role.task.label}: the coordinator is done{where}", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()
    return None


def _run_server(config: CollectConfig, role: RoleOptions, duty: CaptureDuty,
                iperf_server: IperfServer | None) -> LoadSample:
    """One run of a PS's or worker's server, until the coordinator releases it: its host's
    load meanwhile (the iperf3 server's CPU time counted as the task's own: it serves the
    coordinator's measurement)."""
    done = Path(done_file(role.cluster, role.task))
    done.unlink(missing_ok=True)
    dump = Path(graph_dump_dir(role.cluster)) if role.task.is_chief else None
    if dump is not None:
        shutil.rmtree(dump, ignore_errors=True)
    work, task, handoff = None, None, None

    def own_cpu_s() -> float:
        served = cpu_seconds(iperf_server.process.pid) if iperf_server is not None else None
        return reaped_children_s() + (served or 0.0)

    try:
        with LoadMeter(own_cpu_s) as meter:
            # tcpdump first, so that it sees every connection the job opens
            handoff = HandoffHost.open(config, role, duty)
            work = Path(tempfile.mkdtemp(prefix=f"tfsim-{role.task.label}-"))
            (work / "logs").mkdir()
            task, _ = _start(config, role, work, work)
            released = _serve_until_released(config, role, task, done, handoff)
            task.stop()  # reaped: its CPU time is counted as the task's own
        handoff.finish(released)
        if released != SERVERS_DONE:
            raise ClusterError(role.task.label, "the coordinator stopped before the job was done, so this task "
                                                "stops too (see the coordinator's message)")
    finally:
        if task is not None:
            task.stop()
        if handoff is not None:
            handoff.close()
        stop_running_captures()
        done.unlink(missing_ok=True)
        if dump is not None:
            shutil.rmtree(dump, ignore_errors=True)
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)  # kept on failure, for its log
    return meter.sample


def _serve_until_released(config: CollectConfig, role: RoleOptions, task: _Task, done: Path,
                          handoff: HandoffHost | None) -> str:
    """Answer the coordinator's requests until it writes the done file; return what it wrote
    (:data:`SERVERS_DONE` or :data:`SERVERS_FAILED`)."""
    started = time.monotonic()
    while True:
        if done.exists():  # written by an op: seen whole on a later poll if not yet
            released = done.read_text(errors="replace").strip()
            if released in (SERVERS_DONE, SERVERS_FAILED):
                return released
        if task.process.poll() is not None:
            raise CollectError(f"task {task.label} exited with status {task.process.returncode} before the "
                               f"coordinator was done: {task.last_error_line()} (log: {task.log_path})")
        if time.monotonic() - started > config.timeout_s:
            raise CollectError(f"{role.task.label}: the coordinator was not done within {config.timeout_s:.0f} s "
                               f"(--timeout); log: {task.log_path}")
        if handoff is not None:
            handoff.serve()
        time.sleep(DONE_POLL_S)


def _run_coordinator_repeated(config: CollectConfig, role: RoleOptions, *, progress: bool,
                              overwrite: bool) -> Path:
    """The coordinator's ``role.repeat`` runs, each a run directory ``rK`` of ``config.out_dir``
    (written as ``out_dir`` + :data:`INCOMPLETE_SUFFIX` until the last is complete)."""
    out = config.out_dir
    if out.exists() and not overwrite:
        raise UsageError(out, "already exists; choose another --out or pass --force")
    partial = out.with_name(out.name + INCOMPLETE_SUFFIX)
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    for k in range(1, role.repeat + 1):
        _run_coordinator(dataclasses.replace(config, out_dir=partial / repetition_name(k)), role,
                         progress=progress, overwrite=False, repetition=k)
    publish_run_dir(partial, out)
    return out


def _end_repetition(config: CollectConfig, role: RoleOptions, own: Handoff) -> dict[str, dict]:
    """The barrier at the end of a repetition (:mod:`tfprofile.harness.handoff`): tell every
    server's host, each of which holds its task's port until then, so that the next
    repetition's servers are new ones; return every host's load by task label."""
    resolved = role.cluster.resolved()
    loads = {own.label: own.host_load}
    for task in server_tasks(role.cluster):
        answer = hand_over(resolved.address(task.role, task.index), task.label, own, relay=False,
                           timeout_s=config.startup_timeout_s)
        loads[answer["label"]] = answer.get("host_load")
    return {label: loads[label] for label in sorted(loads)}


def _run_coordinator(config: CollectConfig, role: RoleOptions, *, progress: bool, overwrite: bool,
                     repetition: int = 0) -> Path:
    """The coordinator's run; ``repetition`` (from 1) of a repeated job also ends it on every
    host and records every host's load in run.json."""
    out = config.out_dir
    if out.exists() and not overwrite:
        raise UsageError(out, "already exists; choose another --out or pass --force")
    wait_servers(role)
    partial = fresh_partial_dir(out)
    started = time.monotonic()
    task, bar = None, None
    try:
        if progress:
            bar = step_bar(config, "coordinator")
        with LoadMeter(reaped_children_s) as meter:
            task, lines = _start(config, role, partial, partial)
            state = watch_task(task, lines, config, bar)
            if not state.finished:
                raise CollectError(f"the coordinator exited without finishing (log: {task.log_path})")
            task.stop()
        say_host_load(role.task.label, meter.sample, repetition_text(role, repetition))
        capture, links = read_record(partial)
        # the servers wait for this before their next repetition: end it first
        loads = _end_repetition(config, role, Handoff(role.task.label, repetition, meter.sample.as_dict())) \
            if repetition else None
        extra = {"host_load": meter.sample.as_dict(), "cluster_spec": role.cluster.as_dict(),
                 "cluster_source": role.cluster_source, "task": {"role": role.task.role, "index": 0},
                 "hosts": hosts_record(role), "iperf3_links": links}
        if repetition:
            extra.update(repetition={"index": repetition, "of": role.repeat}, host_loads=loads)
        _finish_run_dir(partial, config, role.cluster.resolved().as_dict(), state.batch_size,
                        time.monotonic() - started, capture, extra=extra)
        publish_run_dir(partial, out)
        return out
    finally:
        if bar is not None:
            bar.close()
        if task is not None:
            task.stop()
