"""Read a run directory written by ``tfsim collect`` (docs/formats.md §2) into a profile.

A run directory holds ``run.json`` (configuration, versions, ``status: complete``),
``variables.json``, ``step_times.csv`` (every step of every worker) and ``trace/``
with one RunMetadata per traced step (``step_NNNNN.pb.gz``). A directory without a
complete ``run.json`` is refused: the run that wrote it did not finish.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tfbase.errors import InputError, RunDirError
from tfbase.fileio import read_input
from tfprofile.build import StepRecords, build_profile
from tfprofile.dag import MAX_BATCH_SIZE, MAX_DURATION_S, MAX_SERVERS, MAX_TENSOR_BYTES, Profile, VariableTable
from tfprofile.runmetadata import graph_nodes, read_run_metadata, step_records

RUN_FORMAT = "tfsim.run/1"
VARIABLES_FORMAT = "tfsim.variables/1"
MAX_RECORD_BYTES = 64 * 2**20  # run.json, variables.json
MAX_TABLE_BYTES = 256 * 2**20  # step_times.csv
MAX_TRACED_STEPS = 10_000
TF2_PSS_API = "tf2-pss"  # run.json's config.api of a TF2 ParameterServerStrategy run (docs/formats.md §2.8)
_TASK_RE = re.compile(r"/job:ps(?:/replica:\d+)?/task:(\d+)")


@dataclasses.dataclass(frozen=True)
class RunDir:
    """A checked run directory: its record, variables, step times and trace files."""

    path: Path
    run: dict
    variables: VariableTable
    trace_files: tuple[Path, ...]
    step_times: tuple[dict, ...]

    @property
    def batch_size(self) -> int:
        return int(self.run["batch_size"])

    def wall_times_s(self, worker: int = 0) -> np.ndarray:
        """Measured wall time of every measured (post-warm-up) step of ``worker``."""
        return np.array([r["wall_s"] for r in self.step_times if r["worker"] == worker and r["measured"]])


def _read_json(path: Path, what: str) -> dict:
    if not path.exists():
        raise RunDirError(path, f"missing: a run directory needs {what}")
    raw = read_input(path, limit=MAX_RECORD_BYTES, error=RunDirError, what="run record")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(path, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise RunDirError(path, "not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise RunDirError(path, "must hold a JSON object")
    return data


def _whole_number(value, path: Path, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RunDirError(path, f"{key} must be a whole number from {low} to {high}, not {value!r:.40}")
    return value


def ps_count(run: dict, path: Path) -> int | None:
    """The parameter servers of a run: its ``cluster``'s PS list, else ``config.ps_tasks`` (None: unknown)."""
    cluster = run.get("cluster")
    if isinstance(cluster, dict) and isinstance(cluster.get("ps"), list) and cluster["ps"]:
        return len(cluster["ps"])
    config = run.get("config")
    if isinstance(config, dict) and config.get("ps_tasks") is not None:
        return _whole_number(config["ps_tasks"], path, "config.ps_tasks", 1, MAX_SERVERS)
    return None


def read_variables(path: str | os.PathLike) -> VariableTable:
    """Read ``variables.json`` (``{"format": "tfsim.variables/1", "variables": [...]}``)."""
    path = Path(path)
    data = _read_json(path, "the variable list")
    if data.get("format") != VARIABLES_FORMAT:
        raise RunDirError(path, f"format is {data.get('format')!r}, expected {VARIABLES_FORMAT!r}")
    try:
        rows = data["variables"]
        if not isinstance(rows, list):
            raise TypeError("variables is not a list")
        names = [str(v["name"]) for v in rows]
        sizes = [int(v["bytes"]) for v in rows]
        servers = [int(m.group(1)) if (m := _TASK_RE.search(str(v.get("device", "")))) else 0 for v in rows]
        trainable = [bool(v["trainable"]) for v in rows]
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise RunDirError(path, f"variable entry lacks a valid field ({exc})") from None
    if any(s < 0 for s in sizes):
        raise RunDirError(path, "a variable has a negative size")
    if any(s > MAX_TENSOR_BYTES for s in sizes):
        raise RunDirError(path, f"a variable is larger than {MAX_TENSOR_BYTES} bytes (1 TiB)")
    if any(m >= MAX_SERVERS for m in servers):
        raise RunDirError(path, f"a variable is on parameter server {max(servers)}: at most {MAX_SERVERS}")
    return VariableTable(np.array(names, dtype=str), np.array(sizes, np.int64), np.array(servers, np.int16),
                         np.array(trainable, bool))


def _read_step_times(path: Path) -> tuple[dict, ...]:
    if not path.exists():
        raise RunDirError(path, "missing: a run directory needs the measured step times")
    raw = read_input(path, limit=MAX_TABLE_BYTES, error=RunDirError, what="step-times table")
    try:
        rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8"), newline="")))
        out = tuple({"worker": int(r["worker"]), "step": int(r["step"]), "measured": r["measured"] == "1",
                     "traced": r["traced"] == "1", "start_unix_s": float(r["start_unix_s"]),
                     "wall_s": float(r["wall_s"])} for r in rows)
    except (UnicodeDecodeError, KeyError, TypeError, ValueError, csv.Error) as exc:
        raise RunDirError(path, f"not a step-times table ({_one_line(exc)})") from None
    for number, row in enumerate(out, start=2):
        if not (row["worker"] >= 0 and row["step"] >= 0):
            raise RunDirError(path, f"line {number}: worker and step must not be negative")
        if not (math.isfinite(row["wall_s"]) and 0 <= row["wall_s"] <= 1e3 * MAX_DURATION_S):
            raise RunDirError(path, f"line {number}: wall_s must be a step time in seconds (finite, not negative), "
                                    f"not {row['wall_s']}")
        if not math.isfinite(row["start_unix_s"]):
            raise RunDirError(path, f"line {number}: start_unix_s must be a finite time, not {row['start_unix_s']}")
    return out


def run_api(run: dict) -> str:
    """How the run's job trained: ``"tf1"`` (the default of older run directories) or ``"tf2-pss"``."""
    config = run.get("config")
    api = config.get("api") if isinstance(config, dict) else None
    return api if api == TF2_PSS_API else "tf1"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def open_run_dir(path: str | os.PathLike) -> RunDir:
    """Check a run directory and read everything in it but the traces."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(path, "is not a directory")
    run = _read_json(path / "run.json", "run.json (was the run completed?)")
    if run.get("format") != RUN_FORMAT:
        raise RunDirError(path / "run.json", f"format is {run.get('format')!r}, expected {RUN_FORMAT!r}")
    if run.get("status") != "complete":
        raise RunDirError(path / "run.json", f"status is {run.get('status')!r}: the run did not complete")
    if "batch_size" not in run:
        raise RunDirError(path / "run.json", "has no batch_size")
    _whole_number(run["batch_size"], path / "run.json", "batch_size", 1, MAX_BATCH_SIZE)
    servers = ps_count(run, path / "run.json")
    variables = read_variables(path / "variables.json")
    if servers is not None and len(variables) and int(variables.server.max()) >= servers:
        raise RunDirError(path / "variables.json", f"a variable is on parameter server {int(variables.server.max())}, "
                                                   f"but the run had {servers} (run.json)")
    if run_api(run) == TF2_PSS_API:
        traces = tuple(sorted((path / "trace").glob("*.xplane.pb*")))
        if not traces:
            raise RunDirError(path / "trace", "holds no profiler trace of a task (<task>.xplane.pb.gz)")
    else:
        traces = tuple(sorted((path / "trace").glob("step_*.pb*")))
    if not traces:
        raise RunDirError(path / "trace", "holds no traced step (step_*.pb or step_*.pb.gz)")
    if len(traces) > MAX_TRACED_STEPS:
        raise RunDirError(path / "trace", f"holds {len(traces):,} traced steps (at most {MAX_TRACED_STEPS:,})")
    return RunDir(path, run, variables, traces, _read_step_times(path / "step_times.csv"))


def traced_steps(run_dir: RunDir) -> dict[str, StepRecords]:
    """Every traced step of a run directory, by label: a TF1 run's trace file names, or a tf2-pss
    run's ``<worker trace>#step_id=<id>`` (its whole steps, :func:`tfprofile.pssrun.read_pss_steps`)."""
    if run_api(run_dir.run) == TF2_PSS_API:
        from tfprofile.pssrun import read_pss_steps

        return {Path(s.source).name: s for s in read_pss_steps(run_dir.path).steps}
    return {path.name: step_records(read_run_metadata(path), path) for path in run_dir.trace_files}


def profile_from_traces(
    trace_files: Sequence[str | os.PathLike],
    *,
    batch_size: int,
    variables: VariableTable | None = None,
    step_wall_s: Sequence[float] = (),
    meta: dict | None = None,
) -> Profile:
    """Build a profile from RunMetadata files of one run (the graph is taken from the first)."""
    if not trace_files:
        raise InputError(None, "no trace files given")
    first = read_run_metadata(trace_files[0])
    nodes = graph_nodes(first, trace_files[0])
    steps = [step_records(first, trace_files[0])]
    for path in trace_files[1:]:
        steps.append(step_records(read_run_metadata(path), path))
    return build_profile(os.fspath(trace_files[0]), nodes, steps, batch_size=batch_size, variables=variables,
                         step_wall_s=step_wall_s, meta=meta)


def profile_from_run_dir(path: str | os.PathLike) -> Profile:
    """Read a complete run directory into a profile of all its traced steps."""
    run_dir = open_run_dir(path)
    config = run_dir.run.get("config") if isinstance(run_dir.run.get("config"), dict) else {}
    meta = {
        "source": str(run_dir.path.name),
        "model": config.get("model_fn") or config.get("model"),
        "image_size": config.get("image_size"),
        "intra_op_threads": config.get("intra_op_threads"),
        "inter_op_threads": config.get("inter_op_threads"),
        # How the job placed its variables over PS tasks: re-partitioning follows it (docs/model.md §2.2).
        "placement": config.get("placement"),
        "cluster": run_dir.run.get("cluster"),
        "versions": run_dir.run.get("versions"),
        "machine": run_dir.run.get("machine"),
        "trace_files": [p.name for p in run_dir.trace_files],
    }
    if run_api(run_dir.run) == TF2_PSS_API:
        from tfprofile.pssrun import profile_from_pss_run

        profile = profile_from_pss_run(run_dir.path, batch_size=run_dir.batch_size, variables=run_dir.variables,
                                       step_wall_s=run_dir.wall_times_s(), meta=meta, step_times=run_dir.step_times)
    else:
        profile = profile_from_traces(run_dir.trace_files, batch_size=run_dir.batch_size,
                                      variables=run_dir.variables, step_wall_s=run_dir.wall_times_s(), meta=meta)
    servers = ps_count(run_dir.run, run_dir.path / "run.json")
    if servers is not None and profile.graph.n_servers > servers:
        raise RunDirError(run_dir.trace_files[0], f"has ops on parameter server {profile.graph.n_servers - 1}, but the "
                                                  f"run had {servers} (run.json)")
    return profile
