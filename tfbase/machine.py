"""A description of this machine, for run records and benchmark results."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine_description() -> dict:
    """CPU model, core count, kernel, host name and Python version."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "kernel": platform.release(), "hostname": platform.node(),
            "python": platform.python_version()}
