"""Under torchrun: Hugging Face ``Trainer`` or TRL's ``SFTTrainer`` on the examples our trainer trains on, for
``bench_vs_peers.py`` and the loss-agreement test.

    torchrun --nproc_per_node=2 peers_worker.py SETTINGS_JSON

Settings (JSON): ``side`` (``hf``, ``trl`` or ``trl-packed``), ``model``, ``data`` (a JSON Lines file, alpaca
unless ``format`` names another of the trainer's formats),
``out``, ``seq``, ``batch``, ``lr``, ``epochs`` or ``steps``, ``max_grad_norm``, ``bf16``. The examples are
tokenized by the trainer's own :class:`trainer.data.rows.Tokenize` (prompt tokens masked, the same filter), so
every side sees the same tokens; ``hf`` and ``trl`` take them in file order (``sequential``: rank ``r`` gets
batch ``g * world + r`` of step ``g``, as the trainer's unshuffled order gives it). Rank 0 prints one line,
``PEERS_RESULT {json}``: real (non-pad) tokens over all ranks, the loop's seconds (from the first step's
start to the last step's end), the steps, and each step's loss averaged over ranks as the model computed it
(gathered once, after training: no collective per step is added to the peer's loop).
"""

from __future__ import annotations

import json
import os
import sys
import time


def examples(model: str, data: str, seq: int, fmt: str = "alpaca") -> list[dict]:
    """``input_ids`` and ``labels`` (prompt masked) of every example our trainer would train on."""
    from transformers import AutoTokenizer

    from trainer.data.dataset import load_rows
    from trainer.data.rows import IGNORE, Tokenize
    from trainer.wire.data_config import DataConfig

    tok = AutoTokenizer.from_pretrained(model)
    rows, _ = load_rows(data, DataConfig())
    out = Tokenize(tok, fmt, seq, True).many(rows)
    return [{"input_ids": e.input_ids, "labels": e.labels} for e in out if any(x != IGNORE for x in e.labels[1:])]


def main(settings: dict) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    side = settings["side"]
    data = examples(settings["model"], settings["data"], settings["seq"], settings.get("format", "alpaca"))
    tok = AutoTokenizer.from_pretrained(settings["model"])
    model = AutoModelForCausalLM.from_pretrained(settings["model"], attn_implementation="sdpa")
    common = {"output_dir": settings["out"], "per_device_train_batch_size": settings["batch"],
              "learning_rate": settings["lr"], "lr_scheduler_type": "constant", "warmup_steps": 0,
              "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.95, "adam_epsilon": 1e-8,
              "max_grad_norm": settings["max_grad_norm"], "report_to": [], "save_strategy": "no",
              "dataloader_drop_last": True, "disable_tqdm": True, "seed": 0, "data_seed": 0,
              "use_cpu": not settings["bf16"], "bf16": settings["bf16"],
              "ddp_backend": "nccl" if settings["bf16"] else "gloo",
              "train_sampling_strategy": "sequential", "num_train_epochs": settings.get("epochs", 1),
              "max_steps": settings.get("steps") or -1}
    counted = [0]
    losses: list = []

    class Timing(TrainerCallback):
        """The loop's time: from the first step's start to the last step's end."""

        first: float | None = None
        last = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            if self.first is None:
                self.first = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.last = time.perf_counter()

    timing = Timing()
    if side == "hf":
        from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

        from trainer.data.rows import IGNORE

        collate = DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=IGNORE)
        args = TrainingArguments(**common)
        base, kwargs = Trainer, {"train_dataset": [{**e, "attention_mask": [1] * len(e["input_ids"])} for e in data],
                                 "processing_class": tok}
    else:
        import datasets
        from trl import SFTConfig, SFTTrainer

        collate = None
        args = SFTConfig(**common, max_length=settings["seq"], packing=side == "trl-packed",
                         completion_only_loss=True, dataset_num_proc=None)
        base, kwargs = SFTTrainer, {"train_dataset": datasets.Dataset.from_list(data), "processing_class": tok}

    class Recording(base):
        """Each step's loss as this rank computed it (a device tensor, read after training) and the real
        tokens of every batch it trained on."""

        def training_step(self, model, inputs, num_items_in_batch=None):
            mask = inputs.get("attention_mask")
            # padding-free batches (TRL's packing) are one row with no padding and no mask
            counted[0] += int(mask.sum()) if mask is not None else int(inputs["input_ids"].numel())
            loss = super().training_step(model, inputs, num_items_in_batch)
            losses.append(loss)
            return loss

    if collate is not None:
        kwargs["data_collator"] = collate
    trainer = Recording(model=model, args=args, callbacks=[timing], **kwargs)
    trainer.train()
    device = trainer.args.device
    per_step = torch.stack([x.float() for x in losses]).to(device)
    total = torch.tensor([float(counted[0])], device=device)
    torch.distributed.all_reduce(total)
    torch.distributed.all_reduce(per_step)
    world = torch.distributed.get_world_size()
    if trainer.args.process_index == 0:
        result = {"side": side, "real_tokens": int(total.item()), "seconds": timing.last - (timing.first or 0.0),
                  "steps": trainer.state.global_step, "losses": (per_step / world).tolist(),
                  "distributed": str(trainer.accelerator.distributed_type).split(".")[-1],
                  "torch_module": type(trainer.model_wrapped).__name__}
        print("PEERS_RESULT " + json.dumps(result), flush=True)
    torch.distributed.barrier()
    _exit_without_teardown()


def _exit_without_teardown() -> None:
    """The process ended here, its objects alive: freeing the peer's trainer frees its DDP reducer and with it
    the gloo group, whose destructor joins threads that may wait on the rank that already left (a hang seen
    after ``destroy_process_group``, SIGABRT "terminate called without an active exception" without it)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


if __name__ == "__main__":
    os.environ.setdefault("TQDM_DISABLE", "1")
    main(json.loads(sys.argv[1]))
