"""Read a run directory written by ``tfsim collect`` (docs/formats.md §2) into a profile.

A run directory holds ``run.json`` (configuration, versions, ``status: complete``),
``variables.json``, ``step_times.csv`` (every step of every worker) and ``trace/``
with one RunMetadata per traced step (``step_NNNNN.pb.gz``). A directory without a
complete ``run.json`` is refused: the run that wrote it did not finish.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tfbase.errors import InputError, RunDirError
from tfprofile.build import build_profile
from tfprofile.dag import Profile, VariableTable
from tfprofile.runmetadata import graph_nodes, read_run_metadata, step_records

RUN_FORMAT = "tfsim.run/1"
VARIABLES_FORMAT = "tfsim.variables/1"
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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(path, f"missing: a run directory needs {what}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(path, f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RunDirError(path, "must hold a JSON object")
    return data


def read_variables(path: str | os.PathLike) -> VariableTable:
    """Read ``variables.json`` (``{"format": "tfsim.variables/1", "variables": [...]}``)."""
    path = Path(path)
    data = _read_json(path, "the variable list")
    if data.get("format") != VARIABLES_FORMAT:
        raise RunDirError(path, f"format is {data.get('format')!r}, expected {VARIABLES_FORMAT!r}")
    try:
        rows = data["variables"]
        names = [str(v["name"]) for v in rows]
        sizes = [int(v["bytes"]) for v in rows]
        servers = [int(m.group(1)) if (m := _TASK_RE.search(str(v.get("device", "")))) else 0 for v in rows]
        trainable = [bool(v["trainable"]) for v in rows]
    except (KeyError, TypeError, ValueError) as exc:
        raise RunDirError(path, f"variable entry lacks a valid field ({exc})") from None
    if any(s < 0 for s in sizes):
        raise RunDirError(path, "a variable has a negative size")
    return VariableTable(np.array(names, dtype=str), np.array(sizes, np.int64), np.array(servers, np.int16),
                         np.array(trainable, bool))


def _read_step_times(path: Path) -> tuple[dict, ...]:
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        return tuple({"worker": int(r["worker"]), "step": int(r["step"]), "measured": r["measured"] == "1",
                      "traced": r["traced"] == "1", "start_unix_s": float(r["start_unix_s"]),
                      "wall_s": float(r["wall_s"])} for r in rows)
    except FileNotFoundError:
        raise RunDirError(path, "missing: a run directory needs the measured step times") from None
    except (OSError, KeyError, TypeError, ValueError, csv.Error) as exc:
        raise RunDirError(path, f"not a step-times table ({exc})") from None


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
    variables = read_variables(path / "variables.json")
    traces = tuple(sorted((path / "trace").glob("step_*.pb*")))
    if not traces:
        raise RunDirError(path / "trace", "holds no traced step (step_*.pb or step_*.pb.gz)")
    return RunDir(path, run, variables, traces, _read_step_times(path / "step_times.csv"))


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
    config = run_dir.run.get("config", {})
    meta = {
        "source": str(run_dir.path.name),
        "model": config.get("model_fn") or config.get("model"),
        "image_size": config.get("image_size"),
        "intra_op_threads": config.get("intra_op_threads"),
        "inter_op_threads": config.get("inter_op_threads"),
        "cluster": run_dir.run.get("cluster"),
        "versions": run_dir.run.get("versions"),
        "machine": run_dir.run.get("machine"),
        "trace_files": [p.name for p in run_dir.trace_files],
    }
    return profile_from_traces(run_dir.trace_files, batch_size=run_dir.batch_size, variables=run_dir.variables,
                               step_wall_s=run_dir.wall_times_s(), meta=meta)
