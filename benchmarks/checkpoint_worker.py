"""Under torchrun: how long training is blocked by a save, three ways (see bench_checkpoint.py)."""

import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from transformers import LlamaConfig, LlamaForCausalLM

from trainer import parallel
from trainer.ckpt.checkpoint import AppState, Checkpointer
from trainer.loop import optim
from trainer.loop.state import TrainState
from trainer.wire.config import CheckpointConfig, FsdpConfig, OptimConfig

hidden, layers, repeat = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
d = parallel.init_distributed()
torch.manual_seed(0)
config = LlamaConfig(vocab_size=32000, hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
                     num_attention_heads=max(1, hidden // 64), num_key_value_heads=max(1, hidden // 64))
model = parallel.shard_model(LlamaForCausalLM(config), FsdpConfig(), d)
opt = optim.build_optimizer(model, 1e-4, OptimConfig(), d.device)
sched = optim.build_scheduler(opt, 10, OptimConfig())
model(input_ids=torch.randint(0, 32000, (1, 16), device=d.device)).logits.sum().backward()
opt.step()
app = AppState(model, opt, sched, TrainState(step=1))
params = sum(p.numel() for p in model.parameters())  # DTensor numel: the whole (unsharded) size
root = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
meta = {"model_name": "bench"}
ours = {kind: Checkpointer(CheckpointConfig(async_save=kind == "async", keep_last=1), str(root / kind), d, meta)
        for kind in ("async", "sync")}
results = {"async": [], "async_submit": [], "sync": [], "seed": []}
for i in range(repeat):
    for kind, ckpt in ours.items():
        dist.barrier()
        t = time.perf_counter()
        submit = ckpt.save(app, i + 1)  # the whole save (sync), or its submit (async)
        staged = ckpt.wait_staged()  # what the trainer waits for before its next optimiser step
        results[kind].append(time.perf_counter() - t)
        if staged is not None:
            results["async_submit"].append(submit)
        ckpt.wait()
    dist.barrier()
    t = time.perf_counter()
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if d.is_main:
        model.save_pretrained(root / f"seed-{i}", state_dict=full, safe_serialization=True)
    dist.barrier()
    results["seed"].append(time.perf_counter() - t)
if d.is_main:
    print(json.dumps({"params": params, "device": d.device.type, "results": results}), flush=True)
dist.destroy_process_group()
