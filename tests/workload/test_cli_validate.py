"""``fsdp-tui validate``, ``schema`` and ``run --dry-run`` as a user runs them: the real console script."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
AIR = ROOT / "sample_workloads/air_llama31_8b_sft/train.yaml"
CORPUS = ROOT / "tests/data/malformed"


def cli(*args, env=None, cwd=None):
    return subprocess.run([FSDP_TUI, *map(str, args)], capture_output=True, text=True, timeout=60,
                          env=env, cwd=cwd)


def test_valid_file_exits_zero():
    out = cli("validate", AIR)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout == ""


def test_errors_exit_one_in_compiler_format():
    bad = CORPUS / "26_trainer_bad_enum.yaml"
    out = cli("validate", AIR, bad)
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        f"{bad}:7:15: error: parameters.fsdp.sharding: 'full_shrad' is not one of auto, full_shard, "
        "shard_grad_op, hybrid_shard, no_shard (did you mean 'full_shard'?)"
    ]


def test_json_output_has_the_documented_keys():
    bad = CORPUS / "19_env_and_secret.yaml"
    out = cli("validate", "--json", bad)
    assert out.returncode == 1
    problems = json.loads(out.stdout)
    assert {tuple(sorted(p)) for p in problems} == {
        ("column", "file", "hint", "line", "message", "path", "severity")}
    assert {(p["line"], p["path"], p["severity"]) for p in problems} == {
        (3, "env_variables.HF_TOKEN", "warning"), (5, "secrets.HF_TOKEN", "error")}


@pytest.mark.parametrize("args", [("validate",), ("validate", "/no/such/file.yaml"), ("frobnicate",)])
def test_usage_errors_exit_two(args):
    out = cli(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr


def test_set_is_checked_and_reported(tmp_path):
    out = cli("validate", AIR, "--set", "parameters.max_steps=20", "--set", "timeout_minutes=30")
    assert out.returncode == 0
    assert "parameters.max_steps: 100 -> 20" in out.stderr and "timeout_minutes: 120 -> 30" in out.stderr
    out = cli("validate", AIR, "--set", "compute.num_acelerators=8")
    assert out.returncode == 1
    assert "--set compute.num_acelerators=8: error: compute.num_acelerators: unknown key" in out.stdout
    assert "did you mean 'num_accelerators'?" in out.stdout


def test_schema_validates_every_sample_and_rejects_a_bad_one():
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    out = cli("schema")
    assert out.returncode == 0
    schema = json.loads(out.stdout)
    validator = jsonschema.Draft202012Validator(schema)
    for path in sorted((ROOT / "sample_workloads").rglob("*.yaml")):
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, f"{path}: {errors[0].message}"
    bad = yaml.safe_load((CORPUS / "25_trainer_unknown_param.yaml").read_text())
    assert list(validator.iter_errors(bad))


def test_dry_run_of_air_file_without_hosts_says_what_is_missing(tmp_path):
    text = AIR.read_text().replace("  hosts:\n    - gpu-node-0        # aliases from ~/.ssh/config, or user@host[:port]\n"
                                   "    - gpu-node-1\n", "")
    air = AIR.parent / "air_original.yaml"
    air.write_text(text)
    try:
        out = cli("run", air, "--dry-run", env={"FSDP_TUI_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    finally:
        air.unlink()
    assert out.returncode == 0, out.stderr
    assert "cannot run yet: compute.hosts is missing: list 2 SSH hosts" in out.stdout
    assert "warning: compute: no compute.hosts" in out.stderr


def test_dry_run_prints_each_node_and_masks_secrets(tmp_path):
    env = {"FSDP_TUI_HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
           "FSDP_TUI_SECRET_MY_SCOPE_HF_TOKEN": "canary-4b1d"}
    out = cli("run", AIR, "--dry-run", "--set", "env_variables.NCCL_DEBUG=INFO", env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "node 0: gpu-node-0" in text and "node 1: gpu-node-1" in text
    for rank in (0, 1):
        block = text.split(f"node {rank}: ")[1].split("\nnode ")[0]
        assert f"NODE_RANK={rank}" in block and "NUM_NODES=2" in block and "LOCAL_WORLD_SIZE=8" in block
        assert "MASTER_ADDR=gpu-node-0" in block and "MASTER_PORT=29500" in block
        assert "NCCL_DEBUG=INFO" in block and "HF_TOKEN=******" in block
        assert f"/node-{rank}/parameters.yaml" in block
        assert "--nproc_per_node=\"${LOCAL_WORLD_SIZE:-8}\"" in block
    assert "canary-4b1d" not in text + out.stderr
    assert not (tmp_path / "runs.db").exists(), "a dry run must not record a run"


def test_dry_run_of_invalid_file_fails_with_its_problems():
    bad = CORPUS / "14_not_a_multiple.yaml"
    out = cli("run", bad, "--dry-run")
    assert out.returncode == 2  # an invalid workload: as doctor says it
    assert f"{bad}:3:21: error: compute.num_accelerators" in out.stderr
    assert "Traceback" not in out.stderr
