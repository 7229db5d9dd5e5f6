"""Under torchrun: PEFT LoRA under Hugging Face ``Trainer`` on CPU (accelerate runs it as DDP), on the examples
our trainer trains on, for ``bench_lora.py``.

    torchrun --nproc_per_node=2 lora_hf_worker.py MODEL OUT STEPS BATCH SEQ LORA_JSON
"""

from __future__ import annotations

import json
import sys


def main(model_dir: str, out: str, steps: int, batch: int, seq: int, lora: dict) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        Trainer,
        TrainingArguments,
    )

    from trainer.data.dataset import load_rows
    from trainer.data.rows import IGNORE, Tokenize
    from trainer.wire.data_config import DataConfig

    tok = AutoTokenizer.from_pretrained(model_dir)
    rows, _ = load_rows("builtin:tiny-alpaca", DataConfig())
    examples = [e for e in Tokenize(tok, "alpaca", seq, True).many(rows) if any(x != IGNORE for x in e.labels[1:])]
    data = [{"input_ids": e.input_ids, "labels": e.labels, "attention_mask": [1] * len(e.input_ids)} for e in examples]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model = get_peft_model(model, LoraConfig(r=lora["r"], lora_alpha=lora["alpha"],
                                             target_modules=lora["target_modules"], task_type="CAUSAL_LM"))
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=batch, max_steps=steps, learning_rate=1e-4,
                             use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
                             ddp_backend="gloo", dataloader_drop_last=True, disable_tqdm=True, seed=0)
    collate = DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=IGNORE)
    counted = [0]

    def counting(features):  # the real (non-pad) tokens of every batch this rank trains on
        batch_out = collate(features)
        counted[0] += int(batch_out["attention_mask"].sum())
        return batch_out

    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=counting)
    result = trainer.train()
    total = torch.tensor([float(counted[0])])
    torch.distributed.all_reduce(total)
    if trainer.args.process_index == 0:
        print(f"HF_TRAINER real_tokens={int(total.item())} seconds={result.metrics['train_runtime']:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), json.loads(sys.argv[6]))
