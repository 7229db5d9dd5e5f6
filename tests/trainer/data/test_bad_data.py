"""Bad data through the real trainer on 2 ranks (torchrun, gloo): each file stops every rank with one line
naming the file, the row's line and the ``parameters.`` key, no traceback; triage calls it ``data``."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from launcher.runs.core.triage import classify_line, triage_run
from tests.support.trainer.run import HERE, ROOT, tiny_params, torchrun_argv, trainer_env

pytestmark = pytest.mark.slow

ROW = {"instruction": "Say it.", "input": "", "output": "it"}
GOOD = "".join(json.dumps(ROW) + "\n" for _ in range(30))
BAD = {
    "gap.jsonl": (GOOD + '{"instruction": "x"}\n').encode(),
    "latin1.jsonl": GOOD.encode() + '{"instruction": "caf\u00e9", "output": "x"}\n'.encode("latin-1"),
    "answers.csv": b'context,question,answers\n"P is Q.",What is P?,"{""text"": [Q]}"\n',
    "empty.jsonl": b"",
    "nowhere.jsonl": None,
}
SAID = {
    "gap.jsonl": "{p}:31: parameters.dataset_name: row has no 'output'; the alpaca format needs instruction, output",
    "latin1.jsonl": "{p}:31: parameters.dataset_name: not UTF-8 text: byte 0xe9 at column 21 (save the file as UTF-8)",
    "answers.csv": "{p}:2: parameters.dataset_name: 'answers' is text that looks like JSON but is not: Expecting value "
                   "(column 11 of the cell)",
    "empty.jsonl": "{p}: parameters.dataset_name: the file has no rows",
    "nowhere.jsonl": "{p}: parameters.dataset_name: no such file on this node (a local path: it must be here, or on "
                     "storage every node sees)",
}


def test_bad_files_stop_every_rank_with_one_line_and_triage_calls_it_data(tmp_path):
    paths = []
    for name, content in BAD.items():
        data = tmp_path / name
        if content is not None:
            data.write_bytes(content)
        params = tmp_path / f"{name}.params.yaml"
        params.write_text(yaml.safe_dump(tiny_params(tmp_path / "out", dataset_name=str(data), max_steps=1)))
        paths.append(params)
    # Every file through the trainer's entry in the same two processes (one start-up for all of them); the
    # last one ends them as `python -m trainer` ends.
    out = subprocess.run(torchrun_argv(2, str(HERE / "bad_data_worker.py"), *map(str, paths)),
                         cwd=ROOT, env=trainer_env(tmp_path), capture_output=True, text=True, timeout=300)
    names = list(BAD)
    refused = sorted(line.split(" ", 3)[1:] for line in out.stdout.splitlines() if line.startswith("REFUSED "))
    expected = sorted([str(i), str(rank), SAID[name].format(p=tmp_path / name)]
                      for i, name in enumerate(names[:-1]) for rank in (0, 1))
    assert refused == expected, out.stdout[-3000:] + out.stderr[-3000:]
    assert all(classify_line(message).kind == "data" for _, _, message in refused)
    assert "TRAINED" not in out.stdout

    last = SAID[names[-1]].format(p=tmp_path / names[-1])
    assert out.returncode != 0
    assert out.stderr.splitlines().count(last) == 2, out.stderr[-3000:]  # once from each rank
    # no traceback of ours on any rank: torchrun's own report of a failed child is all else there is
    ours = [x for x in out.stderr.splitlines() if f'File "{ROOT}/trainer' in x or f'File "{ROOT}/tests' in x
            or x.startswith("[rank")]
    assert not ours, ours
    report = triage_run({0: out.stdout + out.stderr}, {0: out.returncode})
    assert (report.signature, report.excerpt) == ("data", last)
