"""The README and docs/ cannot drift from the project: every relative link and anchor resolves, every page
is on the README's map and starts from a question, the README stays a short map with its two commands,
every workload example validates, every file and module named exists, and every ``fsdp-tui ...`` line
shown is a command and flags the real parser accepts (parsed in-process, nothing run)."""

from __future__ import annotations

import argparse
import functools
import re
from pathlib import Path

import pytest

from launcher.cli.main import build_parser
from tests.support.docs_reader import (
    CODE_SPAN,
    anchors,
    check_invocation,
    code_blocks,
    invocations,
    links,
    paragraphs,
    slug,
)

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
        for m in CODE_SPAN.finditer(prose):
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
    ("fsdp-tui run FILE --detached", "no option --detached"),
    ("fsdp-tui runs --lim 5", "no option --lim"),
    ("fsdp-tui sweep show SWEEP --format yaml", "invalid choice"),
    ("fsdp-tui runs --limit many", "is not a count of runs"),
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
