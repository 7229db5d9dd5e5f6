"""One GPU: a Llama-3.2-1B-shaped model (random init), seq 2048, bf16 with fp32 reduce, through the
trainer's own sharding, optimiser and loss. Reports tokens/s, MFU and peak memory.

    python benchmarks/bench_gpu.py [--batch 4] [--steps 20] [--ac off|full|selective] [--compile] [--packed 512]

Rows are whole 2048-token examples (causal attention: SDPA's flash kernel) unless ``--packed N`` packs
examples of N tokens into each row, which needs the block-diagonal mask (SDPA's masked kernel).

Needs CUDA (run it on the GPU machine); MFU is the trainer's own (``trainer.metrics.train_flops``:
6 x non-embedding parameters incl. the output layer + attention FLOPs from each example's length) over
the device's dense bf16 peak (floor: 35% on H100).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--ac", default="off", choices=["off", "full", "selective"])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--packed", type=int, default=0, help="pack examples of this many tokens per row")
    args = p.parse_args()

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu needs a CUDA GPU")
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer import metrics, model, optim, parallel, train
    from trainer.config import FsdpConfig, OptimConfig

    d = parallel.init_distributed()
    config = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=args.seq,
                         tie_word_embeddings=True, rope_theta=500000.0)
    torch.manual_seed(0)
    with torch.device("cuda"):
        net = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    net.config.use_cache = False
    shape = metrics.ModelShape.of(net)
    model.apply_activation_checkpointing(net, args.ac)
    if args.compile:
        model.apply_compile(net)
    net = parallel.shard_model(net, FsdpConfig(sharding="full_shard"), d)
    opt = optim.build_optimizer(net, 1e-4, OptimConfig(), d.device)
    sched = optim.build_scheduler(opt, args.steps + args.warmup, OptimConfig(schedule="constant"))
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    positions = torch.arange(args.seq) % args.packed if args.packed else torch.arange(args.seq)
    batch = {"input_ids": ids, "labels": ids.clone(), "position_ids": positions.expand(args.batch, -1),
             "real_tokens": torch.tensor(args.batch * args.seq), "lengths": torch.tensor([args.seq] * args.batch)}
    for _ in range(args.warmup):
        train.train_step(net, opt, sched, [batch], d.device, 1.0, d.world)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        train.train_step(net, opt, sched, [batch], d.device, 1.0, d.world)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tokens_per_s = args.steps * args.batch * args.seq / seconds
    example = args.packed or args.seq
    lengths = [example] * (args.batch * args.seq // example)
    flops_per_s = args.steps * metrics.train_flops(shape, lengths) / seconds
    mfu = metrics.mfu(flops_per_s, metrics.peak_flops(d, None)) or float("nan")
    print(f"{torch.cuda.get_device_name()} | {shape.num_params / 1e9:.2f}B params | batch {args.batch} x seq {args.seq} | "
          f"ac {args.ac} | compile {args.compile} | {f'packed {args.packed}' if args.packed else 'unpacked'}")
    print(f"tokens/s {tokens_per_s:,.0f} | MFU {mfu:.1%} (floor 35%) | "
          f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
