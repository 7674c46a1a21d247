"""A W-worker run's measured timeline beside tfsim's simulation of the same W (docs/formats.md §10.1).

:func:`timeline_view` decodes a capture taken at the PS during a real run
(:mod:`tfsim.lab.timeline`), simulates the same job, cluster, hosts and W with a trace, and
puts the two side by side over the same part of the run (the last half of the steps, where
the lab measures throughput):

- :meth:`TimelineView.summary`: per direction, the share of the link's sustained rate used,
  its busy fraction and its idle gaps, measured and simulated; the median step; the tensors
  whose first or last byte moves most;
- :meth:`TimelineView.figure`: a few steps, measured above simulated, one lane per worker and
  direction (its tensors, first to last byte) and one per direction for the link;
- :meth:`TimelineView.chrome_trace`: both in one Chrome trace JSON (Perfetto), the measured
  run's lanes named as ``tfsim predict --trace-out`` names the simulated ones.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from tfbase.errors import InputError
from tfsim.lab.timeline import (
    Timeline,
    compare,
    measured_timeline,
    merged_intervals,
    short_tensor,
    simulated_timeline,
)

SIMULATED_STEPS = 40  # per worker; the view compares the last half, as the lab measures
FIGURE_STEPS = 3
MEASURED_PID0, SIMULATED_PID0 = 0, 1000  # Chrome trace process ids of the two runs
DIRECTIONS = ("down", "up")


@dataclasses.dataclass(frozen=True)
class TimelineView:
    """A measured run (:class:`~tfsim.lab.timeline.Timeline`) and the simulated one
    (:class:`~simulate.engine.SimRun` with a trace), with :func:`~tfsim.lab.timeline.compare`'s
    tables of the two."""

    measured: Timeline
    simulated_run: object
    simulated: dict
    comparison: dict

    @property
    def workers(self) -> int:
        return len(self.measured.layout.worker_ips)

    def busy_fractions(self) -> dict[str, float]:
        """``{"measured_down": .., "simulated_down": .., "measured_up": .., "simulated_up": ..}``:
        the time a transfer was on the link (a low reading on a loaded measured link:
        :mod:`tfsim.lab.timeline`)."""
        return self._fractions("busy_fraction")

    def used_fractions(self) -> dict[str, float]:
        """As :meth:`busy_fractions`, for the share of the link's sustained rate used: the
        fraction the two runs count alike (:func:`tfsim.lab.timeline.used_fraction`)."""
        return self._fractions("used_fraction")

    def _fractions(self, key: str) -> dict[str, float]:
        return {f"{side}_{row['direction']}": float(row[f"{side}_{key}"])
                for row in self.comparison["wire_side_by_side"] for side in ("measured", "simulated")}

    def summary(self) -> dict:
        """The numbers the lab's results and the report show, as plain JSON values."""
        measured_steps = [r["step_median_ms"] for r in self.comparison["measured"]["steps"]]
        sim = self.simulated_run
        half = sim.step_start_s.shape[1] // 2
        sim_steps = (sim.step_end_s[:, half:] - sim.step_start_s[:, half:]) * 1e3
        tensors = [r for r in self.comparison["tensors_side_by_side"]
                   if r["measured_last_ms"] is not None and r["simulated_last_ms"] is not None]
        tensors.sort(key=lambda r: -abs(r["measured_last_ms"] - r["simulated_last_ms"]))
        return {
            "workers": self.workers,
            "wire": self.comparison["wire_side_by_side"],
            "step_median_ms": {"measured": float(np.median(measured_steps)) if measured_steps else math.nan,
                               "simulated": float(np.median(sim_steps))},
            "tensors_most_apart": tensors[:5],
        }

    def figure(self, steps: int = FIGURE_STEPS):
        """A few steps of worker 0 and what every worker moved meanwhile: measured (top) and
        simulated (bottom), time from the first shown step's start."""
        from tfbase.figures import pyplot

        plt = pyplot()
        lanes = [f"link {d}" for d in DIRECTIONS] + [f"w{w} {d}" for w in range(self.workers) for d in DIRECTIONS]
        fig, axes = plt.subplots(2, 1, figsize=(10, 1.2 + 0.42 * len(lanes) * 2), dpi=110, sharex=True)
        for ax, title, bars, boundaries in (
                (axes[0], "measured (capture at the PS)", *self._measured_bars(steps)),
                (axes[1], "simulated (tfsim, grpc)", *self._simulated_bars(steps))):
            for y, lane in enumerate(lanes):
                spans = bars.get(lane)
                if spans is not None and len(spans):
                    colour = "0.35" if lane.startswith("link") else ("tab:blue" if lane.endswith("down")
                                                                    else "tab:orange")
                    ax.broken_barh([(a * 1e3, (b - a) * 1e3) for a, b in spans], (y - 0.35, 0.7), color=colour)
            for x in boundaries:
                ax.axvline(x * 1e3, color="k", lw=0.6, ls=":")
            ax.set_yticks(range(len(lanes)), lanes, fontsize=7)
            ax.invert_yaxis()
            ax.set_title(title, fontsize=9)
            ax.grid(axis="x", alpha=0.3)
        axes[1].set_xlabel("time from the step's start (ms); dotted: worker 0's steps")
        fig.suptitle(f"W = {self.workers}: down = PS to worker, up = worker to PS", fontsize=10)
        fig.tight_layout()
        return fig

    def _measured_bars(self, steps: int) -> tuple[dict, list]:
        layout, t = self.measured.layout, self.measured
        w0 = layout.steps[min(layout.steps)]
        k0 = _first_shown_step(w0[:, 0], *t.window, steps)
        k1 = min(k0 + steps, len(w0) - 1)
        a, b = float(w0[k0, 0]), float(w0[k1, 0]) if k1 > k0 else float(w0[k0, 1])
        bars: dict[str, np.ndarray] = {}
        for d, name in enumerate(DIRECTIONS):
            m = t.wire["dir"] == d
            start = t.wire["t"][m]
            bars[f"link {name}"] = _clip(merged_intervals(start, start + t.wire["bytes"][m] / t.rate_Bps), a, b)
        for w in range(self.workers):
            for name in DIRECTIONS:
                rows = [(r["first_data_t"], r["last_data_t"]) for r in t.messages
                        if r["worker"] == w and r["rpc"] == "RecvTensor" and r["response_dir"] == name
                        and r["first_data_t"] is not None and r["last_data_t"] is not None]
                bars[f"w{w} {name}"] = _clip(np.array(rows, dtype=float).reshape(-1, 2), a, b)
        return bars, list(w0[k0:k1 + 1, 0] - a)

    def _simulated_bars(self, steps: int) -> tuple[dict, list]:
        sim, s = self.simulated_run, self.simulated
        starts = sim.step_start_s[0]
        k0 = _first_shown_step(starts, *s["window"], steps)
        k1 = min(k0 + steps, len(starts) - 1)
        a, b = float(starts[k0]), float(starts[k1]) if k1 > k0 else float(sim.step_end_s[0, k0])
        bars = {f"link {d}": _clip(np.array(s["link_busy"][d]).reshape(-1, 2), a, b) for d in DIRECTIONS}
        for w in range(self.workers):
            for name in DIRECTIONS:
                rows = [(r["first_data_t"], r["last_data_t"]) for r in s["tensors"]
                        if r["worker"] == w and r["response_dir"] == name]
                bars[f"w{w} {name}"] = _clip(np.array(rows, dtype=float).reshape(-1, 2), a, b)
        return bars, list(starts[k0:k1 + 1] - a)

    def chrome_trace(self) -> dict:
        """Both runs in one Chrome trace: ``measured worker w`` (pid w) with the capture's
        tensors on lanes ``DOWNLINK``/``UPLINK`` and the step on ``WORKER``, and the simulated
        run as ``tfsim predict --trace-out`` writes it (pids from 1000, names prefixed
        ``simulated``). Each run's time starts at its compared window."""
        from simulate.chrome_trace import chrome_trace
        from simulate.engine import slot_names

        names = slot_names(1)
        lane = {"down": names.index("DOWNLINK"), "up": names.index("UPLINK"), "step": names.index("WORKER")}
        t0 = self.measured.window[0]
        events: list[dict] = []
        for w in range(self.workers):
            pid = MEASURED_PID0 + w
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"measured worker {w}"}})
            for tid in lane.values():
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                               "args": {"name": names[tid]}})
            for k, (start, end) in enumerate(self.measured.layout.steps.get(w, [])):
                events.append({"ph": "X", "name": f"step {k}", "cat": "step", "pid": pid, "tid": lane["step"],
                               "ts": (start - t0) * 1e6, "dur": (end - start) * 1e6})
        for r in self.measured.messages:
            if r["rpc"] != "RecvTensor" or r["first_data_t"] is None or r["last_data_t"] is None:
                continue
            events.append({"ph": "X", "name": short_tensor(r["tensor"]) or r["rpc"], "cat": "transfer",
                           "pid": MEASURED_PID0 + r["worker"], "tid": lane[r["response_dir"]],
                           "ts": (r["first_data_t"] - t0) * 1e6, "dur": (r["last_data_t"] - r["first_data_t"]) * 1e6,
                           "args": {"step": r["step"], "bytes": r["tensor_bytes"], "request_ts_us":
                                    (r["request_t"] - t0) * 1e6}})
        simulated = chrome_trace(self.simulated_run)
        s0 = self.simulated["window"][0] * 1e6
        for e in simulated["traceEvents"]:
            e = dict(e, pid=SIMULATED_PID0 + e["pid"])
            if e.get("name") == "process_name":
                e["args"] = {"name": f"simulated {e['args']['name']}"}
            if "ts" in e:
                e["ts"] -= s0
            events.append(e)
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"generator": "tfsim", "view": "measured beside simulated", "workers": self.workers}}


def _first_shown_step(starts: np.ndarray, t0: float, t1: float, steps: int) -> int:
    """The step from which ``steps`` steps are shown: the first to start in the window
    ``[t0, t1]``, moved back if fewer than ``steps`` follow it."""
    k = int(np.searchsorted(starts, t0))
    return max(0, min(k, len(starts) - 1 - steps))


def _clip(spans: np.ndarray, a: float, b: float) -> np.ndarray:
    """``spans`` cut to ``[a, b]`` and shifted so that ``a`` is 0; spans outside dropped."""
    if spans.size == 0:
        return spans.reshape(0, 2)
    s, e = np.clip(spans[:, 0], a, b), np.clip(spans[:, 1], a, b)
    keep = e > s
    return np.column_stack([s[keep] - a, e[keep] - a])


def timeline_view(run_dir: str | Path, profile, cluster, *, rate_Bps: float, cores: float | None = None,
                  colocation=None, pcap: str | Path | None = None, steps: int = SIMULATED_STEPS,
                  seed: int = 0, tie_order: str = "index") -> TimelineView:
    """The measured timeline of ``run_dir`` (a W-worker run captured at the PS) beside tfsim's
    ``grpc`` simulation of the same W.

    Parameters
    ----------
    run_dir : path
        A complete run directory with one PS whose ``capture.pcap.gz`` was taken at the PS
        (:func:`ps_capture_of` checks it).
    profile, cluster : Profile, ClusterModel
        The job's profile and the cluster's calibration (from the one-worker run).
    rate_Bps : float
        The link's rate in bytes/s on the wire, for the measured busy time.
    cores, colocation
        The simulated hosts, as :func:`simulate.predict` takes them.
    pcap : path, optional
        The capture, if not the run directory's.
    steps : int
        Steps per worker simulated; the view compares the last half of them.
    seed : int
        The simulation's seed.
    tie_order : {"recorded", "index"} or TieOrder
        How the simulation queues transfers ready at one instant (docs/model.md §2.4).
    """
    from simulate.sweep import traced_run

    run_dir = Path(run_dir)
    if pcap is None:
        pcap = ps_capture_of(run_dir)
    measured = measured_timeline(pcap, run_dir, rate_Bps=rate_Bps, chain=())
    workers = len(measured.layout.worker_ips)
    sim = traced_run(profile, cluster, workers=workers, transfer="grpc", priorities={}, cores=cores,
                     colocation=colocation, steps=steps, seed=seed, tie_order=tie_order)
    half = steps // 2
    window = (float(np.max(sim.step_start_s[:, half])), float(np.min(sim.step_end_s[:, -1])))
    capacity = sustained_capacity_Bps(cluster)
    simulated = simulated_timeline(sim, *window, capacity_Bps=capacity)
    return TimelineView(measured, sim, simulated, compare(measured, simulated, capacity))


def ps_capture_of(run_dir: str | Path) -> Path:
    """The capture of ``run_dir`` taken at PS 0, checked: what :func:`timeline_view` decodes.

    The run must be complete, have one PS, ``run.json``'s ``capture.host`` ``ps0`` and its
    file in the directory (on a real cluster, copied from PS 0's ``--out``: its
    ``capture.json``, when copied too, must name the same cluster), and its tasks on distinct
    addresses (the decoder tells the workers apart by address: a run on loopback cannot be
    read). Raises :class:`~tfbase.errors.InputError` naming the directory and what is missing.
    """
    from tfprofile.harness.capture_site import PS_CAPTURE_FORMAT
    from tfprofile.rundir import open_run_dir

    run_dir = Path(run_dir)
    run = open_run_dir(run_dir).run
    capture = run.get("capture")
    how = "collect it with --capture --capture-at ps"
    if not isinstance(capture, dict):
        raise InputError(run_dir, f"has no capture (run.json's capture is null): the timeline needs one taken at "
                                  f"PS 0; {how}")
    if capture.get("host") != "ps0":
        raise InputError(run_dir, f"its capture was taken on {capture.get('host') or 'the chief worker'}, not at "
                                  f"PS 0: the timeline needs one taken at the PS; {how}")
    name = str(capture.get("file") or "capture.pcap.gz")
    if Path(name).name != name:
        raise InputError(run_dir / "run.json", f"capture.file must be a file name, not {name!r}")
    pcap = run_dir / name
    if not pcap.is_file():
        copy = capture.get("copy")
        raise InputError(run_dir, f"has no {name}: the capture was taken on ps0" + (f"; copy {copy}" if copy else ""))
    record_path = run_dir / str(capture.get("record") or "capture.json")
    if record_path.is_file():
        try:
            record = json.loads(record_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(record_path, f"is not readable JSON ({exc})") from None
        if not isinstance(record, dict) or record.get("format") != PS_CAPTURE_FORMAT:
            raise InputError(record_path, f"format is {record.get('format') if isinstance(record, dict) else None!r}, "
                                          f"expected {PS_CAPTURE_FORMAT!r}")
        if record.get("cluster") != run.get("cluster"):
            raise InputError(record_path, f"is the capture of another job: its cluster "
                                          f"{record.get('cluster')} is not run.json's {run.get('cluster')}")
    cluster = run.get("cluster") or {}
    hosts = [address.rpartition(":")[0].strip("[]") for address in [*cluster.get("ps", []),
                                                                   *cluster.get("worker", [])]]
    if len(set(hosts)) < len(hosts):
        shared = next(h for h in hosts if hosts.count(h) > 1)
        raise InputError(run_dir, f"its tasks share the address {shared}: a capture cannot tell their traffic "
                                  "apart (run each task on its own host or network namespace)")
    return pcap


def sustained_capacity_Bps(cluster) -> dict[str, float]:
    """Payload bytes/s each direction of the cluster's PS link sustains under load: a
    calibrated token bucket's sustained rate, else the bandwidth (docs/model.md §4.4)."""
    out = {}
    for name, bucket, peak in (("down", cluster.bucket_downlink, cluster.downlink_Bps),
                               ("up", cluster.bucket_uplink, cluster.uplink_Bps)):
        out[name] = float(bucket.sustained_Bps if bucket is not None else peak)
    return out
