"""Run events on the wire (``run --json``, the owner's events file): the typed triage and swap they carry are
written exactly as the run's ``triage.json`` and ``swaps.json`` keep them, and read back as the same values;
events older versions stored read as theirs."""

from __future__ import annotations

import json

from launcher.events import NodeSwapped, RunFinished, RunState, event_from_dict, event_to_dict
from launcher.events.swaps import Swap
from launcher.events.triage import TriageReport
from launcher.runs.core.swaps import settled

TRIAGE = TriageReport(node_rank=1, rank=9, exit_code=1, signature="oom", line_no=4242, excerpt="CUDA out of memory",
                      consequence="node 0: reset", slow_ranks=("rank 3 slow",))
SWAP = settled(Swap(1, "spare", 1, "gpu-07", "node 1 (gpu-07): lost", "lost", 1000.5, 2, 1840, "gpu-11",
                    ("gpu-12: doctor",), 1800, hosts_after=("gpu-00", "gpu-11"), log_shift={1: 300},
                    stream_shift={"metrics.jsonl": 12}), 1094.25, 1801, "verified")

FINISHED_LINE = (
    '{"type": "RunFinished", "run_id": "r", "state": "failed", "exit_code": 1, "triage": {"node_rank": 1, "rank": 9, '
    '"exit_code": 1, "signature": "oom", "line_no": 4242, "excerpt": "CUDA out of memory", "summary": "node 1 rank 9: '
    'oom, exit code 1: CUDA out of memory", "consequence": "node 0: reset", "slow_ranks": ["rank 3 slow"]}}')
SWAPPED_LINE = (
    '{"type": "NodeSwapped", "run_id": "r", "swap": {"number": 1, "kind": "spare", "node_rank": 1, "failed_host": '
    '"gpu-07", "why": "node 1 (gpu-07): lost", "signature": "lost", "failed_at": 1000.5, "attempt": 2, "failed_step": '
    '1840, "replacement": "gpu-11", "skipped": ["gpu-12: doctor"], "checkpoint_step": 1800, "checkpoint_note": "", '
    '"batch": "", "resumed_at": 1094.25, "resumed_step": 1801, "verdict": "verified", "differs": [], "loss_note": "", '
    '"hosts_after": ["gpu-00", "gpu-11"], "log_shift": {"1": 300}, "stream_shift": {"metrics.jsonl": 12}, '
    '"seconds": 93.75, "steps_lost": 40, "recovered": true, "text": "node 1 (gpu-07) lost at step 1,840; replaced by '
    'gpu-11; resumed verified at step 1,800 after 94 s"}}')
"""The lines as the events were written when they carried the record's dicts themselves: the same bytes now."""


def test_the_typed_triage_and_swap_go_on_the_wire_as_their_records_keep_them_and_come_back_the_same():
    finished, swapped = RunFinished("r", RunState.FAILED, 1, TRIAGE), NodeSwapped("r", SWAP)
    assert json.dumps(event_to_dict(finished)) == FINISHED_LINE
    assert json.dumps(event_to_dict(swapped)) == SWAPPED_LINE
    assert event_to_dict(finished)["triage"] == TRIAGE.to_dict() and event_to_dict(swapped)["swap"] == SWAP.to_dict()
    assert event_from_dict(json.loads(FINISHED_LINE)) == finished
    assert event_from_dict(json.loads(SWAPPED_LINE)) == swapped
    ended = RunFinished("r", RunState.SUCCEEDED, 0, None)
    assert json.dumps(event_to_dict(ended)) == '{"type": "RunFinished", "run_id": "r", "state": "succeeded", "exit_code": 0, "triage": null}'
    assert event_from_dict(event_to_dict(ended)) == ended


def test_events_older_versions_stored_are_read_as_typed_values():
    # A triage written by hand or by an older version: only some keys, its summary in its own words.
    old = {"type": "RunFinished", "run_id": "r", "state": "failed", "exit_code": 1, "at": 5.0,
           "triage": {"summary": "node 2 rank 4: python_error, exit code 1: ValueError: boom", "node_rank": 2}}
    event = event_from_dict(old)
    assert isinstance(event, RunFinished) and event.triage is not None
    assert (event.triage.node_rank, event.triage.summary) == (2, "node 2 rank 4: python_error, exit code 1: ValueError: boom")
    assert event_from_dict({"type": "RunFinished", "run_id": "r", "state": "cancelled"}) == RunFinished("r", RunState.CANCELLED)
    # A swap this version cannot read is no event; one of the fields it knows reads as those.
    assert event_from_dict({"type": "NodeSwapped", "run_id": "r", "swap": {"kind": "teleport"}}) is None
    minimal = {"number": 1, "kind": "shrink", "node_rank": 0, "failed_at": 3.0, "attempt": 2}
    event = event_from_dict({"type": "NodeSwapped", "run_id": "r", "swap": minimal})
    assert isinstance(event, NodeSwapped) and (event.swap.kind, event.swap.hosts_after, event.swap.settled) == ("shrink", (), False)
