"""The ``air`` workload format as upstream has it today: every field validates here, by upstream's own
rules; what means something outside Databricks is honoured, the rest is accepted with a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.workload.air_rules import quartz_to_cron
from launcher.workload.load import plan_file
from launcher.workload.validate import validate_text

EVERY_FIELD = """\
experiment_name: air-everything
idempotency_token: nightly-2026-11-25
mlflow_run_name: nightly_sft
mlflow_experiment_directory: /Workspace/Users/me@example.com/experiments
mlflow_artifact_location: /Volumes/main/default/artifacts
permissions:
  - {user_name: me@example.com, level: CAN_MANAGE}
  - {group_name: ml-team, level: CAN_VIEW}
usage_policy_name: research
schedule: {quartz_cron_expression: "0 0 9 ? * MON-FRI", timezone_id: Europe/Berlin, pause_status: UNPAUSED}
compute: {num_accelerators: 16, accelerator_type: GPU_8xH100, node_pool_id: pool-1}
environment:
  docker_image: {url: nvcr.io/nvidia/pytorch:25.01-py3, tag_policy: latest, credentials_scope: reg, credentials_key: token}
code_source:
  type: snapshot
  snapshot:
    root_path: .
    include_paths: [train.py, configs]
    git: {commit: 0123abcd, remote: false}
    remote_volume: /Volumes/main/default/code
command: cd $CODE_SOURCE_PATH && torchrun train.py
max_retries: 3
timeout_minutes: 60
"""


def _errors(text: str, base: Path | None = None) -> list[str]:
    return [p.format() for p in validate_text(text, "w.yaml", base_dir=base).problems if p.is_error]


def test_a_workload_with_every_upstream_field_validates_with_warnings_only(tmp_path):
    result = validate_text(EVERY_FIELD, "w.yaml", base_dir=tmp_path)
    assert result.ok, [p.format() for p in result.errors]
    warned = {p.path for p in result.problems if p.severity == "warning"}
    assert {"mlflow_experiment_directory", "mlflow_artifact_location", "permissions", "usage_policy_name",
            "compute.node_pool_id", "code_source.snapshot.remote_volume", "schedule"} <= warned
    schedule = next(p for p in result.problems if p.path == "schedule")
    assert "CRON_TZ=Europe/Berlin 0 9 * * MON-FRI" in schedule.hint and "fsdp-tui run" in schedule.hint


BASE = "experiment_name: x\ncompute: {accelerator_type: CPU, procs_per_node: 1}\ncommand: echo hi\n"


@pytest.mark.parametrize(("extra", "path", "words"), [
    ("idempotency_token: '  '\n", "idempotency_token", "1-64 characters"),
    (f"idempotency_token: {'t' * 65}\n", "idempotency_token", "1-64 characters"),
    ("mlflow_run_name: 'bad name!'\n", "mlflow_run_name", "not a valid MLflow run name"),
    ("mlflow_run_name: a\nmlflow: {run_name: b}\n", "mlflow_run_name", "both"),
    ("usage_policy_name: a\nusage_policy_id: 12345678-90ab-cdef-1234-567890abcdef\n", "usage_policy_id",
     "mutually exclusive"),
    ("usage_policy_id: research\n", "usage_policy_id", "not a UUID"),
    ("mlflow_experiment_directory: /Users/me\n", "mlflow_experiment_directory", "/Workspace"),
    ("mlflow_artifact_location: s3://bucket\n", "mlflow_artifact_location", "dbfs:/"),
    ("permissions: [{user_name: a, group_name: b, level: CAN_VIEW}]\n", "permissions[0]", "exactly one"),
    ("permissions: [{user_name: a}]\n", "permissions[0].level", "missing required key"),
    ("schedule: {quartz_cron_expression: '0 0 9 * * ?'}\n", "schedule.timezone_id", "missing required key"),
    ("schedule: {quartz_cron_expression: '0 0 9 * * ?', timezone_id: UTC, pause_status: STOPPED}\n",
     "schedule.pause_status", "not one of PAUSED, UNPAUSED"),
    ("environment: {docker_image: {url: img}, dependencies: [numpy]}\n", "environment.docker_image",
     "dependencies cannot be set"),
    ("environment: {docker_image: {url: img, credentials_scope: s}}\n", "environment.docker_image",
     "go together"),
    ("environment: {docker_image: {url: img, credentials_scope: s, credentials_key: k}}\n",
     "environment.docker_image.credentials_scope", "tag_policy: latest"),
    ("environment: {docker_image: {url: img, tag_policy: newest}}\n", "environment.docker_image.tag_policy",
     "not one of auto, latest"),
    ("code_source: {type: snapshot, snapshot: {root_path: ., git: {branch: main, commit: abc}}}\n",
     "code_source.snapshot.git", "exactly one of branch and commit"),
    ("code_source: {type: snapshot, snapshot: {root_path: ., include_paths: []}}\n",
     "code_source.snapshot.include_paths", "empty"),
    ("code_source: {type: snapshot, snapshot: {root_path: ., include_paths: [../secrets]}}\n",
     "code_source.snapshot.include_paths[0]", "not a path inside root_path"),
    ("code_source: {type: snapshot, snapshot: {root_path: ., include_paths: [/etc]}}\n",
     "code_source.snapshot.include_paths[0]", "not a path inside root_path"),
    ("code_source: {type: snapshot, snapshot: {root_path: ., remote_volume: /tmp/x}}\n",
     "code_source.snapshot.remote_volume", "/Volumes/"),
    ("environment: {dependencies: missing-requirements.txt}\n", "environment.dependencies", "no such file"),
])
def test_upstream_rules_are_errors_at_their_key(tmp_path, extra, path, words):
    problems = validate_text(BASE + extra, "w.yaml", base_dir=tmp_path).problems
    errors = [p for p in problems if p.is_error]
    assert any(p.path == path and words in p.format() for p in errors), [p.format() for p in problems]


def test_a_bad_code_source_brings_no_second_wrong_warning(tmp_path):
    text = ("experiment_name: x\ncompute: {accelerator_type: CPU, procs_per_node: 1}\n"
            "code_source: {type: snapshot, snapshot: {root_path: ., bogus: 1}}\ncommand: cd $CODE_SOURCE_PATH\n")
    problems = validate_text(text, "w.yaml", base_dir=tmp_path).problems
    assert [p.path for p in problems] == ["code_source.snapshot.bogus"], [p.format() for p in problems]


@pytest.mark.parametrize(("quartz", "cron"), [
    ("0 0 9 * * ?", "0 9 * * *"),
    ("0 30 9 ? * MON-FRI", "30 9 * * MON-FRI"),
    ("0 0 12 ? * 1,7", "0 12 * * 0,6"),
    ("0 15 10 1 * ?", "15 10 1 * *"),
    ("30 0 9 * * ?", None),
    ("0 0 9 L * ?", None),
    ("0 0 9 ? * 6#3", None),
    ("0 0 9 * * ? 2030", None),
])
def test_quartz_schedules_become_crontab_lines_where_cron_can_say_them(quartz, cron):
    assert quartz_to_cron(quartz) == cron


def test_dependencies_from_a_requirements_file_reach_the_plan(tmp_path):
    (tmp_path / "requirements.txt").write_text("# pinned\nnumpy>=1.24\n\nrich==13.7.1  # the log colours\n")
    (tmp_path / "env.yaml").write_text("version: '4'\ndependencies: [pyyaml>=6]\n")
    for name, expected in (("requirements.txt", ("numpy>=1.24", "rich==13.7.1")), ("env.yaml", ("pyyaml>=6",))):
        file = tmp_path / "w.yaml"
        file.write_text(BASE + f"environment: {{dependencies: {name}}}\n")
        planned = plan_file(file, home=tmp_path)
        assert planned.plan is not None, [p.format() for p in planned.problems]
        assert planned.plan.dependencies == expected
    (tmp_path / "requirements.txt").write_text("-r other.txt\n")
    errors = _errors(BASE + "environment: {dependencies: requirements.txt}\n", tmp_path)
    assert len(errors) == 1 and "requirements.txt:1: pip options ('-r')" in errors[0]


def test_git_remote_is_a_warning_and_ships_what_the_remote_has(tmp_path):
    """``git.remote: true``, upstream's way to snapshot a branch as pushed: accepted with a warning that says
    what ships, and the snapshot is the remote's branch, not the clone's unpushed commit."""
    import os
    import subprocess

    from launcher.backends.snapshot_source import source_root
    from launcher.workload.model import Snapshot

    remote_on = EVERY_FIELD.replace("git: {commit: 0123abcd, remote: false}", "git: {branch: main, remote: true}")
    result = validate_text(remote_on, "w.yaml", base_dir=tmp_path)
    assert result.ok, [p.format() for p in result.errors]
    (said,) = [p for p in result.problems if p.path == "code_source.snapshot.git.remote"]
    assert said.severity == "warning" and "fetched from the branch's upstream remote, else origin" in said.message

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}

    def git(where: Path, *args: str) -> None:
        subprocess.run(["git", "-C", str(where), *args], check=True, capture_output=True, env=env)

    upstream, clone = tmp_path / "upstream.git", tmp_path / "clone"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(upstream))
    git(tmp_path, "clone", "-q", str(upstream), str(clone))
    (clone / "train.py").write_text("pushed\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "pushed")
    git(clone, "push", "-q", "origin", "HEAD:main")
    (clone / "train.py").write_text("committed here, never pushed\n")
    git(clone, "commit", "-qam", "local")
    snap = Snapshot.model_validate({"root_path": ".", "git": {"branch": "main", "remote": True}})
    (tmp_path / "t1").mkdir()
    assert (source_root(clone, snap, tmp_path / "t1") / "train.py").read_text() == "pushed\n"
    local = Snapshot.model_validate({"root_path": ".", "git": {"branch": "main"}})
    (tmp_path / "t2").mkdir()
    assert (source_root(clone, local, tmp_path / "t2") / "train.py").read_text() == "committed here, never pushed\n"
    named = Snapshot.model_validate({"root_path": ".", "git": {"branch": "main", "remote": "nowhere"}})
    (tmp_path / "t3").mkdir()
    with pytest.raises(Exception, match="git fetch nowhere main failed"):
        source_root(clone, named, tmp_path / "t3")
