"""Run under torchrun by ``test_fit_measured.py``: for each case (a model folder and a sharding), the
trainer's own parts build, shard and train the model for two steps (the second with AdamW's state), and
every rank measures its resident peak above what it held before the model, next to the prediction the
trainer makes for that run (``trainer.wire.fit``). Rank 0 writes the cases as JSON lines.

    torchrun --nproc_per_node=2 tests/trainer/fit_worker.py CASES.json OUT.jsonl
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys


def _status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    return 0


def _settle() -> None:
    """Freed memory back to the system before the next case is measured (glibc keeps small chunks)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def main(cases_path: str, out_path: str) -> None:
    import torch.distributed as dist

    from trainer import job
    from trainer.loop import memory, train
    from trainer.wire.config import TrainerConfig
    from trainer.wire.fit import predict

    cases = json.loads(open(cases_path).read())
    d = data = None
    for case in cases:
        cfg = TrainerConfig.model_validate(case["params"])
        choices = job.choose(cfg)
        if d is None:
            d = job.start(cfg)
            data = job.load_data(cfg, choices, d)  # one tokenizer and dataset for every case
        _settle()
        before = _status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the resident peak starts again from here
        built = job.build_model(cfg, choices, data.total, d)
        run = job.training(cfg, built, data, d)
        epoch, position = 0, 0
        for _ in range(2):
            batches, epoch, position, count = train.micro_batches(
                data.order, data.rows.train_rows, epoch, position, 1, data.rows.pad_id, None)
            train.train_step(built.net, run.optimizer, run.scheduler, batches, d.device, cfg.optim.max_grad_norm,
                             d.world)
        measured = _status("VmHWM") - before
        predicted = predict(built.size, memory.setup(cfg, d, built.sharding.sharding, choices.attention))
        peaks = [None] * d.world
        dist.all_gather_object(peaks, measured)
        if d.rank == 0:
            with open(out_path, "a") as out:
                out.write(json.dumps({"name": case["name"], "sharding": built.sharding.sharding, "measured": peaks,
                                      "predicted": predicted.peak, "parts": predicted.parts_gib(),
                                      "params": built.shape.num_params}) + "\n")
        del built, run, batches
        _settle()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
