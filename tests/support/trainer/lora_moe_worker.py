"""Under torchrun: a LoRA run on a mixture of experts as the trainer builds it, against PEFT alone.

    torchrun ... lora_moe_worker.py OUT.pt PARAMS.yaml CHECKPOINT [PARAMS.yaml CHECKPOINT ...]

For each run: the model is built and sharded as the trainer builds it (``full_shard``, adapters on the
experts' fused weights), and three optimiser steps are taken on packed rows (the trainer's ``train_step``,
AdamW); beside it, on every rank, PEFT alone (``from_pretrained`` + ``get_peft_model``, the same initial
adapter values) takes the same three steps on the same examples one per row, padding masked. Rank 0 records
both losses, how many expert weights got an adapter, and the logits of the run's final checkpoint
(adapters only) loaded into the model.
"""

import sys

import torch
import torch.distributed.checkpoint as dcp

from tests.support.trainer.ending import end_ranks
from trainer import parallel
from trainer.__main__ import load_config
from trainer.data import dataset
from trainer.data.rows import Tokenize, collate, pack, pad_rows
from trainer.loop import optim, train
from trainer.loop.state import TrainState
from trainer.lora import adapters as lora
from trainer.model import build as model
from trainer.model.loading import clean_name
from trainer.model.source import ModelSource

INPUT = torch.tensor([[1, 17, 42, 99, 7, 250, 31, 64]])
STEPS, PER_RANK = 3, 4


def _reference(source: ModelSource, cfg, adapters: lora.Adapters):
    """PEFT alone on the whole model, its adapters at the trainer's initial values."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model.weights_folder(source), attn_implementation="eager")
    peft = get_peft_model(base, lora.peft_config(cfg.lora, model=base), autocast_adapter_dtype=False)
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if param.requires_grad:
                param.copy_(adapters.initial[clean_name(name)])
    return peft.train()


def _reference_step(peft, opt, examples) -> float:
    batch = collate(pad_rows(examples, 0), 0)
    padding = (torch.arange(batch["input_ids"].shape[1]).unsqueeze(0) < batch["lengths"].unsqueeze(1)).long()
    logits = peft(input_ids=batch["input_ids"], attention_mask=padding).logits[:, :-1]
    labels = batch["labels"][:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                                             ignore_index=-100)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss)


def one(params: str, ckpt: str, d) -> dict:
    cfg = load_config([params])
    source = ModelSource.resolve(cfg.model_name, cfg.model.tokenizer)
    hf = model.hf_config(source, cfg.model)
    adapters = lora.Adapters(cfg.lora, cfg.seed, cfg.model_name)

    def prepare(net):
        return parallel.shard_model(adapters.apply(net), cfg.fsdp.model_copy(update={"sharding": "full_shard"}), d)

    net = model.build_model(source, cfg.model, hf, "eager", cfg.seed, d.device, prepare, adapters=adapters)
    opt = optim.build_optimizer(net, cfg.learning_rate, cfg.optim, d.device)
    sched = optim.build_scheduler(opt, 10, cfg.optim.model_copy(update={"schedule": "constant"}))
    tok = model.load_tokenizer(source, cfg.model)
    rows = dataset.load_rows(cfg.dataset_name, cfg.data)[0]
    examples = Tokenize(tok, "alpaca", cfg.max_seq_len, True).many(rows)
    peft = _reference(source, cfg, adapters)
    ref_opt = torch.optim.AdamW([p for p in peft.parameters() if p.requires_grad], lr=cfg.learning_rate,
                                betas=cfg.optim.betas, eps=cfg.optim.eps, weight_decay=0.0)
    ours, theirs = [], []
    for step in range(STEPS):
        chunk = examples[step * d.world * PER_RANK:(step + 1) * d.world * PER_RANK]
        mine = chunk[d.rank * PER_RANK:(d.rank + 1) * PER_RANK]
        batch = collate(pack(mine, cfg.max_seq_len, tok.pad_token_id), tok.pad_token_id)
        result = train.train_step(net, opt, sched, [batch], d.device, None, d.world)
        ours.append(result.mean_loss())
        theirs.append(_reference_step(peft, ref_opt, chunk))
    experts = sum(getattr(m, "parameter_name", "") in ("gate_up_proj", "down_proj") for m in net.modules())
    app = lora.AdapterState(net, opt, sched, TrainState())
    dcp.load({"app": app}, checkpoint_id=ckpt)
    net.eval()
    with torch.no_grad():
        logits = net(input_ids=INPUT).logits.float()
    return {"ours": ours, "peft": theirs, "experts": experts, "logits": logits}


def main(argv: list[str]) -> None:
    d = parallel.init_distributed()
    out, pairs = argv[0], argv[1:]
    results = [one(pairs[i], pairs[i + 1], d) for i in range(0, len(pairs), 2)]
    if d.is_main:
        torch.save(results, out)
    end_ranks()


if __name__ == "__main__":
    main(sys.argv[1:])
