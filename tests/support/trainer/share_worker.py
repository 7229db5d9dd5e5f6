"""Under torchrun: for a replicated model (FSDP2 ``no_shard`` per block, as on a GPU, and the plain
replication the CPU picks), one Adam step, an async save, another step, a load of the save. Each rank
writes to OUT/rank<N>.json, per mode: the tensor bytes its stager copied to host memory, the bytes of
its whole state, its largest tensor, and whether the load gave back exactly what was saved."""

import json
import sys
from pathlib import Path

import torch

from tests.support.trainer.ending import end_ranks
from trainer import parallel
from trainer.ckpt import checkpoint
from trainer.ckpt.write import local_bytes, tensor_bytes, tensor_leaves
from trainer.loop import optim
from trainer.loop.state import TrainState
from trainer.model import build as model
from trainer.model.source import ModelSource
from trainer.wire.config import CheckpointConfig, FsdpConfig, ModelConfig, OptimConfig

model_dir, out = sys.argv[1], Path(sys.argv[2])
d = parallel.init_distributed()
gen = torch.Generator().manual_seed(d.rank)


def step(net, opt) -> None:
    ids = torch.randint(0, net.config.vocab_size, (2, 16), generator=gen)
    net(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()


def local(t: torch.Tensor) -> torch.Tensor:
    return (t.to_local() if hasattr(t, "to_local") else t).detach().clone()


result = {}
for mode in ("no_shard", "replicate"):
    net = model.load_model(ModelSource.resolve(model_dir), ModelConfig(from_scratch=True), seed=0)
    net = parallel.shard_model(net, FsdpConfig(sharding="no_shard"), d, per_block=mode == "no_shard")
    opt = optim.build_optimizer(net, 1e-3, OptimConfig(), d.device)
    app = checkpoint.AppState(net, opt, optim.build_scheduler(opt, 10, OptimConfig()), TrainState(step=1))
    step(net, opt)
    full = app.state_dict()
    saved = {path: local(t) for path, t in tensor_leaves(full)}
    ckpt = checkpoint.Checkpointer(CheckpointConfig(async_save=True, keep_last=None), str(out / mode), d, {})
    ckpt.save(app, 1)
    ckpt.wait()
    staged = ckpt.stager.staged_bytes
    step(net, opt)  # the weights and Adam's moments move on: the load must bring back the saved ones
    ckpt.load(app, checkpoint.newest_complete(ckpt.root))
    back = {path: local(t) for path, t in tensor_leaves(app.state_dict())}
    exact = back.keys() == saved.keys() and all(torch.equal(back[k], saved[k]) for k in saved)
    ckpt.close()
    result[mode] = {"staged": staged, "total": tensor_bytes(full), "exact": exact,
                    "largest": max(local_bytes(t) for _, t in tensor_leaves(full))}
(out / f"rank{d.rank}.json").write_text(json.dumps(result))
end_ranks()
