"""The ``tfsim`` command line: one program, a subcommand per job, one module per subcommand.

Each subcommand module has ``register(subparsers)`` and ``run(args) -> int``. ``run`` imports
the library it drives when it runs, so ``tfsim --help`` and ``tfsim X --help`` stay fast (no
numpy, pandas, numba or TensorFlow).

This package is the only place that knows the option names. The library names the
*parameter* at fault in its errors (``workers: must be between 1 and 1024``); :func:`main`
turns a parameter into the option that sets it (``--workers: ...``).

Exit status: 0 on success, 2 on bad input or usage (one line on stderr), 1 when a run
fails or on an internal error, 130 on Ctrl-C (SIGINT), 143 on SIGTERM, 129 on SIGHUP. A
signal stops the command at once: simulations run in child processes that are killed, the
outputs staged so far are removed (:mod:`tfbase.signals`, :mod:`simulate.workers`,
:mod:`tfbase.fileio`).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from tfbase.errors import InputError, Terminated, TfsimError, TfsimWarning
from tfbase.signals import received_stop_signal, stop_exception, stop_on_signals
from tfsim import __version__
from tfsim.cli import calibrate, collect, compare, demo, lab, order, plan, predict, profile, report
from tfsim.cli.console import console
from tfsim.cli.options import Parser

DESCRIPTION = """\
Predict how fast a TensorFlow parameter-server training job runs on W workers,
from a 1-PS/1-worker profiling run.

workflow:
  tfsim collect   run a real 1-PS/1-worker TF1 job here and trace it
  tfsim profile   turn the traces into an op DAG profile; summarise a profile
  tfsim calibrate fit bandwidth, HTTP/2 window and parsing overhead from a captured run
  tfsim order     TicTac transfer priorities (TIC, TAC) and scheduling efficiency
  tfsim predict   simulate the job on W workers and M servers: throughput table and plot
  tfsim compare   the simulation beside the coarse analytical baselines (and measurements)
  tfsim report    one self-contained HTML page: calibration, job, throughput over W, orders, steps
  tfsim lab       measure real W-worker throughput on emulated clusters; publish the error
  tfsim demo      summary, prediction, orderings and baselines on the bundled real data
"""

COMMANDS = (collect, profile, calibrate, order, predict, compare, report, plan, lab, demo)

# Library parameters whose option is not simply ``--`` + the parameter's name (with dashes).
PARAMETER_OPTIONS = {
    "bandwidth_Bps": "--bandwidth",
    "flow_cap_Bps": "--flow-cap",
    "servers": "--ps",
    "colocation": "--ps-cores",
    "start_offsets_s": "--stagger",
    "timeout_s": "--timeout",
    "connect_timeout_s": "--connect-timeout",
    "batch_size": "--batch",
    "warmup_steps": "--warmup",
    "gantt_workers": "--gantt-workers",
    "rate_bit": "--rate",
    "ps_tasks": "--ps",
    "target_eps": "--target",
    "deadline_h": "--deadline",
    "queue_ms": "--queue",
    "queue_bytes": "--queue",
    "buffer_bytes": "--buffer",
    "congestion_control": "--cc",
    "delay_ms": "--latency",
    "latency_s": "--latency",
    "output": "-o",
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tfsim", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tfsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


def option_for(parameter: str | None, parser: argparse.ArgumentParser) -> str | None:
    """The option of ``parser`` that sets the library parameter ``parameter``, or None."""
    if not parameter or not parameter.isidentifier():  # a file, or already an option
        return None
    options = {opt for action in parser._actions for opt in action.option_strings}
    candidates = [PARAMETER_OPTIONS.get(parameter), "--" + parameter.replace("_", "-")]
    for action in parser._actions:  # an option whose destination is the parameter (--ps -> servers)
        if action.dest == parameter and action.option_strings:
            candidates.append(action.option_strings[-1] if action.option_strings[-1].startswith("--")
                              else action.option_strings[0])
    return next((c for c in candidates if c in options), None)


def _as_option(err: InputError, parser: argparse.ArgumentParser) -> str:
    """The error's one line, with a parameter name replaced by its option."""
    option = option_for(err.source, parser)
    return f"{option}: {err.problem}" if option else str(err)


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    return parser


def entry() -> int:
    """The ``tfsim`` program: :func:`main`, then exit with its status. A stop signal that comes
    once the command is done (the interpreter shutting down, the outputs committed) is ignored:
    the status is what the command did."""
    return main(exiting=True)


def main(argv: Sequence[str] | None = None, *, exiting: bool = False) -> int:
    """Run one command line; its exit status. ``exiting``: the process ends after this (stop
    signals are ignored once the command is done, instead of restoring their handlers)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command_parser = _subparser(parser, args.command)
    default_showwarning = warnings.showwarning
    console.reset()

    def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, TfsimWarning):
            console.warn(_as_option(message, command_parser) if isinstance(message, TfsimWarning) else str(message))
        else:
            console.say(warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"))

    warnings.showwarning = show_warning
    try:
        with stop_on_signals(then_ignore=exiting):
            try:
                return _run(args, command_parser)
            except KeyboardInterrupt as stop:
                return _stopped(stop)
            except Terminated as stop:
                return _stopped(stop)
            except Exception:
                signum = received_stop_signal()
                if signum is None:
                    raise
                # Compiled code replaced the signal's exception with its own error on the way out.
                return _stopped(stop_exception(signum))
    finally:
        warnings.showwarning = default_showwarning


def _stopped(stop: KeyboardInterrupt | Terminated) -> int:
    """Report a stop signal; the command's exit status (130 for Ctrl-C, 128 + the signal's number
    otherwise)."""
    console.drop()
    if isinstance(stop, KeyboardInterrupt):
        print("tfsim: interrupted", file=sys.stderr)
        return 130
    print(f"tfsim: terminated by {stop.signal_name}", file=sys.stderr)
    return stop.exit_status


def _run(args, command_parser: argparse.ArgumentParser) -> int:
    """Run the command; its exit status (signals are left to :func:`main`)."""
    try:
        status = args.handler(args)
    except InputError as err:
        console.drop()
        print(f"tfsim: error: {_as_option(err, command_parser)}", file=sys.stderr)
        return 2
    except TfsimError as err:  # the run failed (a task, a child process), not its input
        console.release()
        print(f"tfsim: {args.command} failed: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of stdout went away (| head): nothing more to say
        console.drop()
        return 0
    console.release()
    return status
