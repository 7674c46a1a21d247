"""``tfsim compare``: every method side by side over W, with measurements when given.

Methods: the fine-grained simulation (``tfsim``), and the coarse baselines of the SGD mode
(:mod:`simulate.compare`: Lin et al. and Cynthia for async, TPDS Eqs. 7-10 for sync, ring
all-reduce). Measurements come from a CSV with a ``workers`` column and a ``measured_eps``
(as ``tfsim lab`` writes) or ``throughput_eps`` column; with several lab settings in one
file, ``--setting`` picks one.
"""

from __future__ import annotations

import math
from pathlib import Path

from tfbase.errors import InputError
from tfbase.fileio import atomic_output, write_json

MAX_WORKERS = 1_000_000  # far above any cluster; bounds the integer conversion


def read_measured(path: Path, setting: str | None = None):
    """The measured points of a CSV: a DataFrame with ``workers`` and ``throughput_eps``."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(path, f"not a CSV table ({exc})") from None
    column = "measured_eps" if "measured_eps" in frame else "throughput_eps" if "throughput_eps" in frame else None
    if "workers" not in frame or column is None:
        raise InputError(path, "needs a workers column and a measured_eps (or throughput_eps) column")
    if "setting" in frame:
        labels = frame["setting"].map(str)
        settings = sorted(set(labels))
        if setting is None and len(settings) > 1:
            raise InputError(path, f"holds several settings ({', '.join(settings)}): choose one with --setting")
        if setting is not None:
            if setting not in settings:
                raise InputError(path, f"has no setting {setting!r} (it has {', '.join(settings)})")
            frame = frame[labels == setting]
    workers = pd.to_numeric(frame["workers"], errors="coerce")
    rates = pd.to_numeric(frame[column], errors="coerce")
    if not workers.between(1, MAX_WORKERS).all() or not (workers % 1 == 0).all():
        raise InputError(path, f"workers must be whole numbers from 1 to {MAX_WORKERS}")
    if not (rates > 0).all() or not rates.lt(math.inf).all():
        raise InputError(path, "measured throughputs must be positive")
    return pd.DataFrame({"workers": workers.astype(int), "throughput_eps": rates.astype(float)})


def comparison_table(simulated, baselines, measured=None):
    """Wide table: one row per W, one column per method (examples/s), and the error of each
    method against the measurement where there is one."""
    wide = baselines.pivot(index="workers", columns="model", values="throughput_eps")
    wide.insert(0, "tfsim", simulated.set_index("workers")["throughput_eps"])
    if measured is not None:
        wide.insert(0, "measured", measured.set_index("workers")["throughput_eps"])
        for method in [c for c in wide.columns if c != "measured"]:
            wide[f"error_{method}"] = wide[method] / wide["measured"] - 1
    return wide.reset_index()


def run_cli(args) -> int:
    from simulate.compare import baselines
    from simulate.predict import default_jobs, parse_workers, predict
    from tfprofile.profile_io import load_profile
    from tfbase.figures import save_figure
    from tfsim.plots import throughput_figure
    from tfsim.prediction import resolve_cluster

    profile = load_profile(args.profile)
    cluster = resolve_cluster(args.cluster, args.bandwidth)
    workers = parse_workers(args.workers)
    measured = read_measured(args.measured, args.setting) if args.measured else None
    simulated = predict(profile, cluster, workers=workers, mode=args.mode, steps=args.steps,
                        warmup=min(50, args.steps // 5), cores=args.cores, jobs=args.jobs or default_jobs(),
                        progress=not args.no_progress)
    base = baselines(profile, cluster, workers, args.mode)
    table = comparison_table(simulated, base, measured)
    print(table.to_string(index=False, float_format=lambda x: f"{x:,.3f}"))
    if measured is not None:
        errors = {c[len("error_"):]: float(table[c].abs().mean()) for c in table.columns if c.startswith("error_")}
        print("mean |error| against the measurements: " + ", ".join(
            f"{m} {e * 100:.1f}%" for m, e in sorted(errors.items(), key=lambda kv: kv[1]) if not math.isnan(e)))
    if args.csv:
        with atomic_output(args.csv) as handle:
            table.to_csv(handle, index=False, float_format="%.9g")
    if args.json:
        rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
                for row in table.to_dict(orient="records")]
        write_json(args.json, {"format": "tfsim.comparison/1", "mode": args.mode, "rows": rows})
    if args.plot:
        save_figure(throughput_figure(simulated, baselines=base, measured=measured,
                                      title=f"{profile.meta.get('model') or Path(args.profile).stem}: "
                                            f"tfsim and the coarse baselines ({args.mode} SGD)"), args.plot)
    return 0
