"""Under torchrun: a LoRA run's model as the trainer builds it, for what its records cannot show.

    torchrun ... lora_worker.py OUT.pt PARAMS.yaml CHECKPOINT [PARAMS.yaml CHECKPOINT ...]

For each run: the model is built and sharded as the trainer builds it (``full_shard``), one real training
step (the trainer's ``train_step``) is taken, and rank 0 records which frozen weights differ from the
model's safetensors afterwards (bit for bit), which frozen weights got a gradient or optimiser state,
and the logits on a fixed input of the run's final checkpoint (adapters-only) loaded into the model.
"""

import sys

import torch
import torch.distributed.checkpoint as dcp
from safetensors import safe_open
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from tests.support.trainer.ending import end_ranks
from trainer import parallel
from trainer.__main__ import load_config
from trainer.data import dataset
from trainer.data.rows import collate
from trainer.loop import optim, train
from trainer.loop.state import TrainState
from trainer.lora import adapters as lora
from trainer.model import build as model
from trainer.model.source import ModelSource

INPUT = torch.tensor([[1, 17, 42, 99, 7, 250, 31, 64]])


def one(params: str, ckpt: str, d) -> dict:
    cfg = load_config([params])
    source = ModelSource.resolve(cfg.model_name, cfg.model.tokenizer)
    hf = model.hf_config(source, cfg.model)
    adapters = lora.Adapters(cfg.lora, cfg.seed, cfg.model_name)

    def prepare(net):
        return parallel.shard_model(adapters.apply(net), cfg.fsdp.model_copy(update={"sharding": "full_shard"}), d)

    net = model.build_model(source, cfg.model, hf, "sdpa", cfg.seed, d.device, prepare, adapters=adapters)
    opt = optim.build_optimizer(net, cfg.learning_rate, cfg.optim, d.device)
    sched = optim.build_scheduler(opt, 10, cfg.optim)
    tok = model.load_tokenizer(source, cfg.model)
    data = dataset.build(cfg, tok, packing=False, model_source=source)
    batch = collate(data.train_rows[d.rank * 4:(d.rank + 1) * 4], data.pad_id)
    train.train_step(net, opt, sched, [batch], d.device, 1.0, d.world)
    frozen = [p for p in net.parameters() if not p.requires_grad]
    with_grad = sum(p.grad is not None for p in frozen)
    with_state = sum(p in opt.state for p in frozen)
    full = get_model_state_dict(net, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    changed, missing, compared = [], [], 0
    if d.is_main:
        folder = model.weights_folder(source)
        with safe_open(str(next(folder.glob("*.safetensors"))), framework="pt") as f:
            keys = set(f.keys())
            for name, value in full.items():
                base = lora.base_name(name)
                if base is None or lora._TRAINED_COPY in name:
                    continue
                key = base if base in keys else base.split(".", 1)[1]  # the file's names may lack the prefix
                if key not in keys:  # a tied output layer is saved once, as the input embedding
                    missing.append(name)
                    continue
                compared += 1
                if not torch.equal(f.get_tensor(key), value):
                    changed.append(name)
    app = lora.AdapterState(net, opt, sched, TrainState())
    dcp.load({"app": app}, checkpoint_id=ckpt)
    net.eval()
    with torch.no_grad():
        logits = net(input_ids=INPUT).logits.float()
    return {"changed": changed, "missing": missing, "compared": compared, "frozen_with_grad": with_grad,
            "frozen_with_state": with_state, "logits": logits, "trainable": sum(p.requires_grad for p in net.parameters())}


def main(argv: list[str]) -> None:
    d = parallel.init_distributed()
    out, pairs = argv[0], argv[1:]
    results = [one(pairs[i], pairs[i + 1], d) for i in range(0, len(pairs), 2)]
    if d.is_main:
        torch.save(results, out)
    end_ranks()


if __name__ == "__main__":
    main(sys.argv[1:])
