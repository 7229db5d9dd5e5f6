"""Checkpoints in a bucket: a real S3-API server process (moto's server mode) on loopback, the built-in
trainer writing and reading it through DCP's fsspec writer and reader, credentials through the
workload's secrets; listed, exported and resumed from it as from any checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import cli, events, write_workload
from tests.support.s3_server import KEY, SECRET

pytestmark = pytest.mark.slow


def _losses(home: Path, run_id: str) -> dict[int, float]:
    records = [json.loads(x) for x in (home / "runs" / run_id / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r.get("kind", "train") == "train"}


def test_a_run_checkpoints_to_a_bucket_and_resumes_from_it(home, tmp_path, s3_server):
    wl = write_workload(tmp_path, f"""experiment_name: bucket
compute: {{accelerator_type: CPU, procs_per_node: 1, num_accelerators: 1}}
mlflow: {{enabled: false}}
env_variables: {{OMP_NUM_THREADS: 1, FSDP_TUI_ASSETS: /tmp/fsdp-tui-test-assets, AWS_ENDPOINT_URL: "{s3_server}",
                AWS_DEFAULT_REGION: us-east-1}}
secrets: {{AWS_ACCESS_KEY_ID: aws/key_id, AWS_SECRET_ACCESS_KEY: aws/secret}}
parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: s3://ckpts/runs/$FSDP_TUI_RUN_ID
  max_seq_len: 64
  per_device_batch_size: 4
  learning_rate: 0.003
  max_steps: 4
  model: {{from_scratch: true}}
  logging: {{eval_max_batches: 1}}
  checkpoint: {{every_steps: 2, export_hf: false}}
""")
    creds = {"FSDP_TUI_SECRET_AWS_KEY_ID": KEY, "FSDP_TUI_SECRET_AWS_SECRET": SECRET}
    dry = cli(home, "run", wl, "--dry-run", **creds).stdout
    assert "  checkpoints: a bucket (s3://ckpts/runs/$FSDP_TUI_RUN_ID): every node writes and reads it directly" in dry

    out = cli(home, "run", wl, "--json", **creds)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    run_id = events(out.stdout)[0]["run_id"]
    import s3fs

    fs = s3fs.S3FileSystem(key=KEY, secret=SECRET, client_kwargs={"endpoint_url": s3_server})
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"ckpts/runs/{run_id}/checkpoints")) == [
        "step-00000002", "step-00000004"]
    assert not list(home.glob(f"nodes/{run_id}/node-0/s3*"))  # nothing landed on a local path named like it

    listed = cli(home, "ckpt", run_id, "--json", **creds)
    assert [(c["step"], c["complete"]) for c in json.loads(listed.stdout)] == [(2, True), (4, True)], listed.stderr
    assert json.loads(listed.stdout)[0]["path"] == f"s3://ckpts/runs/{run_id}/checkpoints/step-00000002"
    assert "safe      step 4" in cli(home, "show", run_id, **creds).stdout

    here = tmp_path / "exported"
    exported = cli(home, "export", run_id, "--step", "2", "--to", here, **creds)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert (here / "config.json").is_file() and list(here.glob("*.safetensors"))

    resumed = cli(home, "resume", run_id, "--from", "2", "--json", **creds)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    again = events(resumed.stdout)[0]["run_id"]
    log = (home / "runs" / again / "nodes" / "0.log").read_text()
    assert f"resumed from s3://ckpts/runs/{run_id}/checkpoints/step-00000002 at step 2" in log, log[-2000:]
    straight = _losses(home, run_id)
    assert _losses(home, again) == {s: straight[s] for s in (3, 4)}
    for text in (log, out.stdout, (home / "runs" / run_id / "workload.yaml").read_text()):
        assert SECRET not in text
