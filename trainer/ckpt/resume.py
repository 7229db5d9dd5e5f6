"""A checkpoint loaded into this run's state: where its steps, data position and learning-rate curve stand
when the run resumes with another world size or batch, and whether anything is left to train."""

from __future__ import annotations

from typing import Any

from trainer.data.rows import GlobalOrder
from trainer.loop import optim


def resume(ckpt, app, state: dict[str, Any], order: GlobalOrder, total: int, max_steps: int, scheduler,
           proof, is_main: bool) -> bool:
    """Load the checkpoint a resume asks for (none: nothing happens) into ``app`` and fit ``state`` to this
    run; ``proof`` (a :class:`trainer.ckpt.resume_facts.ResumeWatch`) learns where the run stood. ``True``
    when the checkpoint already holds every step (a finished run started again): nothing is left to train."""
    path = ckpt.resume_path()
    if path is None:
        return False
    ckpt.load(app, path)
    order.fit(state)
    if not max_steps and state.get("total_steps", total) != total:
        # Another world size: the same share of the data done, the same point of the LR curve.
        state["step"] = state["step"] * total // state["total_steps"]
        optim.move_schedule(scheduler, state["step"])
    state["total_steps"] = total
    proof.resumed(ckpt.loaded_meta, state)
    if is_main:
        print(f"resumed from {path} at step {state['step']}", flush=True)
    if state["step"] < total:
        return False
    if is_main:  # its checkpoint and export are there
        print(f"nothing to train: {path} is step {state['step']} of {total}; nothing is written "
              "(raise max_steps or num_epochs to train further)", flush=True)
    return True
