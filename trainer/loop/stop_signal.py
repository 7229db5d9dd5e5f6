"""Checkpoint and stop on SIGUSR1: a scheduler's warning that the job's time is nearly up (or that it is
about to be preempted), so the next job resumes from where this one got to.

Only when ``$FSDP_TUI_CHECKPOINT_ON_SIGNAL`` is ``1`` (the backend that sends the signal sets it): without
it nothing is installed and the loop pays nothing. The handler only sets a flag; at each step boundary the
ranks agree (MAX of a 0/1 scalar), so every rank stops at the same step even when the signal reaches the
ranks at slightly different moments, or only some of them.
"""

from __future__ import annotations

import os
import signal

from trainer.wire.protocol import CHECKPOINT_SIGNAL_ENV

SIGNAL = signal.SIGUSR1


class StopSignal:
    """Installs the handler at construction: early (this module imports no torch), so a signal during
    start-up (imports, model build, data loading) is kept for the first step boundary instead of killing
    the process (SIGUSR1's default)."""

    def __init__(self) -> None:
        self.received = False
        signal.signal(SIGNAL, self._handle)
        # Restart interrupted system calls: the signal must never surface as EINTR in a collective or a write.
        signal.siginterrupt(SIGNAL, False)

    def _handle(self, signum: int, frame) -> None:
        self.received = True

    def agreed(self) -> bool:
        """Whether any rank was signalled (collective: every rank calls it at each step boundary). A CPU
        scalar: gloo carries it on CPU and on GPU alike (the loop's other scalars go the same way), and it
        never waits on the device's queue of work."""
        import torch
        import torch.distributed as dist

        flag = torch.tensor([1 if self.received else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    @property
    def signal_name(self) -> str:
        return SIGNAL.name

    def stopping_line(self, step: int) -> str:
        """What rank 0 prints once the checkpoint of ``step`` is complete."""
        return (f"checkpoint at step {step} on {SIGNAL.name} (the job's time is nearly up): stopping; "
                f"a resubmitted job resumes from it")


def install() -> StopSignal | None:
    """A :class:`StopSignal` when the job asked for one, else ``None`` (SIGUSR1 left as it was)."""
    return StopSignal() if os.environ.get(CHECKPOINT_SIGNAL_ENV) == "1" else None
