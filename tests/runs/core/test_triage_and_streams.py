"""Pure pieces of the launcher, table-driven: triage, line splitting, log metrics, the run view."""

import os

import pytest

from launcher.events import MetricsRecorded, NodeLines, RunState, RunStateChanged
from launcher.runs.core.streams import LineSplitter, LogMetrics
from launcher.runs.core.triage import classify_line, gone_report, lost_first, triage_run
from launcher.runs.read.view import RunView
from launcher.workload.model import DEFAULT_METRICS_PATTERN
from trainer.wire.protocol import MetricRecord, RankMemory


@pytest.mark.parametrize("line, kind", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
    ("[rank3]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(...)", "nccl_timeout"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "rendezvous_timeout"),
    ("[rank1]: ValueError: learning rate must be positive", "python_error"),
    ("  exitcode  : -9 (pid: 1234)", "killed"),
    ("fsdp-tui: pip install for environment.dependencies failed (exit 1); the job did not start", "dependencies"),
    ("Requirement already satisfied: environment.dependencies", None),
    ("step=3/10 loss=1.0", None),
    ("[rank0]: /runs/a/params.yaml: parameters.learning_rate: Input should be greater than 0", "settings"),
    ("parameters.data.packing: this model cannot take packed rows; set data.packing: false", "settings"),
    ("/data/a.jsonl: parameters.per_device_batch_size: 5 training rows cannot fill one global batch", "settings"),
    ("parameters.learning_rate: 0.001", None),  # a value echoed, not a refusal
    # a problem in the data itself: the file and its line, the dataset_name key
    ("/data/a.jsonl:7: parameters.dataset_name: row has no 'output'; the alpaca format needs instruction, output",
     "data"),
    ("[rank1]: /data/a.parquet: parameters.dataset_name: row 3: 'answers' is empty", "data"),
    ("/data/a.jsonl: parameters.dataset_name: no such file on this node", "data"),
    # the trainer's stop on a non-finite loss; a step it skipped or trained on is no failure
    ("[rank1]: loss is NaN at step 7 on rank 3: training stopped (training.on_nan: stop); the last checkpoint "
     "before it is step 5", "nonfinite_loss"),
    ("loss is inf at step 12 on rank 0 (first seen here: losses are read every 10 steps, logging.every_steps): "
     "training stopped (training.on_nan: stop); no checkpoint was saved before it", "nonfinite_loss"),
    ("the largest weight is -inf at step 4 on rank 2: training stopped (training.on_nan: stop); no checkpoint "
     "was saved before it", "nonfinite_loss"),
    ("loss is NaN at step 3 on rank 1: the step's update was skipped (training.on_nan: skip_step)", None),
    ("loss is NaN at step 2 on rank 0: training goes on (training.on_nan: continue); every later loss and "
     "checkpoint follows from it", None),
])
def test_classify_line(line, kind):
    sig = classify_line(line)
    assert (sig.kind if sig else None) == kind


def test_triage_blames_the_first_failed_node_and_its_rank():
    logs = {
        0: "step=1\n[rank0]: RuntimeError: Connection closed by peer\n",
        1: "step=1\n[rank3]: torch.OutOfMemoryError: CUDA out of memory.\nrank: 3 (local_rank: 1)\n",
    }
    report = triage_run(logs, {0: None, 1: 1})
    assert (report.node_rank, report.rank, report.exit_code, report.signature) == (1, 3, 1, "oom")
    assert "node 1 rank 3: oom, exit code 1" in report.summary



def test_a_nan_stop_is_blamed_on_the_rank_the_trainer_names_before_torchruns_report_of_it():
    line = ("loss is NaN at step 7 on rank 3: training stopped (training.on_nan: stop); the last checkpoint "
            "before it is step 5")
    logs = {0: f"step=6/9 loss=2.1\n[rank0]: {line}\n",
            1: f"[rank3]: {line}\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
               "Root Cause (first observed failure):\n  rank      : 3 (local_rank: 1)\n"}
    report = triage_run(logs, {0: 1, 1: 1})
    assert (report.node_rank, report.rank, report.signature, report.summary) == (0, 3, "nonfinite_loss", line)
    assert "succeeded" not in report.summary


def test_a_node_lost_in_a_gather_is_named_before_the_connection_reset_it_set_off():
    logs = {0: "step=6/9 loss=2.1\n[rank0]: RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection reset "
               "by peer\nrank: 0 (local_rank: 0)\n", 1: "step=6/9\n"}
    from_logs = triage_run(logs, {0: 1, 1: None})
    assert (from_logs.node_rank, from_logs.signature) == (0, "python_error")  # what the logs alone blame
    words = "lost during the gather of checkpoint step-00000006: node 1 (gpu-b): lost: no connection for 120 s"
    report = lost_first(from_logs, {1: words}, {0: "gpu-a", 1: "gpu-b"})
    assert (report.node_rank, report.signature) == (1, "lost")
    assert report.summary == f"node 1 (gpu-b): {words}"
    assert report.consequence == from_logs.summary  # the reset on node 0, kept as what followed
    assert lost_first(from_logs, {}, {}) is from_logs  # no gather lost a node: the logs' verdict
    found = gone_report(from_logs, 0, "gpu-a", "lost: the machine restarted since its job started")
    assert lost_first(found, {1: words}, {1: "gpu-b"}) is found  # a node found without its job: named already


@pytest.mark.parametrize("code, signature", [(-9, "killed"), (137, "killed"), (-15, "killed"), (1, None), (3, None)])
def test_a_silent_death_by_signal_is_triaged_as_killed(code, signature):
    report = triage_run({0: "tick\n", 1: "tick\n"}, {0: None, 1: code})
    assert (report.node_rank, report.signature) == (1, signature)
    if signature:
        assert "killed by SIG" in report.summary

def test_line_splitter_keeps_partial_lines_and_strips_ansi():
    s = LineSplitter()
    assert s.feed(b"a\nb") == ["a"]
    assert s.feed(b"c\n\x1b[31mred\x1b[0m\r\n") == ["bc", "red"]
    assert s.feed("é".encode()[:1]) == [] and s.feed("é".encode()[1:] + b"\n") == ["é"]


@pytest.mark.parametrize("line, step, max_steps, loss", [
    ("step=12/100 loss=1.2345", 12, 100, 1.2345),
    ("[rank0]: Step: 7 | loss: 2.5e-1", 7, None, 0.25),
    ("epoch 1 step 3/9 loss=nan", 3, 9, None),
    ("no metrics here", None, None, None),
])
def test_default_metrics_pattern(line, step, max_steps, loss):
    rec = LogMetrics(DEFAULT_METRICS_PATTERN).parse(line)
    if step is None:
        assert rec is None
        return
    assert (rec.step, rec.max_steps) == (step, max_steps)
    if loss is None:
        assert rec.loss != rec.loss  # nan
    else:
        assert rec.loss == pytest.approx(loss)


def test_run_view_tracks_progress_eta_memory_and_first_error():
    v = RunView("r")
    v.apply(RunStateChanged("r", RunState.RUNNING, 1), now=100.0)
    for step in (1, 2, 3):
        v.apply(MetricsRecorded("r", MetricRecord(step=step, max_steps=11, loss=5.0 - step, tokens_per_s=10.0,
                                                  memory=(RankMemory(0, peak_gib=3.0, total_gib=80.0),))),
                now=100.0 + step)
    assert list(v.loss) == [4.0, 3.0, 2.0] and v.step == 3
    assert v.eta_s(now=103.0) == pytest.approx(8.0)
    assert v.memory[0].used_gib == 3.0  # an older trainer's record: its peak
    card = RankMemory(0, allocated_gib=2.0, reserved_gib=4.0, peak_gib=3.0, total_gib=80.0, device_used_gib=7.5)
    assert card.used_gib == 7.5  # the card's use (context, NCCL, other processes too), not the tensors' peak
    assert RankMemory(0, rss_gib=1.5).used_gib == 1.5
    v.apply(NodeLines("r", 1, ("ok", "[rank2]: KeyError: 'x'"), 10))
    v.apply(NodeLines("r", 0, ("fine",) * 5 + ("RuntimeError: late",), 10))
    assert v.first_error() == (1, 1, "[rank2]: KeyError: 'x'")
    assert v.router_aux_loss is None
    moe = MetricRecord.from_json(MetricRecord(step=4, loss=1.5, router_aux_loss=2.03).to_json())
    assert moe is not None and moe.router_aux_loss == 2.03 and not moe.extra  # decoded as its own figure
    v.apply(MetricsRecorded("r", moe), now=104.0)
    assert v.router_aux_loss == 2.03 and list(v.loss)[-1] == 1.5  # beside the loss, never in it


def test_job_env_puts_the_shipped_trainer_first_and_keeps_the_nodes_search_path(monkeypatch):
    from launcher.backends.agent.jobs import job_env as _job_env

    spec = {"env": {"NODE_RANK": "1"}, "dir_env": {"PYTHONPATH": "trainer-pkg", "CODE_SOURCE_PATH": "code"},
            "secrets": {"TOKEN": "s3cret"}}
    monkeypatch.setenv("PYTHONPATH", "/opt/site")
    monkeypatch.setenv("SSH_CONNECTION", "10.0.0.1 22 10.0.0.2 22")
    env = _job_env("/n/0", spec)
    assert env["PYTHONPATH"] == f"/n/0/trainer-pkg{os.pathsep}/opt/site"
    assert env["CODE_SOURCE_PATH"] == "/n/0/code" and env["TOKEN"] == "s3cret" and env["NODE_RANK"] == "1"
    assert "SSH_CONNECTION" not in env
    monkeypatch.delenv("PYTHONPATH")
    assert _job_env("/n/0", spec)["PYTHONPATH"] == "/n/0/trainer-pkg"


def test_triage_names_the_rank_torchrun_calls_the_root_cause():
    log = """[rank2]: RuntimeError: bad value in batch
[rank3]: RuntimeError: Connection closed by peer
E1123 torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-23_12:00:01
  host      : node1
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 1234)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_12:00:00
  host      : node1
  rank      : 2 (local_rank: 0)
  exitcode  : 1 (pid: 1233)
============================================================
"""
    report = triage_run({0: "[rank0]: RuntimeError: Connection closed by peer\n", 1: log}, {0: 1, 1: 1})
    assert (report.node_rank, report.rank) == (0, 0)  # node 0 failed first in its own log: its own rank
    report = triage_run({0: "step=1\n", 1: log}, {0: None, 1: 1})
    assert (report.node_rank, report.rank, report.signature) == (1, 2, "python_error")
    assert "bad value in batch" in report.excerpt


def test_errors_and_triage_belong_to_the_last_attempt():
    from launcher.backends.agent.jobs import ATTEMPT_MARKER as AGENT_MARKER
    from launcher.events import ATTEMPT_MARKER, NodeLines, last_attempt

    assert AGENT_MARKER == ATTEMPT_MARKER  # the agent writes what the launcher looks for
    first = [f"{ATTEMPT_MARKER}1 of 2, started 2026-11-23 12:00:00 UTC ===", "RuntimeError: first failure"]
    second = [f"{ATTEMPT_MARKER}2 of 2, started 2026-11-23 12:01:00 UTC ===", "ok", "ValueError: second failure"]
    view = RunView("r")
    view.apply(NodeLines("r", 0, tuple(first), 0))
    assert view.first_error() == (0, 1, "RuntimeError: first failure")
    view.apply(NodeLines("r", 0, tuple(second), 0))
    assert view.first_error() == (0, 4, "ValueError: second failure")
    report = triage_run({0: last_attempt("\n".join(first + second))}, {0: 1})
    assert "second failure" in report.excerpt


def test_what_a_cancel_makes_the_job_print_is_no_error():
    view = RunView("r")
    view.apply(RunStateChanged("r", RunState.CANCELLING, 1))
    view.apply(NodeLines("r", 0, ("Traceback (most recent call last):", "KeyboardInterrupt: SIGTERM",
                                  "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got "
                                  "signal: 15"), 0))
    assert view.first_error() is None
