"""Under torchrun: one micro-step's loss and gradients, from the same weights and rows, for each given way of
sharding, computing the loss and checkpointing activations, one after the other in the same processes; rank 0
saves the global mean loss and every full gradient to ``OUT_PREFIX-<config>.pt``.

    chunked_worker.py MODEL_DIR OUT_PREFIX SHARDING:CROSS_ENTROPY:CHECKPOINTING [...]

``SHARDING`` is ``no_shard`` (plain replication, as the trainer replicates on CPU), ``full_shard`` (the model
small enough that the root unit holds every block) or ``full_shard_blocks`` (a unit per block);
``CROSS_ENTROPY`` is ``full`` or ``chunked`` (16 positions a chunk); ``CHECKPOINTING`` is
``model.activation_checkpointing``.
"""

import sys

import torch
import torch.distributed as dist

from tests.support.trainer.ending import end_ranks
from tests.support.trainer.run import alpaca_examples
from trainer import parallel
from trainer.data.rows import IGNORE, collate, pack
from trainer.loop import loss, train
from trainer.model import build as model
from trainer.model import learned_logits
from trainer.model.source import ModelSource
from trainer.wire.config import FsdpConfig, ModelConfig

model_dir, prefix, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
d = parallel.init_distributed()
examples, pad = alpaca_examples(model_dir, 48, 64, mask_prompt=True)
packed = pack(examples, 64, pad)
mine = collate([packed[i] for i in range(8) if i % d.world == d.rank], pad)  # rank r: rows r, r + W, ...
labels = train.shifted_labels(mine, "cpu")
count = torch.tensor([float((labels != IGNORE).sum())])
dist.all_reduce(count)

for config in configs:
    sharding, cross_entropy, checkpointing = config.split(":")
    net = model.load_model(ModelSource.resolve(model_dir), ModelConfig(from_scratch=True), seed=0)
    model.apply_activation_checkpointing(net, checkpointing)
    per_block = sharding != "no_shard"
    parallel.UNIT_BYTES = 1 if sharding == "full_shard_blocks" else 25 * 2**20
    fsdp = FsdpConfig(sharding="no_shard" if sharding == "no_shard" else "full_shard")
    net = parallel.shard_model(net, fsdp, d, per_block)
    learned_logits.install(net)
    choice = loss.choose(cross_entropy, net.config.to_dict(), 4, 64, cuda=False)
    loss.keep(net, loss.LossChoice(choice.setting, choice.vocab, 16, choice.mapping, choice.note))
    torch.manual_seed(1)
    total, _ = train.micro_step(net, mine, labels, d.device, d.world / float(count))
    summed = total.detach().reshape(1).double()
    dist.all_reduce(summed)
    grads = {}
    for name, p in net.named_parameters():
        g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        grads[name.replace("_checkpoint_wrapped_module.", "")] = g.detach().clone()
    if d.is_main:
        torch.save({"loss": float(summed) / float(count), "grads": grads}, f"{prefix}-{config.replace(':', '-')}.pt")
    dist.barrier()
end_ranks()
