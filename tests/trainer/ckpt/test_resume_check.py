"""The resume check's rule (pure: no torch, no run) and its record on the wire, table-driven."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from trainer.ckpt.resume_check import ResumeFacts, compare, loss_jump
from trainer.wire.protocol import MetricRecord, ResumeCheck

FALLING = (10.4, 10.1, 9.5, 8.6, 7.7, 6.9)
"""A young run's losses: a steep fall (changes of ~0.3 to 0.9 a step)."""
FLAT = (2.01, 1.98, 2.03, 1.99, 2.02)
"""A converged run: changes of a few hundredths."""

SAVED = ResumeFacts(run_id="run-a", step=6, total_steps=12, epoch=0, samples_in_epoch=96, batch_rows=16,
                    next_batch="aaaa", world_size=2, sharding="full_shard", lr=0.002, losses=FALLING, seed=42,
                    data="d1", dataset="builtin:tiny-alpaca")
SAME = replace(SAVED, losses=())
"""What a healthy resume of ``SAVED`` on the same world size finds (a resume gathers no losses of its own)."""


@pytest.mark.parametrize(("first", "losses", "flagged"), [
    (6.2, FALLING, False),      # the fall goes on: one more change of the run's own size
    (6.9, FALLING, False),      # no change at all
    (9.9, FALLING, True),       # back up by 3: past 3 x the run's ~0.7 rms changes
    (2.05, FLAT, False),        # within the floor
    (2.4, FLAT, True),          # 0.38 from 2.02: past the 0.1 floor and 3 x ~0.04
    (1.95, FLAT, False),
    (4.0, (4.0, 4.0, 4.0), False),  # no noise at all: the floor still allows a healthy step
    (4.2, (4.0, 4.0, 4.0), True),
])
def test_loss_jump_against_the_runs_own_noise(first, losses, flagged):
    said = loss_jump(first, losses)
    assert (said is not None) == flagged, said
    if flagged:
        assert said.startswith(f"loss: {first:.4g} at the first step, {losses[-1]:.4g} before the stop")


CASES = [
    # name, now (changes to SAME), first loss, verdict, words that must be in what differs
    ("healthy", {}, 6.3, "verified", []),
    # another run's checkpoint: named, and judged by what it recorded
    ("another run's checkpoint of the same workload", {"run_id": "run-b"}, 6.3, "verified", []),
    ("another run's checkpoint, other data", {"run_id": "run-b", "data": "d2", "next_batch": "x"}, 6.3, "differs",
     ["data: not the rows the checkpoint trained on (the same dataset builtin:tiny-alpaca, other rows"]),
    ("another run's checkpoint, another trajectory", {"run_id": "run-b"}, 3.1, "differs", ["loss: 3.1 at the first"]),
    ("another seed", {"seed": 7, "next_batch": "bbbb"}, 6.3, "differs",
     ["seed: 42 in the checkpoint, 7 now", "next batch: not the rows"]),
    ("other data", {"data": "d2", "dataset": "mine.jsonl", "next_batch": "cccc"}, 6.3, "differs",
     ["data: not the rows the checkpoint trained on (builtin:tiny-alpaca then, mine.jsonl now)"]),
    ("lr", {"lr": 0.003}, 6.3, "differs", ["learning rate: 0.002 recorded for the next step, 0.003 now"]),
    ("lr within tolerance", {"lr": 0.002 * (1 + 1e-9)}, 6.3, "verified", []),
    ("loss jump", {}, 9.8, "differs", ["loss: 9.8 at the first step"]),
    ("step", {"step": 5}, 6.3, "differs", ["step: the checkpoint is step 6, the run continues at step 5"]),
    ("position", {"samples_in_epoch": 80}, 6.3, "differs",
     ["data position: epoch 0 sample 96 in the checkpoint, epoch 0 sample 80 now"]),
    ("one rank, same step size", {"world_size": 1, "sharding": "no_shard"}, 6.3, "resharded", []),
    # 2 ranks x 8 -> 3 ranks x 8: 96 rows done, rounded down to 4 steps of 24 rows; the hash is not comparable
    ("three ranks", {"world_size": 3, "batch_rows": 24, "samples_in_epoch": 96, "next_batch": "zzzz"}, 6.3,
     "resharded", []),
    ("three ranks, position lost", {"world_size": 3, "batch_rows": 24, "samples_in_epoch": 48,
                                    "next_batch": "zzzz"}, 6.3, "differs", ["data position"]),
    ("sharding only", {"sharding": "shard_grad_op"}, 6.3, "resharded", []),
    ("schedule stretched", {"world_size": 1, "batch_rows": 8, "total_steps": 24, "step": 12, "lr": 0.0025,
                            "samples_in_epoch": 96, "next_batch": "zzzz", "epoch_counted": True}, 6.3,
     "resharded", []),
    ("schedule stretched, step wrong", {"world_size": 1, "batch_rows": 8, "total_steps": 24, "step": 6,
                                        "samples_in_epoch": 96, "epoch_counted": True}, 6.3, "differs",
     ["step: the checkpoint is step 6 (12 of 24 on this world size), the run continues at step 6"]),
    # max_steps raised: the same step goes on, on a longer schedule (its learning rate is not comparable)
    ("max_steps raised", {"total_steps": 20, "lr": 0.0027, "epoch_counted": False}, 6.3, "verified", []),
]


@pytest.mark.parametrize(("name", "change", "first", "verdict", "words"), CASES, ids=[c[0] for c in CASES])
def test_compare(name, change, first, verdict, words):
    check = compare(SAVED, replace(SAME, **change), first)
    assert check.verdict == verdict, check.words()
    for w in words:
        assert any(w in d for d in check.differs), (w, check.differs)
    if verdict != "differs":
        assert not check.differs
    if verdict == "verified" and "total_steps" not in change:
        assert set(check.checked) == {"step", "seed", "data", "next batch", "data position", "learning rate", "loss"}
    assert (check.from_step, check.from_run, check.world_before) == (6, "run-a", 2)


@pytest.mark.parametrize(("writer", "continues", "verdict", "said"), [
    ("run-a", ("run-a",), "verified", None),                  # resume RUN: RUN's own checkpoint
    ("run-z", ("run-a", "run-z"), "verified", None),          # RUN had resumed run-z and not saved since
    ("run-b", ("run-a", "run-z"), "differs",                  # swapped: a checkpoint another run wrote
     "checkpoint's run: written by run run-b, not by the run this resume continues (run-a, run-z)"),
    ("run-b", (), "verified", None),                          # no claim: a shared output_dir, on purpose
    (None, ("run-a",), "verified", None),                     # an older checkpoint names no run: not checked
])
def test_a_resume_claims_the_runs_it_continues(writer, continues, verdict, said):
    check = compare(replace(SAVED, run_id=writer), SAME, 6.3, continues)
    assert check.verdict == verdict and (said in check.differs if said else not check.differs), check.differs
    assert ("checkpoint's run" in check.checked) == bool(continues and writer and not said), check.checked
    assert ("checkpoint's run" in check.not_checked) == bool(continues and not writer)


def test_an_older_checkpoint_is_not_checked_rather_than_failed():
    older = {"model_name": "m", "step": 6, "world_size": 2, "run_id": "run-a", "shards": {}}  # no "resume"
    check = compare(ResumeFacts.from_meta(older), SAME, 6.3)
    assert check.verdict == "unchecked" and not check.differs
    assert {"step", "seed", "data", "next batch", "data position", "learning rate", "loss"} <= set(check.not_checked)
    assert "the checkpoint records nothing to check" in check.words()
    # Some fields of the wrong type (a hand-edited file), one loss only: those are unknown, the rest checked.
    partial = {"resume": {"step": "6", "seed": 42, "losses": [7.0], "lr": "x", "data": "d1"}}
    check = compare(ResumeFacts.from_meta(partial), SAME, 6.3)
    assert check.verdict == "verified" and set(check.checked) == {"seed", "data"}
    assert {"step", "loss", "learning rate"} <= set(check.not_checked)
    assert compare(ResumeFacts.from_meta(None), SAME, None).verdict == "unchecked"


def test_facts_round_trip_through_meta_json():
    meta = json.loads(json.dumps({"run_id": "run-a", "world_size": 2, "resume": SAVED.to_dict()}))
    assert ResumeFacts.from_meta(meta) == SAVED


def test_the_record_round_trips_and_its_reader_is_tolerant():
    check = compare(SAVED, replace(SAME, seed=7), 6.3)
    line = check.record().to_json()
    back = ResumeCheck.from_record(MetricRecord.from_json(line))
    assert back == check
    assert back.words().startswith("differs at step 6 (from step 6 of run run-a): seed: 42 in the checkpoint, 7 now")
    # A newer trainer's extra field and verdict are carried; an older one's missing fields are unknown.
    newer = json.loads(line) | {"verdict": "replayed", "hint": "x"}
    assert ResumeCheck.from_record(MetricRecord.from_dict(newer)).verdict == "replayed"
    older = ResumeCheck.from_record(MetricRecord.from_dict({"step": 3, "kind": "resume_check", "verdict": "verified"}))
    assert older == ResumeCheck(verdict="verified", step=3)
    assert older.words() == "verified: the checkpoint records nothing to check"
    # What a node sends is untrusted: no verdict, junk types and control characters.
    assert ResumeCheck.from_record(MetricRecord.from_dict({"step": 3, "kind": "resume_check"})) is None
    assert ResumeCheck.from_record(MetricRecord.from_dict({"step": 3, "kind": "resume_check",
                                                           "verdict": "rm -rf /"})) is None
    hostile = ResumeCheck.from_record(MetricRecord.from_dict({
        "step": 3, "kind": "resume_check", "verdict": "differs", "differs": ["a\x1b[31mb", 5, "x" * 5000],
        "world_before": "2", "from_run": "\x07r"}))
    assert hostile.differs == ("a?[31mb", "x" * 400) and hostile.world_before is None and hostile.from_run == "?r"
    assert ResumeCheck.from_record(MetricRecord(step=1)) is None


def test_a_longer_schedule_says_why_the_learning_rate_is_not_checked():
    check = compare(SAVED, replace(SAME, total_steps=20, lr=0.0027, epoch_counted=False), 6.3)
    assert check.not_checked == ("learning rate (the schedule is 20 steps now, 12 then)",)
    assert "step" in check.checked


def test_resharded_words_say_both_sides():
    check = compare(SAVED, replace(SAME, world_size=1, sharding="no_shard"), 6.3)
    assert check.words().startswith("resharded at step 6 (from step 6 of run run-a), 2 ranks full_shard -> "
                                     "1 rank no_shard: checked step, seed, data, next batch")
