"""Under torchrun: build MODEL_DIR's model on the meta device, shard it (full_shard) and fill the shards,
for each ``MODEL_DIR OUT check|-`` triple in turn, in the same processes (one launch for several models).
Each rank writes its resident memory just before the build (its modeling code imported, as in the trainer) and its peak during it to OUT.rank<N>.json;
with ``check``, rank 0 also compares the gathered weights with ``from_pretrained``'s."""

import gc
import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from tests.support.trainer.ending import end_ranks
from trainer import parallel
from trainer.model import build as model
from trainer.model.source import ModelSource
from trainer.wire.config import FsdpConfig, ModelConfig


def _status(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(field)


def load(model_dir: str, out: str, check: bool, d) -> None:
    mcfg, source = ModelConfig(), ModelSource.resolve(model_dir)
    config = model.hf_config(source, mcfg)
    # The trainer resolves the model's class at start-up, before loading anything: importing its modeling
    # code costs ~80 MB of resident memory on a CPU build of torch, ~150 MB on a CUDA build (torch 2.14.1),
    # which is code, not weights, and stays out of the load's peak.
    model.attention_support(config, source, mcfg)
    dist.barrier()
    with open("/proc/self/clear_refs", "w") as f:  # restart the peak (VmHWM) from the current RSS
        f.write("5")
    idle = _status("VmRSS")
    net = model.build_model(source, mcfg, config, "sdpa", 0, d.device,
                            lambda m: parallel.shard_model(m, FsdpConfig(sharding="full_shard"), d))
    peak = _status("VmHWM")
    local = sum(p.to_local().numel() * p.element_size() for p in net.parameters())
    with open(f"{out}.rank{d.rank}.json", "w") as f:
        json.dump({"idle": idle, "peak": peak, "local_bytes": local}, f)
    if check:
        state = get_model_state_dict(net, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if d.is_main:
            ref = model.load_model(source, mcfg, 0).state_dict()
            same = all(torch.equal(state[k], ref[k]) for k in state)
            with open(f"{out}.check.json", "w") as f:
                json.dump({"keys_match": sorted(state) == sorted(k for k in ref if k in state), "same": same,
                           "num_keys": len(state)}, f)
    dist.barrier()


d = parallel.init_distributed()
for i in range(1, len(sys.argv), 3):
    load(sys.argv[i], sys.argv[i + 1], sys.argv[i + 2] == "check", d)
    gc.collect()
end_ranks()
