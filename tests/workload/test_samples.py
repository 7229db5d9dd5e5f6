"""Every shipped sample workload validates, and the seed-000 air file validates unchanged."""

from pathlib import Path

import pytest

from launcher.workload.validate import validate_file, validate_text

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (ROOT / "sample_workloads").rglob("*.yaml"))


def test_there_are_samples_for_every_seed():
    names = {p.relative_to(ROOT / "sample_workloads").as_posix() for p in SAMPLES}
    assert {"tiny_cpu.yaml", "air_llama31_8b_sft/train.yaml", "byo_script/workload.yaml",
            "torchtune_llama70b_2node.yaml", "bloom560m_squad_sharding.yaml",
            "llama32_1b_squad_async_ckpt.yaml", "slurm/torchtune_llama70b_2node.yaml",
            "slurm/bloom560m_squad.yaml"} <= names


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_is_valid_without_warnings(path):
    result = validate_file(path)
    assert result.problems == [], "\n".join(p.format() for p in result.problems)
    assert result.workload is not None


def test_air_file_without_hosts_validates_with_a_note():
    text = (ROOT / "sample_workloads/air_llama31_8b_sft/train.yaml").read_text()
    # The air original: the same file without our `hosts` block.
    air = text.replace("  hosts:\n    - gpu-node-0        # aliases from ~/.ssh/config, or user@host[:port]\n"
                       "    - gpu-node-1\n", "")
    assert air != text
    result = validate_text(air, "train.yaml", base_dir=ROOT / "sample_workloads/air_llama31_8b_sft")
    assert result.ok
    notes = [p for p in result.problems if p.severity == "warning"]
    assert len(notes) == 1 and notes[0].path == "compute" and "compute.hosts" in notes[0].message
