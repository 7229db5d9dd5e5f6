"""The editor's pure parts: completion at a cursor, mechanical fixes, templates, teaching problems."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from launcher.workload.complete import Sources, complete
from launcher.workload.fixes import fix_for
from launcher.workload.hosts import config_aliases
from launcher.workload.templates import BUILTIN, is_blank, templates
from launcher.workload.validate import validate_text


def _labels(text: str, sources: Sources | None = None) -> list[str]:
    lines = text.split("\n")
    found = complete(text, len(lines) - 1, len(lines[-1]), sources or Sources())
    return [i.label for i in found.items] if found else []


@pytest.mark.parametrize("text, first", [
    ("exp", "experiment_name"),
    ("experiment_name: x\ncompute:\n  hos", "hosts"),
    ("experiment_name: x\nparameters:\n  fsdp:\n    shar", "sharding"),
    ("experiment_name: x\nparameters:\n  fsdp:\n    sharding: hy", "hybrid_shard"),
    ("experiment_name: x\nparameters:\n  data:\n    format: ", "auto"),
    ("experiment_name: x\nmlflow:\n  enabled: ", "true"),
    ("experiment_name: x\ncompute:\n  hosts:\n    - g", "gpu-a"),
    ("experiment_name: x\ncompute:\n  hosts:\n    - <host-0>", "gpu-a"),
    ("experiment_name: x\ncompute:\n  slurm:\n    login: g", "gpu-a"),
    ("experiment_name: x\ncompute:\n  slurm:\n    parti", "partition"),
    ("experiment_name: x\nsecrets:\n  HF_TOKEN: ", "team/hf"),
])
def test_completion_offers_what_fits_the_cursor(text, first):
    sources = Sources(hosts=["gpu-a", "gpu-b"], secrets=["team/hf"])
    assert _labels(text, sources)[0] == first


def test_completion_leaves_out_written_keys_and_comments():
    assert "experiment_name" not in _labels("experiment_name: x\ne")
    assert _labels("experiment_name: x\n# comp") == []
    # With a `command`, parameters are free-form: no trainer keys.
    assert _labels("experiment_name: x\ncommand: y\nparameters:\n  mo") == []


def test_keys_with_children_complete_without_a_space():
    found = complete("experiment_name: x\ncompute:\n  hos", 2, 5)
    assert found is not None and found.start == 2 and found.items[0].insert == "hosts:"
    assert complete("experiment_nam", 0, 14).items[0].insert == "experiment_name: "


def test_fix_renames_a_misspelt_key_and_adds_a_missing_one():
    text = "experiment_name: x\ncompute:\n  hots: [a]\ncommand: y\n"
    (p,) = [p for p in validate_text(text).problems if "hots" in p.message]
    assert fix_for(p, text).apply(text) == text.replace("hots", "hosts")
    text = "experiment_name: x\nparameters:\n  model_name: m\n  dataset_name: d\n"
    (p,) = validate_text(text).errors
    fixed = fix_for(p, text).apply(text)
    assert "  output_dir: outputs\n" in fixed and validate_text(fixed).ok
    text = "compute: {}\ncommand: y"
    (p,) = validate_text(text).errors
    assert validate_text(fix_for(p, text).apply(text)).ok


def test_missing_command_and_parameters_is_one_problem_without_pydantic_words():
    result = validate_text("experiment_name: x\ncompute: 3\n")
    assert [p.path for p in result.errors] == ["", "compute"]
    assert "`command:`" in result.errors[0].message and "parameters:" in result.errors[0].hint
    assert result.errors[1].message.startswith("expected a mapping")
    # `parameters:` being written: now the built-in trainer's keys are asked for.
    asked = validate_text("experiment_name: x\nparameters:\n").errors
    assert sorted(p.path for p in asked) == ["parameters.dataset_name", "parameters.model_name",
                                            "parameters.output_dir"]
    for problem in asked + result.errors:
        assert "Input should" not in problem.message and "instance of" not in problem.message


def test_indentation_errors_say_so():
    (p,) = validate_text("experiment_name: x\ncompute:\n    hosts: [a]\n  gpus_per_node: 1\ncommand: y\n").errors
    assert "indentation" in p.hint


def test_templates_validate_once_their_blanks_are_filled():
    for t in templates():
        text = t.text.replace("<host-0>", "gpu-a").replace("<host-1>", "gpu-b").replace("<login-node>", "hpc").replace(
            "<partition>", "gpu")
        assert validate_text(text).ok, (t.key, validate_text(text).problems)
    for t in BUILTIN:  # every key of the built-in templates carries a comment (list items excepted)
        keys = [line for line in t.text.splitlines() if re.match(r"\s*[a-z_]+:", line)]
        assert all("#" in line or line.rstrip().endswith(":") for line in keys), t.key
    assert [t.title for t in BUILTIN][:2] == ["This machine, CPU demo", "N SSH hosts, built-in trainer"]
    assert is_blank("# just a comment\n\n") and not is_blank("experiment_name: x")


def test_ssh_config_aliases_leave_patterns_out():
    text = "Host *\n  User me\nHost gpu-a gpu-b !bad\nHost=bastion\nMatch host x\nHost node-?\n"
    assert config_aliases(text) == ["gpu-a", "gpu-b", "bastion"]


def test_the_lora_and_samples_sections_complete_with_their_help():
    from launcher.workload.complete import complete

    lora = complete("experiment_name: x\nparameters:\n  model_name: m\n  lora:\n    \n", 4, 4)
    assert [i.label for i in lora.items] == ["r", "alpha", "dropout", "target_modules", "modules_to_save", "quantize"]
    assert "PEFT's r" in lora.items[0].help and "all-linear" in lora.items[3].help
    samples = complete("experiment_name: x\nparameters:\n  logging:\n    samples:\n      \n", 4, 6)
    assert [i.label for i in samples.items][:3] == ["prompts", "eval_rows", "every_steps"]


def test_no_rename_fix_when_the_key_it_would_become_is_set_beside_it():
    text = ("experiment_name: x\nparameters:\n  model_name: m\n  dataset_name: d\n  output_dir: o\n"
            "  max_steps: 10\n  max_stepz: 20\n")
    (p,) = validate_text(text).errors
    assert p.message == "unknown key 'max_stepz'" and "'max_steps' is set beside it" in p.hint
    assert fix_for(p, text) is None  # renaming would write a duplicate key: the user decides
    alone = text.replace("  max_steps: 10\n", "")
    (p,) = validate_text(alone).errors
    assert fix_for(p, alone).apply(alone) == alone.replace("max_stepz", "max_steps")


def test_templates_speak_for_themselves():
    from trainer.wire.config import MIN_TORCH

    need = "torch >= " + ".".join(map(str, MIN_TORCH))
    for t in templates():
        assert "seed" not in (t.summary + t.text).lower(), t.key  # no internal names of where a recipe came from
        assert t.summary and not t.summary.endswith((",", ":")) and "`" not in t.summary, (t.key, t.summary)
        for version in re.findall(r"torch >= [\d.]+", t.text):
            assert version == need, (t.key, version)
        # output_dir names the run's outputs: the trainer adds checkpoints/ and hf/ below it
        for value in re.findall(r"^\s+output_dir:\s*(\S+)", t.text, re.M):
            assert value.rstrip("/").rsplit("/", 1)[-1] != "checkpoints", (t.key, value)
    summaries = {t.key: t.summary for t in templates()}
    assert summaries["sample:tiny_cpu.yaml"].startswith("The demo: the built-in FSDP2 trainer")


@pytest.mark.parametrize("path", [("parameters", "fsdp", "sharding"), ("ssh", "identity_file"),
                                  ("parameters", "checkpoint", "every_steps"), ("compute", "hosts"),
                                  ("parameters", "model_name"), ("environment", "dependencies")])
def test_the_help_of_a_key_is_in_words(path):
    from launcher.workload.schema_walk import help_for

    info = help_for(path, None)
    shown = f"{info.headline()}\n{info.description}"
    for raw in ("None", "``", "Literal[", "typing", "| None", ":class:", ":func:", "'auto'", "[]"):
        assert raw not in shown, (path, shown)
    assert "\n" not in info.description  # one paragraph: the pane wraps it


def test_help_names_the_default_and_the_choices():
    from launcher.workload.schema_walk import help_for

    assert help_for(("parameters", "fsdp", "sharding"), None).headline() == (
        "parameters.fsdp.sharding: one of auto, full_shard, shard_grad_op, hybrid_shard, no_shard (default: auto)")
    assert help_for(("ssh", "identity_file"), None).headline() == "ssh.identity_file: text (default: not set)"
    assert help_for(("parameters", "output_dir"), None).headline() == "parameters.output_dir: text, required"


def test_every_gpu_template_has_a_cpu_variant_that_plans_on_cpu():
    """Each starting point for GPUs has its CPU twin (its key with ``-cpu``): the same way to reach the
    machines (SSH hosts, SLURM) and the same trainer or script, planned as a CPU run, with nothing to download."""
    from launcher.workload.plan import build_plan

    def filled(t):
        return t.text.replace("<host-0>", "node-a").replace("<host-1>", "node-b").replace("<login-node>", "hpc").replace(
            "<partition>", "cpu")

    by_key = {t.key: t for t in BUILTIN}
    gpu = [t for t in BUILTIN if (validate_text(filled(t)).workload.compute.accelerator_type or "").startswith("GPU")]
    assert {t.key for t in gpu} == {"ssh-builtin", "ssh-script", "slurm-builtin"}
    for t in gpu:
        cpu = by_key[f"{t.key}-cpu"]
        twin, plan = validate_text(filled(t)).workload, build_plan(validate_text(filled(cpu)).workload, run_id="r")
        assert plan.topology.kind == "cpu" and plan.topology.num_nodes == 2, cpu.key
        assert (twin.compute.slurm is None) == (plan.workload.compute.slurm is None), cpu.key
        assert (twin.command is None) == (plan.workload.command is None), cpu.key
        if plan.workload.command is None:  # the built-in trainer on the tiny model: nothing to download
            assert plan.workload.parameters["model_name"].startswith("builtin:"), cpu.key
            assert plan.workload.parameters["dataset_name"].startswith("builtin:"), cpu.key


def _completion_world(tmp_path):
    from launcher.workload.complete import read_entries

    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text("{}")
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "dataset_info.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner-model").mkdir()
    (tmp_path / "sub" / "inner-model" / "config.json").write_text("{}")
    (tmp_path / "sub" / "rows.parquet").write_text("")
    (tmp_path / "train.jsonl").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / ".hidden.jsonl").write_text("")
    return Sources(entries=lambda folder: read_entries(tmp_path, folder))


def _offered(text: str, sources, row: int | None = None) -> dict[str, str]:
    lines = text.split("\n")
    row = len(lines) - 1 if row is None else row
    found = complete(text, row, len(lines[row]), sources)
    return {} if found is None else {i.label: i.help for i in found.items}


HEAD = "experiment_name: x\nparameters:\n"


def test_model_name_completes_built_ins_docs_names_and_local_model_folders(tmp_path):
    from launcher.workload.known_names import HUB_MODELS

    sources = _completion_world(tmp_path)
    got = _offered(HEAD + "  model_name: ", sources)
    assert list(got)[:2] == ["builtin:tiny-llama", "builtin:small-llama"] and "built in" in got["builtin:tiny-llama"]
    assert set(HUB_MODELS) <= set(got) and got["meta-llama/Llama-3.2-1B"].startswith("hub: ")
    assert got["./my-model"] == "model folder" and got["./sub/"] == "folder"
    assert "./train.jsonl" not in got and "./notes.txt" not in got and not any("hidden" in k for k in got)
    assert list(_offered(HEAD + "  model_name: bigsc", sources)) == ["bigscience/bloom-560m"]
    assert _offered(HEAD + "  model_name: ./sub/", sources) == {"./sub/inner-model": "model folder"}
    assert _offered(HEAD + f"  model_name: {tmp_path}/my", sources) == {f"{tmp_path}/my-model": "model folder"}
    # a script of your own: parameters are free-form, nothing is offered
    assert _offered("experiment_name: x\ncommand: python t.py\nparameters:\n  model_name: ", sources) == {}


def test_dataset_name_completes_built_ins_docs_names_data_files_and_saved_datasets(tmp_path):
    from launcher.workload.known_names import HUB_DATASETS

    sources = _completion_world(tmp_path)
    got = _offered(HEAD + "  dataset_name: ", sources)
    assert list(got)[0] == "builtin:tiny-alpaca" and set(HUB_DATASETS) <= set(got)
    assert got["./train.jsonl"] == "data file" and got["./saved"] == "saved dataset"
    assert "./my-model" not in got and "./notes.txt" not in got
    assert _offered(HEAD + "  dataset_name: ./sub/r", sources) == {"./sub/rows.parquet": "data file"}
    assert list(_offered(HEAD + "  dataset_name: squ", sources)) == ["rajpurkar/squad"]


def test_the_names_the_docs_use_are_the_ones_completion_offers():
    """Every model and dataset the docs, the README, the samples and the templates name is offered: a
    built-in name, or a hub name of known_names (a path or a variable is a local thing, offered from disk)."""
    from launcher.workload.known_names import HUB_DATASETS, HUB_MODELS
    from trainer import assets
    from trainer.wire import builtin_assets

    assert set(builtin_assets.MODELS) == set(assets.MODELS) and set(builtin_assets.DATASETS) == set(assets.DATASETS)
    root = Path(__file__).resolve().parents[2]
    files = [root / "README.md", *(root / "docs").glob("*.md"), *(root / "sample_workloads").rglob("*.yaml")]
    texts = [f.read_text() for f in files] + [t.text for t in BUILTIN]
    named = {(key, value) for text in texts
             for key, value in re.findall(r"\b(model_name|dataset_name): *([A-Za-z0-9_.:/~$-]+)", text)}
    assert ("model_name", "meta-llama/Llama-3.2-1B") in named
    for key, value in named:
        if value.startswith(("/", "~", "./", "$", "<")) or "/" not in value and ":" not in value:
            continue  # a path, a variable, a blank, or a word in prose
        if value.startswith("builtin:"):
            table = builtin_assets.MODELS if key == "model_name" else builtin_assets.DATASETS
            assert value.removeprefix("builtin:") in table, (key, value)
        else:
            assert value in (HUB_MODELS if key == "model_name" else HUB_DATASETS), (key, value)
