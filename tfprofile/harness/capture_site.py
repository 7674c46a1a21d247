"""Where a cluster job's capture is taken (``tfsim collect --role ... --capture --capture-at``).

On a real cluster each task runs on its own host, so the capture site decides which task runs
tcpdump (docs/formats.md §2.7):

- ``chief-worker`` (the default): the chief (worker 0) captures its own traffic with every PS
  into the run directory: the one-worker run that calibration reads;
- ``ps``: PS 0 captures every worker's traffic with it on its own interface, into its own
  ``--out`` directory (``capture.pcap.gz`` and ``capture.json``), and the chief's ``run.json``
  records that the capture is there: the W-worker run that the timeline view reads once the two
  files are copied into the run directory.

:func:`capture_duty` checks the options of one task against this and says what the task does;
:class:`PsCapture` is PS 0's side. This module does not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import shutil
import socket
import time
from pathlib import Path

from tfbase.errors import ClusterError, UsageError
from tfbase.fileio import write_json
from tfprofile.harness.capture import (
    Tcpdump,
    gzip_file,
    host_port_filter,
    interface_towards,
    require_root,
    require_tools,
)
from tfprofile.harness.launcher import INCOMPLETE_SUFFIX, CaptureSite, CollectConfig
from tfprofile.harness.role_options import RoleOptions
from tfprofile.harness.tfconfig import ClusterSpec, TaskId, split_address

PS_CAPTURE_FORMAT = "tfsim.ps-capture/1"
CAPTURE_FILE = "capture.pcap.gz"
CAPTURE_RECORD = "capture.json"
EMPTY_PCAP_BYTES = 24  # a pcap file's global header alone: tcpdump saw nothing


class CaptureDuty(enum.Enum):
    """What one task of a cluster job does about the capture.

    ``NONE``: nothing. ``CAPTURE``: runs tcpdump (the chief at ``chief-worker``, PS 0 at
    ``ps``; in a tf2-pss job worker 0 at ``chief-worker``). ``RECORD``: the chief of a TF1 job
    captured at PS 0: records in ``run.json`` where the capture is and which files to copy into
    the run directory. ``FETCH``: the coordinator of a tf2-pss job: fetches the capture from
    the host that took it into its run directory (:mod:`tfprofile.harness.pss_handoff`).
    """

    NONE = "none"
    CAPTURE = "capture"
    RECORD = "record"
    FETCH = "fetch"


def _is_ps0(role: RoleOptions) -> bool:
    return role.task == TaskId("ps", 0)


def capture_duty(config: CollectConfig, role: RoleOptions) -> CaptureDuty:
    """What this task does about ``config.capture`` at ``config.capture_site``.

    Raises :class:`~tfbase.errors.UsageError` naming the parameter (``capture_site``,
    ``capture`` or ``capture_interface``) when the options do not fit this task.
    """
    label, at_ps = role.task.label, config.capture_site is CaptureSite.PS
    if not config.capture:  # CollectConfig refuses a capture site without a capture
        if role.capture_interface is not None and _is_ps0(role):
            raise UsageError("capture_interface", f"{label} captures only with capture and capture_site ps")
        return CaptureDuty.NONE
    if role.task.is_chief:
        duty = CaptureDuty.RECORD if at_ps else CaptureDuty.CAPTURE
    elif at_ps and _is_ps0(role):
        duty = CaptureDuty.CAPTURE
    elif at_ps:
        raise UsageError("capture_site", f"the capture at the PS runs on ps0 (and the chief records it), "
                                         f"not on {label}")
    else:
        raise UsageError("capture", f"the capture runs on the chief (worker 0), not on {label}"
                                    + (": to capture at PS 0, give capture_site ps here and on the chief"
                                       if _is_ps0(role) else ""))
    if role.capture_interface is not None and duty is CaptureDuty.RECORD:
        raise UsageError("capture_interface", f"with capture_site ps the capture runs on ps0: give its interface "
                                              f"there, not on {label}")
    return duty


def pss_capture_duty(config: CollectConfig, role: RoleOptions) -> CaptureDuty:
    """What this task of a tf2-pss job does about ``config.capture`` at ``config.capture_site``.

    The coordinator is on none of the links the tensors cross: the capture runs on worker 0's
    host (``chief-worker``: its traffic with every PS, the one-worker run calibration reads) or
    on PS 0's (``ps``: every worker's traffic with it), and the coordinator fetches it. Raises
    :class:`~tfbase.errors.UsageError` naming the parameter when the options do not fit this task.
    """
    label, at_ps = role.task.label, config.capture_site is CaptureSite.PS
    capturer = TaskId("ps", 0) if at_ps else TaskId("worker", 0)
    if not config.capture:
        if role.capture_interface is not None:
            raise UsageError("capture_interface", f"{label} captures only with capture")
        return CaptureDuty.NONE
    if role.task.is_coordinator:
        return CaptureDuty.FETCH
    if role.task == capturer:
        return CaptureDuty.CAPTURE
    if at_ps:
        raise UsageError("capture_site", f"the capture at the PS runs on ps0 (and the coordinator fetches it), "
                                         f"not on {label}")
    raise UsageError("capture", f"in a tf2-pss job the capture runs on worker0 (and the coordinator fetches it), "
                                f"not on {label}" + (": to capture at PS 0, give capture_site ps here and on the "
                                                     "coordinator" if _is_ps0(role) else ""))


def ps_hosts(cluster: ClusterSpec) -> dict[str, list[int]]:
    """Each distinct PS host of ``cluster`` (resolved) and the PS tasks on it, in PS order: the
    hosts iperf3 measures the link to."""
    hosts: dict[str, list[int]] = {}
    for p, address in enumerate(cluster.resolved().ps):
        hosts.setdefault(split_address(address)[0], []).append(p)
    return hosts


def chief_capture_pairs(role: RoleOptions) -> list[tuple[str, int]]:
    """The ``(host, port)`` endpoints of worker 0's traffic with every PS, as worker 0 sees it:
    to each PS's port, and from each PS to worker 0's own port."""
    resolved = role.cluster.resolved()
    chief_port = split_address(resolved.worker[0])[1]
    pairs = []
    for address in resolved.ps:
        host, port = split_address(address)
        pairs += [(host, port), (host, chief_port)]
    return pairs


def ps_capture_pairs(role: RoleOptions) -> list[tuple[str, int]]:
    """The ``(host, port)`` endpoints of every worker's traffic with PS 0, as PS 0 sees it.

    Each worker talks to PS 0 over two connections (each side is a gRPC client of the other):
    to PS 0's port, and from PS 0 to the worker's own port.
    """
    resolved = role.cluster.resolved()
    ps_port = split_address(resolved.ps[0])[1]
    pairs = []
    for address in resolved.worker:
        host, port = split_address(address)
        pairs += [(host, ps_port), (host, port)]
    return pairs


def chief_record(role: RoleOptions) -> dict:
    """``run.json``'s ``capture`` on the chief of a job captured at PS 0: where the capture is
    and what to copy into the run directory."""
    ps_ip = split_address(role.cluster.resolved().ps[0])[0]
    return {"host": "ps0", "file": CAPTURE_FILE, "record": CAPTURE_RECORD, "taken_on": ps_ip,
            "copy": f"{CAPTURE_FILE} and {CAPTURE_RECORD} from the --out directory of ps0 ({ps_ip}) "
                    "into this run directory"}


@dataclasses.dataclass
class PsCapture:
    """PS 0's capture of a W-worker job: tcpdump on its interface, written to ``out`` (via
    ``out.incomplete``, renamed when complete) as ``capture.pcap.gz`` and ``capture.json``."""

    out: Path
    partial: Path
    tcpdump: Tcpdump | None
    record: dict

    @classmethod
    def prepare(cls, out: Path, *, overwrite: bool) -> Path:
        """Check ``out`` and the tools before the task starts; return the staging directory."""
        out = Path(out)
        if out.exists() and not overwrite:
            raise UsageError(out, "already exists; choose another --out or pass --force")
        require_tools("tcpdump")
        require_root("collect --capture")
        partial = out.with_name(out.name + INCOMPLETE_SUFFIX)
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        return partial

    @classmethod
    def start(cls, out: Path, partial: Path, role: RoleOptions) -> PsCapture:
        """Start tcpdump on the interface towards worker 0 (or ``role.capture_interface``)."""
        worker0 = split_address(role.cluster.resolved().worker[0])[0]
        interface = role.capture_interface or interface_towards(worker0)
        bpf = host_port_filter(ps_capture_pairs(role))
        tcpdump = Tcpdump.start(partial / "capture.pcap", interface, [], filter_text=bpf)
        return cls(Path(out), partial, tcpdump, {"interface": interface, "filter": bpf})

    def stop(self, role: RoleOptions) -> dict:
        """Stop tcpdump and compress its file; refuse a capture that saw none of the job."""
        counts = self.tcpdump.stop()
        self.tcpdump = None
        (self.partial / "capture.tcpdump.log").unlink(missing_ok=True)
        pcap = self.partial / "capture.pcap"
        if counts.get("captured", 0) == 0 or pcap.stat().st_size <= EMPTY_PCAP_BYTES:
            raise ClusterError(role.task.label, f"the capture on interface {self.record['interface']} saw no "
                                                f"traffic with the workers ({self.record['filter']}): give the "
                                                "interface that carries it (--capture-interface)")
        self.record = {"file": gzip_file(pcap).name, **self.record, **counts}
        return self.record

    def finish(self, role: RoleOptions) -> Path:
        """Write ``capture.json`` and move the directory into place; return it."""
        write_json(self.partial / CAPTURE_RECORD, {
            "format": PS_CAPTURE_FORMAT, "host": "ps0", **self.record,
            "cluster": role.cluster.resolved().as_dict(), "hostname": socket.gethostname(),
            "created_unix_s": round(time.time(), 3)})
        if self.out.exists():
            shutil.rmtree(self.out)
        os.replace(self.partial, self.out)
        return self.out

    def abandon(self) -> None:
        """Stop tcpdump if it still runs; the staging directory stays, as a failed run's does."""
        if self.tcpdump is not None:
            self.tcpdump.stop()
            self.tcpdump = None
