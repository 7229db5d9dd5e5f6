"""Under torchrun: the trainer's own entry (``trainer.__main__.main``) on each parameters file in turn, in
the same processes, with a loss made NaN on purpose: ``PARAMS.nan.json`` beside each file says on which
rank and at which steps (``{"rank": 1, "steps": [5]}``). The fault is this file's, not the trainer's: the
rank's micro-step is scaled by NaN, so its loss and its gradients are NaN, as an overflow would make them.
The process group is made once and kept (a run's end keeps it for the next file). Each file's end is printed
as ``STOPPED <index> <rank> <message>`` or ``TRAINED <index> <rank>``; the last file's stop ends
the process as ``python -m trainer`` ends it: through ``trainer.__main__.ended``, its message in one write, and
without the interpreter's teardown (as every end of this worker).

    nan_worker.py PARAMS.yaml [PARAMS.yaml ...]
"""

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

from trainer import job
from trainer.__main__ import ended, main
from trainer.loop import train
from trainer.wire.startup import exit_without_teardown

job.end = dist.barrier  # the group stays for the next file: made again, it would wait for its old keys

real_micro_step = train.micro_step
fault = {"rank": -1, "steps": [], "calls": 0, "accum": 1}


def micro_step(model, batch, labels, device, scale, router_weight=None):
    fault["calls"] += 1
    step = (fault["calls"] - 1) // fault["accum"] + 1
    if int(os.environ["RANK"]) == fault["rank"] and step in fault["steps"]:
        total, aux = real_micro_step(model, batch, labels, device, scale * float("nan"), router_weight)
        return total * float("nan"), aux
    return real_micro_step(model, batch, labels, device, scale, router_weight)


train.micro_step = micro_step


def one(path: str) -> None:
    import yaml

    spec = json.loads(Path(path).with_suffix(".nan.json").read_text())
    accum = (yaml.safe_load(Path(path).read_text()) or {}).get("gradient_accumulation_steps", 1)
    fault.update(rank=spec["rank"], steps=spec["steps"], calls=0, accum=accum)
    main([path])


*first, last = sys.argv[1:]
for index, path in enumerate(first):
    try:
        one(path)
    except SystemExit as exit_:
        sys.stdout.write(f"STOPPED {index} {os.environ['RANK']} {exit_.code}\n")  # one write: ranks share the pipe
    else:
        sys.stdout.write(f"TRAINED {index} {os.environ['RANK']}\n")
code = ended(lambda: one(last))  # python -m trainer's own way out: its message in one write, no teardown
if code == 0:
    sys.stdout.write(f"TRAINED {len(first)} {os.environ['RANK']}\n")
exit_without_teardown(code)
