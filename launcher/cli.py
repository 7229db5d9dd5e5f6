"""The headless command line: ``fsdp-tui validate | schema | run | runs | logs | cancel | ckpt | doctor``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each name is a module in launcher/commands with register(subparsers) and run(args) -> int.
COMMANDS: tuple[str, ...] = ("validate", "schema", "run", "runs", "logs", "cancel", "ckpt", "secrets", "trust", "doctor")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fsdp-tui",
        description="Compose, launch, watch and remember multi-node FSDP runs. "
        "With no command, opens the app; with a workload FILE, opens it in the editor.",
    )
    parser.add_argument("--theme", help="colour theme of the app (persists)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"launcher.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
