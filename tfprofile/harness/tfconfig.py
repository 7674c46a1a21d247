"""The cluster of a multi-host job, in TensorFlow's own conventions (``TF_CONFIG``).

``TF_CONFIG`` holds ``{"cluster": {"ps": ["host:port", ...], "worker": [...]},
"task": {"type": "worker", "index": 0}}``; ``--cluster-spec FILE`` holds the same JSON, or
just the cluster object. ``--role``/``--task-index`` override the ``task`` part. Worker 0
is the chief. Every problem raises :class:`~tfbase.errors.ClusterError` with a one-line
message that names the task (or ``TF_CONFIG``/the file when the task is not known yet).

The agreement check between tasks (:func:`agreement_difference`) lives here too: it
compares two tasks' records of the model and run options and says what differs first.

This module imports neither TensorFlow nor anything heavy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from tfbase.errors import ClusterError

ROLES = ("ps", "worker")
COORDINATOR_ROLE = "chief"  # a tf2-pss job's coordinator: TF_CONFIG's "chief" job, one task


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """The job's task addresses (``host:port``), PS tasks and workers, in index order."""

    ps: tuple[str, ...]
    worker: tuple[str, ...]
    chief: tuple[str, ...] = ()  # a tf2-pss job's coordinator; empty for a TF1 job

    def as_dict(self) -> dict:
        jobs = {"ps": list(self.ps), "worker": list(self.worker)}
        return {**jobs, COORDINATOR_ROLE: list(self.chief)} if self.chief else jobs

    def address(self, role: str, index: int) -> str:
        return {"ps": self.ps, "worker": self.worker, COORDINATOR_ROLE: self.chief}[role][index]

    def resolved(self) -> ClusterSpec:
        """The same cluster with every host name replaced by its IPv4 address (unchanged if
        it does not resolve): captures see addresses, not names."""
        return ClusterSpec(tuple(_resolve(a) for a in self.ps), tuple(_resolve(a) for a in self.worker),
                           tuple(_resolve(a) for a in self.chief))


@dataclasses.dataclass(frozen=True)
class TaskId:
    """One task of the job: ``role`` (``ps`` or ``worker``) and its index."""

    role: str
    index: int

    @property
    def label(self) -> str:
        return f"{self.role}{self.index}"

    @property
    def is_chief(self) -> bool:
        return self.role == "worker" and self.index == 0

    @property
    def is_coordinator(self) -> bool:
        """A tf2-pss job's coordinator (TF_CONFIG's ``chief``), which writes its run directory."""
        return self.role == COORDINATOR_ROLE


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) -> ``(host, port)``."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _resolve(address: str) -> str:
    host, port = split_address(address)
    try:
        ip = socket.gethostbyname(host)
    except (OSError, UnicodeError):
        return address
    return f"{ip}:{port}"


def _check_address(where: str, role: str, index: int, address: object) -> str:
    if not isinstance(address, str) or ":" not in address:
        raise ClusterError(where, f"{role}{index}'s address {address!r} is not of the form host:port")
    host, _, port = address.rpartition(":")
    if not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterError(where, f"{role}{index}'s address {address!r} is not of the form host:port")
    return address


def parse_cluster(data: object, where: str, *, coordinator: bool = False) -> ClusterSpec:
    """Check a cluster object (``{"ps": [...], "worker": [...]}``) read from ``where``; with
    ``coordinator`` (a tf2-pss job) it also needs ``"chief": ["host:port"]``, the coordinator."""
    if not isinstance(data, dict):
        raise ClusterError(where, "the cluster must be a JSON object with lists 'ps' and 'worker'")
    extra = sorted(set(data) - set(ROLES) - ({COORDINATOR_ROLE} if coordinator else set()))
    if extra:
        raise ClusterError(where, f"job {extra[0]!r} is not supported: a tfsim job has only 'ps' and 'worker' "
                                  "(worker 0 is the chief)" + (" or, with --api tf2-pss, a 'chief' that "
                                                               "coordinates" if extra[0] == COORDINATOR_ROLE else ""))
    jobs = {}
    for role in ROLES + ((COORDINATOR_ROLE,) if coordinator else ()):
        addresses = data.get(role)
        if not isinstance(addresses, list) or not addresses:
            raise ClusterError(where, f"the cluster needs a non-empty list of {role!r} addresses (host:port)"
                                      + (": a tf2-pss job's coordinator" if role == COORDINATOR_ROLE else ""))
        jobs[role] = tuple(_check_address(where, role, i, a) for i, a in enumerate(addresses))
    if len(jobs.get(COORDINATOR_ROLE, ())) > 1:
        raise ClusterError(where, f"a tf2-pss job has one coordinator: 'chief' lists {len(jobs[COORDINATOR_ROLE])}")
    every = jobs["ps"] + jobs["worker"] + jobs.get(COORDINATOR_ROLE, ())
    duplicates = sorted({a for a in every if every.count(a) > 1})
    if duplicates:
        raise ClusterError(where, f"address {duplicates[0]} is given to two tasks")
    return ClusterSpec(jobs["ps"], jobs["worker"], jobs.get(COORDINATOR_ROLE, ()))


def _read_json(text: str, where: str, label: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterError(label, f"{where} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ClusterError(label, f"{where} is not a cluster spec (JSON nested too deeply)") from None


def _task_from(data: dict, where: str, label: str) -> tuple[str | None, int | None]:
    task = data.get("task")
    if task is None:
        return None, None
    if not isinstance(task, dict):
        raise ClusterError(label, f"{where}'s 'task' must be an object like {{\"type\": \"worker\", \"index\": 0}}")
    role, index = task.get("type"), task.get("index", 0)
    if not isinstance(index, int) or isinstance(index, bool):
        raise ClusterError(label, f"{where}'s task index {index!r} is not an integer")
    return role, index


def load_task(env: Mapping[str, str], cluster_spec: str | os.PathLike | None = None,
              role: str | None = None, index: int | None = None, *,
              coordinator: bool = False) -> tuple[ClusterSpec, TaskId, str]:
    """The cluster and this task, from ``--cluster-spec FILE`` if given, else ``TF_CONFIG``.

    ``role``/``index`` (``--role``/``--task-index``) override the file's or TF_CONFIG's
    ``task``. ``coordinator``: a tf2-pss job, whose cluster has a ``chief`` (the coordinator)
    and whose tasks may be it. Returns ``(cluster, task, source)`` with ``source`` the file
    or ``"TF_CONFIG"``.
    """
    label = f"{role}{index if index is not None else ''}" if role else "TF_CONFIG"
    if cluster_spec is not None:
        where = str(cluster_spec)
        try:
            if Path(cluster_spec).stat().st_size > 1 << 20:
                raise ClusterError(label, f"the cluster spec {where} is larger than a cluster spec can be (1 MiB)")
            text = Path(cluster_spec).read_text(encoding="utf-8")
        except OSError as exc:
            raise ClusterError(label, f"cannot read --cluster-spec {where}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ClusterError(label, f"the cluster spec {where} is not UTF-8 text (JSON)") from None
    else:
        where = "TF_CONFIG"
        text = env.get("TF_CONFIG", "")
        if not text.strip():
            raise ClusterError(label, "TF_CONFIG is not set and no --cluster-spec FILE was given: the task needs "
                                      "the cluster's addresses, e.g. TF_CONFIG='{\"cluster\": {\"ps\": "
                                      "[\"h1:2222\"], \"worker\": [\"h2:2222\"]}, \"task\": {\"type\": \"worker\", "
                                      "\"index\": 0}}'")
    data = _read_json(text, where, label)
    if not isinstance(data, dict):
        raise ClusterError(label, f"{where} must hold a JSON object")
    given_role, given_index = _task_from(data, where, label) if "cluster" in data else (None, None)
    cluster = parse_cluster(data["cluster"] if "cluster" in data else data, f"{label}: {where}",
                            coordinator=coordinator)
    role = role or given_role
    index = index if index is not None else given_index
    roles = ROLES + ((COORDINATOR_ROLE,) if coordinator else ())
    if role is None:
        raise ClusterError(label, f"{where} names no task: give --role {'|'.join(roles)} and --task-index I")
    if role not in roles:
        raise ClusterError(label, f"task type {role!r} is not supported: use 'ps' or 'worker' (worker 0 is the chief)"
                                  + (" or 'chief' (the coordinator)" if coordinator else
                                     "; 'chief' is a tf2-pss job's coordinator (--api tf2-pss)"
                                     if role == COORDINATOR_ROLE else ""))
    index = 0 if index is None else index
    count = len(cluster.as_dict()[role])
    if not 0 <= index < count:
        raise ClusterError(f"{role}{index}", f"task index {index} is outside the cluster: {where} lists {count} "
                                             f"{role} task(s), {role}0 to {role}{count - 1}")
    return cluster, TaskId(role, index), where


# Options a task records only when they are not their default (a job run once records what it always did).
OPTION_DEFAULTS = {"repeat": 1}


def agreement_difference(own: dict, theirs: dict, other: str) -> str | None:
    """What first differs between this task's agreement record and task ``other``'s, as
    ``"batch_size is 8 here, 16 on ps0"``; ``None`` when they agree.

    A record is ``{"options": {...}, "cluster": {...}, "variables": [[name, shape, dtype,
    device], ...]}``: the run options, the cluster spec and the variables the model puts
    on the parameter servers.
    """
    for key in sorted(set(own.get("options", {})) | set(theirs.get("options", {}))):
        default = OPTION_DEFAULTS.get(key)
        mine, yours = own.get("options", {}).get(key, default), theirs.get("options", {}).get(key, default)
        if mine != yours:
            return f"{key} is {mine!r} here, {yours!r} on {other}"
    if own.get("cluster") != theirs.get("cluster"):
        mine, others = json.dumps(own.get("cluster")), json.dumps(theirs.get("cluster"))
        return f"the cluster spec is {mine} here, {others} on {other}"
    mine = {v[0]: v[1:] for v in own.get("variables", [])}
    yours = {v[0]: v[1:] for v in theirs.get("variables", [])}
    for name in sorted(set(mine) | set(yours)):
        if name not in yours:
            return f"variable {name} exists here, not on {other}: the models differ"
        if name not in mine:
            return f"variable {name} exists on {other}, not here: the models differ"
        if mine[name] != yours[name]:
            return f"variable {name} is {_describe(mine[name])} here, {_describe(yours[name])} on {other}"
    return None


def _describe(entry: list) -> str:
    shape, dtype, device = entry
    return f"{dtype}{list(shape)} on {device}"
