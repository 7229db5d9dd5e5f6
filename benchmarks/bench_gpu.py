"""One GPU: a Llama-3.2-1B-shaped model (random init), seq 2048, bf16 with fp32 reduce, through the
trainer's own sharding choice, optimiser, output layer on learned positions and loss. Reports tokens/s,
MFU and peak memory.

    python benchmarks/bench_gpu.py [--batch 4] [--steps 20] [--ac off|full|selective] [--compile]
                                   [--packed 0 512] [--sharding auto] [--json]

Rows are whole 2048-token examples (causal attention: SDPA's flash kernel) for ``--packed 0``; ``--packed
N`` packs examples of N tokens into each row, which needs the block-diagonal mask (SDPA's masked kernel).
Several values are measured one after the other in this one process (one model, one compile cache), each
reported as soon as it is measured; ``--json`` adds one JSON line per value (``benchmarks/gpu_proof.py``
reads them).

Needs CUDA (run it on the GPU machine), except with ``--tiny``: a two-block Llama that runs where there is
no GPU, to check the script end to end (its figures mean nothing). MFU is the trainer's own
(``trainer.loop.metrics.train_flops``: 6 x non-embedding parameters incl. the output layer + attention FLOPs
from each example's length) over the device's dense bf16 peak (floor: 35% on H100).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LLAMA_32_1B = {"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
               "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": True,
               "rope_theta": 500000.0}
TINY = {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--ac", default="off", choices=["off", "full", "selective"])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--packed", type=int, nargs="+", default=[0],
                   help="examples of this many tokens per row (0: whole rows); several: each in turn")
    p.add_argument("--sharding", default="auto", choices=["auto", "full_shard", "no_shard"])
    p.add_argument("--tiny", action="store_true", help="a two-block model, on CPU where there is no GPU")
    p.add_argument("--json", action="store_true", help="also one JSON line per --packed value")
    args = p.parse_args()

    import torch

    if not torch.cuda.is_available() and not args.tiny:
        raise SystemExit("bench_gpu needs a CUDA GPU (or --tiny, to check the script on CPU)")
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer import parallel
    from trainer.loop import metrics, optim, train
    from trainer.model import build as model
    from trainer.model import learned_logits
    from trainer.wire.config import FsdpConfig, OptimConfig
    from trainer.wire.fit import Setup
    from trainer.wire.model_size import size_of

    d = parallel.init_distributed()
    config = LlamaConfig(**(TINY if args.tiny else LLAMA_32_1B), max_position_embeddings=args.seq)
    torch.manual_seed(0)
    with d.device:
        net = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    net.config.use_cache = False
    shape = metrics.ModelShape.of(net)
    # As the trainer's entry does: its sharding choice, recomputation, compile, then FSDP2.
    cuda = d.device.type == "cuda"
    setup = Setup(world=d.world, nodes=1, device="cuda" if cuda else "cpu", sharding="no_shard",
                  compute_bytes=2 if cuda else 4, checkpointing=args.ac, batch=args.batch, seq=args.seq)
    chosen = parallel.choose_sharding(FsdpConfig(sharding=args.sharding), d, size_of(config.to_dict()), setup)
    model.apply_activation_checkpointing(net, args.ac)
    if args.compile:
        model.apply_compile(net)
    net = parallel.shard_model(net, FsdpConfig(sharding=chosen.sharding), d, chosen.per_block)
    learned_logits.install(net)
    opt = optim.build_optimizer(net, 1e-4, OptimConfig(), d.device)
    steps_all = (args.steps + args.warmup) * len(args.packed)
    sched = optim.build_scheduler(opt, steps_all, OptimConfig(schedule="constant"))
    peak = metrics.peak_flops(d, None)
    name = torch.cuda.get_device_name() if d.device.type == "cuda" else "cpu"
    print(f"{name} | {shape.num_params / 1e6:,.1f}M params | batch {args.batch} x seq {args.seq} | ac {args.ac} | "
          f"compile {args.compile} | {chosen.note} | load average {os.getloadavg()[0]:.1f}", flush=True)
    for packed in args.packed:
        batch = _batch(torch, config.vocab_size, args.batch, args.seq, packed)
        started = time.perf_counter()
        for _ in range(args.warmup):
            train.train_step(net, opt, sched, [batch], d.device, 1.0, d.world)
        _sync(torch, d.device)
        warm_s = time.perf_counter() - started
        if d.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(args.steps):
            train.train_step(net, opt, sched, [batch], d.device, 1.0, d.world)
        _sync(torch, d.device)
        seconds = time.perf_counter() - start
        tokens_per_s = args.steps * args.batch * args.seq / seconds
        example = packed or args.seq
        lengths = [example] * (args.batch * args.seq // example)
        mfu = metrics.mfu(args.steps * metrics.train_flops(shape, lengths) / seconds, peak)
        memory = metrics.rank_memory(d)
        rows = f"{args.seq // packed} packed examples of {packed}" if packed else "whole examples"
        print(f"{rows}: tokens/s {tokens_per_s:,.0f} | MFU {f'{mfu:.1%}' if mfu else 'n/a'} (floor 35%) | "
              f"peak memory {memory.get('peak_gib', memory.get('rss_gib', 0.0)):.1f} GiB | "
              f"warm-up {warm_s:.1f} s", flush=True)
        if args.json:
            print(json.dumps({
                "bench": "gpu", "device": name, "params": shape.num_params, "batch": args.batch, "seq": args.seq,
                "packed": packed, "rows": rows, "compile": args.compile, "ac": args.ac, "sharding": chosen.sharding,
                "steps": args.steps, "warmup": args.warmup, "warmup_s": round(warm_s, 3),
                "seconds": round(seconds, 4), "tokens_per_s": round(tokens_per_s, 1),
                "mfu": round(mfu, 4) if mfu is not None else None, "memory": memory,
                "load_average": os.getloadavg()[0]}), flush=True)
    torch.distributed.destroy_process_group()


def _batch(torch, vocab: int, rows: int, seq: int, packed: int) -> dict:
    """Random tokens, every one learned; ``packed``: positions restart every ``packed`` tokens."""
    ids = torch.randint(0, vocab, (rows, seq))
    positions = torch.arange(seq) % packed if packed else torch.arange(seq)
    return {"input_ids": ids, "labels": ids.clone(), "position_ids": positions.expand(rows, -1),
            "real_tokens": torch.tensor(rows * seq), "lengths": torch.tensor([seq] * rows)}


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
