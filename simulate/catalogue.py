"""Which cluster to rent: predictions over a catalogue of instance types (docs/model.md §11).

A catalogue is a small TOML file, one ``[[type]]`` table per instance type::

    [[type]]
    name = "c6in.2xlarge"
    price = 0.45          # $ per hour
    link = "25gbit"       # its network
    compute_scale = 1.0   # its computation time relative to the profiled host (0.5: twice as fast)

``plan_catalogue`` predicts every type as the workers' and the parameter servers' host (one
type for the whole cluster) with the cluster's calibration at the type's link rate (a
what-if, as ``bandwidth_Bps``) and the profile's computation scaled, then adds each row's cost
(:mod:`simulate.planning`). Every type's sweep is checked before any runs, and all run as one
batch (:func:`simulate.sweep.run_sweeps`). The cheapest that meets a target is :func:`simulate.cheapest` of it.
"""

from __future__ import annotations

import dataclasses
import math

from simulate.planning import Prices, add_costs
from simulate.sweep import plan_sweep, run_sweeps
from simulate.whatif import check_compute_scale, scale_compute
from tfbase.errors import InputError, UsageError
from tfbase.fileio import read_input
from tfbase.units import parse_rate

CATALOGUE_LIMIT = 1 << 20  # a catalogue is a few dozen lines
MAX_TYPES = 64  # each type is a whole sweep


@dataclasses.dataclass(frozen=True)
class InstanceType:
    """One rentable host: its name, $ per hour, link rate (bytes/s) and computation scale."""

    name: str
    price_usd_per_h: float
    link_Bps: float
    compute_scale: float = 1.0

    def __post_init__(self) -> None:
        Prices(self.price_usd_per_h)  # the price's range check
        if not (math.isfinite(self.link_Bps) and self.link_Bps > 0):
            raise UsageError("link", f"must be a positive rate, not {self.link_Bps}")
        check_compute_scale(self.compute_scale)


def read_catalogue(path) -> list[InstanceType]:
    """The instance types of a TOML catalogue; errors name the file and the type.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "types.toml")
    >>> _ = open(path, "w").write('[[type]]\\nname = "small"\\nprice = 0.5\\nlink = "1gbit"\\n')
    >>> read_catalogue(path)
    [InstanceType(name='small', price_usd_per_h=0.5, link_Bps=125000000.0, compute_scale=1.0)]
    """
    import tomllib

    try:
        document = tomllib.loads(read_input(path, limit=CATALOGUE_LIMIT, what="catalogue", gunzip=False)
                                 .decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(path, "is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as err:
        raise InputError(path, f"is not TOML: {err}") from None
    tables = document.get("type")
    if not isinstance(tables, list) or not tables:
        raise InputError(path, "has no [[type]] table")
    if len(tables) > MAX_TYPES:
        raise InputError(path, f"has {len(tables)} types, more than {MAX_TYPES}")
    types = []
    for k, table in enumerate(tables, start=1):
        name = table.get("name", f"type {k}") if isinstance(table, dict) else f"type {k}"
        try:
            unknown = set(table) - {"name", "price", "link", "compute_scale"}
            if unknown:
                raise UsageError("catalogue", f"unknown key(s) {', '.join(sorted(unknown))}")
            for key in ("name", "price", "link"):
                if key not in table:
                    raise UsageError("catalogue", f"needs {key}")
            types.append(InstanceType(str(table["name"]), table["price"], parse_rate(str(table["link"]), "link"),
                                      table.get("compute_scale", 1.0)))
        except (UsageError, TypeError) as err:
            raise InputError(path, f"{name}: {err}") from None
    names = [t.name for t in types]
    if len(set(names)) != len(names):
        raise InputError(path, "two types have the same name")
    return types


@dataclasses.dataclass(frozen=True, eq=False)
class CataloguePlan:
    """The checked sweeps of a catalogue (:func:`plan_types`), one per instance type, ready to
    run as one batch (:meth:`run`)."""

    types: tuple[InstanceType, ...]
    sweeps: tuple  # simulate.sweep.Sweep, one per type
    servers: int  # the parameter servers each configuration rents
    examples: float | None = None

    def run(self, *, jobs: int = 1, progress: bool = False, executor=None, journal=None, resume: bool = False):
        """Predict every type and cost each row; one DataFrame with an ``instance`` column.

        ``jobs``, ``progress``, ``executor``, ``journal`` and ``resume`` are
        :func:`simulate.sweep.run_sweeps`': every type's configurations share one pool (or
        Dask cluster), one progress bar and one journal.
        """
        import pandas as pd

        frames = []
        for kind, frame in zip(self.types, run_sweeps(self.sweeps, jobs=jobs, progress=progress, executor=executor,
                                                      journal=journal, resume=resume)):
            frame = add_costs(frame, Prices(kind.price_usd_per_h, kind.price_usd_per_h), servers=self.servers,
                              examples=self.examples)
            frame.insert(0, "instance", kind.name)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)


def plan_types(profile, cluster, types: list[InstanceType], *, workers, examples: float | None = None,
               **sweep_options) -> CataloguePlan:
    """Check the sweep of every type of ``types`` as the whole cluster's host type (its link
    rate as ``bandwidth_Bps``, its computation scale on the profile) before any runs;
    ``sweep_options`` go to :func:`simulate.sweep.plan_sweep`."""
    if not types:
        raise UsageError("catalogue", "has no instance type")
    sweeps = tuple(plan_sweep(scale_compute(profile, worker=kind.compute_scale, ps=kind.compute_scale), cluster,
                              workers=workers, bandwidth_Bps=kind.link_Bps, **sweep_options) for kind in types)
    return CataloguePlan(tuple(types), sweeps, max(profile.graph.n_servers, 1), examples)


def plan_catalogue(profile, cluster, types: list[InstanceType], *, workers, examples: float | None = None,
                   jobs: int = 1, progress: bool = False, executor=None, journal=None, resume: bool = False,
                   **sweep_options):
    """Predict every type of ``types`` as the whole cluster's host type and cost each row; one
    DataFrame with an ``instance`` column (:func:`plan_types`, then :meth:`CataloguePlan.run`).

    ``sweep_options`` go to :func:`simulate.sweep.plan_sweep` (steps, warm-up, seed, mode, ...);
    ``executor`` runs the configurations on a Dask cluster (``"dask://HOST:PORT"``), and
    ``journal`` (with ``resume``) records them to resume a stopped plan, as in
    :func:`simulate.predict`.
    """
    plan = plan_types(profile, cluster, types, workers=workers, examples=examples, **sweep_options)
    return plan.run(jobs=jobs, progress=progress, executor=executor, journal=journal, resume=resume)
