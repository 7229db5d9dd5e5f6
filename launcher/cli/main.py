"""``fsdp-tui COMMAND ...``: the parser of every headless command, and the entry that runs one."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each name is a module in launcher/cli with register(subparsers) and run(args) -> int.
COMMANDS: tuple[str, ...] = ("validate", "schema", "run", "runs", "show", "logs", "cancel", "relaunch", "ckpt",
                             "export", "stacks", "ssh", "clean", "rm", "secrets", "trust", "doctor", "sweep",
                             "sweeps", "compare", "repair", "nettest", "nettests", "notify", "gpus", "eject",
                             "mlflow", "quarantine")
ALIASES = {"resume": "relaunch"}
"""Commands that live in another command's module."""
REAPING = frozenset({"run", "runs", "show", "logs", "doctor"})
"""Commands that first reap what runs left on nodes that were lost and are back (:meth:`launcher.api.nodes.Nodes.reap_lost`)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fsdp-tui",
        description="Compose, launch, watch and remember multi-node FSDP runs. "
        "With no command, opens the app; with a workload FILE, opens it in the editor.",
    )
    parser.add_argument("--theme", help="colour theme of the app (persists)")
    parser.add_argument("--version", action=_Version, nargs=0, help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"launcher.cli.{name}").register(sub)
    return parser


class _Version(argparse.Action):
    """``--version``: the installed package's version, looked up only when asked (reading the package
    metadata costs more than the rest of a command's start)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("fsdp-tui")
        except PackageNotFoundError:
            found = "(not installed)"
        print(f"fsdp-tui {found}")
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from launcher.api.runs import RecordUnwritable, StoreDamaged

    try:
        if args.command in REAPING:
            _reap_lost_nodes()
        return int(args.handler(args))
    except (StoreDamaged, RecordUnwritable) as err:
        print(f"fsdp-tui {args.command}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`fsdp-tui runs | head -2`): stop quietly, as cat does.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _reap_lost_nodes() -> None:
    from launcher.api import Client

    for reaped in Client().nodes.reap_lost():
        print(f"fsdp-tui: {reaped.line()}", file=sys.stderr)
