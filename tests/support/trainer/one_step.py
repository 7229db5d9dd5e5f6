"""Under torchrun: one optimiser step from a fixed init with each given sharding, one after the other in
the same processes; rank 0 saves the loss and the full parameters after the step to
``OUT_PREFIX-<sharding>-<offload>.pt`` (used to check that strategies agree).

    one_step.py MODEL_DIR OUT_PREFIX SHARDING:OFFLOAD [SHARDING:OFFLOAD ...]
"""

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from tests.support.trainer.ending import end_ranks
from trainer import parallel
from trainer.data.rows import Tokenize, collate, pack
from trainer.loop import optim, train
from trainer.model import build as model
from trainer.model.source import ModelSource
from trainer.wire.config import FsdpConfig, ModelConfig, OptimConfig

model_dir, prefix, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
source = ModelSource.resolve(model_dir)
d = parallel.init_distributed()
mcfg = ModelConfig(from_scratch=True)
tok = model.load_tokenizer(source, mcfg)
with open("trainer/data/tiny_alpaca.jsonl") as f:
    rows = [json.loads(line) for line in f.readlines()[:64]]
t = Tokenize(tok, "alpaca", 64, True)
packed = pack([t(r) for r in rows], 64, tok.pad_token_id)
# The same global batch on every world size: rank r takes rows r, r+W, ... of the first 8.
mine = [packed[i] for i in range(8) if i % d.world == d.rank]

for config in configs:
    sharding, offload = config.split(":")[0], config.split(":")[1] == "1"
    net = model.load_model(source, mcfg, seed=0)
    fsdp = FsdpConfig(sharding=sharding, cpu_offload=offload,
                      replicate_degree=2 if sharding == "hybrid_shard" else None)
    net = parallel.shard_model(net, fsdp, d)
    # Adam's first step is lr * sign(g) where |g| >> eps: rounding-level differences in near-zero
    # gradients (another reduction order) would flip whole updates. A large eps keeps the update
    # proportional to the gradient, so the comparison sees what sharding changes: the gradients and the step.
    opt = optim.build_optimizer(net, 1e-2, OptimConfig(eps=1e-3), d.device)
    sched = optim.build_scheduler(opt, 10, OptimConfig(schedule="constant"))
    loss = train.train_step(net, opt, sched, [collate(mine, tok.pad_token_id)], d.device, 1.0, d.world).mean_loss()
    state = get_model_state_dict(net, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if d.is_main:
        torch.save({"loss": loss, "params": state}, f"{prefix}-{sharding}-{int(offload)}.pt")
    dist.barrier()
end_ranks()
