"""A silent hang for torchrun: two gloo ranks all-reduce once a step (0.1 s apart, rank 0 printing
``step=N/1000 loss=...``) until rank 1 sleeps forever at step 6 while rank 0 waits for it in all_reduce; the
flight recorder (``trainer.flight``) is on, so a stall dump names the collective rank 1 never entered."""

from __future__ import annotations

HUNG_RANK = """import os, time
import torch
import torch.distributed as dist


def hang_forever():
    while True:
        time.sleep(3600)


dist.init_process_group("gloo")
rank = dist.get_rank()
from trainer.flight import start  # noqa: E402 (the collectives each rank is in, dumped on a stall)

start(rank)
for step in range(1, 1001):
    if rank == 1 and step == 6:
        hang_forever()
    value = torch.ones(1)
    dist.all_reduce(value)
    time.sleep(0.1)
    if rank == 0:
        print(f"step={step}/1000 loss={1.0 / step:.4f}", flush=True)
"""
"""What the run's ``python hang.py`` runs (written to a code folder of its own)."""
