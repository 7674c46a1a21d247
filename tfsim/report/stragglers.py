"""The report's straggler section: async and sync SGD side by side, with and without slow workers.

In async SGD a straggler costs its own share of the throughput: the others do not wait for it.
In sync SGD the barrier makes every worker wait for the slowest, so one slow worker holds
everyone back (docs/model.md §4.6). The section predicts both modes with the cluster's default
transfer model, once with every worker at the profiled speed and once with the speeds asked
for, each run exactly as ``tfsim predict --mode MODE [--worker-speed SPEEDS] --transfer
REFERENCE`` with the report's workers, steps, warm-up, seed and hosts runs it.
"""

from __future__ import annotations

import dataclasses

from simulate.config import Mode, WorkerSpeeds
from simulate.sweep import Sweep, plan_sweep

# The two modes the section compares, whatever mode the rest of the report is for.
STRAGGLER_MODES = (Mode.ASYNC, Mode.SYNC)
COLUMNS = ("workers", "mode", "throughput_even_eps", "ci95_even_eps", "throughput_stragglers_eps",
           "ci95_stragglers_eps", "loss", "slowest_speed", "mean_speed")


@dataclasses.dataclass(frozen=True, eq=False)
class StragglerPlan:
    """The checked sweeps of the section: per mode, the even cluster and the one with stragglers.

    Attributes
    ----------
    text : str
        The speeds as asked for (``--worker-speed``'s text).
    speeds : WorkerSpeeds
        The same, parsed.
    sweeps : tuple of (Mode, Sweep, Sweep)
        Per mode: the sweep with every worker at speed 1, and the one with ``speeds``.
    """

    text: str
    speeds: WorkerSpeeds
    sweeps: tuple[tuple[Mode, Sweep, Sweep], ...]

    @property
    def all_sweeps(self) -> tuple[Sweep, ...]:
        """Every sweep of the section, in the order :func:`straggler_table` takes their tables:
        per mode, the even one, then the one with stragglers."""
        return tuple(sweep for _, even, slowed in self.sweeps for sweep in (even, slowed))


def plan_stragglers(profile, cluster, *, text: str, workers: list[int], transfer: str, steps: int, warmup: int,
                    seed: int, cores=None, colocation=None, tie_order="index") -> StragglerPlan:
    """Check the section's sweeps before anything runs (a bad speed fails naming ``worker_speed``).

    Parameters
    ----------
    profile, cluster
        As the report reads them.
    text : str
        The speeds: ``"1,1,1,0.5"`` or ``"lognormal:SIGMA"`` (drawn with ``seed``).
    workers : list of int
        The worker counts of the report.
    transfer : str
        The transfer model predicted (the report's reference).
    steps, warmup, seed : int
        As the report's prediction.
    cores, colocation
        The hosts, as the report's prediction has them.
    tie_order : {"recorded", "index"} or TieOrder
        As the report's prediction (docs/model.md §2.4).

    Returns
    -------
    StragglerPlan

    Examples
    --------
    >>> import simulate, tfprofile
    >>> profile = tfprofile.load_profile("data/profiles/tiny.npz")
    >>> cluster = simulate.load_cluster("data/clusters/lab-1gbit.json")
    >>> plan = plan_stragglers(profile, cluster, text="1,0.5", workers=[1, 2], transfer="grpc", steps=40,
    ...                        warmup=5, seed=0)
    >>> [mode.value for mode, _, _ in plan.sweeps]
    ['async', 'sync']
    """
    speeds = WorkerSpeeds.parse(text, seed)
    sweeps = []
    for mode in STRAGGLER_MODES:
        even, slowed = (plan_sweep(profile, cluster, workers=workers, mode=mode, transfer=[transfer], steps=steps,
                                   warmup=warmup, seed=seed, cores=cores, colocation=colocation, worker_speed=speed,
                                   tie_order=tie_order)
                        for speed in (None, speeds))
        sweeps.append((mode, even, slowed))
    return StragglerPlan(text, speeds, tuple(sweeps))


def run_stragglers(plan: StragglerPlan, *, jobs: int = 1, progress: bool = False, executor=None):
    """Run the section's sweeps (:attr:`StragglerPlan.all_sweeps`, as one batch:
    :func:`simulate.sweep.run_sweeps`, ``executor`` as there); :func:`straggler_table` of them."""
    from simulate.sweep import run_sweeps

    return straggler_table(plan, run_sweeps(plan.all_sweeps, jobs=jobs, progress=progress, executor=executor))


def straggler_table(plan: StragglerPlan, frames):
    """One row per (mode, W) from the tables of :attr:`StragglerPlan.all_sweeps`: both
    throughputs, and the loss.

    ``loss`` is the fraction of the even cluster's throughput the stragglers cost (0.2: a fifth
    fewer examples/s); ``slowest_speed`` and ``mean_speed`` describe the W workers' speeds.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`COLUMNS`, async rows first, W ascending within a mode.
    """
    import pandas as pd

    rows = []
    for k, (mode, _, _) in enumerate(plan.sweeps):
        even = frames[2 * k].set_index("workers")
        slowed = frames[2 * k + 1].set_index("workers")
        for w in sorted(even.index):
            speeds = plan.speeds(int(w))
            rows.append({
                "workers": int(w), "mode": mode.value,
                "throughput_even_eps": float(even.at[w, "throughput_eps"]),
                "ci95_even_eps": float(even.at[w, "ci95_eps"]),
                "throughput_stragglers_eps": float(slowed.at[w, "throughput_eps"]),
                "ci95_stragglers_eps": float(slowed.at[w, "ci95_eps"]),
                "loss": 1.0 - float(slowed.at[w, "throughput_eps"]) / float(even.at[w, "throughput_eps"]),
                "slowest_speed": min(speeds), "mean_speed": sum(speeds) / len(speeds)})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def straggler_figure(table, *, title: str):
    """Throughput against W for async and sync, with and without the stragglers.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`straggler_table`'s rows.
    title : str

    Returns
    -------
    matplotlib.figure.Figure
    """
    from tfbase.figures import finish_throughput_axes, pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    colours = {Mode.ASYNC.value: "#2b6cb0", Mode.SYNC.value: "#c05621"}
    for mode, rows in table.groupby("mode", sort=False):
        ax.plot(rows["workers"], rows["throughput_even_eps"], "o-", color=colours[mode], label=f"{mode}, even")
        ax.plot(rows["workers"], rows["throughput_stragglers_eps"], "s--", color=colours[mode],
                label=f"{mode}, with stragglers")
    ax.set_xlabel("workers W")
    finish_throughput_axes(fig, ax, title)
    return fig


def straggler_document(plan: StragglerPlan, table) -> dict:
    """The section's numbers for ``report.json``: the speeds asked for, those of the largest W,
    and the rows of :func:`straggler_table` (numbers as ``tfsim predict --json`` writes them, so
    that the two compare equal)."""
    from tfsim.prediction import prediction_rows

    largest = int(table["workers"].max())
    return {"worker_speed": plan.text, "speeds_at_largest_w": list(plan.speeds(largest)),
            "rows": prediction_rows(table)}
