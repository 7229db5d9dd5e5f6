"""The interconnect self-test's pure parts on the operator's side: bandwidth definitions, the slow-node verdict,
decoding a result, the FSDP expectation and the test's plan (the node's side: tests/trainer/nettest)."""

from __future__ import annotations

import math

import pytest

from launcher.nettest.expect import Inputs, comm_time, expect, inputs_for
from launcher.nettest.figures import (
    SLOW_RATIO,
    BadResult,
    PairFigure,
    bus_factor,
    decode,
    judge_pairs,
)
from launcher.nettest.report import to_dict, verdict_lines
from tests.support.nettest import result

MIB = 1 << 20


@pytest.mark.parametrize(("op", "n", "factor"), [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 2, 0.5), ("all_gather", 8, 0.875),
    ("reduce_scatter", 4, 0.75), ("all_gather", 1, 0.0),
])
def test_bus_factor_is_nccl_tests(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def pairs_from(rates: dict[tuple[int, int], float]) -> list[PairFigure]:
    """Pairs whose all-gather of 2 MB took what gives ``rate`` MB/s of bus bandwidth."""
    return [PairFigure(a, b, 0, 2_000_000, 2_000_000 * 0.5 / (r * 1e6)) for (a, b), r in rates.items()]


@pytest.mark.parametrize(("rates", "nodes", "links"), [
    # even network (with the noise of shared hosts): nothing named
    ({(0, 1): 50, (1, 2): 41, (0, 2): 58}, [], []),
    ({(0, 1): 50, (1, 2): 30, (2, 3): 44, (0, 3): 55}, [], []),
    # node 2 at 1/5: both its pairs slow, the third fast
    ({(0, 1): 50, (1, 2): 10, (0, 2): 10}, [2], []),
    # node 0 of four
    ({(0, 1): 9, (1, 2): 50, (2, 3): 48, (0, 3): 11}, [0], []),
    # one slow link between healthy nodes
    ({(0, 1): 50, (1, 2): 8, (2, 3): 48, (0, 3): 52}, [], [(1, 2)]),
    # a slow node among five (odd ring: three rounds)
    ({(0, 1): 60, (1, 2): 58, (2, 3): 12, (3, 4): 11, (0, 4): 61}, [3], []),
    # just above the threshold: not named
    ({(0, 1): 50, (1, 2): 26, (0, 2): 26}, [], []),
])
def test_slow_node_or_link_named_against_the_median_of_the_others(rates, nodes, links):
    verdict = judge_pairs(pairs_from(rates))
    assert list(verdict.slow_nodes) == nodes
    assert [f.nodes for f in verdict.findings if f.kind == "link"] == links


def test_verdict_words_name_the_host_figure_and_rule():
    verdict = judge_pairs(pairs_from({(0, 1): 50, (1, 2): 10, (0, 2): 10}))
    lines = verdict_lines(verdict, ("a", "b", "c"))
    assert lines[0] == ("slow node: node 2 (c): 10.0 MB/s all-gather bus bandwidth against 50.0 MB/s for the "
                        "fast pairs (0.20x)")
    assert f"{SLOW_RATIO:.2f}x the median" in lines[-1]
    assert "no slow node" in verdict_lines(judge_pairs(pairs_from({(0, 1): 5, (1, 2): 5, (0, 2): 5})), ("a",) * 3)[0]


@pytest.mark.parametrize(("n", "note"), [(1, "one node"), (2, "two nodes")])
def test_too_few_nodes_to_compare_says_so(n, note):
    pairs = pairs_from({(0, 1): 5}) if n == 2 else []
    verdict = judge_pairs(pairs)
    assert verdict.findings == () and verdict.note.startswith(note)


def test_decode_computes_bandwidths_from_the_median_time():
    m = decode(result())
    ag = m.scope("world").largest("all_gather")
    assert ag.algbw == pytest.approx(4 * MIB / 0.1) and ag.busbw == pytest.approx(4 * MIB / 0.1 * 2 / 3)
    assert ag.spread == pytest.approx(1.1)
    ar = m.scope("world").largest("all_reduce")
    assert ar.busbw == pytest.approx(4 * MIB / 0.1 * 4 / 3)
    data = to_dict(m, ("n0", "n1", "n2"))
    assert [s["host"] for s in data["verdict"]["slow_nodes"]] == ["n2"]
    assert m.across is m.scope("world")


@pytest.mark.parametrize("bad", [
    None, {"version": 2}, {**result(), "sizes": [-1]}, {**result(), "pairs": [{"a": 0, "b": 1, "round": 0,
                                                                              "bytes": 1, "times": ["x"]}]},
    {**result(), "nnodes": True}, {**result(), "pairs": [{"a": 0, "b": 1, "round": 0, "bytes": 1, "times": []}]},
    # Parts of the wrong shape (a node's file is untrusted): refused with why, never an AttributeError.
    {**result(), "scopes": [1]}, {**result(), "scopes": {"world": []}}, {**result(), "sizes": 5},
    {**result(), "pairs": ["ab"]}, {**result(), "phases": [1.0]}, {**result(), "cuts": 1},
    {**result(), "scopes": [{**result()["scopes"][0], "ops": ["all_gather"]}]},
])
def test_a_result_that_is_not_one_is_refused_with_why(bad):
    with pytest.raises(BadResult):
        decode(bad)


def test_expected_bytes_per_rank_per_strategy():
    m = decode(result(nnodes=2, local=4))  # every collective: 4 MiB in 0.1 s
    ins = Inputs(params=1_000_000_000, sharding="full_shard", param_bytes=2, reduce_bytes=4, tokens_per_rank=4096,
                 peak_flops=989e12)
    n = 8
    full_bytes, full_s = comm_time(ins, m, "full_shard")
    assert full_bytes == pytest.approx((2 * 2e9 + 4e9) * (n - 1) / n)
    ag_bw = 4 * MIB / 0.1 * (n - 1) / n
    assert full_s == pytest.approx(full_bytes / ag_bw)
    sgo_bytes, _ = comm_time(ins, m, "shard_grad_op")
    assert sgo_bytes == pytest.approx((2e9 + 4e9) * (n - 1) / n)
    ns_bytes, _ = comm_time(ins, m, "no_shard")
    assert ns_bytes == pytest.approx(2 * 4e9 * (n - 1) / n)
    hy_bytes, _ = comm_time(ins, m, "hybrid_shard")
    assert hy_bytes == pytest.approx((2 * 2e9 + 4e9) * 3 / 4 + 2 * (4e9 / 4) / 2)
    e = expect(ins, m)
    compute = 6 * 1e9 * 4096 / (989e12 * 0.4)
    assert e.compute_s == pytest.approx(compute)
    assert any(line.startswith("the network caps MFU near") for line in e.lines)
    assert any("fsdp.sharding: shard_grad_op" in line or "hybrid_shard" in line for line in e.lines)


def test_comm_behind_compute_and_cpu_without_a_peak():
    m = decode(result(nnodes=2, local=1))
    fast = Inputs(1000, "full_shard", 2, 4, 10**6, 1e12)
    assert "fits behind compute" in expect(fast, m).lines[-1]
    cpu = Inputs(1000, "full_shard", 4, 4, 4096, None)
    assert "--peak-tflops" in expect(cpu, m).lines[-1]
    assert math.isfinite(expect(cpu, m).comm_s)


def test_the_test_runs_as_the_workload_with_its_command_replaced(tmp_path):
    from launcher.nettest.launch import RESULT_MARK, Options, nettest_plan
    from launcher.workload.load import plan_file
    from trainer.nettest import node as nettest

    wl = tmp_path / "w.yaml"
    wl.write_text("""experiment_name: exp
compute: {accelerator_type: CPU, procs_per_node: 2, num_accelerators: 4, hosts: [a@h1, b@h2]}
env_variables: {GLOO_SOCKET_IFNAME: eth0}
parameters: {model_name: m, dataset_name: d, output_dir: o, max_seq_len: 512,
             fsdp: {sharding: hybrid_shard}}
""")
    plan = plan_file(wl, home=tmp_path).plan
    test = nettest_plan(plan, Options(quick=True, max_bytes=4 * MIB), tmp_path)
    assert [n.host for n in test.nodes] == [n.host for n in plan.nodes]
    assert test.topology.procs_per_node == 2 and test.node_root == plan.node_root
    assert not test.workload.mlflow.enabled and test.workload.max_retries == 0
    assert test.nodes[1].env["GLOO_SOCKET_IFNAME"] == "eth0"
    command = test.nodes[0].argv[2]
    assert "--quick" in command and f"--max-bytes={4 * MIB}" in command and '"$CODE_SOURCE_PATH/nettest.py"' in command
    assert (test.code_root / "nettest.py").read_bytes() == (tmp_path / "nettests/node-code/nettest.py").read_bytes()
    assert RESULT_MARK == nettest.RESULT_MARK
    ins = inputs_for(plan, 10**9)
    assert (ins.sharding, ins.param_bytes, ins.tokens_per_rank, ins.peak_flops) == ("hybrid_shard", 4, 4 * 512, None)


def test_show_links_a_run_to_the_newest_test_of_the_same_nodes(tmp_path, monkeypatch, capsys):
    import json

    from launcher.cli.main import main
    from launcher.events import RunState
    from launcher.runs.core.store import RunStore
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_file
    from tests.support.cli import ROOT

    monkeypatch.setenv("FSDP_TUI_HOME", str(tmp_path))
    plan = build_plan(validate_file(ROOT / "sample_workloads" / "tiny_cpu.yaml").workload, run_id="r-1")
    RunStore(tmp_path).create_run(plan, None, "x: 1\n")
    RunStore(tmp_path).set_state("r-1", RunState.SUCCEEDED, 1)
    (tmp_path / "nettests").mkdir()
    for run_id, started, nodes in [("t-old", 1.0, ["this machine"]), ("t-new", 2.0, ["this machine"]),
                                   ("t-other", 3.0, ["elsewhere"])]:
        (tmp_path / "nettests" / f"{run_id}.json").write_text(json.dumps(
            {"run_id": run_id, "started_at": started, "nodes": nodes, "result": result(nnodes=1, local=2)}))
    assert main(["show", "r-1"]) == 0
    assert "network   newest test of these nodes: t-new (" in capsys.readouterr().out
    assert main(["show", "r-1", "--json"]) == 0
    linked = json.loads(capsys.readouterr().out)["nettest"]
    assert linked["run_id"] == "t-new" and linked["verdict"].startswith("one node")
