"""Calibration figures: overhead against size with the fit (like ICPE Fig. 10), and one step's
streams on the wire (like ICPE Fig. 11)."""

from __future__ import annotations

import numpy as np

from tfbase.figures import pyplot


def overhead_figure(calibration):
    """Parsing overhead (ms) against tensor size (MB), per direction, with the robust fit."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), dpi=120, sharey=True)
    for ax, direction in zip(axes, ("downlink", "uplink")):
        mine = [s for s in calibration.samples if s.direction == direction]
        if mine:
            size = np.array([s.size_bytes for s in mine]) / 1e6
            delay = np.array([s.overhead_s for s in mine]) * 1e3
            ax.plot(size, delay, "o", ms=3, alpha=0.6, label="samples")
            fit = calibration.overhead.get(direction)
            if fit is not None:
                xs = np.linspace(0, size.max() * 1.05, 50)
                ax.plot(xs, fit(xs * 1e6) * 1e3, "-", color="C3",
                        label=f"α={fit.slope * 1e9:.3g} ns/B, β={fit.intercept * 1e3:.3g} ms (R²={fit.r2:.2f}, "
                              f"n={fit.n})")
        ax.set_title(f"{direction}: last DATA frame → RecvTensor end", fontsize=9)
        ax.set_xlabel("tensor size (MB)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("overhead (ms)")
    fig.tight_layout()
    return fig


def stream_timeline_figure(calibration, step_file: str | None = None):
    """One traced step: each tensor stream from its request to its last DATA frame, per direction."""
    plt = pyplot()
    steps = sorted({s.step_file for s in calibration.samples})
    step = step_file or (steps[len(steps) // 2] if steps else None)
    mine = [s for s in calibration.samples if s.step_file == step]
    fig, ax = plt.subplots(figsize=(9, 0.22 * max(len(mine), 8) + 1.2), dpi=120)
    if mine:
        t0 = min(s.request_s for s in mine)
        mine.sort(key=lambda s: (s.direction, s.request_s))
        for y, s in enumerate(mine):
            color = "C0" if s.direction == "downlink" else "C2"
            ax.plot([(s.request_s - t0) * 1e3, (s.send_ready_s - t0) * 1e3], [y, y], color="0.75", lw=1)
            ax.plot([(s.first_data_s - t0) * 1e3, (s.last_data_s - t0) * 1e3], [y, y], color=color, lw=3)
            ax.plot([(s.record_end_s - t0) * 1e3], [y], "|", color="C3", ms=6)
        ax.set_yticks(range(len(mine)))
        ax.set_yticklabels([f"{s.direction[0]} {s.size_bytes / 1e6:.2f} MB" for s in mine], fontsize=6)
    ax.set_xlabel("time since the step's first request (ms)")
    ax.set_title(f"{step}: request → send-ready (grey), DATA frames (blue downlink, green uplink), "
                 "record end (red)", fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig
