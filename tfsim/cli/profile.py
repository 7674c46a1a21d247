"""``tfsim profile``: build an op-DAG profile from a run directory or traces; summarise a profile."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tfbase.errors import InputError
from tfsim.cli.options import positive_int


def register(sub) -> None:
    p = sub.add_parser(
        "profile", help="build an op-DAG profile from a run directory or traces; summarise a profile",
        description="Build a profile (op DAG + per-step durations, format tfsim.profile/1) from a run "
                    "directory or from RunMetadata files (.pb, .pbtxt, optionally .gz) or Chrome trace JSON "
                    "of one 1-PS/1-worker run; or, with --summary, print what a profile holds.",
    )
    p.add_argument("inputs", nargs="+", metavar="RUN_DIR|TRACE|PROFILE")
    p.add_argument("-o", "--output", type=Path, metavar="PROFILE", help="profile file to write (.npz)")
    p.add_argument("--summary", action="store_true", help="summarise the PROFILE given as input")
    p.add_argument("--json", action="store_true", help="with --summary: one JSON object on stdout")
    p.add_argument("--batch", type=positive_int, help="batch size, for trace files outside a run directory")
    p.add_argument("--variables", type=Path, metavar="FILE",
                   help="variables.json, for trace files outside a run directory")
    p.set_defaults(handler=run)


def run(args) -> int:
    from tfbase.fileio import Outputs
    from tfprofile import api
    from tfprofile.summary import format_summary, summarize

    if args.summary:
        if len(args.inputs) != 1:
            raise InputError("--summary", "takes exactly one PROFILE")
        if args.output is not None:
            raise InputError("-o", "writes a profile; --summary reads one: give one of them")
        summary = summarize(api.load_profile(args.inputs[0]))
        print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
        return 0
    if args.output is None:
        raise InputError("-o", "give the profile file to write (-o PROFILE), or --summary to read one")
    with Outputs() as outputs:
        output = outputs.file(args.output, "-o", binary=True)
        profile = api.read_profile(args.inputs, batch_size=args.batch, variables=args.variables)
        api.save_profile(profile, output)
        outputs.commit()
    print(format_summary(summarize(profile)), file=sys.stderr)
    print(args.output)
    return 0
