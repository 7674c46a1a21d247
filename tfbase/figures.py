"""Figures written the same way everywhere: matplotlib's Agg backend (no display needed),
no timestamps in the files (equal inputs give equal bytes), atomic writes.

matplotlib is imported on the first figure, never at module import.
"""

from __future__ import annotations

import io
import os

from tfbase.fileio import Output, output_name, write_bytes


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend selected."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_bytes(fig, fmt: str = "png") -> bytes:
    """The figure as PNG, SVG or PDF bytes, identical on every run, and close it."""
    plt = pyplot()
    buffer = io.BytesIO()
    metadata = {"Software": None} if fmt == "png" else {"Date": None}  # no timestamps: same bytes every run
    # SVG element ids are random unless salted.
    with plt.rc_context({"svg.hashsalt": "tfsim"}):
        fig.savefig(buffer, format=fmt, metadata=metadata)
    plt.close(fig)
    return buffer.getvalue()


def save_figure(fig, path: str | os.PathLike | Output) -> None:
    """Write the figure to ``path`` (PNG, or SVG/PDF by extension) atomically; ``path`` may be a
    planned :class:`~tfbase.fileio.Output`."""
    fmt = output_name(path).rsplit(".", 1)[-1].lower()
    write_bytes(path, figure_bytes(fig, fmt if fmt in ("png", "svg", "pdf") else "png"))


def finish_throughput_axes(fig, ax, title: str, *, legend_fontsize: float = 8) -> None:
    """The common end of a throughput plot: examples/s on a y axis from 0, a light grid, a small
    title and legend, tight layout (x label and what is drawn are the caller's)."""
    ax.set_ylabel("throughput (examples/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=legend_fontsize)
    fig.tight_layout()
