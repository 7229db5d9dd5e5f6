"""Per-node plans: environment, argv and directories for each kind of workload."""

import sys
from pathlib import Path

from launcher.present.dry_run import dry_run_text
from launcher.workload.dry_run import dry_run_of
from launcher.workload.plan import build_plan, with_master_port
from launcher.workload.validate import validate_text

ROOT = Path(__file__).resolve().parents[2]


def _plan(text: str, **kw):
    result = validate_text(text, "w.yaml", base_dir=ROOT)
    assert result.ok, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id="r1", **kw)


def test_local_cpu_trainer_plan():
    plan = _plan((ROOT / "sample_workloads/tiny_cpu.yaml").read_text(), node_root="/data/nodes")
    [node] = plan.nodes
    assert node.host is None and plan.master_addr == "127.0.0.1"
    assert node.node_dir == "/data/nodes/r1/node-0"
    assert node.env["NUM_NODES"] == "1" and node.env["LOCAL_WORLD_SIZE"] == "2"
    assert node.env["FSDP_TUI_RUN_ID"] == "r1" and node.env["OMP_NUM_THREADS"] == "1"
    assert node.dir_env["PYTHONPATH"] == "pkg" and node.dir_env["HYPERPARAMETERS_PATH"] == "parameters.yaml"
    assert node.argv[:3] == (sys.executable, "-m", "torch.distributed.run")  # as a local launch runs it
    assert "--nproc_per_node=2" in node.argv and node.argv[-3:] == ("-m", "trainer", "parameters.yaml")
    assert plan.uses_builtin_trainer and "max_steps: 200" in plan.parameters_yaml


def test_moving_the_rendezvous_port_changes_every_node_and_nothing_else():
    plan = _plan("""experiment_name: t
compute: {accelerator_type: CPU, procs_per_node: 2, hosts: [a, b]}
parameters: {model_name: m, dataset_name: d, output_dir: /ckpt}
""")
    moved = with_master_port(plan, 41234)
    assert moved.master_port == 41234 and plan.master_port == 29500
    for old, new in zip(plan.nodes, moved.nodes, strict=True):
        assert new.env == {**old.env, "MASTER_PORT": "41234"}
        assert [a for a in new.argv if a not in old.argv] == ["--master_port=41234"]
        assert len(new.argv) == len(old.argv) and new.node_dir == old.node_dir


def test_multi_node_plan_ranks_and_master():
    text = """experiment_name: t
compute: {num_accelerators: 4, gpus_per_node: 2, hosts: ['alice@gpu-a:2222', gpu-b], master_port: 29600}
command: echo "$NODE_RANK"
environment: {python: /opt/py/bin/python}
"""
    plan = _plan(text)
    assert [n.node_rank for n in plan.nodes] == [0, 1]
    assert plan.nodes[0].host.user == "alice" and plan.nodes[0].host.port == 2222
    assert plan.master_addr == "gpu-a" and plan.master_port == 29600
    assert all(n.argv == ("bash", "-c", 'echo "$NODE_RANK"') for n in plan.nodes)
    assert plan.nodes[1].node_dir == "~/.fsdp-tui/runs/r1/node-1"
    assert "PYTHONPATH" not in plan.nodes[0].dir_env
    assert not plan.blockers


def test_render_shows_every_node_with_secrets_masked():
    text = "experiment_name: t\ncommand: run\nsecrets: {TOKEN: s/k}\nenv_variables: {A: \"it's $(x)\"}\n"
    out = dry_run_text(dry_run_of(_plan(text)))
    assert "node 0: this machine" in out
    assert "TOKEN=******  (secret s/k)" in out
    assert "A='it'\"'\"'s $(x)'" in out


def test_a_recorded_plan_keeps_its_nodes_directories_and_a_new_run_never_takes_them():
    from launcher.workload.plan import plan_from_json, plan_to_json, with_node_dirs

    plan = _plan((ROOT / "sample_workloads/tiny_cpu.yaml").read_text(), node_root="/data/nodes")
    swapped = with_node_dirs(plan, ["/data/nodes/r1/node-0.s1"])  # a node swapped in: a directory of its own
    assert plan_from_json(plan_to_json(swapped)).nodes[0].node_dir == "/data/nodes/r1/node-0.s1"
    again = {**plan_to_json(swapped), "run_id": "r2"}  # the same plan for a new run (a sweep's variant resumed)
    assert plan_from_json(again).nodes[0].node_dir == "/data/nodes/r2/node-0"
