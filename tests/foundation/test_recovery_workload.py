"""``compute.spares`` and ``recovery:`` in the workload file, and the plans of the nodes that go on after a
failure (a spare in a failed node's place, a SLURM node excluded, the run without the node). Pure."""

from __future__ import annotations

import json

import pytest

from launcher.backends.slurm.script import sbatch_options
from launcher.workload.plan import build_plan, plan_from_json, plan_to_json, with_rendezvous
from launcher.workload.recovery import exclude_plan, kept_batch, shrink_plan, swap_plan, without_spares
from launcher.workload.validate import validate_text

BASE = """experiment_name: rec
compute: {accelerator_type: CPU, procs_per_node: 1, num_accelerators: 3, hosts: [a, b, c], spares: [s0, s1]}
parameters: {model_name: builtin:tiny-llama, dataset_name: builtin:tiny-alpaca, per_device_batch_size: 4,
             max_steps: 10, output_dir: outputs}
"""


def _problems(text: str) -> list[tuple[int, int, str, str, str]]:
    result = validate_text(text, "w.yaml")
    return [(p.line, p.column, p.severity, p.path, p.message) for p in result.problems]


@pytest.mark.parametrize("text, expect", [
    (BASE, []),
    ("experiment_name: rec\ncompute: {hosts: [a, b], spares: [b, \"c d\", c, c, localhost]}\ncommand: run\n", [
        (2, 35, "error", "compute.spares[0]", "'b' is node 1 already: a spare is a machine the run does not use"),
        (2, 38, "error", "compute.spares[1]", "'c d' is not a valid host name or ~/.ssh/config alias"),
        (2, 48, "error", "compute.spares[3]", "'c' is spare 2 already"),
        (2, 51, "error", "compute.spares[4]", "'localhost' is this machine: a spare is another machine the run can "
                                              "reach over SSH")]),
    ("experiment_name: rec\ncompute: {spares: [s0]}\ncommand: run\n", [
        (2, 19, "error", "compute.spares", "spares stand in for SSH hosts, and this run has none")]),
    ("experiment_name: rec\ncompute:\n  num_accelerators: 2\n  accelerator_type: CPU\n  spares: [s0]\n"
     "  slurm: {login: local}\ncommand: run\n", [
        (5, 11, "error", "compute.spares", "a SLURM run has no spares: the scheduler picks the replacement "
                                          "(recovery excludes the failed node from the next job)")]),
    ("experiment_name: rec\ncompute: {hosts: [a, b], spares: [s0]}\nrecovery: {max_swaps: 0}\ncommand: run\n", [
        (3, 23, "warning", "recovery.max_swaps", "the spares are never used: recovery.max_swaps is 0")]),
    ("experiment_name: rec\ncompute: {hosts: [a]}\nrecovery: {shrink: true}\ncommand: run\n", [
        (3, 20, "warning", "recovery.shrink", "a one-node run cannot go on without its node")]),
    ("experiment_name: rec\ncompute: {hosts: [a, b]}\nrecovery:\n  max_swap: 2\n  quarantine_after: 0\n"
     "command: run\n", [
        (4, 3, "error", "recovery.max_swap", "unknown key 'max_swap'"),
        (5, 21, "error", "recovery.quarantine_after", "must be greater than or equal to 1, got 0")]),
    ("experiment_name: rec\ncompute:\n  num_accelerators: 2\n  accelerator_type: CPU\n"
     "  slurm: {login: local, exclude: [\"n1,n2\", \"n 3\"]}\ncommand: run\n", [
        (5, 34, "error", "compute.slurm.exclude", "'n1,n2': a comma: list one node per entry")]),
])
def test_spares_and_recovery_are_checked_at_their_lines(text, expect):
    got = _problems(text)
    assert len(got) == len(expect), got
    for (line, col, sev, path, message), want in zip(got, expect, strict=True):
        assert (line, col, sev, path) == want[:4], got
        assert message.startswith(want[4]), message


def test_a_misspelled_recovery_key_gets_did_you_mean():
    result = validate_text("experiment_name: rec\ncompute: {hosts: [a, b], sparse: [c]}\nrecovery: {shrnk: true}\n"
                           "command: run\n", "w.yaml")
    said = [p.format() for p in result.problems]
    assert any("compute.sparse: unknown key 'sparse' (did you mean 'spares'?)" in s for s in said), said
    assert any("recovery.shrnk: unknown key 'shrnk' (did you mean 'shrink'?)" in s for s in said), said


def _plan(text: str = BASE):
    result = validate_text(text, "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    plan = build_plan(result.workload, run_id="r1", node_root="~/.fsdp-tui/runs")
    return with_rendezvous(plan, addr="10.0.0.1", port=29511)


def test_a_spare_takes_the_failed_nodes_rank_in_a_directory_of_its_own_and_the_plan_says_so_when_read_back():
    plan = _plan()
    swapped = swap_plan(plan, 1, "s1", 1)
    assert [n.host_display for n in swapped.nodes] == ["a", "s1", "c"]
    assert swapped.workload.compute.spares == ["s0"]
    assert [n.node_dir for n in swapped.nodes] == ["~/.fsdp-tui/runs/r1/node-0", "~/.fsdp-tui/runs/r1/node-1.1",
                                                   "~/.fsdp-tui/runs/r1/node-2"]
    assert (swapped.master_addr, swapped.master_port) == ("10.0.0.1", 29511)  # node 0 stays: so does the rendezvous
    assert swapped.nodes[1].env["NODE_RANK"] == "1" and swapped.nodes[1].env["MASTER_ADDR"] == "10.0.0.1"
    again = plan_from_json(json.loads(json.dumps(plan_to_json(swapped))))  # an adopting owner reads it back
    assert [n.node_dir for n in again.nodes] == [n.node_dir for n in swapped.nodes]
    assert [n.host_display for n in again.nodes] == ["a", "s1", "c"]
    # Node 0 replaced: the rendezvous moves to the spare (an alias the backend resolves), same port.
    first = swap_plan(plan, 0, "s0", 2)
    assert (first.master_addr, first.master_port, first.master_addr_is_alias) == ("s0", 29511, True)
    assert first.nodes[0].node_dir.endswith("/node-0.2") and all(n.env["MASTER_ADDR"] == "s0" for n in first.nodes)
    assert without_spares(plan, ["s0"]).workload.compute.spares == ["s1"]


@pytest.mark.parametrize("rows, world, per_device, expect", [
    (12, 2, 4, (3, 2)),   # 3 ranks x 4 -> 2 ranks: 6 rows each, 3 a micro-batch, 2 micro-batches
    (8, 1, 4, (4, 2)),
    (16, 4, 4, (4, 1)),   # nothing to change
    (12, 5, 4, None),     # 12 rows cannot be split over 5 ranks
    (6, 2, 1, (1, 3)),
    (7, 7, 4, (1, 1)),
])
def test_the_global_batch_is_kept_on_fewer_ranks_by_accumulation(rows, world, per_device, expect):
    assert kept_batch(rows, world, per_device) == expect
    if expect is not None:
        assert world * expect[0] * expect[1] == rows and expect[0] <= per_device


def test_a_shrink_drops_the_node_keeps_the_others_directories_and_the_global_batch():
    plan = _plan()
    shrunk = shrink_plan(plan, 1)
    assert not shrunk.problem
    p = shrunk.plan
    assert [n.host_display for n in p.nodes] == ["a", "c"] and p.topology.num_nodes == 2
    assert [n.node_dir for n in p.nodes] == ["~/.fsdp-tui/runs/r1/node-0", "~/.fsdp-tui/runs/r1/node-2"]
    assert [n.env["NODE_RANK"] for n in p.nodes] == ["0", "1"] and p.nodes[1].env["NUM_NODES"] == "2"
    assert p.workload.compute.num_accelerators == 2
    assert (p.workload.parameters["per_device_batch_size"], p.workload.parameters["gradient_accumulation_steps"]) \
        == (3, 2)
    assert "per_device_batch_size: 3" in p.parameters_yaml and "gradient_accumulation_steps: 2" in p.parameters_yaml
    assert shrunk.batch == ("per_device_batch_size 4 -> 3, gradient_accumulation_steps 1 -> 2 (12 rows a step, "
                            "as before)")
    assert validate_text(plan_yaml(p), "w.yaml").ok
    odd = shrink_plan(_plan(BASE.replace("num_accelerators: 3, hosts: [a, b, c]", "num_accelerators: 2, hosts: [a, b]")
                            .replace("per_device_batch_size: 4", "per_device_batch_size: 3")), 0)
    assert odd.plan.workload.parameters["gradient_accumulation_steps"] == 2 and not odd.problem


def plan_yaml(plan) -> str:
    import yaml

    return yaml.safe_dump(plan.workload.model_dump(mode="json", exclude_defaults=True))


def test_a_failed_slurm_node_is_excluded_from_the_next_jobs_batch_script():
    plan = _plan("experiment_name: rec\ncompute:\n  num_accelerators: 2\n  accelerator_type: CPU\n"
                 "  slurm: {login: local, exclude: [fsl-n9]}\ncommand: run\n")
    assert "--exclude=fsl-n9" in sbatch_options(plan)
    once = exclude_plan(plan, "fsl-n1")
    assert "--exclude=fsl-n9,fsl-n1" in sbatch_options(once)
    assert exclude_plan(once, "fsl-n1").workload.compute.slurm.exclude == ["fsl-n9", "fsl-n1"]
    assert "--nodes=2" in sbatch_options(once)
    smaller = shrink_plan(once, 1).plan
    assert "--nodes=1" in sbatch_options(smaller) and "--exclude=fsl-n9,fsl-n1" in sbatch_options(smaller)


def test_a_shrink_the_trainer_cannot_run_is_refused_in_its_words():
    hybrid = BASE.replace("num_accelerators: 3, hosts: [a, b, c]", "num_accelerators: 4, hosts: [a, b, c, d]") \
        .replace("max_steps: 10,", "max_steps: 10, fsdp: {sharding: hybrid_shard, replicate_degree: 2},") \
        .replace("per_device_batch_size: 4", "per_device_batch_size: 3")
    shrunk = shrink_plan(_plan(hybrid), 3)
    assert shrunk.problem == ("parameters.fsdp.replicate_degree: 3 processes cannot form 2 equal replicas"), shrunk
    odd = shrink_plan(_plan(BASE.replace("num_accelerators: 3, hosts: [a, b, c]",
                                         "num_accelerators: 4, hosts: [a, b, c, d]")), 0)
    assert odd.problem == "its global batch of 16 rows cannot be split evenly over the 3 processes left"
