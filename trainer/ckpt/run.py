"""A run's checkpoints as one part: the checkpointer, the state it saves and loads (weights, optimiser,
schedule, :class:`trainer.loop.state.TrainState`) and the proof that a resume continued the run. The
steps ask it to save (:class:`trainer.loop.parts.Saves`); the job asks it to resume, where a loaded
checkpoint is fitted to this run: its steps, data position and learning-rate curve when the run resumes
with another world size or batch, and whether anything is left to train."""

from __future__ import annotations

from trainer.ckpt.checkpoint import AppState, Checkpointer
from trainer.ckpt.resume_facts import ResumeWatch
from trainer.data.rows import GlobalOrder
from trainer.loop import optim
from trainer.loop.state import TrainState


class Checkpoints:
    """Saves and resumes of one run's :class:`AppState`, each save recording what its resume must continue."""

    def __init__(self, ckpt: Checkpointer, app: AppState, state: TrainState, proof: ResumeWatch) -> None:
        self.ckpt, self.app, self.state, self.proof = ckpt, app, state, proof
        ckpt.resume_facts = lambda: proof.record(state)  # what a save records, as of its step

    @property
    def saved_step(self) -> int | None:
        return self.ckpt.saved_step

    def save(self, step: int) -> float:
        return self.ckpt.save(self.app, step)

    def save_once(self, step: int) -> None:
        self.ckpt.save_once(self.app, step)

    def wait_staged(self) -> tuple[float, float] | None:
        return self.ckpt.wait_staged()

    def close(self) -> None:
        self.ckpt.close()

    def resume(self, order: GlobalOrder, max_steps: int | None, is_main: bool) -> bool:
        """Load the checkpoint a resume asks for (none: nothing happens) and fit the state to this run; the
        proof learns where the run stood. ``True`` when the checkpoint already holds every step (a finished
        run started again): nothing is left to train."""
        path = self.ckpt.resume_path()
        if path is None:
            return False
        state, total = self.state, self.state.total_steps
        self.ckpt.load(self.app, path)
        order.fit(state.data)
        if not max_steps and state.total_steps != total:
            # Another world size: the same share of the data done, the same point of the LR curve.
            state.step = state.step * total // state.total_steps
            optim.move_schedule(self.app.scheduler, state.step)
        state.total_steps = total
        self.proof.resumed(self.ckpt.loaded_meta, state)
        if is_main:
            print(f"resumed from {path} at step {state.step}", flush=True)
        if state.step < total:
            return False
        if is_main:  # its checkpoint and export are there
            print(f"nothing to train: {path} is step {state.step} of {total}; nothing is written "
                  "(raise max_steps or num_epochs to train further)", flush=True)
        return True
