"""A sweep's variants from the ``sweep:`` section and ``--over``, checked as ``--set`` checks, with
problems at the line of the sweep that asked for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.workload.sweep import parse_over, plan_sweep
from tests.support.sweep_base import SWEEP_BASE

ROOT = Path(__file__).resolve().parents[2]
BASE = SWEEP_BASE


def write(tmp_path: Path, sweep: str = "") -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(BASE + sweep)
    return path


def test_the_cpu_sample_has_its_five_variants(tmp_path):
    plan = plan_sweep(ROOT / "sample_workloads" / "sharding_sweep_cpu.yaml", home=tmp_path)
    assert plan.ok, [p.format() for p in plan.problems]
    assert [v.label for v in plan.variants] == [
        "sharding=full_shard", "sharding=shard_grad_op", "sharding=no_shard",
        "sharding=full_shard cpu_offload=true",
        "sharding=hybrid_shard replicate_degree=2 procs_per_node=4 num_accelerators=4"]
    assert [v.plan.topology.world_size for v in plan.variants] == [2, 2, 2, 2, 4]
    assert len({v.plan.run_id for v in plan.variants}) == 5
    # Each variant runs the workload without its sweep section: relaunching it runs that variant.
    assert all(v.plan.workload.sweep is None for v in plan.variants)


def test_grid_crosses_variants_and_over_adds_an_axis(tmp_path):
    path = write(tmp_path, "sweep:\n  grid:\n    parameters.fsdp.sharding: [full_shard, no_shard]\n"
                 "  variants:\n    - {parameters.learning_rate: 0.1}\n    - {parameters.learning_rate: 0.2}\n")
    plan = plan_sweep(path, ["parameters.max_steps=2,3"], home=tmp_path)
    assert plan.ok, [p.format() for p in plan.problems]
    assert len(plan.variants) == 8
    assert plan.variants[0].overrides == ["parameters.learning_rate=0.1", "parameters.fsdp.sharding=full_shard",
                                          "parameters.max_steps=2"]
    assert plan.varied_keys == ["parameters.learning_rate", "parameters.fsdp.sharding", "parameters.max_steps"]


def test_over_alone_sweeps_a_file_without_a_sweep_section(tmp_path):
    plan = plan_sweep(write(tmp_path), ["parameters.fsdp.sharding=full_shard,shard_grad_op,no_shard"], home=tmp_path)
    assert [v.values for v in plan.variants] == [{"parameters.fsdp.sharding": s}
                                                 for s in ("full_shard", "shard_grad_op", "no_shard")]


@pytest.mark.parametrize(("sweep", "over", "where", "words"), [
    ("sweep:\n  grid:\n    parameters.fsdp.sharding: [full_shard, full_shrad]\n", [],
     ("w.yaml", 10), "full_shrad"),
    ("sweep:\n  variants:\n    - {parameters.fsdp.shardin: no_shard}\n", [], ("w.yaml", 10), "shardin"),
    ("sweep:\n  paralel: 2\n", [], ("w.yaml", 9), "paralel"),
    ("", ["parameters.max_steps=2,many"], ("--over", 1), "many"),
    ("", ["parameters.max_steps"], ("--over", 1), "key.path=value1,value2"),
    ("", [], ("w.yaml", 1), "nothing to sweep"),
])
def test_problems_point_at_the_sweep_line_or_the_over(tmp_path, sweep, over, where, words):
    plan = plan_sweep(write(tmp_path, sweep), over, home=tmp_path)
    assert not plan.ok
    errors = [p for p in plan.problems if p.is_error]
    assert any((Path(p.file).name if p.file.endswith(".yaml") else p.file, p.line) == where
               and words in p.format() for p in errors), [p.format() for p in errors]


def test_parse_over_reads_yaml_scalars():
    assert parse_over(1, "a.b=1,2.5,true,x") == ("a.b", [1, 2.5, True, "x"])


def test_full_fine_tuning_against_lora_and_lora_settings_sweep_as_any_key(tmp_path):
    path = write(tmp_path, "sweep:\n  variants:\n    - {parameters.lora: null}\n    - {parameters.lora.r: 8}\n"
                 "    - {parameters.lora.r: 16, parameters.lora.target_modules: [q_proj, v_proj]}\n"
                 "    - {parameters.lora.target_modules: all-linear, parameters.lora.alpha: 32}\n")
    plan = plan_sweep(path, home=tmp_path)
    assert plan.ok, [p.format() for p in plan.problems]
    assert [v.plan.workload.parameters.get("lora") for v in plan.variants] == [
        None, {"r": 8}, {"r": 16, "target_modules": ["q_proj", "v_proj"]},
        {"target_modules": "all-linear", "alpha": 32}]
    bad = plan_sweep(write(tmp_path, "sweep:\n  grid:\n    parameters.lora.rank: [4, 8]\n"), home=tmp_path)
    assert not bad.ok and "rank" in bad.problems[0].format() and ":10:" in bad.problems[0].format()
