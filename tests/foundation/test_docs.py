"""The README and docs/ cannot drift from the project: every relative link and anchor resolves, every page
is on the README's map, the README stays a short map with its two commands, and every ``fsdp-tui ...``
line they show is a command and flags the real parser accepts (parsed in-process, nothing run)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

# Pages other parts of the project add in their own time. A link to one of them is checked like any
# other once the page exists; until then the link is allowed to wait for it. Keep this list short.
PENDING_PAGES = frozenset({"security.md", "ssh-config.md", "slurm-faults.md", "record-repair.md",
                           "torch-versions.md", "air.md"})

# The README's two commands: a newcomer runs exactly these (the demo, then the whole test suite).
DEMO = ("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e '.[all]' && "
        ".venv/bin/fsdp-tui run sample_workloads/tiny_cpu.yaml")
TEST_SUITE = "bash .ci/run"
README_MAX_LINES = 160

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


# --- reading markdown ---------------------------------------------------------------------------------


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
        out.extend((number, m.group(1)) for m in _LINK.finditer(_CODE_SPAN.sub("", prose)))
    return out


def link_problem(page: Path, target: str) -> str | None:
    """Why a relative link from ``page`` does not resolve (``None`` when it does, or is not ours)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not a file of this repository
        return None
    path_part, _, anchor = target.partition("#")
    dest = (page.parent / path_part).resolve() if path_part else page
    if path_part and not dest.exists():
        if dest.parent == DOCS and dest.name in PENDING_PAGES:
            return None
        return f"no file {path_part}"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
        return f"no heading #{anchor} in {dest.relative_to(ROOT)}"
    return None


# --- the pages --------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = [f"{page.relative_to(ROOT)}:{no}: ({target}): {why}"
              for no, target in links(page.read_text()) if (why := link_problem(page, target))]
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_on_the_readme_map():
    linked = {(README.parent / t.partition("#")[0]).resolve() for _, t in links(README.read_text())}
    missing = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


def test_every_docs_page_starts_from_the_users_question():
    for page in DOCS.glob("*.md"):
        first = page.read_text().splitlines()[0]
        assert first.startswith("# ") and first.rstrip().endswith("?"), f"{page.name}: {first!r}"


def test_readme_is_a_short_map():
    lines = README.read_text().splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_two_commands_are_the_documented_ones():
    text = README.read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert code_blocks(quick_start) == [DEMO, TEST_SUITE]
    assert (ROOT / ".ci/run").is_file() and (ROOT / "sample_workloads/tiny_cpu.yaml").is_file()


def example_errors(fragment: str, folder: Path) -> list[str]:
    """The errors of a workload example as the validator reports them, once given what a fragment leaves
    out (an ``experiment_name``; a ``command`` when it runs neither one nor the trainer)."""
    from launcher.workload.validate import validate_file

    head = "" if re.search(r"^experiment_name:", fragment, re.M) else "experiment_name: docs-example\n"
    if not re.search(r"^(command|parameters):", fragment, re.M):
        head += "command: 'true'\n"
    path = folder / "example.yaml"
    path.write_text(head + fragment + "\n")
    errors = [p.format() for p in validate_file(path).errors]
    if not errors and re.search(r"^sweep:", fragment, re.M):
        from launcher.workload.sweep import plan_sweep

        errors = [p.format() for p in plan_sweep(path, home=folder).problems if p.is_error]
    return errors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_workload_example_validates(page: Path, tmp_path):
    for block in code_blocks(page.read_text(), "yaml"):
        assert not example_errors(block, tmp_path), block


def test_a_wrong_workload_example_is_caught(tmp_path):
    assert example_errors("compute:\n  hosts: [a, b]\n  procs_per_nod: 2", tmp_path)
    assert not example_errors("compute:\n  hosts: [a, b]\n  procs_per_node: 2", tmp_path)
    assert example_errors("sweep:\n  grid:\n    compute.procs_per_nod: [1, 2]", tmp_path)
    assert not example_errors("sweep:\n  grid:\n    compute.procs_per_node: [1, 2]", tmp_path)


_TOP_FOLDERS = ("launcher", "trainer", "tui", "themes", "tests", "benchmarks", "sample_workloads", "docs", ".ci")
_REPO_PATH = re.compile(r"^(?:" + "|".join(map(re.escape, _TOP_FOLDERS)) + r")(?:/[\w.-]+)*/?$")
_MODULE = re.compile(r"^\w+\.py$")


@functools.cache
def _module_names(root: Path) -> frozenset[str]:
    return frozenset(p.name for folder in _TOP_FOLDERS if (root / folder).is_dir() for p in (root / folder).rglob("*.py"))


def stale_paths(text: str, root: Path = ROOT) -> list[str]:
    """Repository paths (``launcher/backends/base.py``) and module names (``policy.py``) that a page
    names in code spans and that do not exist (a module name: nowhere in the repository)."""
    modules = _module_names(root)
    out = []
    for number, prose in paragraphs(text):
        for m in _CODE_SPAN.finditer(prose):
            name = m.group(2).strip()
            missing_path = _REPO_PATH.match(name) and not (root / name).exists()
            if missing_path or (_MODULE.match(name) and name not in modules):
                out.append(f"{number}: {name}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_and_module_named_exists(page: Path):
    stale = stale_paths(page.read_text())
    assert not stale, f"{page.relative_to(ROOT)} names what is not there:\n" + "\n".join(stale)


def test_a_stale_path_is_caught():
    assert stale_paths("See `launcher/no_such.py`, `no_such_module.py` and `launcher/cli/`.") == [
        "1: launcher/no_such.py", "1: no_such_module.py"]


# --- the command lines they show --------------------------------------------------------------------

_ENDS = {"|", ">", ">>", "<", "&&", "||", ";", "&", "2>&1"}


def invocations(text: str) -> list[tuple[int, list[str]]]:
    """(line, arguments) of every ``fsdp-tui ...`` in code blocks and code spans: what follows the
    program name up to a shell operator, with ``[``/``]`` of optional parts and ``...`` removed."""
    candidates = [(line.number, line.text) for line in lines_of(text) if line.in_code]
    for number, prose in paragraphs(text):
        candidates.extend((number, m.group(2)) for m in _CODE_SPAN.finditer(prose))
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
    code, text = _parse(parser, [command, *base])
    if code is not None:
        problems.append(f"fsdp-tui {command} {' '.join(base)}: {text.strip()}")
    for action, name, value in flags:
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


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def test_every_command_line_the_docs_show_parses(parser):
    helped: set[str] = set()
    problems, seen = [], 0
    for page in PAGES:
        for number, args in invocations(page.read_text()):
            seen += 1
            problems += [f"{page.relative_to(ROOT)}:{number}: {p}" for p in check_invocation(parser, args, helped)]
    assert seen > 40, "the docs show the commands; the reader of them found too few"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("line", "wrong"), [
    ("fsdp-tui run FILE --dry-run", ""),
    ("fsdp-tui logs RUN [--node N] [--follow] [--tail N]  # a comment", ""),
    ("fsdp-tui relaunch RUN [--watch | --json]", ""),
    ("printf %s x | fsdp-tui secrets set my_scope/key", ""),
    ("fsdp-tui sweep show SWEEP --format md", ""),
    ("fsdp-tui --theme fsdp-light", ""),
    ("fsdp-tui new.yaml", ""),
    ("fsdp-tui runs --limit 5 | head", ""),
    ("fsdp-tui launch FILE", "no such command: launch"),
    ("fsdp-tui run FILE --detach", "no option --detach"),
    ("fsdp-tui runs --lim 5", "no option --lim"),
    ("fsdp-tui sweep show SWEEP --format yaml", "invalid choice"),
    ("fsdp-tui runs --limit many", "invalid int value"),
    ("fsdp-tui cancel RUN OTHER", "more arguments"),
    ("fsdp-tui --colour dark", "no top-level option"),
])
def test_the_command_line_check_catches_what_the_parser_refuses(parser, line, wrong):
    (_, args), = invocations(f"`{line}`")
    problems = check_invocation(parser, args)
    assert (not problems) if not wrong else any(wrong in p for p in problems), problems


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Changing a key for one launch", "changing-a-key-for-one-launch"),
    ("Why did my run fail? (triage)", "why-did-my-run-fail-triage"),
    ("Checking the nodes first: doctor", "checking-the-nodes-first-doctor"),
    ("The `--set` option", "the---set-option"),
    ("A [linked](x.md) *word*", "a-linked-word"),
    ("snake_case keys", "snake_case-keys"),
])
def test_anchor_slugs_as_github_makes_them(heading, anchor):
    assert slug(heading) == anchor


def test_a_broken_link_or_anchor_is_found(tmp_path):
    assert link_problem(README, "docs/no-such-page.md") == "no file docs/no-such-page.md"
    assert link_problem(README, "#no-such-heading") == "no heading #no-such-heading in README.md"
    assert link_problem(README, "#quick-start") is None
    assert link_problem(README, "docs/security.md") is None or (DOCS / "security.md").exists()
    assert link_problem(README, "https://example.org/x.md") is None
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}
