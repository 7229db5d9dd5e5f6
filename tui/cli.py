"""The ``fsdp-tui`` console entry: the app when a person is at a terminal, the headless CLI otherwise.

``fsdp-tui`` opens the home screen, ``fsdp-tui FILE`` the editor on FILE, and ``fsdp-tui run FILE``
in a terminal the run monitor. Every other command (and ``run --dry-run/--watch/--json``) is the
headless CLI in :mod:`launcher.cli`. Imports stay lazy so ``--help`` is fast and torch-free.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

_HEADLESS_RUN_FLAGS = {"--dry-run", "--watch", "--json", "--detach", "-h", "--help"}


def _split_theme(argv: list[str]) -> tuple[str | None, list[str]]:
    """Take a leading ``--theme NAME`` (or ``--theme=NAME``) off the arguments."""
    theme = None
    rest = list(argv)
    while rest and rest[0].startswith("--theme"):
        flag = rest.pop(0)
        if "=" in flag:
            theme = flag.split("=", 1)[1]
        elif rest:
            theme = rest.pop(0)
    return theme, rest


def _is_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _run_overrides(args: list[str]) -> tuple[Path | None, list[str]]:
    """``FILE`` and the ``--set`` values of ``run FILE --set a=b ...``."""
    file, overrides, i = None, [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--set" and i + 1 < len(args):
            overrides.append(args[i + 1])
            i += 2
            continue
        if arg.startswith("--set="):
            overrides.append(arg.split("=", 1)[1])
        elif not arg.startswith("-") and file is None:
            file = Path(arg)
        i += 1
    return file, overrides


def main(argv: Sequence[str] | None = None) -> int:
    from launcher.cli.main import ALIASES, COMMANDS

    theme, args = _split_theme(list(sys.argv[1:] if argv is None else argv))
    if not args:
        return _app(theme=theme)
    first = args[0]
    if first == "run" and _is_terminal() and not _HEADLESS_RUN_FLAGS & set(args[1:]):
        file, overrides = _run_overrides(args[1:])
        if file is not None:
            return _app(theme=theme, workload=file, launch=True, overrides=overrides)
    if first not in (*COMMANDS, *ALIASES) and not first.startswith("-") and (
        Path(first).is_file() or first.endswith((".yaml", ".yml"))
    ):
        return _app(theme=theme, workload=Path(first))
    from launcher.cli.main import main as headless

    return headless(([f"--theme={theme}"] if theme else []) + args)


def _app(**kwargs) -> int:
    from tui.app import run_app

    return int(run_app(**kwargs) or 0)


if __name__ == "__main__":
    sys.exit(main())
