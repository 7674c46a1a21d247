"""One task of a multi-host job: ``tfsim collect --role ps|worker --task-index I``.

Each host runs one ``tfsim collect`` per task, with the cluster from ``TF_CONFIG`` or
``--cluster-spec`` (:mod:`tfprofile.harness.tfconfig`). The process starts its task
(``python -m tfprofile.harness.task``, as the single-host launcher does) and watches it:

- a **PS** serves until every worker has reported done, then exits 0; with
  ``iperf_server`` an ``iperf3 -s`` runs beside it for the chief's measurements;
- a **worker** first waits until every PS's gRPC port answers (``connect_timeout_s``), then
  trains; the tasks check that they run the same model and options before the first step;
- the **chief** (worker 0) also measures each PS host's link with ``iperf3 -J`` (``iperf``),
  captures its traffic with every PS (``config.capture``), and alone writes the run
  directory, whose ``run.json`` records the cluster spec, the hosts and the placement;
- with ``config.capture_site`` ``PS``, **PS 0** captures instead, every worker's traffic with
  it, into its own ``out_dir``, and the chief records where (:mod:`tfprofile.harness.capture_site`).
- with ``repeat`` N > 1 every task runs N times in step, each time afresh: after each
  repetition each PS's process holds its task's port until every worker has reported the end
  (:mod:`tfprofile.harness.handoff`, which also brings every host's load to the chief), and the
  chief writes repetition K's run directory as ``out_dir/rK`` (the summary is ``tfsim``'s).

Bad input (:class:`~tfbase.errors.ClusterError`, exit status 2) names the task; a task that
fails otherwise raises :class:`~tfbase.errors.CollectError`. This module does not import
TensorFlow.
"""

from __future__ import annotations

import contextlib
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
from tfprofile.harness.capture import (
    IperfServer,
    Tcpdump,
    gzip_file,
    host_port_filter,
    interface_towards,
    measure_bandwidth_to,
    require_root,
    require_tools,
    stop_running_captures,
)
from tfprofile.harness.capture_site import (
    CaptureDuty,
    PsCapture,
    capture_duty,
    chief_capture_pairs,
    chief_record,
    ps_hosts,
)
from tfprofile.harness.handoff import Handoff, hand_over, serve_handoff
from tfprofile.harness.launcher import (
    INCOMPLETE_SUFFIX,
    CollectConfig,
    TrainingApi,
    _finish_run_dir,
    _read_lines,
    _Task,
    _task_command,
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
from tfprofile.harness.tfconfig import split_address

AGREED_OPTIONS = ("model", "model_fn", "batch_size", "image_size", "num_classes", "steps", "warmup_steps",
                  "trace_every", "placement", "learning_rate", "zero_init")




def agreement_options(config: CollectConfig, repeat: int = 1) -> dict:
    """The run options every task of a job must share; ``repeat`` only when it is not 1, so
    that a job run once records what it always did."""
    options = {name: getattr(config, name) for name in AGREED_OPTIONS}
    return {**options, "repeat": repeat} if repeat != 1 else options


def _spec(config: CollectConfig, role: RoleOptions, out_dir: Path) -> dict:
    return {
        "cluster": role.cluster.as_dict(), "model": config.model, "model_fn": config.model_fn,
        "batch_size": config.batch_size, "image_size": config.image_size, "num_classes": config.num_classes,
        "steps": config.steps, "warmup_steps": config.warmup_steps, "trace_every": config.trace_every,
        "workers": len(role.cluster.worker), "placement": config.placement,
        "intra_op_threads": config.intra_op_threads, "inter_op_threads": config.inter_op_threads,
        "learning_rate": config.learning_rate, "out_dir": str(out_dir.resolve()), "zero_init": config.zero_init,
        "role": role.task.role, "task_index": role.task.index, "agreement": agreement_options(config, role.repeat),
        "startup_timeout_s": config.startup_timeout_s, "timeout_s": config.timeout_s,
    }


def _task_env(config: CollectConfig) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1"), **dict(config.env)}
    env.pop("TF_CONFIG", None)  # the task's cluster is in its spec; TF must not read a second one
    project_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [project_root, env.get("PYTHONPATH", "")]))
    return env


def wait_reachable(role: RoleOptions) -> None:
    """Wait until every PS task's gRPC port accepts a TCP connection, or fail after
    ``connect_timeout_s`` naming the PS that did not answer (:func:`wait_serving`)."""
    wait_serving(role, [(f"ps{p}", address) for p, address in enumerate(role.cluster.ps)])


def _start_task(config: CollectConfig, role: RoleOptions, work: Path, out_dir: Path) -> tuple[_Task, queue.Queue]:
    label = role.task.label
    spec_path = work / "logs" / f"{label}.spec.json"
    spec_path.write_text(json.dumps(_spec(config, role, out_dir), indent=2))
    log_path = work / "logs" / f"{label}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_task_command(spec_path, []), env=_task_env(config), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=own_session_dying_with_parent)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
    return _Task(role.task.role, role.task.index, proc, log_path), lines


def run_task(config: CollectConfig, role: RoleOptions, *, progress: bool = True,
             overwrite: bool = False) -> Path | None:
    """Run this host's task of the job (``role.repeat`` times, in step with the other hosts);
    return the run directory (the chief; with repeat, the directory of the repetitions' run
    directories ``r1``, ``r2``, ...), PS 0's capture directory (PS 0 capturing at the PS) or ``None``."""
    if config.api is TrainingApi.TF2_PSS:
        from tfprofile.harness.pss_role import run_pss_task

        return run_pss_task(config, role, progress=progress, overwrite=overwrite)
    duty = capture_duty(config, role)
    if role.task.is_chief:
        if role.repeat == 1:
            return _run_chief(config, role, duty, progress=progress, overwrite=overwrite)
        return _run_chief_repeated(config, role, duty, progress=progress, overwrite=overwrite)
    repeated, capturing = role.repeat > 1, duty is CaptureDuty.CAPTURE
    if capturing and repeated:  # PS 0 captures each repetition into its own directory of --out
        require_tools("tcpdump")
        require_root("collect --capture")
        _fresh_repeat_dir(config.out_dir, overwrite=overwrite)
    single_capture = PsCapture.prepare(config.out_dir, overwrite=overwrite) if capturing and not repeated else None
    server = IperfServer.start(role.iperf_port) if role.iperf_server else None
    out = None
    try:
        for k in range(1, role.repeat + 1):
            capture_out = config.out_dir / repetition_name(k) if repeated else config.out_dir
            capture_dir = PsCapture.prepare(capture_out, overwrite=False) if capturing and repeated else single_capture
            sample, out = _run_once(config, role, capture_out, capture_dir)
            say_host_load(role.task.label, sample, repetition_text(role, k))
            if repeated:
                _end_repetition(config, role, Handoff(role.task.label, k, sample.as_dict()))
    finally:
        if server is not None:
            server.stop()
    return config.out_dir if capturing and repeated else out


def _fresh_repeat_dir(out: Path, *, overwrite: bool) -> Path:
    """The empty directory that a repeated job's repetitions go into."""
    if out.exists() and not overwrite:
        raise UsageError(out, "already exists; choose another --out or pass --force")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return out


def _run_once(config: CollectConfig, role: RoleOptions, capture_out: Path,
              capture_dir: Path | None) -> tuple[LoadSample, Path | None]:
    """One run of a PS's or non-chief worker's task: its host's load while it ran, and PS 0's
    capture directory (when it captures)."""
    if role.task.role == "worker":
        wait_reachable(role)
    work = Path(tempfile.mkdtemp(prefix=f"tfsim-{role.task.label}-"))
    (work / "logs").mkdir()
    task, capture, out = None, None, None
    try:
        # tcpdump first, so that it sees every connection the job opens
        capture = PsCapture.start(capture_out, capture_dir, role) if capture_dir is not None else None
        with LoadMeter(reaped_children_s) as meter:
            task, lines = _start_task(config, role, work, work)
            watch_task(task, lines, config)
            task.stop()  # reaped: its CPU time is counted as the task's own
            if capture is not None:  # tcpdump's CPU time too: it is part of the measurement
                capture.stop(role)
        if capture is not None:
            out = capture.finish(role)
    finally:
        if task is not None:
            task.stop()
        if capture is not None:
            capture.abandon()
        stop_running_captures()
    shutil.rmtree(work, ignore_errors=True)  # kept on failure, for its log
    return meter.sample, out


def _end_repetition(config: CollectConfig, role: RoleOptions, own: Handoff) -> dict[str, dict]:
    """The barrier at the end of a repetition (:mod:`tfprofile.harness.handoff`): a PS waits
    for every worker; a worker tells every PS. Return every host's load by task label (the
    chief's view; the others' is partial)."""
    if role.task.role == "ps":
        port = split_address(role.cluster.ps[role.task.index])[1]
        workers = [f"worker{i}" for i in range(len(role.cluster.worker))]
        loads = serve_handoff(port, own, workers, config.startup_timeout_s)
        return {**loads, own.label: own.host_load}
    loads = {own.label: own.host_load}
    for p, address in enumerate(role.cluster.resolved().ps):
        answer = hand_over(address, f"ps{p}", own, relay=role.task.is_chief, timeout_s=config.startup_timeout_s)
        loads[answer["label"]] = answer.get("host_load")
        loads.update(answer.get("hosts", {}))
    return {label: loads[label] for label in sorted(loads)}


def _measure_links(config: CollectConfig, role: RoleOptions, run_dir: Path) -> list[dict]:
    """iperf3 from the chief to every PS host; PS 0's host in the layout calibrate reads."""
    links = []
    for host, tasks in ps_hosts(role.cluster).items():
        name = "" if tasks[0] == 0 else f"ps{tasks[0]}_"
        paths = measure_bandwidth_to(run_dir, host, name=name, repeats=config.iperf_repeats,
                                     seconds=config.iperf_seconds, port=role.iperf_port,
                                     connect_timeout_s=role.connect_timeout_s)
        links.append({"host": host, "ps_tasks": tasks, "files": [p.name for p in paths]})
    return links


def _start_capture(role: RoleOptions, run_dir: Path) -> tuple[Tcpdump, dict]:
    first_ps = split_address(role.cluster.resolved().ps[0])[0]
    interface = role.capture_interface or interface_towards(first_ps)
    bpf = host_port_filter(chief_capture_pairs(role))
    tcpdump = Tcpdump.start(run_dir / "capture.pcap", interface, [], filter_text=bpf)
    return tcpdump, {"interface": interface, "filter": bpf}


def _stop_capture(tcpdump: Tcpdump, record: dict, role: RoleOptions, run_dir: Path) -> dict:
    counts = tcpdump.stop()
    (run_dir / "capture.tcpdump.log").unlink(missing_ok=True)
    pcap = run_dir / "capture.pcap"
    if counts.get("captured", 0) == 0 or pcap.stat().st_size <= 24:
        raise ClusterError(role.task.label, f"the capture on interface {record['interface']} saw no traffic with "
                                            f"the PS tasks ({record['filter']}): give the interface that carries it "
                                            "(--capture-interface)")
    return {"file": gzip_file(pcap).name, **record, **counts}


def _placement_record(config: CollectConfig, role: RoleOptions, run_dir: Path) -> dict:
    from tfprofile.rundir import read_variables

    table = read_variables(run_dir / "variables.json")
    per_ps = [0] * len(role.cluster.ps)
    for server, size in zip(table.server.tolist(), table.size_bytes.tolist()):
        if 0 <= server < len(per_ps):
            per_ps[server] += int(size)
    return {"strategy": config.placement, "ps_tasks": len(role.cluster.ps), "bytes_per_ps": per_ps}


def _check_chief_tools(role: RoleOptions, duty: CaptureDuty) -> None:
    if duty is CaptureDuty.CAPTURE:
        require_tools("tcpdump")
        require_root("collect --capture")
    if role.iperf:
        require_tools("iperf3")


def _run_chief_repeated(config: CollectConfig, role: RoleOptions, duty: CaptureDuty, *, progress: bool,
                        overwrite: bool) -> Path:
    """The chief's ``role.repeat`` runs, each a run directory ``rK`` of ``config.out_dir``
    (written as ``out_dir`` + :data:`INCOMPLETE_SUFFIX` until the last is complete)."""
    out = config.out_dir
    if out.exists() and not overwrite:
        raise UsageError(out, "already exists; choose another --out or pass --force")
    _check_chief_tools(role, duty)
    partial = out.with_name(out.name + INCOMPLETE_SUFFIX)
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    for k in range(1, role.repeat + 1):
        _run_chief(dataclasses.replace(config, out_dir=partial / repetition_name(k)), role, duty,
                   progress=progress, overwrite=False, repetition=k, published=out / repetition_name(k))
    publish_run_dir(partial, out)
    return out


def _run_chief(config: CollectConfig, role: RoleOptions, duty: CaptureDuty, *, progress: bool,
               overwrite: bool, repetition: int = 0, published: Path | None = None) -> Path:
    """The chief's run; ``repetition`` (from 1) of a repeated job also ends it on every host
    and records every host's load in run.json. ``published``: where the run directory will be
    once the job is complete (for messages), if not ``config.out_dir``."""
    out = config.out_dir
    if out.exists() and not overwrite:
        raise UsageError(out, "already exists; choose another --out or pass --force")
    _check_chief_tools(role, duty)
    wait_reachable(role)
    partial = fresh_partial_dir(out)
    started = time.monotonic()
    links = _measure_links(config, role, partial) if role.iperf else []
    task, tcpdump, bar = None, None, None
    try:
        if duty is CaptureDuty.CAPTURE:
            tcpdump, capture = _start_capture(role, partial)
        if progress:
            bar = step_bar(config, "worker0")
        with LoadMeter(reaped_children_s) as meter:
            task, lines = _start_task(config, role, partial, partial)
            state = watch_task(task, lines, config, bar)
            if not state.finished:
                raise CollectError(f"worker0 exited without finishing (log: {task.log_path})")
            task.stop()  # reaped: its CPU time is counted as the task's own
            capture_record = chief_record(role) if duty is CaptureDuty.RECORD else None
            if tcpdump is not None:  # tcpdump's CPU time too: it is part of the measurement
                capture_record = _stop_capture(tcpdump, capture, role, partial)
                tcpdump = None
        say_host_load("worker0", meter.sample, repetition_text(role, repetition))
        # the PS tasks wait for this before their next repetition: end it first
        loads = _end_repetition(config, role, Handoff("worker0", repetition, meter.sample.as_dict())) \
            if repetition else None
        extra = {"host_load": meter.sample.as_dict(), "cluster_spec": role.cluster.as_dict(),
                 "cluster_source": role.cluster_source,
                 "task": {"role": "worker", "index": 0}, "hosts": hosts_record(role),
                 "placement": _placement_record(config, role, partial), "iperf3_links": links}
        if repetition:
            extra.update(repetition={"index": repetition, "of": role.repeat}, host_loads=loads)
        _finish_run_dir(partial, config, role.cluster.resolved().as_dict(), state.batch_size,
                        time.monotonic() - started, capture_record, extra=extra)
        publish_run_dir(partial, out)
        if duty is CaptureDuty.RECORD:
            print(f"tfsim: the capture was taken on ps0 ({capture_record['taken_on']}): copy "
                  f"{capture_record['file']} and {capture_record['record']} from its --out directory"
                  + (f"'s {out.name}" if repetition else "") + f" into {published or out}",
                  file=sys.stderr, flush=True)
        return out
    finally:
        if bar is not None:
            bar.close()
        if task is not None:
            task.stop()
        if tcpdump is not None:
            with contextlib.suppress(Exception):
                tcpdump.stop()
        stop_running_captures()
