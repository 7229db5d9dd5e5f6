"""The memory prediction against each rank's measured peak, run under torchrun: for each case (a model
folder and a sharding), the trainer's own parts build, shard and train the model for two steps (the
second with AdamW's state), and every rank measures its peak above what it held before the model (on a
GPU ``torch.cuda.max_memory_allocated``; on CPU the resident peak, ``VmHWM``), next to the prediction the
trainer makes for that run (``trainer.wire.fit``). Rank 0 writes one JSON line per case.
``tests/trainer/loop/test_fit_measured.py`` runs it on CPU, ``benchmarks/gpu_proof.py``'s ``fit`` step on a GPU.

    torchrun --nproc_per_node=2 benchmarks/fit_worker.py CASES.json OUT.jsonl
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


def _start(cuda: bool) -> int:
    """Where the peak is counted from: the tensors allocated now on a GPU (its peak reset), else the
    resident memory now (its peak reset: ``/proc/self/clear_refs``)."""
    import torch

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return before


def _peak(cuda: bool) -> int:
    import torch

    if cuda:
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    return _status("VmHWM")


def main(cases_path: str, out_path: str) -> None:
    import torch.distributed as dist

    from trainer import job
    from trainer.loop import memory, train
    from trainer.wire.config import TrainerConfig
    from trainer.wire.fit import predict

    with open(cases_path, encoding="utf-8") as f:
        cases = json.loads(f.read())
    d = data = None
    for case in cases:
        cfg = TrainerConfig.model_validate(case["params"])
        choices = job.choose(cfg)
        if d is None:
            d = job.start(cfg)
            data = job.load_data(cfg, choices, d)  # one tokenizer and dataset for every case
        _settle()
        cuda = d.device.type == "cuda"
        before = _start(cuda)
        built = job.build_model(cfg, choices, data.total, d)
        run = job.training(cfg, choices, built, data, d)
        epoch, position = 0, 0
        for _ in range(2):
            batches, epoch, position, count = train.micro_batches(
                data.order, data.rows.train_rows, epoch, position, 1, data.rows.pad_id, None)
            train.train_step(built.net, run.optimizer, run.scheduler, batches, d.device, cfg.optim.max_grad_norm,
                             d.world)
        measured = _peak(cuda) - before
        predicted = predict(built.size, memory.setup(cfg, d, built.sharding.sharding, choices.attention,
                                                     built.size.vocab))
        peaks = [None] * d.world
        dist.all_gather_object(peaks, measured)
        if d.rank == 0:
            with open(out_path, "a") as out:
                out.write(json.dumps({"name": case["name"], "sharding": built.sharding.sharding, "device": d.device.type,
                                      "measured": peaks,
                                      "predicted": predicted.peak, "parts": predicted.parts_gib(),
                                      "params": built.shape.num_params}) + "\n")
        del built, run, batches
        _settle()
        if cuda:
            import torch

            torch.cuda.empty_cache()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
