"""The headless command line: ``fsdp-tui validate | schema | run | runs | show | logs | cancel | ckpt |
doctor | secrets | trust | ...``. One module per command, each with ``register(subparsers)`` and
``run(args) -> int``; modules keep imports light at the top (``fsdp-tui --help`` imports all of them).

Import rules (``pyproject.toml``): a command imports ``launcher.api`` (the one door to the core),
``launcher.present`` (the door's values as text), ``launcher.workload``, ``launcher.events``, ``launcher.paths``,
``launcher.words`` and its own modules; never a room behind the door (``launcher.runs``, ``launcher.backends``,
``launcher.doctor``, ...)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.api import Client

RunHandler = Callable[[argparse.Namespace, "Client", str], int]
"""A command on one run: its arguments, the data dir's client and the run's full id; the exit status."""


def add_run_argument(parser: argparse.ArgumentParser, *, many: bool = False) -> None:
    """The ``RUN`` argument of a command on runs (``many``: one or more): an id or a unique prefix of one."""
    if many:
        parser.add_argument("run_ids", metavar="RUN", nargs="+", help="run ids or unique prefixes")
    else:
        parser.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")


def on_run(command: str | None = None) -> Callable[[RunHandler], Callable[[argparse.Namespace], int]]:
    """A command's ``run(args)`` for one run named by ``args.run_id`` (an id or a unique prefix): the run is
    found first, or the command says in one line why not (``fsdp-tui COMMAND: no run '0a3f' ...``) and
    exits 2. ``command`` names the command in that line (default: ``args.verb``)."""
    def wrap(handler: RunHandler) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(handler)
        def run(args: argparse.Namespace) -> int:
            from launcher.api import Client

            client = Client()
            run_id = found(client, command or args.verb, args.run_id)
            return 2 if run_id is None else handler(args, client, run_id)
        return run
    return wrap


def each_run(command: str, prefixes: Iterable[str], handler: Callable[[Client, str], int]) -> int:
    """``handler(client, run_id)`` for each run named in ``prefixes``; the worst exit status (2 for a
    prefix that names no run, or several, said in one line each)."""
    from launcher.api import Client

    client, code = Client(), 0
    for prefix in prefixes:
        run_id = found(client, command, prefix)
        code = max(code, 2 if run_id is None else handler(client, run_id))
    return code


def found(client: Client, command: str, prefix: str) -> str | None:
    """The run id ``prefix`` names, or ``None`` after saying why on stderr."""
    from launcher.api.runs import RunNotFound

    try:
        return client.runs.find(prefix)
    except RunNotFound as err:
        print(f"fsdp-tui {command}: {err}", file=sys.stderr)
        return None


def keep_colour() -> bool:
    """Job output keeps its SGR colours on a terminal, unless ``NO_COLOR`` is set (no-color.org); every other
    control sequence is always removed (:mod:`launcher.runs.core.display`)."""
    import os

    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


PIPED_WIDTH = 400
"""Columns a table is laid out in when the output is not a terminal: a script or a file gets each row on
one line (a terminal's width is its own; ``COLUMNS`` sets it either way)."""


def console():
    """The ``rich`` console a command prints its tables with: the terminal's width on a terminal; piped, no
    wrap at 80 columns (rich's default there), so each row stays one line for ``grep`` and friends."""
    import os

    from rich.console import Console

    columns = os.environ.get("COLUMNS", "")
    asked = int(columns) if columns.isascii() and columns.isdigit() and 0 < len(columns) < 6 and int(columns) else None
    piped = not sys.stdout.isatty() and asked is None
    return Console(highlight=False, width=PIPED_WIDTH if piped else asked)  # the width asked for, as rich's own


def number(text: str) -> int:
    """An argparse type: a count or a node's, rank's or step's number, in ASCII digits only (``²`` and
    ``١`` are refused in one line, never read as 2 or 1): the trainer's own rule for checkpoint steps."""
    from launcher.words import ascii_number

    value = ascii_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number (digits 0-9)")
    return value


def reads_as_number(text: str) -> bool:
    """Whether ``text``, not a :func:`number`, still reads as one some other way: another script's digits
    (``٣``, ``²``), a sign, spaces, an exponent, a point or underscores (``+1``, `` 1``, ``1e3``, ``-1``,
    ``1.0``, ``1_000``). Where a word may be a number or something else (``ssh RUN [NODE] [COMMAND]``), such
    a word is a number written wrong, refused in one line, never taken for the other."""
    if not any(c.isnumeric() for c in text):
        return False  # "inf", "nan": words
    if text.strip().lstrip("+-").isnumeric():
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def shown_word(text: str, limit: int = 40) -> str:
    """``text`` quoted as a message names it, cut short past ``limit`` characters (a line stays a line)."""
    return f"'{text}'" if len(text) <= limit else f"'{text[:limit]}...' ({len(text)} characters)"
