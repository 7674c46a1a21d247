"""What the servers' hosts of a tf2-pss job with one task per host hand to its coordinator
beside training: a capture and iperf3's link measurements (``tfsim collect --api tf2-pss
--role ... --capture / --iperf``; docs/formats.md §2.8).

The coordinator alone writes the run directory, but it is on none of the links the tensors
cross. The capture is taken on worker 0's host (capture site ``chief-worker``: its traffic
with every PS, the one-worker run ``tfsim calibrate`` reads) or on PS 0's (``ps``: every
worker's traffic with it), and iperf3 runs from worker 0's host to every PS host, whose
``iperf_server`` serves it. Every PS's and worker's ``tfsim collect`` keeps a handoff
directory on its host (:func:`handoff_dir`), and the coordinator talks to it through files
that TensorFlow ops placed on that task read and write, as it reads worker 0's partition
graphs:

1. before its server starts, the host writes ``manifest.json``: the capture site it captures
   at (tcpdump runs from then on, so that it sees every connection of the job), whether
   iperf3 is at hand, whether it serves iperf3 and how many times it runs the job
   (``repeat``); the coordinator checks every manifest against its own options before the
   model is built (:func:`check_manifests`);
2. with ``iperf``, the coordinator then writes ``iperf.request`` on worker 0's host, which runs
   iperf3 to every PS host into ``iperf3/`` and answers ``iperf.json``; the coordinator copies
   the results into its run directory (:func:`fetch_iperf`), before the first step;
3. with ``capture``, after the last step the coordinator writes ``capture.request`` on the
   capturing host, which stops tcpdump, compresses the capture, cuts it into parts of at most
   :data:`PART_BYTES` and answers ``capture.json``; the coordinator joins the parts into its
   run directory's ``capture.pcap.gz`` (:func:`fetch_capture`).

In a repeated job (``repeat`` N > 1) each repetition has its own handoff directory, manifest,
capture and iperf3 runs, fetched into that repetition's run directory.

An answer with an ``error`` stops the coordinator with that message (exit status 2 where the
input is wrong, such as an interface that saw no traffic). The coordinator then releases every
server as failed, and the host that answered the error ends with it. The host's side
(:class:`HandoffHost`) imports no TensorFlow; the coordinator's side takes the ``tf`` module.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import time
from pathlib import Path

from tfbase.errors import ClusterError, CollectError, UsageError
from tfprofile.harness.capture import (
    Tcpdump,
    gzip_file,
    host_port_filter,
    interface_towards,
    measure_bandwidth_to,
    require_root,
    require_tools,
)
from tfprofile.harness.capture_site import (
    CAPTURE_FILE,
    EMPTY_PCAP_BYTES,
    CaptureDuty,
    chief_capture_pairs,
    ps_capture_pairs,
    ps_hosts,
)
from tfprofile.harness.launcher import CaptureSite, CollectConfig
from tfprofile.harness.role_options import RoleOptions
from tfprofile.harness.tfconfig import ClusterSpec, TaskId, agreement_difference, split_address

HANDOFF_FORMAT = "tfsim.pss-handoff/1"
MANIFEST = "manifest.json"
IPERF_REQUEST = "iperf.request"
IPERF_ANSWER = "iperf.json"
CAPTURE_REQUEST = "capture.request"
CAPTURE_ANSWER = "capture.json"
RECORD_FILE = "handoff.json"  # in the coordinator's unfinished run directory: what run.json records
PART_BYTES = 64 << 20  # one read of a capture part: far below what one tensor (2 GiB) can hold
POLL_S = 0.25
SERVERS_DONE = "done"  # what the coordinator writes into each server's done file: the job is over
SERVERS_FAILED = "failed"  # or: the coordinator stopped before the job was done
USAGE_STATUS = 2  # an answer's error that is the input's fault: exit status 2, as for a bad option
FAILED_STATUS = 1


def safe_name(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9.-]`` replaced: a path component."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", text)


def task_device(task: TaskId) -> str:
    """The CPU device of ``task``, where an op placed on that task runs."""
    return f"/job:{task.role}/replica:0/task:{task.index}/device:CPU:0"


def handoff_dir(cluster: ClusterSpec, task: TaskId) -> str:
    """The handoff directory of ``task`` on its host: a path the task and the coordinator both
    compute from the cluster spec."""
    return f"/tmp/tfsim-pss-handoff-{task.label}-{safe_name(cluster.address(task.role, task.index))}"


def handoff_tasks(cluster: ClusterSpec) -> list[TaskId]:
    """Every server task: each says in its manifest how many times it runs the job; worker 0
    may take the capture (at ``chief-worker``) and runs iperf3's client, every PS may take the
    capture (PS 0 at ``ps``) and serve iperf3."""
    return [*(TaskId("worker", w) for w in range(len(cluster.worker))),
            *(TaskId("ps", p) for p in range(len(cluster.ps)))]


def capture_task(config: CollectConfig) -> TaskId | None:
    """The task whose host takes the capture, or ``None`` without one."""
    if not config.capture:
        return None
    return TaskId("ps", 0) if config.capture_site is CaptureSite.PS else TaskId("worker", 0)


def coordinator_spec(config: CollectConfig, role: RoleOptions) -> dict:
    """The coordinator's ``handoff`` spec: where each server task's directory is, what to
    fetch, and how many times the job runs (``repeat``, which every manifest must say too)."""
    taker = capture_task(config)
    return {
        "tasks": {t.label: {"device": task_device(t), "dir": handoff_dir(role.cluster, t)}
                  for t in handoff_tasks(role.cluster)},
        "capture_site": config.capture_site.value if taker else None,
        "capture_task": taker.label if taker else None,
        "iperf": {"repeats": config.iperf_repeats, "seconds": config.iperf_seconds, "port": role.iperf_port,
                  "connect_timeout_s": role.connect_timeout_s} if role.iperf else None,
        "ps_hosts": ps_hosts(role.cluster),
        "timeout_s": config.timeout_s,
        "repeat": role.repeat,
    }


def _write_atomically(path: Path, document: dict) -> None:
    """Write ``document`` as JSON to ``path`` so that a reader never sees it half written."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(document, indent=1), encoding="utf-8")
    os.replace(partial, path)


# ---------------------------------------------------------------------------- a server's host


@dataclasses.dataclass
class HandoffHost:
    """A server task's side of the handoff, on its own host: its directory, its capture,
    and the answers to the coordinator's requests. :meth:`open` it before the task starts,
    :meth:`serve` it while the task runs, :meth:`close` it when the task has ended."""

    directory: Path
    role: RoleOptions
    tcpdump: Tcpdump | None = None
    capture_record: dict = dataclasses.field(default_factory=dict)
    answered: set = dataclasses.field(default_factory=set)
    error: ClusterError | CollectError | None = None

    @classmethod
    def open(cls, config: CollectConfig, role: RoleOptions, duty: CaptureDuty) -> HandoffHost:
        """Check the tools, start tcpdump (with ``duty`` ``CAPTURE``) and write the manifest."""
        if duty is CaptureDuty.CAPTURE:
            require_tools("tcpdump")
            require_root("collect --capture")
        directory = fresh_private_dir(Path(handoff_dir(role.cluster, role.task)), role.task.label)
        host = cls(directory, role)
        try:
            if duty is CaptureDuty.CAPTURE:
                host._start_capture(config.capture_site)
            _write_atomically(directory / MANIFEST, {
                "format": HANDOFF_FORMAT, "task": role.task.label,
                "capture_site": config.capture_site.value if duty is CaptureDuty.CAPTURE else None,
                "iperf3": shutil.which("iperf3") is not None, "iperf_server": role.iperf_server,
                "hostname": socket.gethostname(), "repeat": role.repeat})
        except BaseException:
            host.close()
            raise
        return host

    def _start_capture(self, site: CaptureSite) -> None:
        resolved = self.role.cluster.resolved()
        if site is CaptureSite.PS:  # every worker's traffic with PS 0, on the interface towards worker 0
            peer, pairs = split_address(resolved.worker[0])[0], ps_capture_pairs(self.role)
        else:  # worker 0's traffic with every PS, on the interface towards PS 0
            peer, pairs = split_address(resolved.ps[0])[0], chief_capture_pairs(self.role)
        interface = self.role.capture_interface or interface_towards(peer)
        bpf = host_port_filter(pairs)
        self.tcpdump = Tcpdump.start(self.directory / "capture.pcap", interface, [], filter_text=bpf)
        self.capture_record = {"interface": interface, "filter": bpf}

    def serve(self) -> None:
        """Answer the coordinator's requests that have come (each once)."""
        for request, answer, handler in ((IPERF_REQUEST, IPERF_ANSWER, self._measure),
                                         (CAPTURE_REQUEST, CAPTURE_ANSWER, self._finish_capture)):
            if answer in self.answered:
                continue
            document = _read_request(self.directory / request)
            if document is not None:
                _write_atomically(self.directory / answer, handler(document))
                self.answered.add(answer)

    def _measure(self, request: dict) -> dict:
        links = []
        try:
            require_tools("iperf3")
            for host, tasks in ps_hosts(self.role.cluster).items():
                name = "" if tasks[0] == 0 else f"ps{tasks[0]}_"
                paths = measure_bandwidth_to(self.directory, host, name=name, repeats=int(request["repeats"]),
                                             seconds=float(request["seconds"]), port=int(request["port"]),
                                             connect_timeout_s=float(request["connect_timeout_s"]))
                links.append({"host": host, "ps_tasks": tasks, "files": [p.name for p in paths]})
        except (CollectError, UsageError) as exc:
            self.error = CollectError(f"{self.role.task.label}: {exc}")
            return {"error": str(self.error), "status": FAILED_STATUS}
        return {"links": links}

    def _finish_capture(self, _request: dict) -> dict:
        label = self.role.task.label
        if self.tcpdump is None:
            self.error = ClusterError(label, "takes no capture (capture)")
            return {"error": str(self.error), "status": USAGE_STATUS}
        counts = self.tcpdump.stop()
        self.tcpdump = None
        (self.directory / "capture.tcpdump.log").unlink(missing_ok=True)
        pcap = self.directory / "capture.pcap"
        if counts.get("captured", 0) == 0 or pcap.stat().st_size <= EMPTY_PCAP_BYTES:
            peers = "the workers" if self.role.task.role == "ps" else "the PS tasks"
            self.error = ClusterError(label, f"the capture on interface {self.capture_record['interface']} saw no "
                                             f"traffic with {peers} ({self.capture_record['filter']}): give the "
                                             "interface that carries it (--capture-interface)")
            return {"error": str(self.error), "status": USAGE_STATUS}
        packed = gzip_file(pcap)
        parts = []
        with open(packed, "rb") as source:
            while chunk := source.read(PART_BYTES):
                part = self.directory / f"{CAPTURE_FILE}.part{len(parts):04d}"
                part.write_bytes(chunk)
                parts.append(part.name)
        size = packed.stat().st_size
        packed.unlink()
        own = self.role.cluster.resolved().address(self.role.task.role, self.role.task.index)
        return {"file": CAPTURE_FILE, **self.capture_record, **counts, "host": label,
                "taken_on": split_address(own)[0], "hostname": socket.gethostname(), "parts": parts,
                "size_bytes": size}

    def finish(self, released: str) -> None:
        """Raise what went wrong here once the coordinator has released this task
        (``released``: what it wrote); a capture it never asked for is dropped."""
        if self.error is not None:
            raise self.error
        if released == SERVERS_DONE and self.tcpdump is not None:
            raise ClusterError(self.role.task.label, "the coordinator did not fetch this host's capture: give it "
                                                     "capture with the same capture_site too")

    def close(self) -> None:
        """Stop tcpdump if it still runs and remove the handoff directory."""
        if self.tcpdump is not None:
            self.tcpdump.stop()
            self.tcpdump = None
        shutil.rmtree(self.directory, ignore_errors=True)


def fresh_private_dir(directory: Path, label: str) -> Path:
    """Create ``directory`` anew, readable by this user only.

    Its name is known in advance (the coordinator finds it by name), so in a shared /tmp
    someone else may have made it first: a symlink, or a directory that is not ours, is refused
    (:class:`~tfbase.errors.ClusterError` naming ``label``), never followed or removed. Our
    own left from an earlier run is replaced."""
    try:
        info = directory.lstat()
    except FileNotFoundError:
        pass
    else:
        if directory.is_symlink() or not directory.is_dir() or info.st_uid != os.geteuid():
            raise ClusterError(label, f"{directory} exists and is not a directory of this user's: remove it")
        shutil.rmtree(directory)
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:  # made by someone else between the check and here
        raise ClusterError(label, f"{directory} appeared while it was being made: remove it") from None
    return directory


def _read_request(path: Path) -> dict | None:
    """The request at ``path`` once it is there and whole (an op writes it: it may be seen
    half written), else ``None``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


# ---------------------------------------------------------------------------- the coordinator's side


class HandoffError(Exception):
    """A server's host cannot give the coordinator what it asked for; ``status`` is the exit
    status (2: the options are wrong)."""

    def __init__(self, message: str, status: int = USAGE_STATUS) -> None:
        super().__init__(message)
        self.status = status


def _read_remote(tf, device: str, path: str) -> bytes | None:
    """The file at ``path`` on ``device``'s host, read by ops placed there, or ``None``."""
    with tf.device(device):
        try:
            if not tf.io.matching_files(path).numpy().size:
                return None
        except tf.errors.NotFoundError:  # its directory is not there either
            return None
        return tf.io.read_file(path).numpy()


def _await_answer(tf, spec: dict, label: str, name: str) -> dict:
    task = spec["handoff"]["tasks"][label]
    deadline = time.monotonic() + float(spec["handoff"]["timeout_s"])
    while True:
        data = _read_remote(tf, task["device"], f"{task['dir']}/{name}")
        if data is not None:
            answer = json.loads(data)
            if "error" in answer:
                raise HandoffError(answer["error"], int(answer.get("status", FAILED_STATUS)))
            return answer
        if time.monotonic() > deadline:
            raise HandoffError(f"chief0: {label} did not answer {name} within {spec['handoff']['timeout_s']:.0f} s "
                               "(--timeout)", FAILED_STATUS)
        time.sleep(POLL_S)


def _request(tf, spec: dict, label: str, name: str, document: dict) -> None:
    task = spec["handoff"]["tasks"][label]
    with tf.device(task["device"]):
        tf.io.write_file(f"{task['dir']}/{name}", json.dumps(document))


def check_manifests(tf, spec: dict) -> None:
    """Check that every server task does what the coordinator's options say: the same
    ``repeat``, the capture on the right host and only there, iperf3 at hand on worker 0's and
    served on every PS host."""
    handoff = spec["handoff"]
    manifests = {}
    for label, task in handoff["tasks"].items():
        path = f"{task['dir']}/{MANIFEST}"
        data = _read_remote(tf, task["device"], path)
        if data is None:
            raise HandoffError(f"chief0: {label} has no {path} on its host: start it with this version of tfsim "
                               "collect")
        manifests[label] = json.loads(data)
    own = {"options": {"repeat": handoff.get("repeat", 1)}}
    for label, manifest in manifests.items():
        difference = agreement_difference(own, {"options": {"repeat": manifest.get("repeat", 1)}}, label)
        if difference is not None:
            raise HandoffError(f"chief0: the run options differ from {label}'s: {difference}")
    site, taker = handoff["capture_site"], handoff["capture_task"]
    at_ps = " and capture_site ps" if site == "ps" else ""
    if taker is not None and manifests[taker].get("capture_site") != site:
        raise HandoffError(f"chief0: {taker} takes no capture: give it capture{at_ps} too, as the coordinator")
    for label, manifest in manifests.items():
        taken = manifest.get("capture_site")
        if label != taker and taken is not None:
            raise HandoffError(f"chief0: {label} captures (capture_site {taken}) but the coordinator does not fetch "
                               f"it: give the coordinator capture{' and capture_site ps' if taken == 'ps' else ''} "
                               "too")
    if handoff["iperf"] is None:
        return
    if not manifests["worker0"].get("iperf3"):
        raise HandoffError("chief0: worker0's host has no iperf3 on PATH, which iperf runs there")
    for host, tasks in handoff["ps_hosts"].items():
        if not any(manifests[f"ps{p}"].get("iperf_server") for p in tasks):
            raise HandoffError(f"chief0: no PS task on {host} serves iperf3: give ps{tasks[0]} iperf_server")


def fetch_iperf(tf, spec: dict, out: Path) -> list[dict]:
    """Have worker 0's host run iperf3 to every PS host; copy the results into ``out/iperf3``
    and return the links (host, PS tasks, files)."""
    _request(tf, spec, "worker0", IPERF_REQUEST, spec["handoff"]["iperf"])
    answer = _await_answer(tf, spec, "worker0", IPERF_ANSWER)
    task = spec["handoff"]["tasks"]["worker0"]
    target = out / "iperf3"
    target.mkdir(exist_ok=True)
    for link in answer["links"]:
        for name in link["files"]:
            data = _read_remote(tf, task["device"], f"{task['dir']}/iperf3/{name}")
            if data is None:
                raise HandoffError(f"chief0: worker0's iperf3 result {name} is gone from its host", FAILED_STATUS)
            (target / name).write_bytes(data)
    return answer["links"]


def fetch_capture(tf, spec: dict, out: Path) -> dict:
    """Have the capturing host stop tcpdump; join its capture's parts into ``out/capture.pcap.gz``
    and return run.json's ``capture``."""
    label = spec["handoff"]["capture_task"]
    _request(tf, spec, label, CAPTURE_REQUEST, {"stop": True})
    answer = _await_answer(tf, spec, label, CAPTURE_ANSWER)
    task = spec["handoff"]["tasks"][label]
    with open(out / CAPTURE_FILE, "wb") as target:
        for name in answer["parts"]:
            data = _read_remote(tf, task["device"], f"{task['dir']}/{name}")
            if data is None:
                raise HandoffError(f"chief0: the capture's part {name} is gone from {label}'s host", FAILED_STATUS)
            target.write(data)
    size = (out / CAPTURE_FILE).stat().st_size
    if size != answer["size_bytes"]:
        raise HandoffError(f"chief0: the capture fetched from {label} has {size} bytes, not {answer['size_bytes']}",
                           FAILED_STATUS)
    return {k: v for k, v in answer.items() if k not in ("parts", "size_bytes")}


def write_record(out: Path, capture: dict | None, links: list[dict]) -> None:
    """What the coordinator fetched, for its host's ``run.json``."""
    (out / RECORD_FILE).write_text(json.dumps({"capture": capture, "iperf3_links": links}), encoding="utf-8")


def read_record(run_dir: Path) -> tuple[dict | None, list[dict]]:
    """:func:`write_record`'s capture record and iperf3 links (none without a handoff); the
    file is removed: it is no part of the run directory."""
    path = run_dir / RECORD_FILE
    if not path.exists():
        return None, []
    document = json.loads(path.read_text(encoding="utf-8"))
    path.unlink()
    return document["capture"], document["iperf3_links"]
