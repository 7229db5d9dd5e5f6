"""The async save's copy of the state to host memory, on a side thread, into buffers kept between saves."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import torch
from torch.distributed.checkpoint.staging import AsyncStager

from trainer.ckpt.write import tensor_bytes


class ReusingStager(AsyncStager):
    """Copies the state to host memory on a side thread, into host buffers allocated at the first save
    and reused by every later one (pinned on CUDA), so the copy overlaps the next step's compute.

    torch's ``DefaultStager`` does the same on 2.13+, but on 2.11 it closes its ``StateDictStager``
    after every stage: that empties the copier's type table (the next save dies with ``KeyError:
    <class 'type'>``) and drops the buffers. This one keeps its copier until :meth:`close`. On a GPU the
    copy runs on its own stream, after the compute stream's work up to the save (an event), with the
    thread on this rank's device (not a new context on GPU 0)."""

    _synchronize_after_execute = False

    def __init__(self, device: torch.device) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from torch.distributed.checkpoint._state_dict_stager import StateDictStager

        self.cuda = device.type == "cuda"
        self.staged_bytes = 0
        """The tensor bytes the last save copied to host memory on this rank."""
        self.copier = StateDictStager(pin_memory=self.cuda, share_memory=False)
        if self.cuda:
            self.stream = torch.cuda.Stream(device)
            self.executor = ThreadPoolExecutor(1, initializer=torch.cuda.set_device, initargs=(device,))
        else:
            self.stream = None
            self.executor = ThreadPoolExecutor(1)

    def stage(self, state_dict: dict[str, Any]) -> Future:
        ready = torch.cuda.current_stream().record_event() if self.cuda else None
        return self.executor.submit(self._copy, state_dict, ready)

    def _copy(self, state_dict: dict[str, Any], ready) -> dict[str, Any]:
        if self.stream is None:
            out = self.copier.stage(state_dict, non_blocking=False)
        else:
            self.stream.wait_event(ready)
            with torch.cuda.stream(self.stream):
                out = self.copier.stage(state_dict, non_blocking=True)
            self.stream.synchronize()
        self.staged_bytes = tensor_bytes(out)
        return out

    def synchronize_staging(self) -> None:
        """Nothing here: the trainer waits for the copy's future before the optimiser step."""

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        self.copier.close()
