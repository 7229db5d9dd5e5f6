"""The doctor looks at a workload's data files where they live on the nodes (every source of a mixture):
there, readable, the format's columns and first row, judged by the trainer's rules; each bad source is
one line at its key. Table-driven on probe replies, then the probe itself on real files here."""

from __future__ import annotations

import json

import pytest

from launcher.doctor import probe as node_probe
from launcher.doctor.data_checks import node_sources
from launcher.doctor.judge import NodeProbe, evaluate
from launcher.doctor.reply import ProbeReply
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from tests.support.doctor_replies import GOOD, GPU2

MIXTURE = """experiment_name: t
compute: {compute}
parameters:
  model_name: builtin:tiny-llama
  output_dir: /tmp/o
  datasets:
    - {{path: /data/a.jsonl, weight: 2}}
    - {{path: $DATA/b.parquet, weight: 1, format: alpaca}}
    - {{path: org/hub-set, weight: 1}}
    - {{path: s3://bucket/c.jsonl, weight: 1}}
    - {{path: shipped/d.jsonl, weight: 1}}
"""


def _plan(text: str):
    result = validate_text(text)
    assert result.workload is not None, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id="t")


A_OK = {"path": "/data/a.jsonl", "kind": "file", "size": 2_000_000, "readable": True,
        "columns": ["instruction", "input", "output"], "row": {"instruction": "x", "input": "", "output": "y"}}
B_OK = {"path": "/mnt/b.parquet", "kind": "file", "size": 10, "readable": True, "columns": ["instruction", "output"]}


def test_only_the_files_on_the_nodes_are_looked_for_there():
    plan = _plan(MIXTURE.format(compute=GPU2))
    assert [(key, path) for key, _, path, _ in node_sources(plan)] == [
        ("parameters.datasets[0].path", "/data/a.jsonl"), ("parameters.datasets[1].path", "$DATA/b.parquet")]
    single = _plan(MIXTURE.format(compute=GPU2).split("  datasets:")[0] + "  dataset_name: ~/a.jsonl\n")
    assert [key for key, *_ in node_sources(single)] == ["parameters.dataset_name"]


@pytest.mark.parametrize(("data", "name", "status", "said"), [
    ([A_OK, B_OK], "data a.jsonl", "ok", "/data/a.jsonl: readable, 2.0 MB (columns instruction, input, output)"),
    ([{"path": "/data/a.jsonl", "kind": "missing"}, B_OK], "data a.jsonl", "error",
     "parameters.datasets[0].path: no such file or folder on b: /data/a.jsonl"),
    ([A_OK, {**B_OK, "columns": ["instruction", "outptu"]}], "data b.parquet", "error",
     "parameters.datasets[1].path: /mnt/b.parquet: no column 'output' (did you mean 'outptu'?): the alpaca format "
     "needs instruction, output"),
    ([{**A_OK, "row": {"instruction": "x", "input": "", "output": None}}, B_OK], "data a.jsonl", "error",
     "parameters.datasets[0].path: /data/a.jsonl: first row: 'output' is empty"),
    ([{**A_OK, "columns": ["messages", "tools"], "row": {"messages": [{"role": "user", "content": "hi"}],
                                                          "tools": ["get_weather"]}}, B_OK], "data a.jsonl", "error",
     "parameters.datasets[0].path: /data/a.jsonl: first row: 'tools' must be a list of function definitions"),
    ([{**A_OK, "readable": False}, B_OK], "data a.jsonl", "error", "cannot be read there (permissions)"),
    ([A_OK, {**B_OK, "problem": "not UTF-8 text: byte 0xe9 near the start (save the file as UTF-8)"}],
     "data b.parquet", "error", "parameters.datasets[1].path: /mnt/b.parquet: not UTF-8 text"),
    ([A_OK], "data", "warning", "the data files could not be looked at on b: no answer"),
    ({"error": "OSError: boom"}, "data", "warning", "could not be looked at on b: OSError: boom"),
])
def test_each_source_on_each_node_is_judged_by_the_trainers_rules(data, name, status, said):
    plan = _plan(MIXTURE.format(compute=GPU2))
    facts = ProbeReply.from_wire({**GOOD, "data": data})
    report = evaluate(plan, plan.nodes[1], NodeProbe("node 1", "/opt/py/bin/python", local=False, facts=facts),
                      node0_hostname="gpu01")
    found = {c.name: c for c in report.checks}
    assert found[name].status == status and said in found[name].detail, found[name]


def test_the_probe_reads_the_files_on_its_node(tmp_path, monkeypatch):
    (tmp_path / "a.jsonl").write_text("\n" + json.dumps({"instruction": "x", "output": "y"}) + "\n")
    (tmp_path / "b.json").write_text(json.dumps([{"messages": [{"role": "user", "content": "hi"}]}], indent=1))
    (tmp_path / "c.csv").write_text("text\nhello\n")
    (tmp_path / "d.jsonl").write_bytes(b'{"text": "caf\xe9"}\n' + b"x" * 100)
    (tmp_path / "e.jsonl").write_text("")
    monkeypatch.setenv("DATA", str(tmp_path))
    found = node_probe._data(["$DATA/a.jsonl", f"{tmp_path}/b.json", "${DATA}/c.csv", f"{tmp_path}/d.jsonl",
                              f"{tmp_path}/e.jsonl", f"{tmp_path}/none.jsonl", str(tmp_path)], {})
    reply = ProbeReply.from_wire({**GOOD, "data": json.loads(json.dumps(found))})
    assert reply is not None
    assert [(d.kind, d.columns, d.problem) for d in reply.data] == [
        ("file", ("instruction", "output"), ""), ("file", ("messages",), ""), ("file", ("text",), ""),
        ("file", None, "not UTF-8 text: byte 0xe9 near the start (save the file as UTF-8)"),
        ("file", None, "the file has no rows"), ("missing", None, ""),
        ("folder", None, "this folder was not saved by datasets (no dataset_info.json)")]
    assert reply.data[0].row == {"instruction": "x", "output": "y"} and reply.data[0].path == f"{tmp_path}/a.jsonl"
