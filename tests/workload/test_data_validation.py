"""``fsdp-tui validate`` (and the editor, through the same ``validate_text``) opens a workload's local
dataset: where the trainer will look for it, its first rows, the format its columns show, a wrong or
missing column with did-you-means, and the chat template; each problem at its key's line. Hub names
and files on other nodes are left alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.workload.validate import validate_file

FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
ALPACA = "".join(json.dumps({"instruction": f"Say {w}.", "input": "", "output": w}) + "\n" for w in ("a", "b"))
HERE = "compute: {accelerator_type: CPU, procs_per_node: 2}\n"
NODES = "compute: {accelerator_type: CPU, procs_per_node: 2, hosts: [gpu-a]}\n"
SHIP = "code_source: {type: snapshot, snapshot: {root_path: .}}"


def _workload(compute: str, dataset: str, data: str = "", extra: str = "") -> str:
    """Line 6 is ``dataset_name``; ``data`` settings follow ``mask_prompt`` from line 10."""
    return (f"experiment_name: d\n{compute}{extra or '# no code_source'}\nparameters:\n  model_name: builtin:tiny-llama\n"
            f"  dataset_name: {dataset}\n  output_dir: out\n  data:\n    mask_prompt: true\n{data}")


CASES = [
    # (name, workload, files {relative path: text}, problems as validate prints them; {d}: the folder)
    ("alpaca here", _workload(HERE, "{d}/a.jsonl"), {"a.jsonl": ALPACA}, []),
    ("hub name", _workload(HERE, "tatsu-lab/alpaca"), {}, []),
    ("builtin", _workload(HERE, "builtin:tiny-alpaca"), {}, []),
    ("missing here", _workload(HERE, "{d}/nope.jsonl"), {},
     ["w.yaml:6:17: error: parameters.dataset_name: no such file or folder: {d}/nope.jsonl"]),
    ("missing on other nodes", _workload(NODES, "/data/on-the-nodes.jsonl"), {}, []),
    ("relative, shipped", _workload(NODES, "data/a.jsonl", extra=SHIP), {"data/a.jsonl": ALPACA}, []),
    ("relative, not shipped", _workload(NODES, "data/a.jsonl", extra=SHIP), {},
     ["w.yaml:6:17: error: parameters.dataset_name: no such file or folder: {d}/data/a.jsonl (a relative path "
      "is read in the code snapshot that ships from here)"]),
    ("relative without code_source", _workload(HERE, "a.jsonl"), {"a.jsonl": ALPACA},
     ["w.yaml:6:17: error: parameters.dataset_name: a.jsonl: a relative path is read in the run's folder on the "
      "node, where only the code snapshot is, and this workload has no code_source (add code_source: {type: "
      "snapshot, snapshot: {root_path: .}} to ship it, or give an absolute path)"]),
    ("$CODE_SOURCE_PATH", _workload(NODES, "$CODE_SOURCE_PATH/data/a.jsonl", extra=SHIP),
     {"data/a.jsonl": ALPACA}, []),
    ("misspelled column", _workload(HERE, "{d}/a.jsonl", "    format: alpaca\n"),
     {"a.jsonl": '{"instruction": "x", "outptu": "y"}\n'},
     ["w.yaml:6:17: error: parameters.dataset_name: {d}/a.jsonl: no column 'output' (did you mean 'outptu'?): "
      "the alpaca format needs instruction, output (columns: [instruction, outptu])"]),
    ("no format fits", _workload(HERE, "{d}/a.csv"), {"a.csv": "contxt,question,answer\nx,y,z\n"},
     ["w.yaml:6:17: error: parameters.dataset_name: {d}/a.csv: cannot tell the format from columns [contxt, "
      "question, answer]: for squad, no column 'context' (did you mean 'contxt'?), no column 'answers' (did you "
      "mean 'answer'?) (name the columns as a format needs them (alpaca: instruction, output; squad: context, "
      "question, answers; chat: messages or conversations; text: text), or set parameters.data.format)"]),
    ("squad csv with json answers", _workload(HERE, "{d}/q.csv"),
     {"q.csv": 'context,question,answers\nP,Q,"{""text"": [""A""]}"\n'}, []),
    ("bad json answers cell", _workload(HERE, "{d}/q.csv"),
     {"q.csv": 'context,question,answers\nP,Q,"{""text"": [A]}"\n'},
     ["w.yaml:6:17: error: parameters.dataset_name: {d}/q.csv:2: 'answers' is text that looks like JSON but is "
      "not: Expecting value (column 11 of the cell)"]),
    ("bad utf-8", _workload(HERE, "{d}/a.jsonl"), {"a.jsonl": ALPACA + "\udce9\n"},
     ["w.yaml:6:17: error: parameters.dataset_name: {d}/a.jsonl: line 3: not UTF-8 text: byte 0xe9 at column 1 "
      "(save the file as UTF-8)"]),
    ("empty", _workload(HERE, "{d}/a.jsonl"), {"a.jsonl": ""},
     ["w.yaml:6:17: error: parameters.dataset_name: {d}/a.jsonl: the file has no rows"]),
    ("sharegpt", _workload(HERE, "{d}/s.json"),
     {"s.json": json.dumps([{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}])},
     []),
    ("unknown speaker", _workload(HERE, "{d}/s.jsonl"),
     {"s.jsonl": json.dumps({"conversations": [{"from": "customer", "value": "hi"}]}) + "\n"},
     ["w.yaml:6:17: error: parameters.dataset_name: {d}/s.jsonl:1: 'conversations' turn 1: unknown role "
      "'customer' (known: system, user, assistant, tool, developer, ipython, function, human, gpt, chatgpt, bot, "
      "model, function_call, observation; map it with parameters.data.chat.roles, e.g. {customer: user})"]),
    ("mapped speaker", _workload(HERE, "{d}/s.jsonl", "    chat: {roles: {customer: user}}\n"),
     {"s.jsonl": json.dumps({"conversations": [{"from": "customer", "value": "hi"}]}) + "\n"}, []),
    ("mapped column missing", _workload(HERE, "{d}/s.jsonl", "    chat: {messages_field: dialog}\n"),
     {"s.jsonl": json.dumps({"dialogue": [{"role": "user", "content": "hi"}]}) + "\n"},
     ["w.yaml:6:17: error: parameters.dataset_name: {d}/s.jsonl: cannot tell the format from columns [dialogue]: "
      "for chat, no column 'dialog' (did you mean 'dialogue'?) (name the columns as a format needs them (alpaca: "
      "instruction, output; squad: context, question, answers; chat: messages or conversations; text: text), or "
      "set parameters.data.format)"]),
    ("tools not function definitions", _workload(HERE, "{d}/s.jsonl"),
     {"s.jsonl": json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": ["get_weather"]}) + "\n"},
     ["w.yaml:6:17: error: parameters.dataset_name: {d}/s.jsonl:1: 'tools' must be a list of function definitions "
      "(JSON schemas), not [\"get_weather\"]"]),
    ("template with a syntax error", _workload(HERE, "{d}/s.jsonl", "    chat_template: '{% for m in messages %}'\n"),
     {"s.jsonl": json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n"},
     ["w.yaml:10:20: error: parameters.data.chat_template: not a valid Jinja template: Unexpected end of template. "
      "Jinja was looking for the following tags: 'endfor' or 'else'. The innermost block that needs to be closed "
      "is 'for'. (line 1 of the template)"]),
    ("template with generation markers", _workload(
        HERE, "{d}/s.jsonl", "    chat_template: '{% for m in messages %}{% generation %}{{ m.content }}"
                            "{% endgeneration %}{% endfor %}'\n"),
     {"s.jsonl": json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n"}, []),
    ("template file missing", _workload(NODES, "tatsu-lab/alpaca", "    chat_template: chat.jinja\n", SHIP), {},
     ["w.yaml:10:20: error: parameters.data.chat_template: no such file: {d}/chat.jinja (and the value is no Jinja "
      "template) (give the template's text, or a file in the code snapshot)"]),
    ("template file shipped", _workload(NODES, "tatsu-lab/alpaca", "    chat_template: chat.jinja\n", SHIP),
     {"chat.jinja": "{{ messages }}"}, []),
]


@pytest.mark.parametrize(("name", "workload", "files", "expected"), CASES, ids=[c[0] for c in CASES])
def test_validate_opens_the_local_dataset(tmp_path, name, workload, files, expected):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    wl = tmp_path / "w.yaml"
    wl.write_text(workload.replace("{d}", str(tmp_path)))
    got = [p.format().removeprefix(str(tmp_path) + "/") for p in validate_file(wl).problems
           if p.path.startswith(("parameters.dataset_name", "parameters.data"))]
    assert got == [e.replace("{d}", str(tmp_path)) for e in expected]


def test_the_cli_names_a_bad_column_and_exits_one(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"instruction": "x", "outptu": "y"}\n')
    wl = tmp_path / "w.yaml"
    wl.write_text(_workload(HERE, f"{tmp_path}/a.jsonl"))
    out = subprocess.run([FSDP_TUI, "validate", str(wl)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stdout.splitlines()[0].startswith(f"{wl}:6:17: error: parameters.dataset_name: {tmp_path}/a.jsonl: "
                                                 "cannot tell the format from columns [instruction, outptu]: for "
                                                 "alpaca, no column 'output' (did you mean 'outptu'?)")


MIXTURE = """experiment_name: d
{compute}parameters:
  model_name: builtin:tiny-llama
  output_dir: out
  datasets:
    - {{path: {d}/a.jsonl, weight: 2}}
    - path: {d}/b.jsonl
      weight: 1
      format: alpaca
    - {{path: {d}/nope.jsonl, weight: 1}}
    - {{path: org/hub-set, weight: 1, format: chat, chat_template: '{{% for m in messages %}}'}}
    - {{path: s3://bucket/c.jsonl, weight: 1}}
"""


def test_validate_opens_every_source_of_a_mixture_and_names_each_bad_one_at_its_line(tmp_path):
    (tmp_path / "a.jsonl").write_text(ALPACA)
    (tmp_path / "b.jsonl").write_text('{"instruction": "x", "outptu": "y"}\n')
    wl = tmp_path / "w.yaml"
    wl.write_text(MIXTURE.format(compute=HERE, d=tmp_path))
    got = [p.format().removeprefix(str(tmp_path) + "/") for p in validate_file(wl).problems
           if p.path.startswith("parameters.datasets")]
    assert got == [
        f"w.yaml:8:13: error: parameters.datasets[1].path: {tmp_path}/b.jsonl: no column 'output' (did you mean "
        "'outptu'?): the alpaca format needs instruction, output (columns: [instruction, outptu])",
        f"w.yaml:11:14: error: parameters.datasets[2].path: no such file or folder: {tmp_path}/nope.jsonl",
        "w.yaml:12:67: error: parameters.datasets[3].chat_template: not a valid Jinja template: Unexpected end of "
        "template. Jinja was looking for the following tags: 'endfor' or 'else'. The innermost block that needs to "
        "be closed is 'for'. (line 1 of the template)"]
    # on other nodes, an absolute path that is not here is theirs (the doctor looks there)
    wl.write_text(MIXTURE.format(compute=NODES, d=tmp_path))
    assert [p.path for p in validate_file(wl).problems if p.path.startswith("parameters.datasets")] == [
        "parameters.datasets[1].path", "parameters.datasets[3].chat_template"]
    # a mixture that contradicts itself is said once, at its key
    wl.write_text(MIXTURE.format(compute=HERE, d=tmp_path).replace("weight: 2", "weight: 2, epochs: 1"))
    assert [p.format().removeprefix(str(tmp_path) + "/") for p in validate_file(wl).problems if p.is_error] == [
        "w.yaml:7:7: error: parameters.datasets[0]: give weight or epochs, not both"]
