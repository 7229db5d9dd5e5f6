"""fsdp-tui doctor on real parts: this machine, real sshd hosts, dead hosts, a bare venv, a held port;
plus the judging of probe facts, table-driven."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.doctor.judge import NodeProbe, evaluate
from launcher.doctor.reply import ProbeReply
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from tests.support.cli import ROOT, cli, write_workload
from tests.support.doctor_replies import GOOD, GPU2

VENV_PYTHON = sys.executable


def free_port(addr: str = "") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def doctor_json(home: Path, wl: Path, *, client: Path | None = None, timeout: int = 120):
    env = {"HOME": str(client)} if client is not None else {}
    out = cli(home, "doctor", wl, "--json", timeout=timeout, **env)
    assert "Traceback" not in out.stderr, out.stderr
    return out, (json.loads(out.stdout) if out.stdout.strip() else None)


def checks(node: dict) -> dict[str, dict]:
    return {c["name"]: c for c in node["checks"]}


def local_workload(tmp_path: Path, *, python: str = VENV_PYTHON, port: int | None = None) -> Path:
    return write_workload(tmp_path, f"""experiment_name: doctor-local
compute: {{accelerator_type: CPU, procs_per_node: 2, master_port: {port or free_port()}}}
environment: {{python: {python}}}
command: echo never run
""")


# -- this machine --------------------------------------------------------------------------------


def test_tiny_cpu_sample_is_all_ok_with_the_venvs_torch(home):
    # A free port, so a concurrent local run on the default 29500 cannot turn this red.
    port = f"compute.master_port={free_port()}"
    wl = ROOT / "sample_workloads" / "tiny_cpu.yaml"
    human = cli(home, "doctor", wl, "--set", port, COLUMNS="200")
    assert human.returncode == 0, human.stdout + human.stderr
    assert human.stdout.strip().splitlines()[-1] == "1 node: 1 ok, 0 with warnings, 0 with errors"
    assert "node 0 (this machine)" in human.stdout

    out = cli(home, "doctor", wl, "--set", port, "--json")
    report = json.loads(out.stdout)
    assert out.returncode == 0, out.stdout
    assert report["summary"] == {"nodes": 1, "ok": 1, "warning": 0, "error": 0}
    found = checks(report["nodes"][0])
    assert [n for n, c in found.items() if c["status"] != "ok"] == []
    # The built-in trainer: its packages are checked too, and torch really imported.
    assert {"python", "torch", "transformers", "datasets", "gpus", "disk", "rendezvous"} <= set(found)
    torch_version = importlib.metadata.version("torch")  # VENV_PYTHON is this interpreter
    assert found["torch"]["detail"].startswith(torch_version + " ")
    assert report["nodes"][0]["facts"]["packages"]["torch"] == {
        "version": torch_version, "import": "ok", "cuda": report["nodes"][0]["facts"]["packages"]["torch"]["cuda"]}
    assert found["python"]["detail"].startswith(".".join(map(str, sys.version_info[:3])))


def test_python_without_torch_is_an_error_naming_the_node_and_the_python(home, tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([VENV_PYTHON, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    out, report = doctor_json(home, local_workload(tmp_path, python=python))
    assert out.returncode == 1
    node = report["nodes"][0]
    torch = checks(node)["torch"]
    assert node["label"] == "node 0 (this machine)" and node["status"] == "error"
    assert torch["status"] == "error" and torch["detail"] == f"not installed for {python}"
    assert f"{python} -m pip install torch" in torch["fix"] and "this machine" in torch["fix"]
    # Everything else was still checked, and is fine.
    assert {n: c["status"] for n, c in checks(node).items() if n != "torch"} == {
        "reachable": "ok", "hostname": "ok", "python": "ok", "gpus": "ok", "disk": "ok", "rendezvous": "ok",
        "secrets": "ok"}
    human = cli(home, "doctor", local_workload(tmp_path, python=python), COLUMNS="300")
    assert human.returncode == 1 and f"not installed for {python}" in human.stdout
    assert human.stdout.strip().splitlines()[-1] == "1 node: 0 ok, 0 with warnings, 1 with errors"


def test_missing_python_is_reported_and_the_machine_is_still_checked(home, tmp_path):
    python = str(tmp_path / "nowhere" / "python")
    out, report = doctor_json(home, local_workload(tmp_path, python=python))
    assert out.returncode == 1
    found = checks(report["nodes"][0])
    assert found["python"]["status"] == "error" and f"{python} does not run" in found["python"]["detail"]
    assert "environment.python" in found["python"]["fix"]
    assert "torch" not in found
    assert found["disk"]["status"] == "ok" and found["rendezvous"]["status"] == "ok"


def test_rendezvous_port_in_use_is_an_error_with_a_free_one_to_try(home, tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        out, report = doctor_json(home, local_workload(tmp_path, port=port))
    assert out.returncode == 1
    rendezvous = checks(report["nodes"][0])["rendezvous"]
    assert rendezvous["status"] == "error" and f"port {port} is in use" in rendezvous["detail"]
    assert f"--set compute.master_port={port + 1}" in rendezvous["fix"]


@pytest.mark.parametrize(("command", "not_done"), [("doctor", "not checked"), ("nettest", "not tested")])
def test_invalid_workload_prints_its_problems_and_exits_2(home, tmp_path, command, not_done):
    wl = write_workload(tmp_path, "experiment_name: x\ncompute: {acelerator_type: CPU}\ncommand: true\n")
    out = cli(home, command, wl, "--set", "max_retries=1")
    assert out.returncode == 2 and out.stdout == ""
    assert "--set max_retries: <unset> -> 1" in out.stderr, out.stderr
    assert "compute.acelerator_type" in out.stderr and "did you mean 'accelerator_type'" in out.stderr
    assert f"{wl}: {not_done}: fix the errors above (fsdp-tui validate {wl})" in out.stderr
    assert "Traceback" not in out.stderr
    missing = cli(home, command, tmp_path / "nope.yaml")
    assert missing.returncode == 2 and "no such file (check the path)" in missing.stderr


# -- real sshd hosts ------------------------------------------------------------------------------


def ssh_workload(tmp_path: Path, hosts: list[str], compute: str = "accelerator_type: CPU, procs_per_node: 1",
                 timeout_s: float = 10) -> Path:
    return write_workload(tmp_path, f"""experiment_name: doctor-ssh
compute: {{{compute}, hosts: {json.dumps(hosts)}, master_addr: 127.0.0.2, master_port: {free_port()}}}
ssh: {{connect_timeout_s: {timeout_s}}}
environment: {{python: {VENV_PYTHON}}}
command: echo never run
""")


@pytest.mark.slow
def test_dead_hosts_are_reported_beside_live_ones(home, tmp_path, hosts):
    client, _ = hosts
    refused = free_port("127.0.0.4")  # nothing listens there
    # node3 and node4 accept TCP but never say a word of SSH: only the connect timeout ends them.
    silent = [socket.create_server((addr, 0), backlog=8) for addr in ("127.0.0.5", "127.0.0.6")]
    with open(client / ".ssh" / "config", "a") as f:
        f.write(f"\nHost node2\n  HostName 127.0.0.4\n  Port {refused}\n")
        for i, s in enumerate(silent, start=3):
            f.write(f"\nHost node{i}\n  HostName {s.getsockname()[0]}\n  Port {s.getsockname()[1]}\n")
    timeout_s = 4
    wl = ssh_workload(tmp_path, [f"node{i}" for i in range(5)], timeout_s=timeout_s)
    try:
        start = time.monotonic()
        out, report = doctor_json(home, wl, client=client)
        elapsed = time.monotonic() - start
    finally:
        for s in silent:
            s.close()
    assert out.returncode == 1
    assert [(n["label"], n["status"]) for n in report["nodes"]] == [
        ("node 0 (node0)", "ok"), ("node 1 (node1)", "ok"), ("node 2 (node2)", "error"),
        ("node 3 (node3)", "error"), ("node 4 (node4)", "error")]
    assert report["summary"] == {"nodes": 5, "ok": 2, "warning": 0, "error": 3}
    for node in report["nodes"][:2]:
        found = checks(node)
        assert found["reachable"]["detail"] == "connected over SSH, host key verified"
        assert found["torch"]["status"] == "ok"
        assert found["ssh config"]["status"] == "ok" and "(read by ssh -G)" in found["ssh config"]["detail"]
    assert checks(report["nodes"][0])["rendezvous"]["status"] == "ok"
    assert checks(report["nodes"][1])["master_addr"]["detail"] == "127.0.0.2 resolves to 127.0.0.2"
    for node, name in zip(report["nodes"][2:], ["node2", "node3", "node4"], strict=True):
        assert [c["name"] for c in node["checks"]] == ["reachable", "ssh config"]
        reach = node["checks"][0]
        assert reach["detail"].startswith(f"{name}: cannot connect:") and f"`ssh {name}`" in reach["fix"]
        assert ("connect_timeout_s=4s" in reach["fix"]) == (name != "node2")
    assert "Errno 111" in checks(report["nodes"][2])["reachable"]["detail"]  # refused
    assert elapsed >= timeout_s, elapsed  # the silent hosts were given their connect timeout
    # That every node is probed at once is shown without a clock: test_the_doctor_probes_every_node_at_once.


def test_the_doctor_probes_every_node_at_once(monkeypatch):
    """Each node's probe waits until every node's probe has begun: probed one after another, the first
    would wait for ever (a silent host costs one connect timeout in all, not one each)."""
    import asyncio

    from launcher.doctor import diagnose
    from tests.support.fake_backend import FakeBackend, FakeNode

    result = validate_text("experiment_name: par\ncompute: {hosts: [h0, h1, h2, h3]}\ncommand: run\n", "w.yaml")
    plan = build_plan(result.workload, run_id="run-par", node_root="/nodes")

    began: list[int] = []
    everyone: asyncio.Barrier | None = None

    class AllAtOnce(FakeBackend):
        async def run_script(self, rank, python, script, timeout_s):
            began.append(rank)
            await asyncio.wait_for(everyone.wait(), 20)  # a sequential doctor ends here, the probe failed
            return await super().run_script(rank, python, script, timeout_s)

    async def main():
        nonlocal everyone
        everyone = asyncio.Barrier(len(plan.nodes))
        return await diagnose.diagnose(plan, run_root="/nodes")

    facts = {"python": {"version": [3, 11, 7]}, "gpus": {"smi": None, "names": []},
             "packages": {"torch": {"version": "2.13.0+cpu", "import": "skipped"}},
             "disk": {"path": "/n", "existing": "/", "free_bytes": 2**40}, "master": {}}
    fake = AllAtOnce(plan, [FakeNode() for _ in plan.nodes], probe_facts=facts)
    monkeypatch.setattr(diagnose, "backend_for", lambda plan, **kw: fake)
    monkeypatch.setattr(diagnose, "_with_ssh_reports", lambda plan, reports, local: asyncio.sleep(0, reports))
    report = asyncio.run(main())
    assert sorted(began) == [0, 1, 2, 3]
    reached = [next(c for c in n.checks if c.name == "reachable") for n in report.nodes]
    assert [c.status for c in reached] == ["ok"] * 4, reached


@pytest.mark.slow
def test_gpu_workload_on_gpu_less_hosts_is_a_gpu_count_error(home, tmp_path, hosts):
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: its hosts are not GPU-less")
    client, _ = hosts
    wl = ssh_workload(tmp_path, ["node0", "node1"], compute="accelerator_type: GPU_2xH100, num_accelerators: 4")
    out, report = doctor_json(home, wl, client=client)
    assert out.returncode == 1 and report["summary"]["error"] == 2
    for node in report["nodes"]:
        gpus = checks(node)["gpus"]
        assert gpus["status"] == "error"
        assert gpus["detail"] == "no nvidia-smi, but the workload runs 2 GPU processes per node (GPU_2xH100)"
        assert "2+ GPUs" in gpus["fix"]
        assert checks(node)["reachable"]["status"] == "ok"


@pytest.mark.slow
def test_unknown_host_key_is_reported_with_its_message_not_a_traceback(home, tmp_path, hosts):
    client, started = hosts
    (client / ".ssh" / "known_hosts").write_text(started[0].known_hosts_line() + "\n")  # node1 unknown
    config = client / ".ssh" / "config"
    config.write_text("Host node0\n  StrictHostKeyChecking accept-new\n" + config.read_text())
    out, report = doctor_json(home, ssh_workload(tmp_path, ["node0", "node1"]), client=client)
    assert out.returncode == 1
    assert [n["status"] for n in report["nodes"]] == ["warning", "error"]
    flagged = checks(report["nodes"][0])["ssh config"]
    assert flagged["status"] == "warning" and "StrictHostKeyChecking accept-new is ignored on purpose" in flagged["detail"]
    reach = checks(report["nodes"][1])["reachable"]
    assert reach["status"] == "error" and "unknown host key SHA256:" in reach["detail"]
    assert "fsdp-tui trust node1" in reach["detail"]


# -- judging, table-driven -------------------------------------------------------------------------


def _plan(compute: str, *, builtin: bool = False):
    text = f"experiment_name: t\ncompute: {compute}\n" + (
        "parameters: {model_name: builtin:tiny-llama, dataset_name: builtin:tiny-alpaca, output_dir: /tmp/o}\n"
        if builtin else "command: 'true'\n")
    result = validate_text(text)
    assert result.workload is not None, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id="t")


def _merge(base: dict, change: dict) -> dict:
    out = dict(base)
    for key, value in change.items():
        out[key] = _merge(base[key], value) if isinstance(value, dict) and key in base and value else value
    return out


@pytest.mark.parametrize(("rank", "change", "name", "status", "words"), [
    (0, {}, "gpus", "ok", "8 GPUs: NVIDIA H100 80GB HBM3"),
    (0, {"python": {"version": [3, 9, 18]}}, "python", "error", "older than 3.10"),
    (0, {"packages": {"torch": {"version": "2.6.0+cpu", "import": "ok", "cuda": None}}}, "torch", "error",
     "a GPU workload needs a CUDA build"),
    (0, {"packages": {"torch": {"version": "2.6.0", "import": "ImportError: libcudnn.so.9: cannot open"}}},
     "torch", "error", "`import torch` fails: ImportError: libcudnn.so.9"),
    (0, {"gpus": {"names": ["NVIDIA A100-SXM4-80GB"] * 8}}, "gpus", "warning", "the workload says H100"),
    (0, {"gpus": {"names": ["NVIDIA H100 80GB HBM3"] * 4}}, "gpus", "error", "4 GPUs: NVIDIA H100 80GB HBM3, but"),
    (0, {"gpus": {"error": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"}},
     "gpus", "error", "nvidia-smi failed: NVIDIA-SMI has failed"),
    (0, {"disk": {"free_bytes": 2 * 2**30}}, "disk", "warning", "only 2.0 GiB free"),
    (0, {"disk": {"writable": False}}, "disk", "error", "/home/u is not writable"),
    (0, {"master": {"addrs": ["10.0.0.11"], "bind_error": {"where": "addr", "errno": "EADDRNOTAVAIL",
                                                            "message": "Cannot assign requested address"}}},
     "rendezvous", "error", "is not an address of node 0"),
    (0, {"master": {"addrs": ["10.0.0.11"], "bind_error": {"where": "any", "errno": "EADDRINUSE",
                                                            "message": "Address already in use"}}},
     "rendezvous", "warning", "held on another interface); the launch will rendezvous on a free port"),
    (1, {"master": {"resolve_error": "[Errno -2] Name or service not known"}}, "master_addr", "error",
     "does not resolve on b"),
    (1, {"hostname": "gpu02", "master": {"addrs": ["127.0.0.1"]}}, "master_addr", "error", "loopback"),
    (1, {"hostname": "gpu01", "master": {"addrs": ["127.0.0.1"]}}, "master_addr", "ok", "resolves to 127.0.0.1"),
    (1, {}, "interface", "ok", "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME=eth0 (10.0.0.11, the interface that "
     "reaches MASTER_ADDR 10.0.0.11; set by the launcher"),
    (1, {"interfaces": {"route": {"iface": None, "error": "no route to 10.0.0.11: Network is unreachable"}}},
     "interface", "error", "no interface of b reaches MASTER_ADDR 10.0.0.11: no route"),
    (1, {"interfaces": {"error": "OSError: boom"}}, "interface", "warning", "could not list the interfaces"),
])
def test_evaluate_judges_probe_facts(rank, change, name, status, words):
    plan = _plan(GPU2)
    probe = NodeProbe(f"node {rank}", "/opt/py/bin/python", local=False, facts=ProbeReply.from_wire(_merge(GOOD, change)))
    report = evaluate(plan, plan.nodes[rank], probe, node0_hostname="gpu01")
    check = {c.name: c for c in report.checks}[name]
    assert check.status == status and report.status == status, check  # the one fact changed decides
    assert words in check.detail, check
    assert (check.fix != "") == (status != "ok"), check


@pytest.mark.parametrize(("env", "status", "words"), [
    ("{GLOO_SOCKET_IFNAME: ib0}", "error", "env_variables.GLOO_SOCKET_IFNAME=ib0: no such interface on b"),
    ("{GLOO_SOCKET_IFNAME: eth0, NCCL_SOCKET_IFNAME: eth0}", "ok", "GLOO_SOCKET_IFNAME=eth0 (set by the workload)"),
    ("{GLOO_SOCKET_IFNAME: eth0}", "ok", "NCCL_SOCKET_IFNAME=eth0 ("),  # the one left unset is the node's
    ("{GLOO_SOCKET_IFNAME: eth, NCCL_SOCKET_IFNAME: eth}", "error", "GLOO_SOCKET_IFNAME=eth: no such"),
    ("{GLOO_SOCKET_IFNAME: eth0, NCCL_SOCKET_IFNAME: eth}", "ok", "set by the workload"),  # NCCL: a prefix
    ("{GLOO_SOCKET_IFNAME: eth0, NCCL_SOCKET_IFNAME: '^docker,lo'}", "ok", "set by the workload"),
    ("{GLOO_SOCKET_IFNAME: eth0, NCCL_SOCKET_IFNAME: '=eth'}", "error", "NCCL_SOCKET_IFNAME==eth: no such"),
])
def test_an_interface_the_workload_names_must_exist_on_the_node(env, status, words):
    result = validate_text(f"experiment_name: t\ncompute: {GPU2}\ncommand: 'true'\nenv_variables: {env}\n")
    plan = build_plan(result.workload, run_id="t")
    assert plan.nodes[1].iface_env == tuple(n for n in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if n not in env)
    report = evaluate(plan, plan.nodes[1], NodeProbe("node 1", "/opt/py/bin/python", local=False, facts=ProbeReply.from_wire(GOOD)),
                      node0_hostname="gpu01")
    check = {c.name: c for c in report.checks}["interface"]
    assert check.status == status and words in check.detail, check


def test_one_node_runs_set_no_interface():
    plan = _plan("{accelerator_type: CPU}", builtin=True)
    assert plan.nodes[0].iface_env == () and "interface" not in {
        c.name for c in evaluate(plan, plan.nodes[0], NodeProbe("n", "p", True, facts=ProbeReply.from_wire(GOOD))).checks}


def test_builtin_trainer_needs_fsdp2_torch_and_its_packages():
    plan = _plan("{accelerator_type: CPU}", builtin=True)
    facts = _merge(GOOD, {"packages": {"torch": {"version": "2.4.1+cpu", "import": "ok", "cuda": None},
                                       "transformers": {"version": None}}})
    report = evaluate(plan, plan.nodes[0], NodeProbe("node 0", "/opt/py/bin/python", True, facts=ProbeReply.from_wire(facts)))
    found = {c.name: c for c in report.checks}
    assert found["torch"].status == "error" and "needs torch 2.11+" in found["torch"].detail
    assert found["transformers"].detail == "not installed for /opt/py/bin/python"
    assert found["datasets"].status == "error"  # not reported at all by the probe: never silently ok


def test_doctor_checks_what_a_launch_needs_output_dir_and_secrets(home, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    wl = write_workload(tmp_path, f"""experiment_name: needs
command: echo hi
secrets: {{HF_TOKEN: team/hf}}
parameters: {{output_dir: {blocker}/out}}
""")
    out = cli(home, "doctor", wl, "--json")
    checks = {c["name"]: c for c in json.loads(out.stdout)["nodes"][0]["checks"]}
    assert checks["output_dir"]["status"] == "error" and f"{blocker} is a file" in checks["output_dir"]["detail"]
    assert checks["secrets"]["status"] == "error" and "team/hf" in checks["secrets"]["detail"]
    assert "fsdp-tui secrets set team/hf" in checks["secrets"]["fix"]
    assert out.returncode == 1
    fine = write_workload(tmp_path, "experiment_name: needs\ncommand: echo hi\nsecrets: {HF_TOKEN: team/hf}\n"
                                    f"parameters: {{output_dir: {tmp_path}/outputs/$FSDP_TUI_RUN_ID}}\n")
    found = json.loads(cli(home, "doctor", fine, "--json", FSDP_TUI_SECRET_TEAM_HF="x").stdout)
    checks = {c["name"]: c for c in found["nodes"][0]["checks"]}
    assert checks["secrets"]["status"] == "ok" and checks["output_dir"]["status"] == "ok"
    assert f"{tmp_path}/outputs/doctor" in checks["output_dir"]["detail"]


LLAMA_8B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False}
H100_MIB = {"gpus": {"memory_mib": [81559] * 8}}


@pytest.mark.parametrize(("params", "change", "status", "words", "fix"), [
    ("{sharding: full_shard}", H100_MIB, "ok", "fits: ", ""),
    ("{sharding: no_shard}", H100_MIB, "error", "does not fit: ", "try fsdp.sharding: full_shard"),
    ("{sharding: full_shard}", {"gpus": {"memory_mib": [40960] * 8}}, "ok", "fits: ", ""),
    ("{sharding: shard_grad_op}", {"gpus": {"memory_mib": [24576] * 8}}, "error", "of 24.0 GiB (NVIDIA H100",
     "fsdp.sharding: full_shard"),
    ("{sharding: full_shard}", {}, "warning", "b did not report its memory", "by hand"),
    ("{sharding: full_shard}", {"gpus": {"memory_mib": ["lots", -5, True]}}, "warning", "did not report", "by hand"),
])
def test_the_memory_check_weighs_the_prediction_against_the_node(tmp_path, params, change, status, words, fix):
    """An 8B Llama on 16 H100s at 4k tokens a row with full recomputation, against what each node's
    nvidia-smi says its cards hold (the model's config.json alone: no weights here)."""
    (tmp_path / "llama8b").mkdir()
    (tmp_path / "llama8b" / "config.json").write_text(json.dumps(LLAMA_8B))
    text = (f"experiment_name: t\ncompute: {GPU2}\nparameters: {{model_name: {tmp_path / 'llama8b'}, "
            "dataset_name: tatsu-lab/alpaca, output_dir: /tmp/o, max_seq_len: 4096, per_device_batch_size: 1, "
            f"model: {{activation_checkpointing: full}}, fsdp: {params}}}\n")
    result = validate_text(text, base_dir=tmp_path)
    assert result.workload is not None, [p.format() for p in result.problems]
    plan = build_plan(result.workload, run_id="t", source_file=tmp_path / "w.yaml")
    probe = NodeProbe("node 1", "/opt/py/bin/python", local=False, facts=ProbeReply.from_wire(_merge(GOOD, change)))
    check = {c.name: c for c in evaluate(plan, plan.nodes[1], probe, node0_hostname="gpu01").checks}["memory"]
    assert check.status == status and words in check.detail and fix in check.fix, check
    assert check.detail.startswith("each rank needs ~")


def test_the_memory_check_of_a_cpu_run_weighs_the_node_s_ram():
    plan = _plan("{accelerator_type: CPU, procs_per_node: 2}", builtin=True)
    facts = _merge(GOOD, {"ram": {"total_bytes": 24 * 2**30, "available_bytes": 20 * 2**30}})
    check = {c.name: c for c in evaluate(plan, plan.nodes[0], NodeProbe("n", "p", True, facts=ProbeReply.from_wire(facts))).checks}
    assert check["memory"].status == "ok" and "fits: " in check["memory"].detail and "RAM over 2 processes" in check["memory"].detail
    script = _plan("{accelerator_type: CPU}")
    assert "memory" not in {c.name for c in evaluate(script, script.nodes[0], NodeProbe("n", "p", True,
                                                                                       facts=ProbeReply.from_wire(facts))).checks}
