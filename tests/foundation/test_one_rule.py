"""One rule, one place: what makes a checkpoint whole, whose it is, what may be pruned and what a resume may
read live in the torch-free ``trainer/wire`` (``ckpt_layout``, ``ckpt_owner``, ``ckpt_digest``), and the
trainer, the node agent and the launcher call them. Two copies of such a rule drifted apart once, and a
resume deleted the checkpoints it resumed from. This test reads every module of the product and fails
where the logic of those rules appears again outside its home:

- a comprehension that picks checkpoints by ``.complete`` (which count: ``ckpt_owner.whole``,
  ``newest_whole``, ``resume_from``, ``to_prune``);
- arithmetic or a slice on ``keep_last`` (what a prune keeps: ``ckpt_owner.to_prune``);
- a checkpoint's writer read from its ``meta.json`` (``ckpt_layout.run_of``) or compared by hand in a
  comprehension over listed checkpoints (whose it is: ``Lineage.whose``);
- the test of a folder no other run writes into (``startswith`` on ``/``, ``~`` and ``$``:
  ``ckpt_owner.private_folder``, ``inside_run_folder``);
- a checkpoint folder's name made or read by hand: a string (an f-string's part, a format, a pattern, a
  prefix) with ``step-`` where a step, a pattern or nothing follows (``ckpt_layout.step_name``,
  ``step_of_name``, ``step_of_path``); prose (docstrings, "step-to-step") and whole sample names are no rule;
- a checkpoint's ``meta.json`` parsed by hand (``json.loads`` of what ``read_meta`` returns, or of the file
  ``ckpt_layout.META`` names: ``ckpt_layout.parse_meta``, ``meta_of``, ``holds_adapters``).

The same fixtures also run through both call sites, the trainer's prune and the launcher's gathers, in
``tests/runs/test_ckpt_invariant.py``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOME = {"trainer/wire/ckpt_layout.py", "trainer/wire/ckpt_owner.py", "trainer/wire/ckpt_digest.py"}
PACKAGES = ("launcher", "trainer", "tui")
STEP_NAME = re.compile(r"step-(?=$|[{%(\[\\]|0\*)")
"""``step-`` where a folder name is made or matched: at the end (a prefix, an f-string's part before the
step), before a placeholder (``{``, ``%``) or a pattern (``0*``, ``(``, ``[``, ``\\d``)."""


def violations(source: str) -> list[str]:
    """Where ``source`` carries checkpoint-rule logic of its own, one line each (``line: what``)."""
    tree = ast.parse(source)
    found = []
    meta_file = "meta.json" in source or "META" in source
    prose, metas = _docstrings(tree), _checkpoint_meta_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose \
                and STEP_NAME.search(node.value):
            found.append(f"{node.lineno}: makes or reads a checkpoint's folder name by hand (ckpt_layout.step_name, "
                         "step_of_name, step_of_path)")
        elif _json_load(node) and any(_names_meta(n, metas) for arg in node.args for n in ast.walk(arg)):
            found.append(f"{node.lineno}: parses a checkpoint's meta.json by hand (ckpt_layout.parse_meta, meta_of)")
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for gen in node.generators:
                conditions = list(gen.ifs)
                if any(_names_attr(c, "complete") for c in conditions):
                    found.append(f"{node.lineno}: picks checkpoints by .complete (ckpt_owner.whole and friends)")
                if any(_compares_attr(c, "run_id") for c in conditions) and _iterates_checkpoints(gen.iter):
                    found.append(f"{node.lineno}: decides whose a listed checkpoint is by hand (Lineage.whose)")
        elif isinstance(node, (ast.BinOp, ast.Slice)) and _names_attr(node, "keep_last", names=True):
            found.append(f"{node.lineno}: counts keep_last by hand (ckpt_owner.to_prune)")
        elif meta_file and _reads_run_id(node):
            found.append(f"{node.lineno}: reads a checkpoint's writer from meta.json by hand (ckpt_layout.run_of)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _about_output_dir(node):
            found += [f"{call.lineno}: tests for a folder of its own by hand (ckpt_owner.private_folder)"
                      for call in ast.walk(node) if _per_run_test(call)]
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    """The module's, classes' and functions' docstrings and attribute docstrings: prose, not code."""
    return {id(stmt.value) for node in ast.walk(tree) if isinstance(getattr(node, "body", None), list)
            for stmt in node.body if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)}


def _checkpoint_meta_names(tree: ast.AST) -> set[str]:
    """The names under which the module imports ``ckpt_layout``'s ``META`` (a module's own ``META`` names
    another file: the token cache's)."""
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("ckpt_layout")
            for alias in node.names if alias.name == "META"}


def _json_load(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("load", "loads")
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "json")


def _names_meta(node: ast.AST, metas: set[str]) -> bool:
    """``node`` reads a checkpoint's ``meta.json``: ``read_meta(...)``, ``META`` as imported from ckpt_layout,
    ``ckpt_layout.META``, or the file's name itself."""
    return ((isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "read_meta")
            or (isinstance(node, ast.Name) and node.id in metas)
            or (isinstance(node, ast.Attribute) and node.attr == "META" and getattr(node.value, "id", "") == "ckpt_layout")
            or (isinstance(node, ast.Constant) and node.value == "meta.json"))


def _about_output_dir(fn: ast.AST) -> bool:
    """A function that handles an ``output_dir`` (an argument, a variable or a key of that name)."""
    for n in ast.walk(fn):
        text = (n.arg if isinstance(n, ast.arg) else n.id if isinstance(n, ast.Name) else
                n.attr if isinstance(n, ast.Attribute) else n.value if isinstance(n, ast.Constant) else None)
        if isinstance(text, str) and "output_dir" in text:
            return True
    return False


def _names_attr(node: ast.AST, attr: str, names: bool = False) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr == attr) or (names and isinstance(n, ast.Name) and n.id == attr)
               for n in ast.walk(node))


def _compares_attr(node: ast.AST, attr: str) -> bool:
    return any(isinstance(n, ast.Compare) and _names_attr(n, attr) for n in ast.walk(node))


def _iterates_checkpoints(node: ast.AST) -> bool:
    """The comprehension runs over listed checkpoints (a listing's ``checkpoints``, a store's ``list()``)."""
    words = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return bool(words & {"checkpoints", "list_checkpoints", "list_in_bucket", "ckpts", "listed"}) or (
        "list" in words and "store" in words)


def _reads_run_id(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "run_id"
    return (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and node.slice.value == "run_id")


def _per_run_test(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"):
        return False
    consts = {n.value for arg in node.args for n in ast.walk(arg) if isinstance(n, ast.Constant)}
    return {"~", "$"} <= consts


def _product_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_checkpoint_rule_is_written_twice():
    said = []
    for path in _product_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel in HOME:
            continue
        said += [f"{rel}:{line}" for line in violations(path.read_text())]
    assert said == [], "the checkpoint rules live in trainer/wire (ckpt_layout, ckpt_owner); call them:\n" + \
        "\n".join(said)


@pytest.mark.parametrize("source, what", [
    # the gathers' prune before the rule was one: every complete checkpoint of the folder counted
    ("def prune(listing, keep_last):\n    done = [c for c in listing.checkpoints if c.complete]\n"
     "    return done[: len(done) - keep_last]\n", "picks checkpoints by .complete"),
    ("def prune(listing, keep_last):\n    return listing[:-keep_last]\n", "counts keep_last by hand"),
    # the trainer's prune before the rule was one: the writer read from meta.json and compared
    ("import json\nMETA = 'meta.json'\ndef run_of(text):\n    return json.loads(text).get('run_id')\n",
     "reads a checkpoint's writer"),
    ("def mine(store, run_id):\n    return [c for c in store.list() if c.run_id == run_id]\n",
     "decides whose a listed checkpoint is by hand"),
    ("def fixed(plan):\n    out = plan.output_dir\n    return out.startswith(('/', '~', '$'))\n",
     "tests for a folder of its own by hand"),
    # the names as the LoRA export made them and the run report read them before they asked ckpt_layout
    ("def out(step):\n    return f'hf/step-{step:08d}'\n", "makes or reads a checkpoint's folder name"),
    ("import re\ndef step(path):\n    return re.search(r'step-0*(\\d+)', path)\n",
     "makes or reads a checkpoint's folder name"),
    ("def mine(name):\n    return name.startswith('step-')\n", "makes or reads a checkpoint's folder name"),
    ("def name(step):\n    return 'step-%08d' % step\n", "makes or reads a checkpoint's folder name"),
    # meta.json read raw, as the LoRA export and the resume's model check did
    ("import json\nfrom trainer.wire.ckpt_layout import META\ndef meta(folder):\n"
     "    return json.loads((folder / META).read_text())\n", "parses a checkpoint's meta.json by hand"),
    ("import json\ndef model(store, path):\n    return json.loads(store.read_meta(path) or '{}')['model_name']\n",
     "parses a checkpoint's meta.json by hand"),
])
def test_the_guard_finds_a_second_copy(source, what):
    assert any(what in v for v in violations(source)), violations(source)


def test_the_guard_leaves_the_rules_callers_alone():
    calls = ("from trainer.wire.ckpt_owner import to_prune, whole\n"
             "def prune(listing, lineage, keep_last):\n    return to_prune(listing.checkpoints, lineage, keep_last)\n"
             "def runs(store, besides):\n    return [r for r in store.list_runs() if r.run_id != besides]\n")
    assert violations(calls) == []
    prose = ('"""Checkpoints are ``<output_dir>/checkpoints/step-00000100/``."""\n'
             "import json\nMETA = 'meta.json'  # the token cache's own file\n"
             "def noise(folder):\n    '''The run's step-to-step noise.'''\n"
             "    return json.loads((folder / META).read_text())\n"
             "SAMPLE = CheckpointFact('step-00000100', 100, 300.0)\n")
    assert violations(prose) == []
