"""``air`` fields honoured by a real local launch: the code snapshot as committed at a git commit and
limited to ``include_paths``, ``mlflow_run_name``, ``idempotency_token`` and ``environment.docker_image``.

No container runtime can start an image on this machine (no registry, no daemon), so the image's runtime
is a stand-in: a ``docker`` on PATH that records how it was called and runs the command itself. What is
checked is ours: what the node is asked to run, and that the run's values reach it by name only."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import cli, events, wait_tracked

pytestmark = pytest.mark.slow

STAND_IN = """#!/bin/bash
printf '%s\\n' "$@" > "$PWD/runtime-argv.txt"
while [ "$#" -gt 2 ]; do shift; done
[ "$1" = "-c" ] && exec bash -c "$2"
exit 99
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}).stdout.strip()


def test_a_commit_snapshot_a_run_name_a_token_and_an_image(home, tmp_path):
    repo = tmp_path / "repo"
    for name, text in {"project/src/main.py": "v1\n", "project/src/util.py": "u\n", "project/configs/a.yaml": "a\n",
                       "project/configs/b.yaml": "b\n", "project/README.md": "r\n"}.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "first")
    commit = _git(repo, "rev-parse", "HEAD")
    (repo / "project/src/main.py").write_text("v2, not committed\n")
    (repo / "project/src/new.py").write_text("untracked\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(STAND_IN)
    (bin_dir / "docker").chmod(0o755)
    workload = tmp_path / "train.yaml"
    workload.write_text(f"""\
experiment_name: air-honoured
idempotency_token: launch-once-1
mlflow_run_name: named_by_air
compute: {{accelerator_type: CPU, procs_per_node: 1, num_accelerators: 1}}
environment:
  docker_image: {{url: registry.example/team/train:v3}}
code_source:
  type: snapshot
  snapshot: {{root_path: repo/project, include_paths: [src, configs/a.yaml], git: {{commit: {commit}}}}}
secrets: {{API_TOKEN: scope/key}}
command: |
  cd $CODE_SOURCE_PATH && find . -type f | sort && cat src/main.py && echo "token length ${{#API_TOKEN}}"
""")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FSDP_TUI_SECRET_SCOPE_KEY": "s3cr3t-value"}
    dry = cli(home, "run", workload, "--dry-run", **env)
    assert dry.returncode == 0, dry.stderr
    assert f"as committed at commit {commit} (only src, configs/a.yaml)" in dry.stdout
    assert "registry.example/team/train:v3" in dry.stdout and "s3cr3t" not in dry.stdout

    first = cli(home, "run", workload, "--json", **env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    run_id = events(first.stdout)[0]["run_id"]
    log = (home / "runs" / run_id / "nodes" / "0.log").read_text().splitlines()
    assert log[:4] == ["./configs/a.yaml", "./src/main.py", "./src/util.py", "v1"], log
    assert "token length 12" in log

    [argv_file] = list((home / "nodes").rglob("runtime-argv.txt"))
    argv = argv_file.read_text().splitlines()
    assert argv[:3] == ["run", "--rm", "--init"] and "registry.example/team/train:v3" in argv
    assert {"--network", "--ipc"} <= set(argv) and f"{argv_file.parent}:{argv_file.parent}" in argv
    passed = {argv[i + 1] for i, a in enumerate(argv) if a == "-e"}
    assert {"API_TOKEN", "NODE_RANK", "MASTER_ADDR", "CODE_SOURCE_PATH", "FSDP_TUI_RUN_ID"} <= passed
    assert not any("s3cr3t" in a for a in argv)

    again = cli(home, "run", workload, "--json", **env)
    assert again.returncode == 0, again.stderr
    assert f"was launched before as run {run_id}: not launched again" in again.stderr
    assert [r["run_id"] for r in json.loads(cli(home, "runs", "--json").stdout)] == [run_id]

    from mlflow import MlflowClient

    wait_tracked(home, run_id)
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("air-honoured").experiment_id])
    assert run.info.run_name == "named_by_air" and run.info.status == "FINISHED"
