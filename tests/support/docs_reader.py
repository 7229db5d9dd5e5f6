"""Reading the README and docs/ as their checks do: the markdown's structure (code blocks, paragraphs,
headings and their GitHub anchors, links) and the ``fsdp-tui ...`` command lines they show, checked
against the real parser in-process (parsed, never run)."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Line:
    number: int
    text: str
    in_code: bool


def lines_of(text: str) -> list[Line]:
    """Each line, and whether it is inside a fenced code block (fences themselves count as code)."""
    out, fenced = [], False
    for number, text_line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(text_line):
            out.append(Line(number, text_line, True))
            fenced = not fenced
            continue
        out.append(Line(number, text_line, fenced))
    return out


def code_blocks(text: str, language: str | None = None) -> list[str]:
    """The contents of every fenced code block (of one ``language`` when given), in order."""
    blocks, current, lang = [], None, ""
    for line in text.splitlines():
        if _FENCE.match(line):
            if current is None:
                current, lang = [], line.strip().strip("`~").strip()
            else:
                if language is None or lang == language:
                    blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (no code ticks, link targets or emphasis), lower case,
    punctuation dropped except ``-`` and ``_``, each space a ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a page, duplicates numbered as GitHub does (``name``, ``name-1``, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in lines_of(text):
        match = None if line.in_code else _HEADING.match(line.text)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph outside code blocks, its lines joined: a code span or a link
    may wrap onto the next line."""
    out, start, current = [], 0, []
    for line in [*lines_of(text), Line(0, "", False)]:
        if line.in_code or not line.text.strip():
            if current:
                out.append((start, " ".join(current)))
            current = []
            continue
        if line.text.lstrip().startswith("|"):  # a table row is a paragraph of its own
            if current:
                out.append((start, " ".join(current)))
            out.append((line.number, line.text.strip()))
            current = []
            continue
        if not current:
            start = line.number
        current.append(line.text.strip())
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every markdown link outside code blocks and code spans."""
    out = []
    for number, prose in paragraphs(text):
        out.extend((number, m.group(1)) for m in _LINK.finditer(CODE_SPAN.sub("", prose)))
    return out



# --- the command lines -------------------------------------------------------------------------------

_ENDS = {"|", ">", ">>", "<", "&&", "||", ";", "&", "2>&1"}


def invocations(text: str) -> list[tuple[int, list[str]]]:
    """(line, arguments) of every ``fsdp-tui ...`` in code blocks and code spans: what follows the
    program name up to a shell operator, with ``[``/``]`` of optional parts and ``...`` removed."""
    candidates = [(line.number, line.text) for line in lines_of(text) if line.in_code]
    for number, prose in paragraphs(text):
        candidates.extend((number, m.group(2)) for m in CODE_SPAN.finditer(prose))
    out = []
    for number, snippet in candidates:
        try:
            tokens = shlex.split(snippet, comments=True)
        except ValueError:
            tokens = snippet.split("#", 1)[0].split()
        for i, token in enumerate(tokens):
            if token.rsplit("/", 1)[-1] == "fsdp-tui":
                out.append((number, _arguments(tokens[i + 1:])))
    return out


def _arguments(tokens: list[str]) -> list[str]:
    args, depth = [], 0
    for token in tokens:
        if token in _ENDS and depth == 0:
            break
        depth += token.count("[") - token.count("]")
        bare = token.replace("[", "").replace("]", "").removesuffix("...")
        if bare and bare != "|":  # inside brackets, `|` separates alternatives
            args.append(bare)
    return args


def _is_placeholder(token: str) -> bool:
    """``RUN``, ``FILE``, ``N``, ``HOST:PORT``: words the reader replaces."""
    return any(c.isupper() for c in token) and not any(c.islower() for c in token)


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _sample_value(action: argparse.Action, shown: str | None) -> str:
    """The value shown in the docs, or one the option accepts when the docs show a placeholder."""
    if shown is not None and not _is_placeholder(shown):
        return shown
    if action.choices:
        return str(next(iter(action.choices)))
    return "x" if action.type in (None, str, Path) else "1"  # a number for int, float and counts


def _positionals(parser: argparse.ArgumentParser, given: list[str]) -> tuple[list[str], argparse.ArgumentParser]:
    """The positional arguments the docs show, completed where they leave one out (``fsdp-tui stacks``
    in a sentence), and the parser of the innermost command (``secrets set``)."""
    argv, rest = [], list(given)
    for action in parser._actions:
        if action.option_strings:
            continue
        if isinstance(action, argparse._SubParsersAction):
            verb = rest.pop(0) if rest else next(iter(action.choices))
            assert verb in action.choices, f"no such command: {verb} (commands: {', '.join(action.choices)})"
            inner, parser = _positionals(action.choices[verb], rest)
            return [*argv, verb, *inner], parser
        values = [("x" if _is_placeholder(v) else v) for v in rest]
        if action.nargs in (None, 1):
            argv.append(values[0] if values else "x")
            rest = rest[1:]
        elif action.nargs == "+":
            argv.extend(values or ["x"])
            rest = []
        elif action.nargs in ("?", "*"):
            argv.extend(values[:1] if action.nargs == "?" else values)
            rest = rest[1:] if action.nargs == "?" else []
    assert not rest, f"more arguments than the command takes: {rest}"
    return argv, parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[int | None, str]:
    """Parse as the CLI does; the exit status argparse asked for (``None``: parsed) and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            parser.parse_args(argv)
        except SystemExit as exit_:
            return int(exit_.code or 0), out.getvalue()
    return None, out.getvalue()


def check_invocation(parser: argparse.ArgumentParser, args: list[str], helped: set[str] | None = None) -> list[str]:
    """What is wrong with ``fsdp-tui ARGS`` as the docs show it: an unknown command, a flag the command
    does not take, a value it refuses, a ``--help`` that does not print. Empty when all is well."""
    args = list(args)
    top = parser._option_string_actions
    while args and args[0].startswith("-"):
        flag, with_value, _ = args.pop(0).partition("=")
        if flag not in top:
            return [f"no top-level option {flag}"]
        if top[flag].nargs != 0 and not with_value and args:
            args.pop(0)  # its value: --theme NAME
    if not args or args[0].endswith((".yaml", ".yml")):
        return []  # the app, or the editor on a file
    command, rest = args[0], args[1:]
    commands = _subparsers(parser).choices
    if command not in commands:
        return [f"no such command: {command}"]
    if helped is None or command not in helped:
        code, text = _parse(parser, [command, "--help"])
        if code != 0 or "usage:" not in text or "Traceback" in text:
            return [f"fsdp-tui {command} --help: exit {code}: {text[-300:]}"]
        if helped is not None:
            helped.add(command)
    inner = _innermost(commands[command], [t for t in rest if not t.startswith("-")])
    problems, flags, shown, i = [], [], [], 0
    while i < len(rest):
        token, i = rest[i], i + 1
        if token == "--":  # the end of the options: what follows is the command's own (ssh RUN -- COMMAND)
            if not any(a.nargs == argparse.REMAINDER for a in inner._actions):
                problems.append(f"fsdp-tui {command}: takes no command after --")
            break
        if not (token.startswith("-") and len(token) > 1):
            shown.append(token)
            continue
        name, _, value = token.partition("=")
        action = inner._option_string_actions.get(name)
        if action is None:
            problems.append(f"fsdp-tui {command}: no option {name}")
            continue
        if action.nargs != 0 and not value and i < len(rest) and not rest[i].startswith("-"):
            value, i = rest[i], i + 1
        flags.append((action, name, value or None))
    try:
        base, _ = _positionals(commands[command], shown)
    except AssertionError as err:
        return [*problems, f"fsdp-tui {command}: {err}"]
    # A required option (``eject --to``) goes with every parse; each other flag is tried on its own.
    needed = [t for action, name, value in flags if action.required
              for t in [name] + ([_sample_value(action, value)] if action.nargs != 0 else [])]
    base = [*base, *needed]
    code, text = _parse(parser, [command, *base])
    if code is not None:
        problems.append(f"fsdp-tui {command} {' '.join(base)}: {text.strip()}")
    for action, name, value in flags:
        if action.required:
            continue
        argv = [command, *base, name] + ([_sample_value(action, value)] if action.nargs != 0 else [])
        code, text = _parse(parser, argv)
        exits = isinstance(action, (argparse._HelpAction, argparse._VersionAction))  # prints, exits 0
        if code != (0 if exits else None):
            problems.append(f"fsdp-tui {' '.join(argv)}: {text.strip()}")
    return problems


def _innermost(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The parser of ``secrets set`` for ``secrets set ...``: where a nested command's flags live."""
    sub = _subparsers(parser)
    if sub is not None and words and words[0] in sub.choices:
        return _innermost(sub.choices[words[0]], words[1:])
    return parser
