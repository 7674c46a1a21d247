"""What the two kinds of task process share (a TF1 task, :mod:`tfprofile.harness.task`; a TF2
ParameterServerStrategy task, :mod:`tfprofile.harness.pss_task`): the model function, the
progress lines the launcher reads, and the step-times CSV."""

from __future__ import annotations

import csv
import importlib
import io
import json

PROGRESS_PREFIX = "TFSIM-PROGRESS "  # a line on a task's stdout that the launcher's progress bar reads


def load_model_fn(spec: dict):
    """Return a callable ``options -> (loss, batch_size)`` for the zoo model or the user's function."""
    from tfprofile.harness import zoo

    if spec.get("model_fn"):
        module_name, _, func_name = spec["model_fn"].partition(":")
        module = importlib.import_module(module_name)
        return getattr(module, func_name)
    return lambda options: zoo.build_model(spec["model"], options)


def emit_progress(kind: str, **fields) -> None:
    """One ``TFSIM-PROGRESS {json}`` line on stdout."""
    print(PROGRESS_PREFIX + json.dumps({"kind": kind, **fields}), flush=True)


def step_times_csv(rows: list[tuple]) -> str:
    """A worker's step times as CSV text with its header."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["worker", "step", "measured", "traced", "start_unix_s", "wall_s"])
    writer.writerows(rows)
    return buffer.getvalue()
