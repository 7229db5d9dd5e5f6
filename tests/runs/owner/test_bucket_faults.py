"""A bucket on a bad day, against a real S3-API server that checks credentials (moto's server mode with
auth): wrong credentials are found by ``doctor`` and by the launch before any node starts (a small object
written and removed), and every command that reads the bucket answers a refusing or dead endpoint in one
line, no traceback."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import cli, events, write_workload
from tests.support.s3_server import moto_s3

pytestmark = pytest.mark.slow

WORKLOAD = """experiment_name: bucket-faults
mlflow: {{enabled: false}}
command: {command}
env_variables: {{AWS_ENDPOINT_URL: "{url}", AWS_DEFAULT_REGION: us-east-1}}
secrets: {{AWS_ACCESS_KEY_ID: aws/key_id, AWS_SECRET_ACCESS_KEY: aws/secret}}
parameters:
  output_dir: s3://ckpts/runs/$FSDP_TUI_RUN_ID
"""
UNKNOWN_KEY = "The AWS Access Key Id you provided does not exist in our records"


def _one_line(out) -> str:
    said = (out.stdout + out.stderr).strip()
    assert "Traceback" not in said and len(said.splitlines()) == 1, said[-3000:]
    return said


def test_wrong_credentials_are_found_before_a_node_starts_and_a_dead_endpoint_is_one_line(home, tmp_path):
    with moto_s3(tmp_path / "moto.log") as s3:
        import boto3

        bucket = boto3.client("s3", endpoint_url=s3.url, aws_access_key_id=s3.key, aws_secret_access_key=s3.secret,
                              region_name="us-east-1")
        right = {"FSDP_TUI_SECRET_AWS_KEY_ID": s3.key, "FSDP_TUI_SECRET_AWS_SECRET": s3.secret}
        wrong = {**right, "FSDP_TUI_SECRET_AWS_KEY_ID": "AKIAIOSFODNN7EXAMPLE"}
        job = tmp_path / "job.sh"
        job.write_text(f"echo started > {tmp_path}/started-$NODE_RANK\n")
        wl = write_workload(tmp_path, WORKLOAD.format(command=f"sh {job}", url=s3.url))

        doctor = cli(home, "doctor", wl, "--json", **wrong)
        checks = [c for node in json.loads(doctor.stdout)["nodes"] for c in node["checks"] if c["name"] == "bucket"]
        assert doctor.returncode != 0 and len(checks) == 1, doctor.stdout[-3000:] + doctor.stderr[-2000:]
        assert checks[0]["status"] == "error" and UNKNOWN_KEY in checks[0]["detail"], checks
        assert checks[0]["detail"].startswith("s3://ckpts/runs: cannot write there with the run's credentials")

        refused = cli(home, "run", wl, **wrong)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        said = refused.stdout + refused.stderr
        assert "parameters.output_dir: s3://ckpts/runs/" in said and UNKNOWN_KEY in said, said
        assert "Traceback" not in said
        assert not list(home.glob("runs/*")) and not list(tmp_path.glob("**/started-*"))  # nothing recorded, nothing ran

        ok = cli(home, "doctor", wl, "--json", **right)
        [check] = [c for node in json.loads(ok.stdout)["nodes"] for c in node["checks"] if c["name"] == "bucket"]
        assert check["status"] == "ok" and "writable with the run's credentials" in check["detail"], check
        launched = cli(home, "run", wl, "--json", **right)
        assert launched.returncode == 0, launched.stdout[-3000:] + launched.stderr[-2000:]
        run_id = events(launched.stdout)[0]["run_id"]
        assert bucket.list_objects_v2(Bucket="ckpts").get("KeyCount", 0) == 0  # every check's object removed
        bucket.put_object(Bucket="ckpts", Key=f"runs/{run_id}/checkpoints/step-00000002/.metadata", Body=b"x")

        # a refusing endpoint: the key it does not know, in one line, from every command that reads the bucket
        for args in (("ckpt", run_id), ("resume", run_id, "--from", "2"), ("export", run_id, "--step", "2")):
            out = cli(home, *args, **wrong)
            assert out.returncode != 0 and UNKNOWN_KEY in _one_line(out), (args, out.stdout + out.stderr)
        s3.stop()
    # a dead endpoint: the same commands, and show, each one line, in seconds
    for args in (("ckpt", run_id), ("resume", run_id, "--from", "2"), ("export", run_id, "--step", "2")):
        out = cli(home, *args, timeout=60, **right)
        assert out.returncode != 0 and "the bucket's endpoint does not answer" in _one_line(out), args
    shown = cli(home, "show", run_id, timeout=60, **right)
    assert shown.returncode == 0 and "Traceback" not in shown.stdout + shown.stderr
    assert "the bucket's endpoint does not answer" in shown.stdout, shown.stdout
