"""`fsdp-tui eject`: every sample workload, rendered for every engine, validates offline against that
engine's own published schema or model package; the sbatch rendering is the SLURM backend's own script.

The schemas are vendored in tests/data/eject/ with their source named in each file:
- Kubeflow Trainer's TrainJob CRD and the JobSet CRD (their openAPIV3Schema, descriptions left out),
  checked with jsonschema plus the API server's pruning rule (a field the schema does not know is an
  error here, as `kubectl apply --validate=strict` makes it);
- SkyPilot 0.14.1's task and resources schemas (``sky/utils/schemas.py``);
and the ``kubeflow-trainer-api`` package's pydantic models (TrainJob and JobSet) read each manifest back:
what they drop or change is an error.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from launcher.eject.sbatch import as_slurm
from launcher.eject.targets import TARGETS, eject
from launcher.workload.load import plan_file

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "eject"
SAMPLES = sorted((ROOT / "sample_workloads").rglob("*.yaml"))


def _schema(name: str) -> dict:
    return json.loads((DATA / name).read_text())


TRAINJOB = _schema("trainjob-crd-schema.json")
JOBSET = _schema("jobset-crd-schema.json")
SKYPILOT = _schema("skypilot-0.14.1-schemas.json")


def _plan(path: Path, tmp_path: Path, overrides=()):
    planned = plan_file(path, list(overrides), home=tmp_path, run_id=yaml.safe_load(path.read_text())["experiment_name"])
    assert planned.plan is not None, [p.format() for p in planned.problems]
    return planned.plan


def unknown_fields(doc, schema: dict, path: str = "") -> list[str]:
    """Fields the API server would prune: keys a structural schema does not declare."""
    out: list[str] = []
    if isinstance(doc, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return out
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in doc.items():
            if props is not None and key in props:
                out += unknown_fields(value, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += unknown_fields(value, extra, f"{path}.{key}")
            elif props is not None or extra is False:
                out.append(f"{path}.{key}")
    elif isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, value in enumerate(doc):
            out += unknown_fields(value, schema["items"], f"{path}[{i}]")
    return out


def _check_crd(doc: dict, crd: dict) -> None:
    assert doc["apiVersion"] == f"{crd['group']}/{crd['version']}" and doc["kind"] == crd["kind"]
    jsonschema.Draft7Validator(crd["openAPIV3Schema"]).validate(doc)
    assert unknown_fields(doc, crd["openAPIV3Schema"]) == []


def _changed(doc, back, path: str = "") -> list[str]:
    """Where ``back`` lost or changed something of ``doc`` (defaults it adds are fine)."""
    if isinstance(doc, dict) and isinstance(back, dict):
        return [p for k, v in doc.items() for p in (_changed(v, back[k], f"{path}.{k}") if k in back else [f"{path}.{k}"])]
    if isinstance(doc, list) and isinstance(back, list) and len(doc) == len(back):
        return [p for i, (a, b) in enumerate(zip(doc, back, strict=True)) for p in _changed(a, b, f"{path}[{i}]")]
    return [] if doc == back else [path]


def _round_trip(model, doc: dict) -> None:
    """The engine's own model reads the manifest and writes it back: nothing dropped, renamed or changed."""
    assert _changed(doc, model.from_dict(doc).to_dict()) == []


def _bash_syntax(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr


def _container_script(doc: dict, target: str) -> str:
    if target == "kubeflow":
        return doc["spec"]["trainer"]["command"][2]
    return doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["command"][2]


def _env(doc: dict, target: str) -> list[dict]:
    if target == "kubeflow":
        return doc["spec"]["trainer"]["env"]
    return doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.relative_to(ROOT / "sample_workloads").as_posix())
def test_every_sample_ejects_to_every_engine_and_validates(path, tmp_path):
    from kubeflow_trainer_api.models import JobsetV1alpha2JobSet, TrainerV1alpha1TrainJob

    plan = _plan(path, tmp_path)
    w = plan.workload
    assert set(TARGETS) == {"kubeflow", "jobset", "skypilot", "sbatch"}
    for target in ("kubeflow", "jobset"):
        out = eject(plan, target)
        doc = yaml.safe_load(out.text)
        _check_crd(doc, TRAINJOB if target == "kubeflow" else JOBSET)
        _round_trip(TrainerV1alpha1TrainJob if target == "kubeflow" else JobsetV1alpha2JobSet, doc)
        script = _container_script(doc, target)
        _bash_syntax(script)
        env = {e["name"]: e for e in _env(doc, target)}
        assert env["NUM_NODES"]["value"] == str(plan.topology.num_nodes)
        assert env["LOCAL_WORLD_SIZE"]["value"] == str(plan.topology.procs_per_node)
        for name, value in w.env_variables.items():
            assert env[name]["value"] == str(value)
        for name, ref in w.secrets.items():  # a reference, never a value
            assert set(env[name]) == {"name", "valueFrom"} and env[name]["valueFrom"]["secretKeyRef"]["key"] == ref.split("/")[1]
        for var in ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CODE_SOURCE_PATH", "HYPERPARAMETERS_PATH",
                    "FSDP_TUI_METRICS_FILE"):
            assert f"{var}=" in script
        assert (w.command or "-m trainer").splitlines()[0] in script
        if plan.topology.kind == "gpu":
            limits = (doc["spec"]["trainer"]["resourcesPerNode"] if target == "kubeflow" else
                      doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"])
            assert limits["limits"]["nvidia.com/gpu"] == str(plan.topology.procs_per_node)
        assert any("per-node panes" in item for item in out.lost)
        assert all(f"#  - {item}" in out.text for item in out.lost)
    ts = yaml.safe_load(eject(plan, "kubeflow").text)["spec"]
    assert ts["trainer"]["numNodes"] == plan.topology.num_nodes
    assert ts.get("activeDeadlineSeconds") == (round(w.timeout_minutes * 60) if w.timeout_minutes else None)
    js = yaml.safe_load(eject(plan, "jobset").text)["spec"]
    assert js["replicatedJobs"][0]["template"]["spec"]["completions"] == plan.topology.num_nodes
    assert js.get("failurePolicy", {}).get("maxRestarts", 0) == w.max_retries

    sky = eject(plan, "skypilot")
    task = yaml.safe_load(sky.text)
    jsonschema.Draft202012Validator(SKYPILOT["task"]).validate(task)
    jsonschema.Draft202012Validator(SKYPILOT["resources"]).validate(task["resources"])
    _bash_syntax(task["run"])
    assert task["num_nodes"] == plan.topology.num_nodes
    assert task.get("secrets", {}) == {name: None for name in w.secrets}
    assert (task.get("workdir") is not None) == (plan.code_root is not None)
    if plan.topology.kind == "gpu":
        assert task["resources"]["accelerators"].endswith(f":{plan.topology.procs_per_node}")

    sbatch = eject(plan, "sbatch")
    _bash_syntax(sbatch.text)
    assert sbatch.text.startswith("#!/bin/bash\n#SBATCH ") and f"--nodes={plan.topology.num_nodes}" in sbatch.text
    assert sbatch.lost


def test_the_sbatch_rendering_is_what_the_slurm_backend_submits(tmp_path):
    """The backend's own render (its dry run) holds the ejected script line for line, and the backend's
    interpreter is the one the ejected script starts the node task with."""
    from launcher.backends.slurm.backend import SlurmBackend
    from launcher.backends.slurm.script import batch_script
    from launcher.present.dry_run import dry_run_text

    for path in (ROOT / "sample_workloads/slurm/torchtune_llama70b_2node.yaml", ROOT / "sample_workloads/tiny_cpu.yaml"):
        plan = as_slurm(_plan(path, tmp_path))
        backend = SlurmBackend(plan)
        submitted = batch_script(plan, 1, backend.fleet.python_of(plan.nodes[0]))
        assert eject(plan, "sbatch").text == submitted
        shown = dry_run_text(backend.dry_run())
        assert all(f"  {line}" in shown for line in submitted.rstrip("\n").splitlines())


def test_secrets_and_names_as_kubernetes_takes_them(tmp_path):
    text = (ROOT / "sample_workloads/tiny_cpu.yaml").read_text().replace(
        "experiment_name: tiny-cpu-demo", "experiment_name: 9_Tiny_CPU") + "secrets:\n  WANDB_API_KEY: My_Team/wandb.key\n"
    wl = tmp_path / "w.yaml"
    wl.write_text(text)
    plan = _plan(wl, tmp_path)
    out = eject(plan, "jobset")
    doc = yaml.safe_load(out.text)
    assert doc["metadata"]["name"] == "x-9-tiny-cpu"
    ref = {e["name"]: e for e in _env(doc, "jobset")}["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "my-team", "key": "wandb.key"}
    assert "kubectl create secret generic my-team --from-literal=wandb.key=VALUE" in out.text
    assert "MASTER_ADDR=x-9-tiny-cpu-node-0-0.x-9-tiny-cpu" in _container_script(doc, "jobset")


def test_eject_cli_writes_the_file_and_says_what_is_lost(tmp_path, capsys):
    from launcher.cli.main import main

    out = tmp_path / "job.yaml"
    code = main(["eject", str(ROOT / "sample_workloads/torchtune_llama70b_2node.yaml"), "--to", "kubeflow", "-o", str(out),
                 "--set", "max_retries=0"])
    err = capsys.readouterr().err
    assert code == 0
    assert "--set max_retries: 2 -> 0" in err and "not carried over:" in err and "compute.hosts" in err
    assert "max_retries" not in err.split("not carried over:")[1]
    first = out.read_text()
    assert main(["eject", str(ROOT / "sample_workloads/torchtune_llama70b_2node.yaml"), "--to", "kubeflow", "-o", str(out),
                 "--set", "max_retries=0"]) == 0
    assert out.read_text() == first  # the same workload ejects to the same text
    assert main(["eject", str(tmp_path / "missing.yaml"), "--to", "jobset"]) == 2
    assert "missing.yaml: not ejected: there is no such file" in capsys.readouterr().err


@pytest.mark.slow
def test_the_ejected_skypilot_task_trains_the_demo_as_skypilot_runs_it(tmp_path):
    """SkyPilot's part done by hand on this machine, one node: ``file_mounts`` (the trainer package),
    ``envs`` exported, ``SKYPILOT_NODE_RANK`` / ``SKYPILOT_NODE_IPS`` set, then ``run`` in bash. The node
    script gives the built-in trainer the node contract, and it trains (2 gloo processes, 3 steps)."""
    import os
    import socket
    import sys

    from trainer.wire.protocol import MetricRecord

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plan = _plan(ROOT / "sample_workloads/tiny_cpu.yaml", tmp_path, [
        "parameters.max_steps=3", "parameters.checkpoint.export_hf=false", f"eject.python={sys.executable}", f"compute.master_port={port}"])
    task = yaml.safe_load(eject(plan, "skypilot").text)
    home = tmp_path / "node"
    (home / "fsdp-tui-pkg").mkdir(parents=True)
    for remote, local in task["file_mounts"].items():
        (home / remote.removeprefix("~/")).symlink_to(local)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FSDP_TUI_", "SKYPILOT_"))}
    env.update(task["envs"], HOME=str(home), SKYPILOT_NODE_RANK="0", SKYPILOT_NODE_IPS="127.0.0.1\n",
               FSDP_TUI_ASSETS=os.environ.get("FSDP_TUI_TEST_ASSETS", "/tmp/fsdp-tui-test-assets"))
    done = subprocess.run(["bash", "-c", task["run"]], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = home / "fsdp-tui-run"
    assert yaml.safe_load((run_dir / "parameters.yaml").read_text()) == plan.workload.parameters
    records = [MetricRecord.from_json(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r.step for r in records if r.kind == "train"] == [1, 2, 3]
    assert any((run_dir / "outputs").rglob(".metadata"))  # the final checkpoint, in the relative output_dir


NODE_VENV = "/home/me/.venv/bin/python"


def _venv_workload(tmp_path: Path, extra: str = "", command: str | None = None) -> Path:
    run = f"command: |\n  {NODE_VENV} train.py\n" if command else ""
    params = "" if command else ("parameters: {model_name: builtin:tiny-llama, dataset_name: builtin:tiny-alpaca, "
                                 "output_dir: outputs}\n")
    wl = tmp_path / "venv.yaml"
    wl.write_text(f"experiment_name: venv-job\ncompute: {{accelerator_type: GPU_8xH100, num_accelerators: 16, "
                  f"hosts: [a, b]}}\nenvironment: {{python: {NODE_VENV}, dependencies: [rich]}}\n{run}{params}{extra}")
    return wl


def _executed(target: str, text: str) -> str:
    """What the engine runs of a rendering: the container's script, or SkyPilot's setup and run."""
    doc = yaml.safe_load(text)
    if target == "skypilot":
        return doc.get("setup", "") + doc["run"]
    return _container_script(doc, target)


@pytest.mark.parametrize("target", ["kubeflow", "jobset", "skypilot"])
def test_an_engine_with_its_own_machines_never_gets_a_nodes_interpreter(target, tmp_path):
    """environment.python names an interpreter on the workload's own nodes (a venv on SSH hosts): an engine
    that starts its own image or machines runs that image's `python` (or eject.python), and says so."""
    import sys

    out = eject(_plan(_venv_workload(tmp_path), tmp_path), target)
    run = _executed(target, out.text)
    assert NODE_VENV not in run and sys.executable not in run
    assert "exec python -m torch.distributed.run" in run
    if target != "skypilot":  # SkyPilot installs in its setup step, the pods at the script's start
        assert "python -m pip install --quiet rich" in run
    else:
        assert yaml.safe_load(out.text)["setup"].startswith("python -m pip install --quiet rich")
    said = [item for item in out.lost if item.startswith(f"environment.python ({NODE_VENV})")]
    assert said and "eject.python" in said[0] and f"#  - {said[0]}" in out.text

    chosen = eject(_plan(_venv_workload(tmp_path), tmp_path, ["eject.python=/opt/conda/bin/python3"]), target)
    run = _executed(target, chosen.text)
    assert "exec /opt/conda/bin/python3 -m torch.distributed.run" in run and NODE_VENV not in run

    own = eject(_plan(_venv_workload(tmp_path, command=True), tmp_path), target)
    assert any(item.startswith(f"the command names {NODE_VENV}") for item in own.lost)


def test_a_workload_that_names_no_interpreter_says_nothing_of_it(tmp_path):
    plan = _plan(ROOT / "sample_workloads/tiny_cpu.yaml", tmp_path)
    for target in ("kubeflow", "jobset", "skypilot"):
        out = eject(plan, target)
        assert not any("environment.python" in item for item in out.lost)
        assert "exec python -m torch.distributed.run" in _executed(target, out.text)


def test_the_sbatch_script_keeps_the_nodes_interpreter(tmp_path):
    """SLURM runs on the user's own nodes, where environment.python is: the batch script starts the node
    task with it, as the SLURM backend does."""
    out = eject(_plan(_venv_workload(tmp_path), tmp_path), "sbatch")
    assert f"{NODE_VENV} node-0/agent.zip slurm-task 1" in out.text
    assert not any("environment.python" in item for item in out.lost)
