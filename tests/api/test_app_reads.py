"""What the app reads through the door: a run's metric records since an offset (each line once; a line still
being written waits for the next call), where a run's files are before it is deleted, a kept interconnect
test in one line."""

from __future__ import annotations

import pytest

from launcher.api import Client
from launcher.api.nettests import NettestRecord, Nettests
from launcher.api.runs import RunNotFound
from launcher.events import RunState
from launcher.present.run_files import folder_line
from tests.support.nettest import result
from tests.support.tui import RecordedRun, record

RUN = RecordedRun("20260301-0900-exp-a1f3", "exp", RunState.SUCCEEDED, 2, 0, 60)


def test_metric_records_come_once_each_and_a_half_written_line_waits(tmp_path):
    home = tmp_path / "home"
    record(home, RUN)
    runs = Client(home).runs
    assert runs.metrics_since(RUN.run_id, 7) == ([], 7), "no metrics yet: nothing, and the same offset"
    path = runs.metrics_file(RUN.run_id)
    path.write_text('{"step": 1, "loss": 2.0}\nnot a record\n{"step": 2, "lo')
    records, offset = runs.metrics_since(RUN.run_id)
    assert [(r.step, r.loss) for r in records] == [(1, 2.0)]
    assert runs.metrics_since(RUN.run_id, offset) == ([], offset)
    with path.open("a") as f:
        f.write('ss": 1.5}\n')
    records, end = runs.metrics_since(RUN.run_id, offset)
    assert [(r.step, r.loss) for r in records] == [(2, 1.5)] and end == path.stat().st_size
    with pytest.raises(RunNotFound):
        runs.metrics_since("20260301-0000-none-0000")


def test_a_runs_folders_are_named_until_they_are_cleaned(tmp_path):
    home = tmp_path / "home"
    directory = record(home, RUN)
    files = Client(home).run_files
    assert files.folders("20260301-0000-none-0000") == []
    here = home / "nodes" / RUN.run_id
    (here / "node-0").mkdir(parents=True)
    (here / "node-0" / "weights.bin").write_bytes(b"\0" * 2048)
    said = [folder_line(f) for f in files.folders(RUN.run_id)]
    assert said[0] == f"here: {here} (2.0 KiB: checkpoints, exports, outputs)"
    assert [line.split(":")[0] for line in said[1:]] == ["node 0 (gpu-a)", "node 1 (gpu-b)"]
    stays = files.left_behind(RUN.run_id)
    assert [s.left for s in stays] == files.folders(RUN.run_id)
    assert stays[0].removal == f"rm -r {here}"
    (directory / "cleaned.json").write_text('{"at": 1.0}')
    assert files.folders(RUN.run_id) == [] and files.left_behind(RUN.run_id) == []


def test_a_kept_test_reads_in_one_line():
    from launcher.present.nettest import summary

    kept = NettestRecord.from_wire({"run_id": "t-1", "nodes": ["a", "b", "c"], "result": result(nnodes=3, local=1)})
    assert kept is not None and kept.measured is not None
    judged = Nettests.judge(kept.measured, kept.nodes)
    assert summary(judged) == "28.0 MB/s all-gather bus bandwidth over the whole world; slow node: node 2"
    assert judged.verdict_lines()[0].startswith("slow node: node 2 (c): ")
    unread = NettestRecord.from_wire({"run_id": "t-2", "nodes": ["a"], "result": "garbage"})
    assert unread is not None and unread.measured is None
