"""A run's folder is read through one module, ``launcher/runs/core/layout.py``, each file into its type: the
plan is read once per reader and validated never again (listing runs costs a JSON read per run, not a model
validation and a topology); no other module reads the plan's file raw."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from launcher.events import RunState
from launcher.runs.core.continuation import Continuation
from launcher.runs.core.layout import (
    OPTIONS,
    PLAN,
    SHAPE,
    Brought,
    LaunchOptions,
    PlanShape,
    RecordedPlan,
    read_options,
    read_plan,
    save_options,
    save_plan,
    write_whole,
)
from launcher.runs.core.store import RunStore
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text

ROOT = Path(__file__).resolve().parents[3]
GPU = """experiment_name: gpu
compute: {accelerator_type: GPU_8xH100, num_accelerators: 16, hosts: [n1, n2]}
parameters: {model_name: builtin:tiny-llama, dataset_name: builtin:tiny-alpaca, output_dir: /tmp/ckpts}
"""


def _run(home: Path, run_id: str, text: str = GPU) -> Path:
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id=run_id)
    store = RunStore(home)
    directory = store.create_run(plan, None, text)
    save_plan(directory, plan)
    for state in (RunState.RUNNING, RunState.SUCCEEDED):
        store.set_state(run_id, state, 1)
    return directory


def test_listing_runs_reads_each_plan_once_and_validates_none(tmp_path, monkeypatch):
    from launcher.api import Client
    from launcher.workload.model import Workload

    home = tmp_path / "home"
    ids = [f"20260301-09000{i}-gpu-a{i}" for i in range(3)]
    for run_id in ids:
        _run(home, run_id)
    reads: dict[str, int] = {}
    validated = []
    real_read, real_validate = Path.read_text, Workload.model_validate.__func__

    def read_text(self, *args, **kwargs):
        if self.name == PLAN:
            reads[self.parent.name] = reads.get(self.parent.name, 0) + 1
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(Workload, "model_validate", classmethod(lambda cls, *a, **k: validated.append(1)
                                                                or real_validate(cls, *a, **k)))
    listed = Client(home).runs.listing()
    assert sorted(r.summary.run_id for r in listed) == ids
    assert all(r.usage is not None and r.usage.kind == "gpu" for r in listed)  # what the list needs is there
    assert reads == {run_id: 1 for run_id in ids}
    assert validated == []


def test_a_plan_written_before_its_shape_was_kept_counts_the_same_usage(tmp_path):
    from launcher.runs.core.usage import usage_of_record

    directory = _run(tmp_path, "20260301-090000-gpu-old")
    record = RunStore(tmp_path).get_run("20260301-090000-gpu-old")
    kept = read_plan(directory)
    assert kept is not None and kept.shape == PlanShape("gpu", 8, "H100")
    data = json.loads((directory / PLAN).read_text())
    del data[SHAPE]
    (directory / PLAN).write_text(json.dumps(data))
    old = read_plan(directory)
    assert old is not None and old.shape is None and old.usage_shape() == kept.shape
    assert usage_of_record(record, old, None, 0.0) == usage_of_record(record, kept, None, 0.0)
    assert old.to_plan().topology.procs_per_node == 8  # the plan itself, rebuilt for whoever runs it


@pytest.mark.parametrize("text, expect", [
    (None, None),                                          # no file
    ("{not json", None),
    ("[1, 2]", None),
    ('{"workload": 3, "node_dirs": ["a", 3], "shape": {"kind": "tpu", "procs_per_node": 1}}',
     {"workload": {}, "node_dirs": ("a",), "shape": None, "max_retries": 0, "experiment_name": None}),
    ('{"run_id": "r", "workload": {"max_retries": true, "experiment_name": "x", "mlflow": [1]},'
     ' "shape": {"kind": "cpu", "procs_per_node": 2, "gpu_model": 5}}',
     {"node_dirs": (), "shape": PlanShape("cpu", 2), "max_retries": 0, "experiment_name": "x"}),
])
def test_a_plan_file_is_decoded_once_what_is_not_one_reads_as_none(tmp_path, text, expect):
    if text is not None:
        (tmp_path / PLAN).write_text(text)
    plan = read_plan(tmp_path)
    if expect is None:
        assert plan is None
        return
    assert isinstance(plan, RecordedPlan) and {k: getattr(plan, k) for k in expect} == expect
    assert plan.section("mlflow") == {} and plan.section("parameters", "checkpoint") == {}
    assert plan.place_words() == ""


def _raw_plan_reads(path: Path) -> list[str]:
    """Where ``path`` names the plan's file itself: the literal, or ``PLAN`` outside an existence check."""
    tree = ast.parse(path.read_text())
    found = [f"{path.name}:{n.lineno}: the literal {n.value!r}" for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value == PLAN]
    def names_plan(node: ast.AST) -> bool:
        return isinstance(node, ast.BinOp) and isinstance(node.right, ast.Name) and node.right.id == "PLAN"

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if method is not None and method != "exists" and names_plan(node.func.value):
            found.append(f"{path.name}:{node.lineno}: reads PLAN raw (.{method})")
        if any(names_plan(arg) for arg in node.args):
            found.append(f"{path.name}:{node.lineno}: hands PLAN's path to {ast.unparse(node.func)}()")
    return found


def test_no_module_but_the_layout_reads_the_plan_file_raw():
    layout = ROOT / "launcher/runs/core/layout.py"
    files = [p for d in ("launcher", "tui") for p in (ROOT / d).rglob("*.py") if p != layout]
    assert [hit for p in files for hit in _raw_plan_reads(p)] == []
    assert _raw_plan_reads(layout)  # the check sees a raw read where there is one: the layout's own


@pytest.mark.parametrize("source", [
    'plan = json.loads((d / "plan.json").read_text())',
    "plan = json.loads((record.directory / PLAN).read_text())",
    "text = (directory / PLAN).read_bytes()",
    "plan = _json(directory / PLAN) or {}",
    "with open(record.directory / PLAN) as f: pass",
])
def test_the_check_catches_a_raw_read_of_the_plan(tmp_path, source):
    (tmp_path / "m.py").write_text(source + "\n")
    assert _raw_plan_reads(tmp_path / "m.py")


def test_one_json_reader_for_the_run_folder():
    """The ``_json()`` helper once copied into the report, the comparison and the notifications is gone."""
    copies = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in (ROOT / "launcher").rglob("*.py")
              for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.FunctionDef) and n.name == "_json"]
    assert copies == [] or all("backends/slurm" in c for c in copies), copies


OPTIONS_AS_WRITTEN = {"force": True, "checked": False, "tags": {"fsdp_tui.probe": "1"},
                      "resume_from": {"run": "r-old", "node": 1, "root": "/ckpts/r-old/checkpoints", "name": "step-00000004"},
                      "continues": {"run": "r-old", "name": "step-00000004", "step": 4, "auto": False}}


@pytest.mark.parametrize("wire, expect", [
    (OPTIONS_AS_WRITTEN, LaunchOptions(True, {"fsdp_tui.probe": "1"},
                                       Brought("r-old", "/ckpts/r-old/checkpoints", "step-00000004", 1),
                                       Continuation("r-old", "step-00000004", 4))),
    ({"force": False, "tags": {}}, LaunchOptions()),
    (None, LaunchOptions()),                                # no file, or not JSON
    ({"force": "yes", "tags": ["a"], "resume_from": {"run": "r", "node": True, "root": "/c", "name": "s"},
      "continues": {"run": "r", "step": "4"}},
     LaunchOptions(resume_from=Brought("r", "/c", "s", None))),
    ({"resume_from": {"run": "r", "name": "s"}}, LaunchOptions()),  # no root: nothing to bring
])
def test_the_launch_options_are_one_type_written_as_they_were(tmp_path, wire, expect):
    if wire is not None:
        (tmp_path / OPTIONS).write_text(json.dumps(wire))
    options = read_options(tmp_path)
    assert options == expect
    save_options(tmp_path, options)
    assert read_options(tmp_path) == options
    if wire is OPTIONS_AS_WRITTEN:  # what the launch writes reads back byte for byte the same JSON
        assert json.loads((tmp_path / OPTIONS).read_text()) == OPTIONS_AS_WRITTEN


def test_no_module_but_the_layout_reads_the_launch_options_raw():
    layout = ROOT / "launcher/runs/core/layout.py"
    hits = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in (ROOT / "launcher").rglob("*.py") if p != layout
            for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.BinOp) and isinstance(n.right, ast.Name) and n.right.id == "OPTIONS"]
    assert hits == []


# Every record file of a run's folder, as its home modules name it: the layout and its neighbours, which alone
# read (and, but for the streams the owner appends to, write) them.
HOMES = ("layout", "gathers", "estimates", "notifying", "safe_step", "housekeeping")
FILE_NAME = re.compile(r"[\w-]+(\.[\w-]+)*\.(json|jsonl|txt)")
LITERALS_IN = ("launcher/runs/", "launcher/api/", "launcher/cli/", "launcher/present/", "launcher/nettest/", "tui/")
"""Where a record's name written by hand is one too many: the layers that can import the layout (those below
it, the node's side and the wire, name the node's own files: ``metrics.jsonl`` there is the trainer's)."""


def _record_files() -> dict[tuple[str, str], str]:
    """``(module, constant)`` -> file name, for each record file a home module names at its top level."""
    out = {}
    for home in HOMES:
        for node in ast.parse((ROOT / f"launcher/runs/core/{home}.py").read_text()).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                    and FILE_NAME.fullmatch(node.value.value)):
                out[(f"launcher.runs.core.{home}", node.targets[0].id)] = node.value.value
    return out


RECORD_FILES = _record_files()


def _names_of_records(tree: ast.Module) -> dict[str, str]:
    """What names a record file in a module: the home modules' constants imported (``PLAN``, or ``layout.PLAN``
    for a home module imported), each with its file's name."""
    out = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            for a in n.names:
                if (n.module, a.name) in RECORD_FILES:
                    out[a.asname or a.name] = RECORD_FILES[(n.module, a.name)]
                elif n.module == "launcher.runs.core" and a.name in HOMES:
                    out |= {f"{a.asname or a.name}.{k}": v for (m, k), v in RECORD_FILES.items()
                            if m.endswith(f".{a.name}")}
        elif isinstance(n, ast.Import):
            for a in n.names:
                out |= {f"{a.asname or a.name}.{k}": v for (m, k), v in RECORD_FILES.items() if m == a.name}
    return out


def _access(call: ast.Call) -> tuple[ast.AST, str] | None:
    """The path a call reads or writes raw, and how (``read``, ``write``, ``append``); ``None``: neither."""
    func = ast.unparse(call.func)
    attr = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if func in ("open", "json.loads", "json.load", "os.replace", "os.rename") and call.args:
        mode = next((k.value for k in call.keywords if k.arg == "mode"), call.args[1] if len(call.args) > 1 else None)
        text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"
        how = "write" if func.startswith("os.") or "w" in text else "append" if "a" in text else "read"
        return call.args[0], how
    if attr in ("read_text", "read_bytes", "open", "write_text", "write_bytes"):
        mode = call.args[0] if attr == "open" and call.args else None
        text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"
        how = "write" if attr.startswith("write") or "w" in text else "append" if "a" in text else "read"
        return call.func.value, how  # type: ignore[union-attr]
    return None


def _raw_record_uses(path: Path, literals: bool = True) -> list[str]:
    """Where ``path`` names a record file by hand, or reads one raw, or writes a whole-file one raw: its path
    (``d / NAME``, ``d / f".{NAME}.tmp"``, or a variable of the same function set to one) handed to ``open``,
    ``.read_text()``, ``json.loads``, ``.write_text()``, ``os.replace``... (an append to a stream, ``.jsonl``,
    is its owner's copy, and a whole stream rebuilt by it too)."""
    tree = ast.parse(path.read_text())
    found = [f"{path.name}:{n.lineno}: the literal {n.value!r}" for n in ast.walk(tree) if literals
             and isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in RECORD_FILES.values()]
    names = _names_of_records(tree)
    homes_own = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                 and n.module in {m for m, _ in RECORD_FILES} for a in n.names}
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
        nodes = list(_in_scope(scope))
        held: dict[str, str] = {}
        for n in nodes:
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                if (kept := _record_of(n.value, names, held)) is not None:
                    held[n.targets[0].id] = kept
        for n in nodes:
            if not isinstance(n, ast.Call):
                continue
            handed = [r for arg in n.args if (r := _record_of(arg, names, held)) and not r.endswith(".jsonl")]
            if handed and ast.unparse(n.func) not in homes_own:  # a whole-file record's path to a raw writer
                found.append(f"{path.name}:{n.lineno}: {handed[0]} handed to {ast.unparse(n.func)}()")
            if (access := _access(n)) is not None:
                target, how = access
                name = next((r for sub in ast.walk(target) if (r := _record_of(sub, names, held))), None)
                if name is not None and (how == "read" or how == "write" and not name.endswith(".jsonl")):
                    found.append(f"{path.name}:{n.lineno}: {name} {how} raw by {ast.unparse(n.func)}")
    return sorted(set(found))


def _in_scope(scope: ast.AST):
    """The nodes of ``scope``, in order, not those of the functions defined in it (each is a scope of its own)."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _in_scope(child)


def _record_of(node: ast.AST, names: dict[str, str], held: dict[str, str]) -> str | None:
    """The record file a path expression names: ``d / NAME`` (or ``d / f".{NAME}.tmp"``), a variable set so."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return next((names[t] for sub in ast.walk(node.right) if (t := ast.unparse(sub)) in names), None)
    return held.get(node.id) if isinstance(node, ast.Name) else None


def test_every_record_file_is_named_and_read_only_in_its_home_modules():
    """No record file of a run's folder is named by hand outside the layout and its neighbours, nor read raw
    (nor a whole-file one written raw): each is one type there, read through ``read_json``/``read_json_lines``."""
    assert {"plan.json", "options.json", "triage.json", "swaps.json", "resume-check.json", "forced.txt",
            "gathers.jsonl", "safe-step.json", "notifications.jsonl", "estimate.json", "cleaned.json",
            "swept.json", "brought.json"} <= set(RECORD_FILES.values())  # the collection finds what it must
    homes = {ROOT / f"launcher/runs/core/{home}.py" for home in HOMES}
    files = [p for d in ("launcher", "tui") for p in sorted((ROOT / d).rglob("*.py")) if p not in homes]
    hits = [f"{p.relative_to(ROOT)}: {hit}" for p in files
            for hit in _raw_record_uses(p, literals=str(p.relative_to(ROOT)).startswith(LITERALS_IN))]
    assert hits == []


@pytest.mark.parametrize("source", [
    'SWEPT = "swept.json"',
    "from launcher.runs.core.housekeeping import SWEPT\nseen = json.loads((directory / SWEPT).read_text())",
    "from launcher.runs.core.housekeeping import BROUGHT\n(d / BROUGHT).write_text(json.dumps(entries))",
    "from launcher.runs.core.layout import FORCED\nforced = (self.dir / FORCED).read_text()",
    "from launcher.runs.core.layout import TRIAGE\nwith open(d / TRIAGE) as f: pass",
    "from launcher.runs.core import safe_step\ndata = json.loads((d / safe_step.RECORD).read_text())",
    "from launcher.runs.core.layout import EVENTS\ndef f(d):\n    path = d / EVENTS\n    with open(path) as f: pass",
    "from launcher.runs.core.housekeeping import SWEPT\ntmp = d / f'.{SWEPT}.tmp'\ntmp.write_text('{}')",
    "from launcher.runs.core.layout import RESUME_CHECK\nself.write(replace_text, self.dir / RESUME_CHECK, text)",
])
def test_the_check_catches_a_record_named_or_read_raw(tmp_path, source):
    (tmp_path / "m.py").write_text(source + "\n")
    assert _raw_record_uses(tmp_path / "m.py")


@pytest.mark.parametrize("source", [
    "from launcher.runs.core.layout import EVENTS\nwith open(d / EVENTS, 'a') as f: pass",  # the owner's appends
    "from launcher.runs.core.layout import PLAN\nif (d / PLAN).exists(): pass",
    "from launcher.runs.core.layout import METRICS, read_records\nrecords = read_records(d / METRICS)",
    "from launcher.runs.sweeps.record import RECORD\ndata = json.loads((d / RECORD).read_text())",  # not a run's
    "from launcher.runs.core.layout import TRIAGE, read_json\ndata = read_json(d / TRIAGE)",
])
def test_the_check_leaves_the_records_own_readers_alone(tmp_path, source):
    (tmp_path / "m.py").write_text(source + "\n")
    assert _raw_record_uses(tmp_path / "m.py") == []


def test_a_record_file_is_written_whole_or_the_one_before_stays(tmp_path, monkeypatch):
    """``write_whole``: the new text, or (the disk refusing the rename) the file as it was and nothing aside."""
    import os

    path = tmp_path / "swept.json"
    write_whole(path, '{"0": {"done": true}}')
    assert path.read_text() == '{"0": {"done": true}}'

    def refused(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(OSError):
        write_whole(path, '{"0": {"tried_at": 1.0}}')
    assert path.read_text() == '{"0": {"done": true}}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["swept.json"]


def test_a_swept_file_with_a_rank_that_is_no_number_keeps_the_others(tmp_path):
    """A hand-edited or damaged ``swept.json``: keys that are no ASCII rank (a superscript digit reads as a
    digit to ``str.isdigit`` but not to ``int``) are left out, the others read."""
    from launcher.runs.core.housekeeping import SWEPT, SweptNode, read_swept

    (tmp_path / SWEPT).write_text(json.dumps({"1": {"done": True}, "\u00b2": {"done": True}, "x": {}}))
    assert read_swept(tmp_path) == {1: SweptNode(done=True)}
