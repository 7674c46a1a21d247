"""Figures: throughput against the number of workers, like ICPE Figs. 13-14."""

from __future__ import annotations

from tfbase.figures import finish_throughput_axes, pyplot


def _label(keys: tuple, names: tuple[str, ...]) -> str:
    return ", ".join(f"{v}" for n, v in zip(names, keys) if v is not None)


def throughput_figure(frame, *, title: str = "", measured=None, baselines=None):
    """Predicted throughput (examples/s) against W, one line per configuration group, with the
    95% confidence band and the saturation point marked. ``measured`` is a frame with
    ``workers`` and ``throughput_eps`` (drawn as points); ``baselines`` one with ``workers``,
    ``model`` and ``throughput_eps`` (dashed lines)."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7.5, 4.6), dpi=120)
    random = frame[frame["policy"].astype(str).str.startswith("random#")] if "policy" in frame else frame.iloc[:0]
    if len(random):
        # Several random orders: one band from the lowest to the highest, and their median.
        stats = random.groupby("workers")["throughput_eps"].agg(["min", "median", "max"]).reset_index()
        band, = ax.plot(stats["workers"], stats["median"], ls="-.", lw=1.2,
                        label=f"random ({random['policy'].nunique()} seeds, median and range)")
        ax.fill_between(stats["workers"], stats["min"], stats["max"], color=band.get_color(), alpha=0.12, lw=0)
        frame = frame.drop(random.index)
    varying = [c for c in ("policy", "sharing", "mode", "servers") if c in frame and frame[c].nunique() > 1]
    groups = frame.groupby(varying, sort=False) if varying else [((), frame)]
    for keys, group in groups:
        keys = keys if isinstance(keys, tuple) else (keys,)
        group = group.sort_values("workers")
        label = _label(keys, tuple(varying)) or "predicted"
        line, = ax.plot(group["workers"], group["throughput_eps"], marker="o", ms=3.5, lw=1.6, label=label)
        low = group["throughput_eps"] - group["ci95_eps"].clip(upper=group["throughput_eps"])
        ax.fill_between(group["workers"], low, group["throughput_eps"] + group["ci95_eps"], color=line.get_color(),
                        alpha=0.18, lw=0)
        sat = group[group["saturated"]]
        if len(sat):
            ax.plot(sat["workers"], sat["throughput_eps"], marker="*", ms=13, color=line.get_color(), ls="none")
    if baselines is not None and len(baselines):
        for model, group in baselines.groupby("model", sort=False):
            group = group.sort_values("workers")
            ax.plot(group["workers"], group["throughput_eps"], ls="--", lw=1.1, label=str(model))
    if measured is not None and len(measured):
        ax.plot(measured["workers"], measured["throughput_eps"], ls="none", marker="s", ms=6, color="black",
                label="measured")
    ax.set_xlabel("workers W")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # worker counts are whole
    finish_throughput_axes(fig, ax, title or "predicted throughput (band: 95% CI; star: saturation point)")
    return fig
