"""The trainer's parts are owned, not passed around as bundles. This test reads the trainer's source:

- the job, the model's build, the entries, the export and the training loop never tell full fine-tuning
  from LoRA: they ask the adaptation (:mod:`trainer.lora.adaptation`), whose :func:`of` and
  :func:`of_checkpoint` are the only places that choose (no ``if`` on LoRA, no LoRA class, module or
  parameter name);
- a model name is resolved into files in one place (:class:`trainer.model.source.ModelSource`), once: at the
  job's start or a tool's (an export's, from a checkpoint's ``meta.json``), and passed down as that source
  (no parameter takes ``ModelSource | str``, nobody works the tokenizer's name out again);
- the steps get their parts as typed objects, a few of them (:class:`trainer.loop.steps.Steps`).

Each check is also run on a snippet that breaks it, so a check that cannot fail fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ASK_THE_ADAPTATION = ("trainer/job.py", "trainer/model/build.py", "trainer/__main__.py", "trainer/export.py",
                      *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "trainer" / "loop").glob("*.py")))
LORA_WORDS = ("lora", "adapter", "quantiz")
LORA_NAMES = {"lora", "qlora", "Adapters", "AdapterState", "Lora", "QLora", "quantize"}
LORA_PARAMETERS = ("lora_", "modules_to_save.")
"""What PEFT names its adapters' parameters and trained copies by (``q_proj.lora_A``, ``modules_to_save.default``)."""
RESOLVES = {"trainer/model/source.py", "trainer/assets.py"}
"""Where ``resolve_model`` may be called: the one place, and the assets' own command line."""
STARTS = {"trainer/job.py", "trainer/ckpt/inference.py", "trainer/lora/adaptation.py"}
"""Where ``ModelSource.resolve`` may be called: a job's start (:func:`trainer.job.choose`), and the exports from
a checkpoint, which read the model's name from its ``meta.json``."""
MAX_STEPS_PARAMETERS = 6


def lora_branches(source: str) -> list[str]:
    """Where ``source`` tells LoRA apart itself: a condition about it, or a LoRA name used."""
    found = []
    for node in ast.walk(ast.parse(source)):
        tests = [node.test] if isinstance(node, (ast.If, ast.IfExp, ast.While)) else \
            list(node.ifs) if isinstance(node, ast.comprehension) else []
        if any(w in ast.unparse(t).lower() for t in tests for w in LORA_WORDS):
            found += [f"{t.lineno}: branches on LoRA: {ast.unparse(t)}" for t in tests]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                any(w in node.value for w in LORA_PARAMETERS):
            found.append(f"{node.lineno}: names LoRA's parameters: {node.value!r}")
        elif isinstance(node, ast.Name) and node.id in LORA_NAMES or \
                isinstance(node, ast.Attribute) and node.attr in LORA_NAMES:
            found.append(f"{node.lineno}: names LoRA's {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module and "lora" in node.module.split(".") and \
                [a.name for a in node.names] != ["adaptation"]:
            found.append(f"{node.lineno}: imports {node.module} beyond its adaptation")
    return found


def resolutions(source: str) -> list[str]:
    """Where ``source`` resolves a model name itself (``resolve_model(...)``)."""
    return [f"{n.lineno}: resolves a model name" for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and (getattr(n.func, "id", None) == "resolve_model"
                                             or getattr(n.func, "attr", None) == "resolve_model")]


def second_resolutions(source: str) -> list[str]:
    """Where ``source`` takes a model as a source or a name (``ModelSource | str``: a name it would resolve
    again), resolves a source itself, or works out the tokenizer's name again (``tokenizer or model_name``)."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.arg) and n.annotation is not None:
            said = {w.strip() for w in ast.unparse(n.annotation).strip("'\"").split("|")}
            if "ModelSource" in said and "str" in said:
                found.append(f"{n.lineno}: {n.arg} takes a ModelSource or a name to resolve")
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "resolve" and \
                getattr(n.func.value, "id", None) == "ModelSource":
            found.append(f"{n.lineno}: resolves a model source")
        elif isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) and \
                {getattr(v, "attr", getattr(v, "id", None)) for v in n.values} >= {"tokenizer", "model_name"}:
            found.append(f"{n.lineno}: works out the tokenizer's name again: {ast.unparse(n)}")
    return found


def steps_parameters(source: str) -> list[str]:
    """What is wrong with ``Steps.__init__``'s parameters: untyped ones, or too many."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "Steps":
            init = next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
            args = [*init.args.posonlyargs, *init.args.args[1:], *init.args.kwonlyargs]
            found = [f"{a.arg}: untyped" for a in args if a.annotation is None]
            if len(args) > MAX_STEPS_PARAMETERS:
                found.append(f"{len(args)} parameters (at most {MAX_STEPS_PARAMETERS}: group them into parts)")
            return found
    return ["no Steps class"]


def _read(path: str) -> str:
    return (ROOT / path).read_text()


@pytest.mark.parametrize("path", ASK_THE_ADAPTATION)
def test_the_job_the_build_and_the_export_ask_the_adaptation(path: str):
    assert lora_branches(_read(path)) == []


def test_a_model_name_is_resolved_in_one_place():
    found = {str(p.relative_to(ROOT)): resolutions(p.read_text()) for p in sorted((ROOT / "trainer").rglob("*.py"))}
    assert {p: lines for p, lines in found.items() if lines and p not in RESOLVES} == {}
    assert found["trainer/model/source.py"]  # the one place does resolve


def test_a_model_source_is_resolved_once_and_passed_down():
    found = {str(p.relative_to(ROOT)): second_resolutions(p.read_text())
             for p in sorted((ROOT / "trainer").rglob("*.py"))}
    wrong = {p: [line for line in lines if p not in STARTS or "resolves a model source" not in line]
             for p, lines in found.items()}
    assert {p: lines for p, lines in wrong.items() if lines} == {}
    assert [line for line in found["trainer/job.py"] if "resolves a model source" in line]  # the job does, once


def test_the_steps_get_typed_parts():
    assert steps_parameters(_read("trainer/loop/steps.py")) == []


@pytest.mark.parametrize(("check", "snippet"), [
    (lora_branches, "if cfg.lora is not None:\n    x = 1\n"),
    (lora_branches, "quantized = cfg.lora.quantize is not None\n"),
    (lora_branches, "net = built.adapters.apply(net) if built.adapters else net\n"),
    (lora_branches, "from trainer.lora import qlora\n"),
    (lora_branches, "from trainer.lora.adapters import Adapters\n"),
    (resolutions, "from trainer.assets import resolve_model\npath = resolve_model(name)\n"),
    (resolutions, "from trainer import assets\nassets.resolve_model(name)\n"),
    # the memory prediction before the adaptation said what the base's parameters are
    (lora_branches, "def model_size(config, net, quantized):\n    if size is None or quantized:\n        return size\n"),
    (lora_branches, "base = {id(p) for n, p in net.named_parameters() if '.lora_' not in f'.{n}'}\n"),
    # the model's build and export before they took the one source
    (second_resolutions, "def hf_config(model: ModelSource | str, cfg):\n    return ModelSource.of(model).path\n"),
    (second_resolutions, "def load(model: 'str | ModelSource'):\n    pass\n"),
    (second_resolutions, "def build(cfg):\n    return ModelSource.resolve(cfg.model_name)\n"),
    (second_resolutions, "chosen = choose_template(tok, setting, cfg.model.tokenizer or cfg.model_name)\n"),
    (steps_parameters, "class Steps:\n    def __init__(self, cfg, *, net, optimizer, scheduler, data, order, total,"
                       " state, d, log, ckpt, app, proof, sampler, compiled):\n        pass\n"),
    (steps_parameters, "class Steps:\n    def __init__(self, cfg: int, model, data: int) -> None:\n        pass\n"),
], ids=["if-lora", "quantize", "adapters-attr", "qlora-module", "adapters-class", "resolve", "assets-resolve",
        "if-quantized", "lora-parameter-names", "source-or-name", "name-or-source", "resolve-again",
        "tokenizer-name-again", "fifteen-untyped", "one-untyped"])
def test_each_check_finds_what_it_is_for(check, snippet: str):
    assert check(snippet)
