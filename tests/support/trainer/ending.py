"""How a worker that torchrun starts for a test ends: as ``python -m trainer`` ends its ranks."""

from __future__ import annotations

from typing import NoReturn


def end_ranks() -> NoReturn:
    """Every rank at a barrier, the process group gone, then the process ended without the interpreter's
    teardown (:func:`trainer.wire.startup.exit_without_teardown`): sharded models that live on in reference
    cycles, freed in that teardown, took gloo's threads with them and aborted a rank ("terminate called
    without an active exception", seen in a fresh-clone run of the chunked-loss worker)."""
    import torch.distributed as dist

    from trainer.wire.startup import exit_without_teardown

    dist.barrier()
    dist.destroy_process_group()
    exit_without_teardown(0)
