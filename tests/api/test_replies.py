"""Replies decoded once where they enter, into types: a run's triage (its ``triage.json``, an event's), a
node's stack dumps, a kept interconnect test. What a node or an old file sends is untrusted: wrong types are
left out, text comes out printable."""

from __future__ import annotations

import json

import pytest

from launcher.api.nettests import NettestRecord, NodeHealth
from launcher.backends.base import StackDump
from launcher.runs.core.layout import TRIAGE, read_triage, save_triage
from launcher.runs.core.triage import TriageReport, gone_report, said_report

OOM = {"node_rank": 1, "rank": 9, "exit_code": 1, "signature": "oom", "line_no": 42,
       "excerpt": "torch.OutOfMemoryError: CUDA out of memory",
       "summary": "node 1 rank 9: oom, exit code 1: torch.OutOfMemoryError: CUDA out of memory"}


@pytest.mark.parametrize("wire, summary, extras", [
    (OOM, OOM["summary"], {}),
    ({"summary": "stalled at step 5", "signature": "stalled", "excerpt": "stalled at step 5"}, "stalled at step 5", {}),
    ({"node_rank": "1", "rank": True, "exit_code": 1.5, "signature": 3, "excerpt": "a\x1b[2Jb"}, "unknown node: exited: ab",
     {}),
    ({**OOM, "consequence": "node 0: python_error", "slow_ranks": ["rank 3 is slow", 4], "scheduler": "OOM killer"},
     OOM["summary"], {"consequence": "node 0: python_error", "slow_ranks": ["rank 3 is slow"], "scheduler": "OOM killer"}),
])
def test_a_triage_is_decoded_once_and_written_back_as_read(tmp_path, wire, summary, extras):
    report = TriageReport.from_wire(wire)
    assert report.summary == summary
    data = report.to_dict()
    assert {k: data[k] for k in extras} == extras and set(data) - set(extras) == {*OOM}
    save_triage(tmp_path, report)
    assert json.loads((tmp_path / TRIAGE).read_text()) == data and read_triage(tmp_path) == report


@pytest.mark.parametrize("wire", [None, [], "oom", 3])
def test_what_is_no_triage_reads_as_none(tmp_path, wire):
    assert TriageReport.from_wire(wire) is None
    (tmp_path / TRIAGE).write_text(json.dumps(wire) if wire != "oom" else "{not json")
    assert read_triage(tmp_path) is None


def test_the_launchers_own_words_and_a_lost_node_are_triages_too():
    assert said_report("no room", "no_space", 2).to_dict() == {
        "node_rank": 2, "rank": None, "exit_code": None, "signature": "no_space", "line_no": None,
        "excerpt": "no room", "summary": "no room"}
    lost = gone_report(TriageReport.from_wire(OOM), 0, "gpu-a", "lost: its job is gone")
    assert lost.summary == "node 0 (gpu-a): lost: its job is gone" and lost.consequence == OOM["summary"]
    assert gone_report(TriageReport.from_wire(OOM), 1, "gpu-b", "lost").consequence == ""  # the same node


@pytest.mark.parametrize("wire, dumps", [
    ([{"pid": 7, "rank": 3, "how": "py-spy", "text": "Thread 7\n  train (train.py:10)"}],
     [StackDump(7, 3, "py-spy", "Thread 7\n  train (train.py:10)")]),
    ([{"pid": 0, "rank": 2, "how": "flight-recorder", "text": "{}"}, {"pid": 9, "how": "gdb", "text": 5}],
     [StackDump(0, 2, "flight-recorder", "{}"), StackDump(9, None, "none", "")]),
    ([{"rank": 1, "how": "py-spy"}, "pid 3", {"pid": True}], []),
    ({"pid": 1}, []),
    (None, []),
])
def test_a_nodes_stack_dumps_are_decoded_once(wire, dumps):
    assert list(StackDump.many_from_wire(wire)) == dumps


RESULT_LESS = {"run_id": "nt-1", "started_at": 5.0, "state": "failed", "nodes": ["a", "b"], "workload": "w.yaml",
               "result": None, "problems": ["node 1 (b): no answer"], "health": {"0": {"ecc": 0}, "x": {}}}


@pytest.mark.parametrize("wire, expect", [
    (RESULT_LESS, {"run_id": "nt-1", "state": "failed", "nodes": ("a", "b"), "measured": None,
                   "problems": ("node 1 (b): no answer",), "health": {0: NodeHealth()}}),
    ({"run_id": "nt-2", "started_at": "soon", "result": {"bad": 1}, "nodes": None},
     {"run_id": "nt-2", "started_at": None, "state": None, "nodes": (), "measured": None, "problems": ()}),
])
def test_a_kept_interconnect_test_is_a_typed_record(wire, expect):
    record = NettestRecord.from_wire(wire)
    assert {k: getattr(record, k) for k in expect} == expect


@pytest.mark.parametrize("wire", [None, [], {"run_id": 3}, {"state": "failed"}])
def test_what_is_no_test_record_is_skipped(wire):
    assert NettestRecord.from_wire(wire) is None


HOSTILE_PROBE = {"hostname": "n\x1b[31m1", "python": {"version": ["3", 11]}, "packages": {"torch": "2.6"},
                 "gpus": {"smi": 7, "names": "H100"}, "disk": {"free_bytes": "lots", "path": "/r"},
                 "output_dir": {"path": 5}, "master": {"addrs": ["::1", "not an address"], "bind_error": [1]},
                 "containers": ["docker"], "interfaces": "eth0"}


def test_a_nodes_probe_reply_is_decoded_once_and_nonsense_is_judged_not_raised():
    from launcher.doctor.judge import NodeProbe, evaluate
    from launcher.doctor.reply import NOT_SENT, ProbeReply
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    reply = ProbeReply.from_wire(HOSTILE_PROBE)
    assert reply.hostname == "n1" and reply.python.version is None and reply.gpus.names == ()
    assert reply.disk.error == NOT_SENT and reply.output_dir.error == NOT_SENT and reply.master.bind_error is None
    assert ProbeReply.from_wire(["not", "a", "reply"]) is None
    text = "experiment_name: x\ncommand: run\ncompute: {hosts: [a, b], num_accelerators: 2, gpus_per_node: 1}\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id="r")
    report = evaluate(plan, plan.nodes[1], NodeProbe("node 1", "python3", local=False, facts=reply))
    said = {c.name: (c.status, c.detail) for c in report.checks}
    assert said["python"] == ("error", "python3: no version reported")
    assert said["disk"] == ("error", f"could not check the run root: {NOT_SENT}")
    assert said["torch"][0] == "error" and said["gpus"][0] == "error" and said["master_addr"][0] == "ok"


def test_kept_tests_are_listed_newest_first_and_found_by_a_prefix_or_one_line_says_why_not(tmp_path):
    from launcher.api.nettests import NettestNotFound, Nettests

    (tmp_path / "nettests").mkdir()
    for run_id, started in (("nt-20260301-a", 1.0), ("nt-20260302-b", 2.0)):
        (tmp_path / "nettests" / f"{run_id}.json").write_text(json.dumps({**RESULT_LESS, "run_id": run_id,
                                                                         "started_at": started}))
    (tmp_path / "nettests" / "broken.json").write_text("{")
    nettests = Nettests(tmp_path)
    assert [r.run_id for r in nettests.list()] == ["nt-20260302-b", "nt-20260301-a"]
    assert nettests.find("nt-20260301").run_id == "nt-20260301-a"
    for prefix, said in (("nt-", "more than one test matches 'nt-'"), ("zz", "no test matches 'zz'")):
        with pytest.raises(NettestNotFound, match=said):
            nettests.find(prefix)


HEALTH = {"gpus": [{"bus_id": "00000000:10:1C.0", "ecc_volatile_uncorrectable": 0, "ecc_aggregate_uncorrectable": 2,
                    "retired_pending": None, "remapped_correctable": 1, "remapped_uncorrectable": 0,
                    "remap_pending": True, "remap_failure": False}],
          "nvlink": {"GPU 0": {"up": 2, "inactive": 1}}, "xid": ["[ 8123.4] NVRM: Xid 79"], "smi_readable": True,
          "kernel_log_readable": False}


@pytest.mark.parametrize("wire, expect", [
    (HEALTH, HEALTH),                                                    # written back as it came
    ({"smi_readable": False}, {"smi_readable": False}),                  # what an unreadable health line becomes
    ({"gpus": [{"bus_id": 7, "ecc_volatile_uncorrectable": "9", "remap_pending": 1}, "x"], "nvlink": [1],
      "xid": "Xid", "smi_readable": "yes"},
     {"gpus": [{"bus_id": "7", "ecc_volatile_uncorrectable": None, "ecc_aggregate_uncorrectable": None,
                "retired_pending": None, "remapped_correctable": None, "remapped_uncorrectable": None,
                "remap_pending": None, "remap_failure": None}]}),
])
def test_a_nodes_health_report_is_decoded_once_into_a_type(wire, expect):
    from launcher.api.nettests import GpuHealth, LinkState

    report = NodeHealth.from_wire(wire)
    assert isinstance(report, NodeHealth) and report.to_dict() == expect
    assert all(isinstance(g, GpuHealth) for g in report.gpus or ())
    assert all(isinstance(s, LinkState) for s in (report.nvlink or {}).values())
    kept = NettestRecord.from_wire({"run_id": "nt-3", "health": {"1": wire, "2": "garbage"}})
    assert kept is not None and kept.health == {1: report}
