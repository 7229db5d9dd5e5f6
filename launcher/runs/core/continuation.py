"""What a run continues (another run's checkpoint), as its launch options keep it: light, so that the run's
record (:mod:`launcher.runs.core.layout`) reads it without the workload's models; the rules of continuing
are in :mod:`launcher.runs.core.continuing`."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.words import plural
from trainer.wire.ckpt_owner import nothing_left

OPTION = "continues"
"""The launch option (the run's ``options.json``) that records what the run continues."""
FRESH = "parameters.checkpoint.resume=never"
"""What ``--fresh`` sets."""
TRAINED_NOTHING = "trained nothing"
"""How the recorded end of a run that made no training step of its own begins (``runs`` and the app mark it)."""


@dataclass(frozen=True)
class Continuation:
    """The run a launch continues, from which of its checkpoints."""

    run_id: str
    name: str
    step: int
    max_steps: int | None = None
    """The new run's length (``parameters.max_steps``; ``None``: counted in epochs, not known here)."""
    auto: bool = False
    """Found by ``resume: auto`` in a shared folder (not named by a resume)."""

    @property
    def nothing_left(self) -> bool:
        return nothing_left(self.step, self.max_steps)

    def words(self) -> str:
        how = " (parameters.checkpoint.resume: auto found it)" if self.auto else ""
        return f"continues run {self.run_id} from step {self.step} ({self.name}){how}"

    def said(self) -> str:
        """What a run that continued this says once it ended (``runs``, ``show``, the monitor)."""
        return f"continued run {self.run_id} from step {self.step} ({self.name})"

    def refusal(self, where: str) -> str:
        """Why a launch that would continue this is refused, and the ways on."""
        further = f"--set parameters.max_steps={self.step + max(self.max_steps or 0, 1)}"
        if not self.auto:
            return (f"run {self.run_id}'s checkpoint {self.name} in {where} is its step {self.step}, and the run is "
                    f"{plural(self.max_steps or 0, 'step')} long: nothing left to train; train further: fsdp-tui resume "
                    f"{self.run_id} --from {self.step} {further}")
        return (f"parameters.checkpoint.resume: auto would continue run {self.run_id} from its checkpoint "
                f"{self.name} (step {self.step}) in {where}, and this run is {plural(self.max_steps or 0, 'step')} long: nothing "
                f"left to train. Start afresh: --fresh (sets {FRESH}), or train further: {further}")

    def to_option(self) -> dict:
        return {"run": self.run_id, "name": self.name, "step": self.step, "auto": self.auto}

    @classmethod
    def from_option(cls, data: object) -> Continuation | None:
        if not isinstance(data, dict):
            return None
        run, name, step = data.get("run"), data.get("name"), data.get("step")
        if not (isinstance(run, str) and isinstance(name, str) and isinstance(step, int)):
            return None
        return cls(run, name, step, auto=data.get("auto") is True)
