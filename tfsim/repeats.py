"""The summary of a repeated cluster job (``tfsim collect --role ... --repeat N``): the chief's
(a tf2-pss job's coordinator's) ``OUT/repeats.json`` over its run directories ``OUT/r1`` ...
``OUT/rN`` (docs/formats.md §2.9).

Each repetition's throughput is the lab's measurement of a run directory
(:func:`tfsim.lab.measure.measured_throughput`: examples/s over the last half of the window
in which every worker runs its measured steps); each host's outside load is what its
``collect`` measured while its task ran (run.json's ``host_loads``); the repetitions are
summarised as the lab summarises a point (:func:`simulate.results.measurement_stats`). A
repetition during which a host carried more than
:data:`~tfbase.load.OUTSIDE_LOAD_LIMIT_CORES` of outside load is flagged, not run again.
"""

from __future__ import annotations

import json
from pathlib import Path

from simulate.results import measurement_stats
from tfbase.errors import InputError
from tfbase.fileio import json_ready, write_json
from tfbase.load import OUTSIDE_LOAD_LIMIT_CORES
from tfprofile.harness.role_watch import repetition_name
from tfsim.lab.measure import measured_throughput

REPEATS_FORMAT = "tfsim.repeats/1"
REPEATS_FILE = "repeats.json"


def repetition_record(run_dir: Path, index: int) -> dict:
    """One repetition: its throughput by the lab's rule and each host's outside load.

    Raises :class:`~tfbase.errors.InputError` naming ``run.json`` when it does not record a
    repetition of a repeated job.
    """
    record = json.loads((run_dir / "run.json").read_text())
    loads = record.get("host_loads")
    if not isinstance(loads, dict) or record.get("repetition", {}).get("index") != index:
        raise InputError(run_dir / "run.json", f"is not repetition {index} of a repeated job (no host_loads)")
    measured = measured_throughput(run_dir)
    outside = {label: (load or {}).get("outside_cores") for label, load in sorted(loads.items())}
    loaded = [label for label, cores in outside.items() if cores is not None and cores > OUTSIDE_LOAD_LIMIT_CORES]
    return {"repetition": index, "run_dir": run_dir.name, "throughput_eps": measured["throughput_eps"],
            "rule": measured["rule"], "window_s": measured["window_s"], "per_worker_eps": measured["per_worker_eps"],
            "step_time_median_s": measured["step_time_median_s"], "outside_cores": outside,
            "host_loads": {label: loads[label] for label in sorted(loads)}, "loaded_hosts": loaded,
            "flagged": bool(loaded)}


def summarise_repeats(out: Path, repeat: int) -> dict:
    """``repeats.json``'s content for the ``repeat`` run directories in ``out``."""
    runs = [repetition_record(out / repetition_name(k), k) for k in range(1, repeat + 1)]
    first = json.loads((out / repetition_name(1) / "run.json").read_text())
    return {"format": REPEATS_FORMAT, "repeat": repeat, "model": first["config"]["model"],
            "workers": first["config"]["workers"], "batch_size": first["batch_size"],
            "outside_load_limit_cores": OUTSIDE_LOAD_LIMIT_CORES,
            "throughput_eps": measurement_stats([r["throughput_eps"] for r in runs]),
            "flagged_repetitions": [r["repetition"] for r in runs if r["flagged"]], "repetitions": runs}


def write_repeats(out: Path, repeat: int) -> dict:
    """Summarise the repetitions in ``out`` into ``out/repeats.json``; return the summary."""
    summary = json_ready(summarise_repeats(out, repeat))
    write_json(out / REPEATS_FILE, summary)
    return summary


def summary_line(summary: dict) -> str:
    """The summary in one line, as ``tfsim collect`` prints it.

    Examples
    --------
    >>> line = summary_line({"repeat": 2, "outside_load_limit_cores": 0.1, "flagged_repetitions": [2],
    ...     "throughput_eps": {"mean": 100.0, "min": 95.0, "max": 105.0, "cv": 0.0707, "ci95": 63.5},
    ...     "repetitions": [{"repetition": 1, "loaded_hosts": []}, {"repetition": 2, "loaded_hosts": ["ps0"]}]})
    >>> for part in line.split("; "):
    ...     print(part)
    tfsim: 2 repetitions: 100.00 examples/s (min 95.00, max 105.00, CV 7.1%, 95% CI ± 63.50)
    flagged, a host with more than 0.1 core of outside load: repetition 2 (ps0)
    """
    stats = summary["throughput_eps"]

    def number(value, form: str) -> str:
        return "n/a" if value is None else format(value, form)

    line = (f"tfsim: {summary['repeat']} repetitions: {number(stats['mean'], '.2f')} examples/s "
            f"(min {number(stats['min'], '.2f')}, max {number(stats['max'], '.2f')}, "
            f"CV {number(None if stats['cv'] is None else stats['cv'] * 100, '.1f')}%, "
            f"95% CI ± {number(stats['ci95'], '.2f')})")
    limit = summary["outside_load_limit_cores"]
    flagged = [r for r in summary["repetitions"] if r["repetition"] in summary["flagged_repetitions"]]
    if not flagged:
        return line + f"; no host had more than {limit:g} core of outside load"
    return line + f"; flagged, a host with more than {limit:g} core of outside load: " + ", ".join(
        f"repetition {r['repetition']} ({', '.join(r['loaded_hosts'])})" for r in flagged)
