"""What a launch continues, said before it starts: ``resume: auto`` in a fixed ``output_dir`` finding another
run's checkpoint (the run's lineage then names it), refused when nothing is left to train (``--fresh``
starts afresh), and a run that trained nothing is never a bare ``succeeded``. The folder is listed by the
real agent on this machine."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from launcher.runs.core.continuing import (
    Continuation,
    continued_by,
    recorded,
    trained_nothing,
    with_lineage,
)
from launcher.runs.launch_checks import continuation_of
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from trainer.wire.ckpt_layout import CheckpointInfo

DEMO = ("experiment_name: demo\ncompute: {{accelerator_type: CPU, procs_per_node: 1, num_accelerators: 1}}\n"
        "parameters:\n  model_name: builtin:tiny-llama\n  dataset_name: builtin:tiny-alpaca\n"
        "  output_dir: '{out}'\n  max_steps: {steps}\n  checkpoint: {{resume: {resume}}}\n")


def _plan(out, steps: int = 60, resume: str = "auto", run_id: str = "run-b"):
    result = validate_text(DEMO.format(out=out, steps=steps, resume=resume), "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id=run_id, node_root="/tmp/nodes-continuing")


def _ck(step: int, run_id: str | None, complete: bool = True) -> CheckpointInfo:
    return CheckpointInfo(step, f"/o/checkpoints/step-{step:08d}", complete, 1, 0.0, run_id=run_id)


@pytest.mark.parametrize("listed, steps, found, left", [
    ([_ck(30, "run-a"), _ck(60, "run-a")], 60, ("run-a", 60), True),  # the finding: a relaunch of a finished run
    ([_ck(30, "run-a")], 60, ("run-a", 30), False),  # a run cancelled half way: continued, said
    ([_ck(30, "run-a"), _ck(60, "run-a", complete=False)], 60, ("run-a", 30), False),
    ([_ck(60, "run-b")], 60, None, False),  # its own (a retry): nothing to say
    ([_ck(60, None)], 60, None, False),  # names no run: the trainer reads none of those
    ([], 60, None, False),
])
def test_what_resume_auto_would_continue(listed, steps, found, left):
    cont = continued_by(_plan("/data/out", steps), listed)
    assert (None if cont is None else (cont.run_id, cont.step)) == found
    assert (cont is not None and cont.nothing_left) == left


def test_a_continuation_is_said_refused_and_recorded_in_words_a_user_acts_on(tmp_path):
    cont = Continuation("run-a", "step-00000060", 60, 60, auto=True)
    said = cont.refusal("/data/out on this machine")
    assert said.startswith("parameters.checkpoint.resume: auto would continue run run-a from its checkpoint "
                           "step-00000060 (step 60) in /data/out on this machine, and this run is 60 steps long: "
                           "nothing left to train.")
    assert "--fresh (sets parameters.checkpoint.resume=never)" in said and "--set parameters.max_steps=120" in said
    assert cont.words() == "continues run run-a from step 60 (step-00000060) (parameters.checkpoint.resume: auto found it)"
    (tmp_path / "options.json").write_text(json.dumps({"continues": cont.to_option()}))
    assert recorded(tmp_path) == Continuation("run-a", "step-00000060", 60, auto=True)  # the run's own length aside
    assert trained_nothing(tmp_path, 60) == ("trained nothing: it continued run run-a at its step 60 (step-00000060), "
                                            "and the run is 60 steps long: nothing left to train")
    assert trained_nothing(tmp_path / "none", None) == "trained nothing: its job ended before a training step"


def test_the_lineage_a_continuation_gives_the_plan(tmp_path):
    plan = with_lineage(_plan("/data/out"), ["run-a", "run-0"])
    assert plan.workload.parameters["checkpoint"]["resume_runs"] == ["run-a", "run-0"]
    assert plan.run_id == "run-b" and "resume_runs:\n  - run-a\n  - run-0" in plan.parameters_yaml


def test_the_folder_is_asked_of_node_0_as_the_job_will_see_it(tmp_path):
    out = tmp_path / "out"
    for step in (30, 60):
        folder = out / "checkpoints" / f"step-{step:08d}"
        folder.mkdir(parents=True)
        (folder / ".metadata").write_bytes(b"m")
        (folder / "meta.json").write_text(json.dumps({"step": step, "run_id": "run-a"}))
    cont = asyncio.run(continuation_of(_plan(out)))
    assert cont is not None and (cont.run_id, cont.name, cont.nothing_left) == ("run-a", "step-00000060", True)
    assert asyncio.run(continuation_of(_plan(out, resume="never"))) is None  # --fresh
    assert asyncio.run(continuation_of(_plan("outputs"))) is None  # a folder of its own: nothing of another's
    assert asyncio.run(continuation_of(_plan(out, steps=100))).nothing_left is False


def test_a_run_that_trained_nothing_is_never_a_bare_success(tmp_path):
    from launcher.runs.owner.recorder import Recorder

    assert Recorder.trained.__doc__  # what the owner asks at the end: any training step recorded
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "kind": "data"}) + "\n")

    class Rec:
        last_train_step = None
        dir = tmp_path

        def records(self):
            from launcher.runs.core.layout import read_records

            return read_records(Path(tmp_path) / "metrics.jsonl")

    assert Recorder.trained(Rec()) is False
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "kind": "train", "loss": 2.0}) + "\n")
    assert Recorder.trained(Rec()) is True


def test_a_launch_asks_what_it_continues_while_the_nodes_are_checked(tmp_path, monkeypatch):
    """Both questions a launch asks the nodes before the record are in flight together: the checks here wait
    until the checkpoint listing has begun, which a launch asking one after the other never sees."""
    from launcher.runs import launch_checks

    listing = asyncio.Event()
    found = Continuation("run-a", "step-00000030", 30, 60, auto=True)

    async def checks(plan, home, *, force=False):
        await asyncio.wait_for(listing.wait(), 30)
        return [], True

    async def continuation(plan):
        listing.set()
        return found

    monkeypatch.setattr(launch_checks, "launch_refusals", checks)
    monkeypatch.setattr(launch_checks, "continuation_of", continuation)
    plan = _plan(tmp_path / "o")
    assert asyncio.run(launch_checks.before_record(plan, tmp_path)) == ([], True, found)
    known = Continuation("run-z", "step-00000010", 10, 60, auto=False)  # a resume says it: nothing asked
    listing.clear()
    monkeypatch.setattr(launch_checks, "launch_refusals", lambda plan, home, force=False: _answer([], False))
    assert asyncio.run(launch_checks.before_record(plan, tmp_path, continues=known)) == ([], False, known)
    assert not listing.is_set()


async def _answer(said, checked):
    return said, checked


def test_the_lineage_of_a_recorded_run_is_read_from_its_plan_as_recorded(tmp_path, monkeypatch):
    import launcher.workload.plan as plan_module
    from launcher.paths import run_dir
    from launcher.runs.core.continuing import lineage_runs
    from launcher.runs.core.layout import save_plan

    directory = run_dir(tmp_path, "run-b")
    directory.mkdir(parents=True)
    save_plan(directory, with_lineage(_plan("/data/out"), ["run-a", "run-b", "run-0"]))
    monkeypatch.setattr(plan_module, "plan_from_json", lambda data: pytest.fail("the plan was validated again"))
    assert lineage_runs(tmp_path, "run-b") == ["run-b", "run-a", "run-0"]
    assert lineage_runs(tmp_path, "run-none") == ["run-none"]  # no plan on record: itself alone
