"""Gantt pictures of simulated steps (like ICPE Figs. 3 and 16): one row per resource of each
worker, one bar per chunk the engine ran, and the time each worker's computation sat idle
while its transfers were on the wire (it waited on the network).

The bars come from the engine's own trace (:class:`~simulate.engine.SimRun.trace`), the same
events ``tfsim predict --trace-out`` writes as a Chrome trace.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from simulate.engine import slot_names
from simulate.prepare import KIND_OVERHEAD, KIND_TRANSFER
from tfbase.figures import pyplot
from tfprofile.dag import Resource

KINDS = ("compute", "transfer", "parse")
MAX_WORKERS_DRAWN = 8  # more rows than this stop being readable on one page


@dataclasses.dataclass(frozen=True, eq=False)
class Gantt:
    """The chunks of a traced run, laid out as rows.

    ``rows`` are labels like ``"w0 DOWNLINK"``, worker by worker; each bar has a row index,
    start and end (seconds), a kind (index into :data:`KINDS`), the resource it ran on and the
    step it belongs to. ``network_wait`` holds, per worker, the intervals during which its
    computation was idle while one of its transfers was in flight.
    """

    workers: int
    steps: int
    rows: tuple[str, ...]
    row: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    kind: np.ndarray
    resource: np.ndarray
    step: np.ndarray
    step_end_s: np.ndarray  # (W, steps)
    worker_busy: tuple[np.ndarray, ...]  # per worker, (k, 2) intervals its WORKER slot was busy
    link_busy: tuple[np.ndarray, ...]  # per worker, (k, 2) intervals one of its transfers was on a link
    network_wait: tuple[np.ndarray, ...]  # per worker, (k, 2) intervals: WORKER idle, a transfer in flight

    @property
    def span_s(self) -> float:
        return float(self.step_end_s.max()) if self.step_end_s.size else 0.0

    @property
    def rows_per_worker(self) -> int:
        return len(self.rows) // self.workers

    def stats(self) -> dict:
        """The numbers the page quotes: the traced span, the mean step time, and how much of each
        worker's traced time its computation was busy, its transfers were on the wire, and it
        waited on the network (means over the workers)."""
        spans = self.step_end_s[:, -1]

        def mean_fraction(intervals):
            return float(np.mean([_length(i) / span for i, span in zip(intervals, spans)]))

        step_times = np.diff(np.concatenate([np.zeros((self.workers, 1)), self.step_end_s], axis=1), axis=1)
        return {"workers": self.workers, "steps_per_worker": self.steps, "span_s": self.span_s,
                "step_time_mean_s": float(step_times.mean()),
                "worker_busy_fraction": mean_fraction(self.worker_busy),
                "link_busy_fraction": mean_fraction(self.link_busy),
                "network_wait_fraction": mean_fraction(self.network_wait)}


def _union(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Disjoint, sorted (k, 2) intervals covering the given ones."""
    if start.size == 0:
        return np.zeros((0, 2))
    order = np.argsort(start, kind="stable")
    merged = []
    lo, hi = float(start[order[0]]), float(end[order[0]])
    for s, e in zip(start[order[1:]], end[order[1:]]):
        if s > hi:
            merged.append((lo, hi))
            lo, hi = float(s), float(e)
        else:
            hi = max(hi, float(e))
    merged.append((lo, hi))
    return np.array(merged)


def _length(intervals: np.ndarray) -> float:
    return float((intervals[:, 1] - intervals[:, 0]).sum()) if len(intervals) else 0.0


def _complement(intervals: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The parts of [lo, hi] that disjoint sorted ``intervals`` leave uncovered."""
    gaps, cursor = [], lo
    for s, e in intervals:
        if s > cursor:
            gaps.append((cursor, min(s, hi)))
        cursor = max(cursor, e)
    if cursor < hi:
        gaps.append((cursor, hi))
    return np.array(gaps) if gaps else np.zeros((0, 2))


def _intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection of two disjoint sorted interval lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if lo < hi:
            out.append((lo, hi))
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return np.array(out) if out else np.zeros((0, 2))


def gantt_from_run(run) -> Gantt:
    """Lay a traced :class:`~simulate.engine.SimRun` out as Gantt rows."""
    if run.trace is None:
        raise ValueError("the run recorded no trace: simulate with trace_steps > 0")
    graph, trace = run.graph, run.trace
    M, W = graph.n_servers, run.config.workers
    names = slot_names(M)
    op = trace["op"].astype(np.int64)
    slot = trace["slot"].astype(np.int64)
    resource = graph.resource[op].astype(np.int64)
    kind = np.where(graph.kind[op] == KIND_TRANSFER, 1, np.where(graph.kind[op] == KIND_OVERHEAD, 2, 0))
    # A pure-delay parse op has a slot of its own: draw it on its receiver's parse lane.
    delay = slot >= 4 * M + 2
    lane = np.where(resource == Resource.WORKER, 3 * M + 1, 3 * M + 2 + np.maximum(graph.server[op], 0))
    slot = np.where(delay, lane, slot)
    used = sorted(set(range(3 * M + 1)) | set(np.unique(slot).tolist()))
    position = {s: k for k, s in enumerate(used)}
    rows = tuple(f"w{w} {names[s]}" for w in range(W) for s in used)
    row = trace["worker"].astype(np.int64) * len(used) + np.array([position[s] for s in slot], dtype=np.int64)
    start, end = trace["start_s"].astype(float), trace["end_s"].astype(float)
    original_slot = trace["slot"].astype(np.int64)
    busy, wire, waits = [], [], []
    for w in range(W):
        mine = trace["worker"] == w
        computing = mine & (original_slot == M)  # the WORKER slot, parsing included when it runs there
        on_wire = mine & np.isin(resource, (Resource.DOWNLINK, Resource.UPLINK))
        horizon = float(run.step_end_s[w, run.config.trace_steps - 1])
        busy.append(_union(start[computing], end[computing]))
        wire.append(_union(start[on_wire], end[on_wire]))
        waits.append(_intersect(_complement(busy[-1], 0.0, horizon), wire[-1]))
    return Gantt(workers=W, steps=run.config.trace_steps, rows=rows, row=row, start_s=start, end_s=end,
                 kind=kind.astype(np.int64), resource=resource, step=trace["step"].astype(np.int64),
                 step_end_s=run.step_end_s[:, :run.config.trace_steps].copy(), worker_busy=tuple(busy),
                 link_busy=tuple(wire), network_wait=tuple(waits))


_COLOURS = {  # (resource, kind) -> colour; steps alternate between the two shades
    "DOWNLINK": ("#2b6cb0", "#90cdf4"), "UPLINK": ("#2f855a", "#9ae6b4"), "WORKER": ("#c05621", "#fbd38d"),
    "PS": ("#6b46c1", "#d6bcfa"), "parse": ("#4a5568", "#cbd5e0"),
}


def _colour(resource: int, kind: int, step: int) -> str:
    key = "parse" if kind == 2 else Resource(resource).name
    return _COLOURS[key][step % 2]


def gantt_figure(gantt: Gantt, *, title: str):
    """The Gantt picture: rows per worker (top to bottom), bars by resource (dark and light
    shades alternate with the step), the network wait hatched in red on each WORKER row, and
    each worker's step ends as ticks."""
    from matplotlib.patches import Patch

    plt = pyplot()
    shown = min(gantt.workers, MAX_WORKERS_DRAWN)
    per = gantt.rows_per_worker
    n_rows = shown * per
    legend_in, height_in = 0.45, 1.25 + 0.2 * n_rows + 0.45
    fig, ax = plt.subplots(figsize=(10.5, height_in), dpi=110)
    keep = gantt.row < n_rows
    scale = 1e3  # milliseconds on the axis
    for r in range(n_rows):
        mask = keep & (gantt.row == r)
        if not mask.any():
            continue
        idx = np.flatnonzero(mask)
        spans = [(gantt.start_s[i] * scale, max(gantt.end_s[i] - gantt.start_s[i], 0.0) * scale) for i in idx]
        colours = [_colour(int(gantt.resource[i]), int(gantt.kind[i]), int(gantt.step[i])) for i in idx]
        ax.broken_barh(spans, (r - 0.4, 0.8), facecolors=colours, edgecolors="none")
    for w in range(shown):
        worker_row = next(k for k, label in enumerate(gantt.rows[w * per:(w + 1) * per]) if label.endswith("WORKER"))
        waits = gantt.network_wait[w]
        if len(waits):
            ax.broken_barh([(s * scale, (e - s) * scale) for s, e in waits], (w * per + worker_row - 0.45, 0.9),
                           facecolors="none", edgecolors="#c53030", hatch="////", linewidth=0)
        ax.plot(gantt.step_end_s[w] * scale, [w * per - 0.5] * gantt.steps, marker="v", ls="none", color="black",
                ms=4)
        if w:
            ax.axhline(w * per - 0.5, color="0.6", lw=0.6)
    ax.set_ylim(n_rows - 0.5, -0.9)
    ax.set_yticks(range(n_rows))
    ax.set_yticklabels(gantt.rows[:n_rows], fontsize=7)
    ax.set_xlim(0, gantt.span_s * scale * 1.01)
    ax.set_xlabel("simulated time (ms)")
    ax.grid(alpha=0.25, axis="x")
    more = f" (workers 0-{shown - 1} of {gantt.workers} drawn)" if shown < gantt.workers else ""
    ax.set_title(title + more, fontsize=10)
    legend = [Patch(color=_COLOURS[k][0], label=label) for k, label in (
        ("DOWNLINK", "PS→worker transfer"), ("WORKER", "worker computation"), ("UPLINK", "worker→PS transfer"),
        ("PS", "PS computation"), ("parse", "parsing received tensors"))]
    legend.append(Patch(facecolor="none", edgecolor="#c53030", hatch="////", label="worker waits on the network"))
    legend.append(plt.Line2D([], [], marker="v", ls="none", color="black", label="step ends"))
    fig.legend(handles=legend, fontsize=7, ncol=4, loc="lower center", frameon=False)
    fig.tight_layout(rect=(0, legend_in / height_in, 1, 1))
    return fig
