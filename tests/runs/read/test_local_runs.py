"""Launching on this machine, end to end through ``fsdp-tui run``: the real agent, store and MLflow."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import (
    FSDP_TUI,
    ROOT,
    cli,
    cli_env,
    events,
    run_sampling_cmdlines,
    tagged,
    wait_tracked,
    write_workload,
)
from tests.support.hostile import HOSTILE

pytestmark = pytest.mark.slow


def test_air_style_script_unmodified_learns_and_gets_metrics_records_and_mlflow(home):
    """The byo sample as shipped, one step past its 60 through ``--set`` (its schedule does not depend on
    max_steps, so its first 60 steps are those of the sample as written): it visibly learns in them, and
    every step reaches the events, the mirror, the store and MLflow."""
    out = cli(home, "run", ROOT / "sample_workloads/byo_script/workload.yaml", "--json",
              "--set", "parameters.max_steps=61")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    evs = events(out.stdout)
    run_id = evs[0]["run_id"]
    losses = [e["record"]["loss"] for e in evs if e["type"] == "MetricsRecorded"]
    steps = [e["record"]["step"] for e in evs if e["type"] == "MetricsRecorded"]
    assert steps == list(range(1, 62)) and all(isinstance(v, float) for v in losses)
    assert evs[-1]["type"] == "RunFinished" and evs[-1]["state"] == "succeeded"
    assert sum(losses[55:60]) < 0.5 * sum(losses[:5]), losses  # learns within the sample's own 60 steps

    mirror = (home / "runs" / run_id / "nodes" / "0.log").read_text().splitlines()
    step_lines = [line for line in mirror if line.startswith("step=")]
    assert step_lines == [f"step={i}/61 loss={loss:.4f}" for i, loss in zip(range(1, 62), losses, strict=True)]

    listing = json.loads(cli(home, "runs", "--json").stdout)
    assert listing[0]["run_id"] == run_id and listing[0]["state"] == "succeeded"
    assert listing[0]["step"] == 61 and listing[0]["last_loss"] == pytest.approx(losses[-1])

    from mlflow import MlflowClient

    wait_tracked(home, run_id)
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("byo-script-cpu").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == run_id
    assert run.data.params["max_steps"] == "61"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in history] == list(range(1, 62))
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"0.log", "workload.yaml"}
    assert run.info.artifact_uri.startswith((home / "mlflow-artifacts").as_uri())
    assert not (ROOT / "mlruns").exists()


def test_failure_is_triaged_to_the_node_and_signature(home, tmp_path):
    wl = write_workload(tmp_path, """experiment_name: fails
mlflow: {enabled: false}
command: |
  echo starting
  python -c "raise ValueError('learning rate must be positive')"
""")
    out = cli(home, "run", wl, "--json")
    assert out.returncode == 1
    end = events(out.stdout)[-1]
    assert end["type"] == "RunFinished" and end["state"] == "failed"
    triage = end["triage"]
    assert triage["node_rank"] == 0 and triage["exit_code"] == 1 and triage["signature"] == "python_error"
    assert "ValueError: learning rate must be positive" in triage["excerpt"]
    run_id = end["run_id"]
    assert json.loads((home / "runs" / run_id / "triage.json").read_text())["signature"] == "python_error"


def test_retries_relaunch_after_a_failure(home, tmp_path):
    marker = tmp_path / "attempted"
    wl = write_workload(tmp_path, f"""experiment_name: retries
max_retries: 1
mlflow: {{enabled: false}}
command: |
  if [ -e {marker} ]; then echo second attempt ok; else touch {marker}; echo first attempt fails; exit 3; fi
""")
    out = cli(home, "run", wl, "--json")
    assert out.returncode == 0, out.stdout[-2000:]
    states = [e["state"] for e in events(out.stdout) if e["type"] == "RunStateChanged"]
    assert "retrying" in states and states[-1] == "succeeded"


def _listen(port: int):
    """Something listening on ``port``, as a forgotten job would be."""
    import socket

    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    return s


@pytest.fixture
def held_port():
    with _listen(0) as s:
        yield s.getsockname()[1]


def test_two_runs_started_at_once_on_this_machine_both_train_each_on_its_own_port(home, tmp_path):
    """Both would find the default port free (it is checked, then bound later by torchrun); each takes a
    port the system picks instead, so neither joins the other's rendezvous nor fails to bind it."""
    from launcher.runs.core.layout import load_plan
    from launcher.workload.plan import DEFAULT_MASTER_PORT

    procs = [subprocess.Popen([FSDP_TUI, "run", "sample_workloads/tiny_cpu.yaml", "--json",
                               "--set", "parameters.max_steps=3",
                               "--set", "compute.procs_per_node=1", "--set", "compute.num_accelerators=1",
                               "--set", "parameters.logging.eval_every_steps=100",
                               "--set", "parameters.checkpoint.every_steps=100",
                               "--set", "parameters.checkpoint.save_final=false",
                               "--set", "parameters.checkpoint.export_hf=false",
                               "--set", "parameters.logging.eval_max_batches=1", "--set", "mlflow.enabled=false",
                               "--set", f"parameters.output_dir={tmp_path / f'out{i}'}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(home), cwd=ROOT)
             for i in range(2)]
    ports = []
    for proc in procs:
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, out[-3000:] + err[-2000:]
        evs = events(out)
        steps = [e["record"]["step"] for e in evs if e["type"] == "MetricsRecorded" and e["record"].get("loss")]
        assert evs[-1]["state"] == "succeeded" and max(steps) == 3, evs[-3:]
        plan = load_plan(home / "runs" / evs[0]["run_id"])
        assert plan.nodes[0].env["MASTER_PORT"] == str(plan.master_port)
        ports.append(plan.master_port)
    assert DEFAULT_MASTER_PORT not in ports and ports[0] != ports[1], ports


def test_a_taken_chosen_rendezvous_port_stops_the_launch_and_says_what_to_do(home, tmp_path, held_port):
    wl = write_workload(tmp_path, f"""experiment_name: port-taken
compute: {{master_port: {held_port}}}
mlflow: {{enabled: false}}
command: echo started
""")
    out = cli(home, "run", wl, "--json")
    assert out.returncode == 1
    end = events(out.stdout)[-1]
    assert end["type"] == "RunFinished" and end["state"] == "failed"
    summary = end["triage"]["summary"]
    assert f"node 0 (this machine): rendezvous port {held_port} (compute.master_port) is in use" in summary
    assert "--set compute.master_port=" in summary and f"ss -ltnp 'sport = :{held_port}'" in summary
    assert not (home / "runs" / end["run_id"] / "nodes" / "0.log").exists() or \
        "started" not in (home / "runs" / end["run_id"] / "nodes" / "0.log").read_text()


def test_cancel_leaves_no_process_behind(home, tmp_path):
    wl = write_workload(tmp_path, """experiment_name: cancel-me
mlflow: {enabled: false}
command: |
  setsid sleep 300 &
  ( sleep 301 & ) &
  python -c "import os, time; os.setsid(); time.sleep(302)" &
  while true; do echo tick; sleep 0.2; done
""")
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home), cwd=ROOT)
    run_id = None
    for line in proc.stdout:
        event = json.loads(line)
        run_id = event["run_id"]
        if event["type"] == "NodeLines" and "tick" in event["lines"]:
            break
    assert len(tagged(run_id)) >= 4
    out = cli(home, "cancel", run_id[:20])
    assert out.returncode == 0, out.stderr
    assert tagged(run_id) == []
    rest = [json.loads(line) for line in proc.stdout]
    assert proc.wait(timeout=30) == 130
    assert rest[-1]["type"] == "RunFinished" and rest[-1]["state"] == "cancelled"


def test_hostile_strings_arrive_byte_for_byte_and_run_nothing(home, tmp_path):
    import yaml

    env = {f"HOSTILE_{i}": v for i, v in enumerate(HOSTILE)}
    doc = {
        "experiment_name": "hostile",
        "command": "python -c \"import json, os, yaml; "
                   "print('ENV', json.dumps({k: v for k, v in os.environ.items() if k.startswith('HOSTILE_')})); "
                   "print('PARAMS', json.dumps(yaml.safe_load(open(os.environ['HYPERPARAMETERS_PATH']))))\"",
        "env_variables": env,
        "parameters": {"values": HOSTILE, "-dash-key": "$(touch PWNED)"},
    }
    wl = write_workload(tmp_path, yaml.safe_dump(doc, allow_unicode=True))
    out = cli(home, "run", wl, "--json")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run_id = events(out.stdout)[0]["run_id"]
    log = (home / "runs" / run_id / "nodes" / "0.log").read_text()
    got_env = json.loads(next(line for line in log.splitlines() if line.startswith("ENV "))[4:])
    got_params = json.loads(next(line for line in log.splitlines() if line.startswith("PARAMS "))[7:])
    assert got_env == env
    assert got_params == doc["parameters"]
    assert not list(Path(ROOT).rglob("PWNED")) and not list(home.rglob("PWNED")) and not list(tmp_path.rglob("PWNED"))


def test_canary_secret_never_lands_anywhere(home, tmp_path):
    import hashlib

    canary = "canary-7f3a9c1e55"
    digest = hashlib.sha256(canary.encode()).hexdigest()
    wl = write_workload(tmp_path, f"""experiment_name: secret-test
secrets:
  API_TOKEN: team/api
command: |
  echo "token is $API_TOKEN"
  test "$(printf %s "$API_TOKEN" | sha256sum | cut -d' ' -f1)" = "{digest}" && echo token-ok
  sleep 1
""")
    code, out, cmdlines = run_sampling_cmdlines(home, wl, 60, FSDP_TUI_SECRET_TEAM_API=canary)
    assert code == 0
    assert all(canary.encode() not in c for c in cmdlines)
    assert canary not in out
    run_id = events(out)[0]["run_id"]
    log = (home / "runs" / run_id / "nodes" / "0.log").read_text()
    assert "token is ******" in log and "token-ok" in log
    for path in home.rglob("*"):
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), path


def test_missing_secret_launches_nothing_and_says_how_to_set_it(home, tmp_path):
    wl = write_workload(tmp_path, "experiment_name: nosecret\nsecrets: {TOK: s/k}\ncommand: echo hi\n")
    out = cli(home, "run", wl, "--json")
    assert out.returncode == 2, out.stdout  # as docs/commands.md says: nothing launched
    assert [json.loads(x)["type"] for x in out.stdout.splitlines()] == ["LaunchRefused"]
    assert "cannot run: no value for secret s/k" in out.stderr and "fsdp-tui secrets set s/k" in out.stderr
    assert "nothing was launched" in out.stderr
    assert json.loads(cli(home, "runs", "--json").stdout) == []  # no failed run left in the list


def test_fast_output_larger_than_a_read_is_mirrored_without_loss(home, tmp_path):
    wl = write_workload(tmp_path, """experiment_name: flood
mlflow: {enabled: false}
command: |
  python -c "import sys; sys.stdout.write(''.join(f'line {i} ' + 'x' * 90 + chr(10) for i in range(120000)))"
""")
    out = cli(home, "run", wl, "--json")
    assert out.returncode == 0
    run_id = events(out.stdout)[0]["run_id"]
    mirror = (home / "runs" / run_id / "nodes" / "0.log").read_text().splitlines()
    assert len(mirror) == 120000 and mirror[-1].startswith("line 119999 ")
    assert sum(len(e["lines"]) for e in events(out.stdout) if e["type"] == "NodeLines") == 120000


def test_gpu_telemetry_from_nvidia_smi_reaches_the_events_and_the_view(home, tmp_path):
    # This machine has no GPU: a stand-in nvidia-smi prints what the real one prints for the agent's query.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text('#!/bin/sh\necho "0, NVIDIA H100 80GB HBM3, 61440, 81920, 97"\n'
                    'echo "1, NVIDIA H100 80GB HBM3, 1024, 81920, [N/A]"\n')
    fake.chmod(0o755)
    wl = write_workload(tmp_path, "experiment_name: gpus\nmlflow: {enabled: false}\ncommand: sleep 1\n")
    out = cli(home, "run", wl, "--json", PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert out.returncode == 0, out.stderr
    telemetry = [e for e in events(out.stdout) if e["type"] == "GpuTelemetry"]
    assert telemetry and telemetry[0]["node_rank"] == 0
    assert telemetry[0]["gpus"] == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_used_mib": 61440.0, "memory_total_mib": 81920.0,
         "utilization_pct": 97.0, "power_w": None, "power_limit_w": None},  # the fake prints no power columns
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "memory_used_mib": 1024.0, "memory_total_mib": 81920.0,
         "utilization_pct": 0.0, "power_w": None, "power_limit_w": None},
    ]
    from launcher.events import GpuSample, GpuTelemetry
    from launcher.runs.read.view import RunView

    view = RunView("r")
    view.apply(GpuTelemetry("r", 0, tuple(GpuSample(**g) for g in telemetry[0]["gpus"])))
    assert view.node(0).gpu_summary == "2 GPU 48% util, 61.0/160.0 GiB"


def test_a_workload_that_cannot_run_here_is_refused_before_it_starts(home, tmp_path):
    """Eight GPU processes per node on a machine without GPUs or a CUDA torch: refused in seconds with
    the doctor's words, before anything is recorded (exit 2, no failed run left); --force starts it anyway."""
    wl = write_workload(tmp_path, "experiment_name: no-gpus\ncompute: {accelerator_type: GPU_8xH100}\nmlflow: {enabled: false}\n"
                                  "command: echo started\n")
    out = cli(home, "run", wl, "--json")
    assert out.returncode == 2, out.stdout
    refusal = json.loads(out.stdout)  # one event, its reasons the doctor's words
    assert refusal["type"] == "LaunchRefused" and "GPU processes per node" in refusal["reasons"][0]
    assert "cannot run: node 0 (this machine): " in out.stderr and "GPU processes per node" in out.stderr
    assert "--force launches past the cheap checks" in out.stderr
    assert json.loads(cli(home, "runs", "--json").stdout) == []
    forced = cli(home, "run", wl, "--json", "--force")
    assert forced.returncode == 0, forced.stdout[-2000:]
    assert [line for e in events(forced.stdout) if e["type"] == "NodeLines" for line in e["lines"]] == ["started"]
    # It succeeded, but not as asked: its state says what it ran without, to the end.
    said = [e["detail"] for e in events(forced.stdout) if e["type"] == "RunStateChanged"]
    assert said[-1].startswith("launched with --force past: ") and "GPU processes per node" in said[-1], said
    run_id = events(forced.stdout)[-1]["run_id"]
    shown = cli(home, "show", run_id).stdout
    assert "state     succeeded: launched with --force past: " in shown, shown


def test_retried_attempts_are_told_apart_and_triage_speaks_of_the_last(home, tmp_path):
    flag = tmp_path / "tried-once"
    wl = write_workload(tmp_path, f"""experiment_name: two-tries
max_retries: 1
mlflow: {{enabled: false}}
command: |
  if [ -f {flag} ]; then echo "ValueError: the second attempt's own failure"; exit 2; fi
  touch {flag}; echo "RuntimeError: the first attempt's failure"; exit 1
""")
    out = cli(home, "run", wl, "--json")
    assert out.returncode == 1
    end = events(out.stdout)[-1]
    assert "second attempt's own failure" in end["triage"]["summary"], end["triage"]
    run_id = end["run_id"]
    log = (home / "runs" / run_id / "nodes" / "0.log").read_text().splitlines()
    markers = [x for x in log if x.startswith("=== fsdp-tui: attempt ")]
    assert [m.split(",")[0] for m in markers] == ["=== fsdp-tui: attempt 1 of 2", "=== fsdp-tui: attempt 2 of 2"]
    assert log.index(markers[1]) > log.index("RuntimeError: the first attempt's failure")
