"""An ``air``-style training script: it knows nothing of fsdp-tui.

It reads its hyperparameters from ``HYPERPARAMETERS_PATH``, is started by ``torchrun`` from the
workload's ``command``, shards a small model with FSDP2 and prints ``step=N/M loss=X`` lines, which
fsdp-tui turns into a loss curve. Runs on GPUs (NCCL) or CPUs (gloo) unchanged.
"""

import gc
import os

import torch
import torch.distributed as dist
import yaml
from torch import nn

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch < 2.6
    from torch.distributed._composable.fsdp import fully_shard


def load_params() -> dict:
    path = os.environ.get("HYPERPARAMETERS_PATH")
    if path and os.path.exists(path):
        with open(path) as f:
            return yaml.safe_load(f) or {}
    return {}


def main() -> None:
    use_cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if use_cuda else "cpu")
    train(load_params(), dist.get_rank(), dist.get_world_size(), device)
    # A sharded model lives on after train() returns (its hooks hold it in reference cycles), and with it
    # its hold on the process group: collected here, before the group goes and while the interpreter is
    # whole, not later in its teardown, where gloo's threads can abort the process.
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def train(p: dict, rank: int, world: int, device: torch.device) -> None:
    max_steps = int(p.get("max_steps", 50))
    width = int(p.get("width", 64))
    torch.manual_seed(0)

    # Learn y = sin(x . w / 3), a smooth function a small MLP fits within the sample's 60 steps;
    # each rank sees its own slice of the data.
    model = nn.Sequential(nn.Linear(8, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 1))
    model.to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=float(p.get("learning_rate", 3e-3)))
    gen = torch.Generator().manual_seed(1234 + rank)
    target_w = torch.randn(8, generator=torch.Generator().manual_seed(7))

    if rank == 0:
        print(f"World size={world} | max_steps={max_steps}", flush=True)
    for step in range(1, max_steps + 1):
        x = torch.randn(int(p.get("batch_size", 64)), 8, generator=gen).to(device)
        y = torch.sin(x @ target_w.to(device) / 3).unsqueeze(1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step={step}/{max_steps} loss={loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
