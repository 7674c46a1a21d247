"""Draw a few steps of a captured lab point: the measured timeline (above) and the simulated one
(below), one row per worker and direction, the link's wire activity and tc's backlog.

    python scripts/research_w4/timeline_figure.py study-data/cap/w4-a --calib study-data/calib-a \
        --seconds 0.6 -o study-data/figs/w4-a.png

Needs ``timeline.pkl`` in the point directory (scripts/research_w4/timeline_report.py writes it).
Optionally ``--sim-cluster CLUSTER.json`` / ``--sim-module`` to draw a prototype model instead.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

COLORS = {"down": "#1f77b4", "up": "#d62728"}


def draw_measured(ax, axq, T, t0: float, t1: float, rate_Bps: float):
    W = len(T.layout.worker_ips)
    rows = {}
    for w in range(W):
        rows[(w, "down")] = 2 * w + 1
        rows[(w, "up")] = 2 * w
    # link activity strips at the top
    for d, dname in ((0, "down"), (1, "up")):
        m = (T.wire["dir"] == d) & (T.wire["t"] >= t0) & (T.wire["t"] <= t1)
        t, b = T.wire["t"][m], T.wire["bytes"][m]
        y = 2 * W + (1 if dname == "down" else 0) + 0.5
        ax.broken_barh(list(zip((t - t0) * 1e3, b / rate_Bps * 1e3)), (y - 0.35, 0.7), color=COLORS[dname], lw=0)
    for msg in T.messages:
        if msg["step"] < 0 or msg.get("request_t") is None:
            continue
        if not (t0 - 0.3 <= msg["request_t"] <= t1):
            continue
        w, d = msg["worker"], msg["response_dir"]
        y = rows[(w, d)]
        if msg["first_data_t"] is not None and msg["last_data_t"] is not None and (msg["tensor_bytes"] or 0) > 20000:
            a, b = msg["first_data_t"], max(msg["last_data_t"], msg["first_data_t"] + 2e-4)
            ax.broken_barh([((a - t0) * 1e3, (b - a) * 1e3)], (y + 0.15, 0.6), color=COLORS[d], alpha=0.75, lw=0.3,
                           edgecolor="k")
        elif msg["rpc"] == "RunGraph":
            ax.plot([(msg["request_t"] - t0) * 1e3], [rows[(w, "up")] + 0.5], "k>", ms=4)
            if msg["response_headers_t"]:
                ax.plot([(msg["response_headers_t"] - t0) * 1e3], [rows[(w, "down")] + 0.5], "k<", ms=4)
        elif msg["first_data_t"] is not None:
            ax.plot([(msg["first_data_t"] - t0) * 1e3], [y + 0.45], "|", color=COLORS[d], ms=6)
    for w, arr in T.layout.steps.items():
        for a, b in arr:
            if t0 <= a <= t1:
                ax.plot([(a - t0) * 1e3] * 2, [2 * w - 0.05, 2 * w + 2.05], color="0.3", lw=0.8, ls=":")
    ax.set_yticks([v + 0.5 for v in rows.values()] + [2 * W + 0.5, 2 * W + 1.5])
    ax.set_yticklabels([f"w{w} {d}" for (w, d) in rows] + ["link up", "link down"], fontsize=7)
    if axq is not None and T.backlog is not None:
        for name in ("down", "up"):
            ts, qs, _ = T.backlog.queues[name]
            m = (ts >= t0) & (ts <= t1)
            axq.step((ts[m] - t0) * 1e3, qs[m] / 1e3, where="post", color=COLORS[name], label=f"tc backlog {name}")
        axq.set_ylabel("backlog (KB)", fontsize=8)
        axq.legend(fontsize=7, loc="upper right")


def draw_simulated(ax, sim, t0: float, t1: float):
    from simulate.prepare import KIND_TRANSFER
    from tfprofile.dag import Resource

    g, tr = sim.graph, sim.trace
    W = sim.config.workers
    tx = g.kind[tr["op"]] == KIND_TRANSFER
    for k in np.flatnonzero(tx & (tr["end_s"] >= t0) & (tr["start_s"] <= t1)):
        op = tr["op"][k]
        d = "down" if g.resource[op] == Resource.DOWNLINK else "up"
        y = 2 * tr["worker"][k] + (1 if d == "down" else 0)
        a, b = tr["start_s"][k], tr["end_s"][k]
        if g.work[0, op] > 20000:
            ax.broken_barh([((a - t0) * 1e3, (b - a) * 1e3)], (y + 0.15, 0.6), color=COLORS[d], alpha=0.75, lw=0.3,
                           edgecolor="k")
        else:
            ax.plot([(a - t0) * 1e3], [y + 0.45], "|", color=COLORS[d], ms=6)
    for w in range(W):
        for a in sim.step_start_s[w]:
            if t0 <= a <= t1:
                ax.plot([(a - t0) * 1e3] * 2, [2 * w - 0.05, 2 * w + 2.05], color="0.3", lw=0.8, ls=":")
    ax.set_yticks([2 * w + (1 if d == "down" else 0) + 0.5 for w in range(W) for d in ("down", "up")])
    ax.set_yticklabels([f"w{w} {d}" for w in range(W) for d in ("down", "up")], fontsize=7)


class ProtoAsRun:
    """A prototype run (tfsim/lab/fifo_proto.py) seen as a SimRun with a trace: tensor messages only."""

    def __init__(self, sim):
        import types

        rows = [r for r in sim.msg_rows if r["kind"] == "tensor"]
        self.graph = sim.g
        self.config = types.SimpleNamespace(workers=sim.W, steps=sim.N, warmup=sim.warmup)
        self.step_start_s = sim.step_start
        self.trace = {"worker": np.array([r["worker"] for r in rows]), "step": np.array([r["step"] for r in rows]),
                      "op": np.array([r["op"] for r in rows]), "start_s": np.array([r["first_t"] for r in rows]),
                      "end_s": np.array([r["last_t"] for r in rows])}


def run_proto(calib: Path, workers: int):
    from proto_eval import load

    from simulate.sweep import staggered_starts
    from tfsim.lab.fifo_proto import ProtoParams, lab_link, simulate

    prof, cl, g = load(calib)
    sim = simulate(g, ProtoParams(down=lab_link(400e6), up=lab_link(400e6)), workers, steps=200, warmup=50,
                   start_offsets_s=staggered_starts(prof, workers, 1.0))
    return ProtoAsRun(sim)


def main(argv=None):
    from timeline_report import simulate_point

    from tfbase.figures import pyplot, save_figure

    ap = argparse.ArgumentParser()
    ap.add_argument("point", type=Path)
    ap.add_argument("--calib", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=0.6)
    ap.add_argument("--start", type=float, default=None, help="offset into the measured window (s)")
    ap.add_argument("--rate-Bps", type=float, default=50e6)
    ap.add_argument("--proto", action="store_true", help="add a panel with the FIFO/window/RPC prototype")
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args(argv)
    T = pickle.loads((args.point / "timeline.pkl").read_bytes())
    point = json.loads((args.point / "point.json").read_text())
    W = point["workers"]
    t0 = T.window[0] + (args.start if args.start is not None else 0.3 * (T.window[1] - T.window[0]))
    t1 = t0 + args.seconds
    sim = simulate_point(args.calib, W)
    s_t0 = float(np.min(sim.step_start_s[:, sim.config.steps // 2]))
    plt = pyplot()
    n = 4 if args.proto else 3
    fig, axes = plt.subplots(n, 1, figsize=(13, 3 + (2.0 if args.proto else 1.4) * W), dpi=110, sharex=True,
                             gridspec_kw={"height_ratios": [2 * W + 2, 3, 2 * W] + ([2 * W] if args.proto else [])})
    draw_measured(axes[0], axes[1], T, t0, t1, args.rate_Bps)
    axes[0].set_title(f"measured at the PS: W = {W}, {point['measured']['throughput_eps']:.0f} ex/s "
                      f"(bars: tensors > 20 KB, first to last byte; ticks: small tensors; > <: RunGraph; dotted: step starts)",
                      fontsize=9)
    draw_simulated(axes[2], sim, s_t0, s_t0 + args.seconds)
    axes[2].set_title("simulated by tfsim today (grpc model, same W, the lab's calibration), steady state", fontsize=9)
    if args.proto:
        proto = run_proto(args.calib, W)
        p_t0 = float(np.min(proto.step_start_s[:, proto.config.steps // 2]))
        draw_simulated(axes[3], proto, p_t0, p_t0 + args.seconds)
        axes[3].set_title("prototype: FIFO link + token bucket + window-limited TCP + RPC chain (tfsim/lab/fifo_proto.py)",
                          fontsize=9)
    axes[-1].set_xlabel("ms")
    for ax in axes:
        ax.grid(alpha=0.25, axis="x")
        ax.set_xlim(0, args.seconds * 1e3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
