"""``fsdp-tui validate FILE... [--json] [--set k=v]``: every problem, compiler style; exit 1 on errors."""

from __future__ import annotations

import argparse
import json
import sys

from launcher.words import plural


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check workload files; print every problem at file:line:col",
                       description="Check workload files. Exit 0 when valid, 1 when any problem is an error.")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print one JSON array of problems")
    add_set_option(p)
    p.set_defaults(handler=run)


def add_set_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override one key (repeatable), e.g. --set parameters.max_steps=20")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from launcher.cli.planning import output_dir_warnings, quarantine_warnings
    from launcher.paths import data_home
    from launcher.workload.load import plan_file

    missing = [name for name in args.files if not Path(name).exists()]
    for name in missing:
        print(f"fsdp-tui validate: {name}: no such file", file=sys.stderr)
    if missing:
        return 2
    problems = []
    for name in args.files:
        planned = plan_file(Path(name), args.overrides, home=data_home())
        result = planned.result
        problems += result.problems + output_dir_warnings(planned) + quarantine_warnings(planned)
        if not args.json:
            for o in result.overrides:
                print(f"{name}: --set {o.describe()}", file=sys.stderr)
    if args.json:
        json.dump([p.to_dict() for p in problems], sys.stdout, indent=2)
        print()
    else:
        for p in problems:
            print(p.format())
        errors = sum(p.is_error for p in problems)
        warnings = len(problems) - errors
        if not problems:
            print(f"ok: {plural(len(args.files), 'file')} valid", file=sys.stderr)
        else:
            print(f"{plural(errors, 'error')}, {plural(warnings, 'warning')}", file=sys.stderr)
    return 1 if any(p.is_error for p in problems) else 0
