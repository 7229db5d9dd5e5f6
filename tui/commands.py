"""The ``:`` command bar's language: a verb and at most one argument, parsed without a terminal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verb = Literal["runs", "workloads", "ckpt", "theme", "quit"]

_VERBS: dict[str, Verb] = {
    "runs": "runs",
    "workloads": "workloads",
    "ckpt": "ckpt",
    "checkpoints": "ckpt",
    "theme": "theme",
    "q": "quit",
    "quit": "quit",
}
_NEEDS_ARG: dict[Verb, str] = {"ckpt": "RUN", "theme": "NAME"}
USAGE = ":runs  :workloads  :ckpt RUN  :theme NAME  :q"
"""Every command, as the bar's placeholder and error messages show them."""


class CommandError(ValueError):
    """Text that is not a command; the message says what is wrong and what would work."""


@dataclass(frozen=True)
class Command:
    verb: Verb
    arg: str | None = None
    """The run id (or id prefix) for ``ckpt``, the theme name for ``theme``."""


def parse_command(text: str) -> Command:
    """``":ckpt 2026"`` -> ``Command("ckpt", "2026")``; ``CommandError`` for anything else."""
    words = text.strip().removeprefix(":").split()
    if not words:
        raise CommandError(f"type a command: {USAGE}")
    name, args = words[0].lower(), words[1:]
    verb = _VERBS.get(name)
    if verb is None:
        raise CommandError(f"unknown command ':{name}' (commands: {USAGE})")
    wanted = _NEEDS_ARG.get(verb)
    if wanted is None and args:
        raise CommandError(f":{name} takes no argument")
    if wanted is not None and len(args) != 1:
        raise CommandError(f"usage: :{name} {wanted}")
    return Command(verb, args[0] if args else None)
