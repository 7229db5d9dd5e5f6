"""The seed-000 recipe's training loop, on our tiny model and data, for comparison (under torchrun).

FSDP1 FULL_SHARD wrapping each decoder block, every example padded to ``max_seq_len``, labels equal to
the input (pad included), gradient checkpointing; fp32 and gloo because this runs on CPU. Prints one
JSON line: steps, real (non-pad) tokens, seconds of the training loop.
"""

import functools
import json
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
from torch.utils.data import DataLoader, DistributedSampler
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.models.llama.modeling_llama import LlamaDecoderLayer


def main(model_dir: str, data_file: str, max_seq_len: int, batch: int) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.config.use_cache = False
    model.gradient_checkpointing_enable()
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer})
    model = FSDP(model, auto_wrap_policy=policy, sharding_strategy=ShardingStrategy.FULL_SHARD,
                 device_id=torch.device("cpu"), use_orig_params=True)
    rows = []
    with open(data_file) as f:
        for line in f:
            r = json.loads(line)
            prompt = f"### Instruction:\n{r['instruction']}\n\n"
            if r.get("input"):
                prompt += f"### Input:\n{r['input']}\n\n"
            enc = tok(f"{prompt}### Response:\n{r['output']}{tok.eos_token}", truncation=True,
                      max_length=max_seq_len, padding="max_length")
            rows.append({"input_ids": torch.tensor(enc["input_ids"]),
                         "attention_mask": torch.tensor(enc["attention_mask"])})
    sampler = DistributedSampler(rows, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(rows, batch_size=batch, sampler=sampler, drop_last=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    real, steps = 0, 0
    start = time.perf_counter()
    for b in loader:
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["input_ids"])
        out.loss.backward()
        model.clip_grad_norm_(1.0)
        opt.step()
        opt.zero_grad()
        real += int(b["attention_mask"].sum())
        steps += 1
    seconds = time.perf_counter() - start
    total = torch.tensor([float(real)])
    dist.all_reduce(total)
    if rank == 0:
        print(json.dumps({"steps": steps, "real_tokens": int(total.item()), "seconds": seconds}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
