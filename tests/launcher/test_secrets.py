"""Secrets: 0600 files in a 0700 folder, env variables first, every gap named with how to fill it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.secrets import MissingSecrets, SecretStore, env_name, mask

ROOT = Path(__file__).resolve().parents[2]


def test_file_permissions_env_precedence_and_missing(tmp_path, monkeypatch):
    store = SecretStore(tmp_path)
    store.set("hf/token", "hf_file_value")
    path = tmp_path / "secrets" / "hf" / "token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "secrets").stat().st_mode) == 0o700
    assert store.list() == ["hf/token"]
    assert store.resolve({"HF_TOKEN": "hf/token"}) == {"HF_TOKEN": "hf_file_value"}

    assert env_name("wandb/api-key") == "FSDP_TUI_SECRET_WANDB_API_KEY"
    monkeypatch.setenv(env_name("hf/token"), "hf_env_value")
    assert store.resolve({"HF_TOKEN": "hf/token"}) == {"HF_TOKEN": "hf_env_value"}

    with pytest.raises(MissingSecrets) as err:
        store.resolve({"HF_TOKEN": "hf/token", "A": "x/a", "B": "y/b"})
    assert err.value.refs == ["x/a", "y/b"]
    assert "printf %s VALUE | fsdp-tui secrets set x/a" in str(err.value)
    assert "fsdp-tui secrets set y/b" in str(err.value)

    assert store.remove("hf/token") and not store.remove("hf/token") and store.list() == []
    with pytest.raises(ValueError):
        store.set("no-slash", "v")


def test_mask_hides_every_value():
    assert mask("tok=abc123 again abc123 and zz", ["abc123", "", "zz"]) == "tok=****** again ****** and ******"


def test_cli_set_list_rm_never_prints_the_value(tmp_path):
    env = {**os.environ, "FSDP_TUI_HOME": str(tmp_path)}
    cli = [str(Path(sys.executable).with_name("fsdp-tui")), "secrets"]
    canary = "canary-7f3e9b"
    set_ = subprocess.run(cli + ["set", "hf/token"], input=canary, env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert set_.returncode == 0, set_.stderr
    listed = subprocess.run(cli + ["list"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "hf/token" in listed.stdout
    assert canary not in set_.stdout + set_.stderr + listed.stdout + listed.stderr
    assert SecretStore(tmp_path).get("hf/token") == canary
    rm = subprocess.run(cli + ["rm", "hf/token"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert rm.returncode == 0 and SecretStore(tmp_path).list() == []
