"""Under torchrun: the trainer's own entry (``trainer.__main__.main``) on several parameters files, one
run after the other in the same processes and process group, each in its own folder with its own
environment. A test module's independent runs of one world size so pay for one torchrun and one start of
each rank (torch, transformers, the trainer: most of a tiny run's CPU), not one per run.

    runs_worker.py SPEC.json

``SPEC.json``: a list of ``{"params": PATH, "cwd": DIR, "env": {NAME: VALUE}}``. After each run, rank 0
writes ``==== run <index> ended <code>`` (the highest exit code of any rank) on stdout and on stderr
between two collectives, so every rank's lines of that run come before it and none of the next run's: :func:`tests.support.trainer.run.run_trainers`
splits the output back into one result per run. A run's refusal (``SystemExit``) is its exit code, its
message written as ``python -m trainer`` writes it; the runs after it still run.
"""

import functools
import json
import os
import sys

import torch
import torch.distributed as dist

from tests.support.trainer.ending import end_ranks
from trainer import job
from trainer.__main__ import ended, main

job.end = dist.barrier  # the group stays for the next run: made again, it would wait for its old keys
MARK = "==== run {index} ended {code}\n"

with open(sys.argv[1]) as f:
    spec = json.load(f)
rank = os.environ["RANK"]
for index, run in enumerate(spec):
    saved = dict(os.environ)
    os.environ.update(run["env"])
    os.chdir(run["cwd"])
    try:
        code = ended(functools.partial(main, [run["params"]]))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    worst = torch.tensor([code])  # every rank's code in, the worst out: each rank's output of the run is written
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    code = int(worst.item())
    if rank == "0":
        sys.stdout.write(MARK.format(index=index, code=code))
        sys.stderr.write(MARK.format(index=index, code=code))
        sys.stdout.flush()
        sys.stderr.flush()
    dist.barrier()
end_ranks()
