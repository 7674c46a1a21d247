"""What every subcommand shares: the parser class, argparse value types, and option groups.

Option groups are added by one function each, so that predict, compare and report spell
the same option the same way, with the same default and help.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), as every other tfsim error."""

    def error(self, message: str) -> None:
        self.exit(2, f"tfsim: error: {message} (see {self.prog} --help)\n")

# How variables are placed over PS tasks (collect, lab, predict --placement); the first is TensorFlow's default.
PLACEMENT_CHOICES = ("round_robin", "greedy")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer of at least 0."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {value}")
    return value


def jobs_count(text: str) -> int:
    """argparse type: a number of worker processes, 1 to :data:`simulate.workers.MAX_JOBS`."""
    from simulate.workers import MAX_JOBS

    value = positive_int(text)
    if value > MAX_JOBS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_JOBS}, not {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    """--cluster/--bandwidth/--workers/--cores, as predict, compare and report take them."""
    p.add_argument("--cluster", type=Path, metavar="CLUSTER.json", help="calibrated cluster (tfsim calibrate)")
    p.add_argument("--bandwidth", metavar="RATE",
                   help="link bandwidth; without --cluster: no parsing overhead, unlimited window (a warning says "
                        "so); with --cluster: a what-if at this bandwidth")
    add_latency_option(p)
    p.add_argument("--workers", default="1-16", help="worker counts (default: 1-16)")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("--cores", type=float, help="all tasks share one host with this many cores (co-location)")
    p.add_argument("--ps-cores", type=float, metavar="N",
                   help="every task on a host of its own: each PS host has N cores, shared by the PS ops of all "
                        "workers (with --worker-cores, or alone: workers unlimited); not with --cores")
    p.add_argument("--worker-cores", type=float, metavar="N",
                   help="every task on a host of its own: each worker host has N cores (see --ps-cores)")


def add_latency_option(p: argparse.ArgumentParser) -> None:
    """--latency: a what-if one-way link latency, both directions or each."""
    p.add_argument("--latency", metavar="TIME|down=TIME,up=TIME",
                   help="what-if: every transfer's bytes and every RPC message reach the other end this much later "
                        "(5ms, 250us; one-way, added to the calibration's), the link free meanwhile; a grpc window "
                        "update waits for both ways (default: 0)")


def with_latency(cluster, text: str | None):
    """``cluster`` with --latency's what-if latency (unchanged without one)."""
    from simulate.cluster import parse_latency

    return cluster if not text else cluster.with_latency(*parse_latency(text))


def task_hosts(args: argparse.Namespace):
    """The library's ``colocation`` for --ps-cores/--worker-cores (a host per task), or None."""
    from simulate.config import TaskHosts
    from tfbase.errors import UsageError

    if args.ps_cores is None and args.worker_cores is None:
        return None
    if args.cores is not None:
        raise UsageError("cores", "give one shared host (--cores) or a host per task (--ps-cores, --worker-cores), "
                                  "not both")
    return TaskHosts(worker_cores=args.worker_cores, ps_cores=args.ps_cores)


def add_mode_option(p: argparse.ArgumentParser) -> None:
    """--mode: how the workers synchronise."""
    p.add_argument("--mode", default="async", choices=("async", "sync", "allreduce"), help="default: async")


def add_measured_options(p: argparse.ArgumentParser) -> None:
    """--measured/--setting: measured throughput to compare against (tfsim lab's results.csv)."""
    p.add_argument("--measured", type=Path, metavar="LAB.csv", help="measured throughput (workers, measured_eps)")
    p.add_argument("--setting", help="which setting of a lab results.csv with several")


def add_steps_options(p: argparse.ArgumentParser, *, steps: int) -> None:
    """--steps/--warmup: simulated steps per worker and how many are dropped."""
    p.add_argument("--steps", type=positive_int, default=steps, help=f"steps per worker (default: {steps})")
    p.add_argument("--warmup", type=non_negative_int, default=50, help="steps dropped per worker (default: 50)")


def add_seed_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed, 0 to 2^32-1 (default: 0)")


def add_replicas_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replicas", type=positive_int, default=1, metavar="K",
                   help="simulate each configuration K times, seeds --seed .. --seed+K-1, and give their mean, t "
                        "interval and range: with several workers on a link a run can settle into one of several "
                        "phase patterns, which one run's interval does not show (default: 1)")


def add_tie_order_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tie-order", choices=("index", "recorded"), default="index",
                   help="how the grpc, http2 and fifo models queue transfers (and the PS ops that send them) that "
                        "become ready at one instant: index (default: ascending op index, the engine's own order) "
                        "or recorded (in the profiled run's order, each parameter transfer by its median recorded "
                        "start; op-index order for a profile that records none). Not the default: on the lab it "
                        "made the errors larger (docs/model.md §2.4)")


def add_enforcement_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--enforcement", choices=("work-conserving", "strict"), default="work-conserving",
                   help="how the priority scheduler enforces an order: work-conserving (default: the lowest number "
                        "among the transfers waiting goes first, none waits for one not yet ready) or strict "
                        "(TicTac's: a transfer starts only after every lower-numbered transfer of its worker and "
                        "link has started)")


def add_jobs_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=jobs_count, help="parallel processes, at most 256 (default: the machine's cores, "
                                                   "at most 8)")


def add_sweep_options(p: argparse.ArgumentParser) -> None:
    """--executor, --journal and --resume: where a sweep's configurations run, and resuming one
    that was stopped (predict, compare, report and plan)."""
    group = p.add_argument_group("large sweeps")
    group.add_argument("--executor", metavar="local|dask://HOST:PORT",
                       help="where the configurations run: local (default: --jobs processes here) or the scheduler "
                            "of a running Dask cluster, whose workers have tfsim installed (pip install "
                            "'tfsim[dask]'); the numbers are the same either way")
    group.add_argument("--journal", type=Path, metavar="FILE",
                       help="record each configuration in FILE as it finishes, so that a run that is stopped "
                            "(Ctrl-C, SIGTERM, a killed process) can be resumed with --resume; FILE is not an "
                            "output: it stays as it is when the run fails")
    group.add_argument("--resume", action="store_true",
                       help="with --journal: take the configurations FILE already holds and simulate only the rest; "
                            "the outputs are those of an uninterrupted run. A journal of another sweep (another "
                            "profile, cluster or option) is refused")


def sweep_run(args: argparse.Namespace, outputs=None) -> dict:
    """--executor, --journal and --resume as the library's ``executor``, ``journal`` and
    ``resume``, the executor's address and the journal's path checked (not yet against a
    sweep: :func:`sweep_journal`)."""
    from simulate.executors import parse_executor
    from tfbase.errors import InputError, UsageError

    if args.resume and args.journal is None:
        raise UsageError("resume", "needs --journal FILE, the journal to resume from")
    if args.journal is not None and outputs is not None:
        taken = outputs.output_at(args.journal)
        if taken is not None:
            raise InputError(args.journal, f"is also the {taken.what}: the journal needs a file of its own")
    return {"executor": parse_executor(args.executor), "journal": args.journal, "resume": bool(args.resume)}


def sweep_journal(run: dict, sweeps) -> dict:
    """``run`` (:func:`sweep_run`) checked against ``sweeps`` before they run: the journal (one
    of another sweep, or one holding rows without --resume, exits 2 here; a line says what a
    resumed run takes from it) and, when anything is left to simulate, the executor's
    scheduler (an unreachable one exits 2 here)."""
    from simulate.sweep_journal import open_journal
    from tfsim.cli.console import console

    journal = None
    if run["journal"] is not None:
        journal = open_journal(run["journal"], sweeps, resume=run["resume"])
        if journal.finished:
            console.say(f"resuming from {journal.path}: {journal.finished} of {journal.total} configurations done")
        run = {**run, "journal": journal}
    if journal is None or journal.finished < journal.total:
        run["executor"].check()
    return run


def add_output_options(p: argparse.ArgumentParser) -> None:
    """--jobs and the table, plot and progress options of predict and compare."""
    add_jobs_option(p)
    p.add_argument("--json", type=Path, metavar="OUT.json", help="write the table as JSON")
    p.add_argument("--csv", type=Path, metavar="OUT.csv", help="write the table as CSV")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="plot throughput against W")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
