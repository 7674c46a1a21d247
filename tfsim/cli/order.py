"""``tfsim order``: TicTac transfer priorities for a profile, and its scheduling efficiency.

Writes TicTac's priority file (``name<TAB>priority``, one line per recv) and prints the
scheduling efficiency E and speedup bound S (TicTac Eqs. 1-4) of the profiled steps.
See :mod:`tfprofile.tictac` for the algorithms.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from tfbase.errors import InputError
from tfsim.cli.options import non_negative_int, positive_float

DESCRIPTION = """\
Compute TicTac priorities for the parameter transfers (PS -> worker recv ops that carry
bytes) of a profile and write them as TicTac's priority file: one line per recv,
'name<TAB>priority', lower numbers transferred first, numbered 0..n-1 per parameter server.
Control transfers (0-byte recvs: a control edge's token) are not ranked: each inherits the
priority of the parameter read it is cut from (the same PS op sends both) and is listed
apart, after the parameter transfers. Also print the scheduling
efficiency E = (U - m)/(U - L) and the speedup bound S = (U - L)/L of the profiled steps
(mean and median), where U is the sum of all op durations of a step, L the busiest
resource's sum and m the step's makespan (TicTac Eqs. 1-4).

policies:
  tic          timing-independent (TicTac Alg. 2): the DAG alone; equal M+ share a rank
  tac          timing-aware (TicTac Alg. 3): uses each op's minimum profiled duration
  reverse_tic  TIC's order reversed (a deliberately bad order, for comparison)
  random       a random permutation (see --seed)
  recorded     the order the profiled run started its transfers in (median recorded
               start over the profiled steps; never recorded: last), the reference
               that tfsim predict and tfsim report measure gains against
"""

EPILOG = """\
With --bandwidth, TAC times every transfer as size/bandwidth instead of its recorded
duration; E and S always use the recorded durations. On a profile recorded over loopback,
concurrent transfers overlap, so L can exceed the makespan and E exceed 1.

example:
  tfsim order data/profiles/resnet50.npz --policy tac -o resnet50.tac.tsv --json
"""


def register(subparsers) -> argparse.ArgumentParser:
    """Register ``tfsim order`` on ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    from tfprofile.tictac import POLICIES

    p = subparsers.add_parser(
        "order", help="TicTac transfer priorities (TIC, TAC) and scheduling efficiency of a profile",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("profile", type=Path, metavar="PROFILE", help="profile file (.npz) from 'tfsim profile'")
    p.add_argument("--policy", required=True, choices=POLICIES, help="ordering heuristic (see above)")
    p.add_argument("-o", "--output", required=True, type=Path, metavar="PRIORITIES.tsv",
                   help="priority file to write (TicTac's format)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of text")
    p.add_argument("--bandwidth", type=positive_float, metavar="BYTES_PER_S",
                   help="for tac: time transfers as size/BYTES_PER_S instead of their recorded durations")
    p.add_argument("--seed", type=non_negative_int, default=0, help="for random: the seed (default: 0)")
    p.set_defaults(handler=run)
    return p


def _oracle_name(args) -> str | None:
    if args.policy != "tac":
        return None
    return "transfers: size/bandwidth; others: min profiled" if args.bandwidth else "min profiled duration"


def run(args) -> int:
    """Handle ``tfsim order``: write the priority file, print E and S. Returns the exit status."""
    from tfbase.errors import UsageError
    from tfbase.fileio import Outputs
    from tfprofile import tictac
    from tfprofile.profile_io import load_profile
    from tfsim.cli.console import console

    with Outputs() as outputs:
        output = outputs.file(args.output, "-o")
        if args.json and outputs.to_stdout:
            raise UsageError("--json", "prints a JSON object on standard output, which -o - already writes to")
        console.text_to_stderr = outputs.to_stdout
        profile = load_profile(args.profile)
        if len(tictac.recv_ops(profile.graph)) == 0:
            raise InputError(args.profile, tictac.NO_RECVS)
        ordering = tictac.compute_ordering(profile, args.policy, bandwidth_Bps=args.bandwidth, seed=args.seed)
        tictac.write_priorities(output, ordering)
        outputs.commit()
    summary = tictac.profile_efficiency(profile, args.bandwidth).summary()
    servers = sorted({int(s) for s in ordering.server})
    report = {
        "profile": str(args.profile),
        "policy": args.policy,
        "priorities": str(args.output),
        "ops": profile.graph.n_ops,
        "recvs": len(ordering),
        "control_transfers": _control_rows(profile.graph, ordering),
        "servers": len(servers),
        "bandwidth_Bps": args.bandwidth,
        "time_oracle": _oracle_name(args),
        "seed": args.seed if args.policy == "random" else None,
        **summary,
    }
    if args.json:
        print(json.dumps(report, indent=2, allow_nan=False))
        return 0
    print(_format_text(report, summary), file=console.out)
    return 0


def _control_rows(graph, ordering) -> list[dict]:
    """The control transfers, each with the priority it inherits and the read it inherits it from."""
    return [{"name": str(name), "priority": int(priority) if math.isfinite(priority) else None,
             "inherited_from": str(graph.name[source]) if source >= 0 else None}
            for name, priority, source in zip(ordering.control_name, ordering.control_priority,
                                              ordering.control_source, strict=True)]


def _number(value, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def _control_lines(controls: list[dict]) -> list[str]:
    if not controls:
        return []
    without = sum(c["priority"] is None for c in controls)
    lines = [f"{len(controls)} control transfer{'s' if len(controls) != 1 else ''} (0 bytes) not ranked, listed after "
             "them with the priority of the parameter read each is cut from"
             + (f" ({without} without one: they go last)" if without else "") + ":"]
    lines += [f"  {c['name']}\t{'none' if c['priority'] is None else c['priority']}"
              f"\t(from {c['inherited_from'] or '-'})" for c in controls]
    return lines


def _format_text(report: dict, summary: dict) -> str:
    eff, spd = summary["efficiency"], summary["speedup"]
    lines = [
        f"wrote {report['recvs']} {report['policy']} priorities ({report['servers']} parameter server"
        f"{'s' if report['servers'] != 1 else ''}) to {report['priorities']}",
        *_control_lines(report["control_transfers"]),
        f"scheduling efficiency E over {summary['steps']} profiled steps: "
        f"mean {_number(eff['mean'])}, median {_number(eff['median'])}",
        f"speedup bound S: mean {_number(spd['mean'])}, median {_number(spd['median'])}",
        f"bounds: U (all ops) median {_number(summary['upper_s']['median'])} s, "
        f"L ({summary['bottleneck']}) median {_number(summary['lower_s']['median'])} s, "
        f"makespan median {_number(summary['makespan_s']['median'])} s",
    ]
    if summary["times"] == "recorded":
        lines.append("note: E and S from the trace's recorded durations; give --bandwidth (the link rate) for "
                     "TicTac's dedicated times (transfers at size/B)")
    if summary["steps_outside_bounds"]:
        lines.append(f"note: in {summary['steps_outside_bounds']} of {summary['steps']} steps the makespan lies "
                     "outside [L, U]: E is left out there")
    return "\n".join(lines)
