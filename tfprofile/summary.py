"""What a profile holds, in numbers a user checks first (``tfsim profile --summary``)."""

from __future__ import annotations

import numpy as np

from tfprofile.dag import Profile, Resource


def _stats(values: np.ndarray) -> dict[str, float] | None:
    if values.size == 0:
        return None
    return {
        "median": float(np.median(values)),
        "mean": float(np.mean(values)),
        "p95": float(np.percentile(values, 95)),
        "min": float(np.min(values)),
        "max": float(np.max(values)),
    }


def critical_path_s(profile: Profile, durations: np.ndarray) -> float:
    """Length of the longest path through the DAG when each op takes ``durations[op]``.

    A lower bound on the step time with unlimited resources; ops are in topological order,
    so one forward sweep suffices.
    """
    graph = profile.graph
    finish = np.zeros(graph.n_ops)
    ptr, idx = graph.pred_ptr, graph.pred_idx
    for op in range(graph.n_ops):
        preds = idx[ptr[op]:ptr[op + 1]]
        finish[op] = (finish[preds].max() if preds.size else 0.0) + durations[op]
    return float(finish.max()) if graph.n_ops else 0.0


def summarize(profile: Profile) -> dict:
    """docs/formats.md §3.1 summary keys (``steps``, ``ops``, ``ops_by_resource``, ``bytes_downlink``,
    ``bytes_uplink``, ``step_time_s``) plus provenance and per-resource busy time.

    ``step_time_s`` summarises the measured wall times of the run's steps when the
    profile has them, else the traced steps' makespans (``step_time_source`` says which).
    """
    graph = profile.graph
    wall = profile.step_wall_s
    busy = {}
    for r in Resource:
        mask = graph.resource == r
        busy[r.name] = float(np.median(profile.duration_s[:, mask].sum(axis=1))) if mask.any() else 0.0
    median_durations = np.median(profile.duration_s, axis=0)
    return {
        "format": "tfsim.profile-summary/1",
        "model": profile.meta.get("model"),
        "batch_size": profile.batch_size,
        "steps": profile.n_steps,
        "ops": graph.n_ops,
        "ops_by_resource": {r.name: int((graph.resource == r).sum()) for r in Resource},
        "servers": graph.n_servers,
        "transfers": int(np.isin(graph.resource, [Resource.DOWNLINK, Resource.UPLINK]).sum()),
        "bytes_downlink": profile.bytes_per_step(Resource.DOWNLINK),
        "bytes_uplink": profile.bytes_per_step(Resource.UPLINK),
        "trainable_variable_bytes": profile.variables.trainable_bytes,
        "step_time_s": _stats(wall if wall.size else profile.step_makespan_s),
        "step_time_source": "measured wall time" if wall.size else "traced makespan",
        "step_makespan_s": _stats(profile.step_makespan_s),
        "busy_time_median_s": busy,
        "critical_path_median_s": critical_path_s(profile, median_durations),
    }


def format_summary(summary: dict) -> str:
    """The summary as a short text table for the terminal."""
    lines = [
        f"model            {summary['model']}  (batch {summary['batch_size']})",
        f"steps traced     {summary['steps']}",
        f"ops              {summary['ops']}  ("
        + ", ".join(f"{k} {v}" for k, v in summary["ops_by_resource"].items()) + ")",
        f"parameter servers {summary['servers']}",
        f"bytes per step   downlink {summary['bytes_downlink']:,}  uplink {summary['bytes_uplink']:,}"
        f"  (trainable variables {summary['trainable_variable_bytes']:,})",
    ]
    st = summary["step_time_s"]
    if st:
        lines.append(f"step time        median {st['median'] * 1e3:.1f} ms  mean {st['mean'] * 1e3:.1f} ms  "
                     f"p95 {st['p95'] * 1e3:.1f} ms  ({summary['step_time_source']})")
    ms = summary["step_makespan_s"]
    lines.append(f"traced makespan  median {ms['median'] * 1e3:.1f} ms")
    lines.append("busy per step    " + "  ".join(f"{k} {v * 1e3:.1f} ms" for k, v in
                                                 summary["busy_time_median_s"].items()))
    lines.append(f"critical path    {summary['critical_path_median_s'] * 1e3:.1f} ms (median durations)")
    return "\n".join(lines)
