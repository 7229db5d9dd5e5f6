"""One way of computing the loss (``model.cross_entropy``) through the trainer's own micro-step: its peak memory
and tokens/s on one device, for the GPU proof (``gpu_proof_steps.loss``) and by hand.

    python benchmarks/bench_loss.py --mode chunked|full|fused [--vocab 128256] [--seq 4096] [--hidden 2048]
        [--layers 2] [--steps 5] [--chunk-rows N] [--cpu]

A Llama of ``--layers`` blocks, ``--hidden`` wide, with a ``--vocab`` output layer (random, bf16 on a GPU, fp32
on CPU) takes ``--steps`` micro-steps (forward and backward; no optimiser) of one ``text`` row of ``--seq``
tokens, every token learned, through ``trainer.loop.train.micro_step`` with the learned-positions hook and the
loss chosen as the trainer chooses it (``--chunk-rows`` overrides the positions a chunk). Prints one JSON line
(``{"bench": "loss", ...}``): the peak memory (``torch.cuda.max_memory_allocated`` on a GPU, the process's
high-water resident memory on CPU), each step's seconds, tokens/s over the steps after the first, and the
mean loss of the first step (the modes agree on it). Run each mode in its own process: a peak is a process's.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("chunked", "full", "fused", "auto"), required=True)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--chunk-rows", type=int)
    parser.add_argument("--cpu", action="store_true", help="on CPU even where CUDA is")
    args = parser.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.data.rows import Example, collate, pad_rows
    from trainer.loop import loss, train
    from trainer.model import learned_logits

    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda" if cuda else "cpu")
    heads = max(1, args.hidden // 128)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 4,
                         num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=args.seq, tie_word_embeddings=False)
    torch.manual_seed(0)
    with device:
        model = LlamaForCausalLM(config).to(torch.bfloat16 if cuda else torch.float32)
    model.config._attn_implementation = "sdpa"
    learned_logits.install(model)
    choice = loss.choose(args.mode, config.to_dict(), 1, args.seq, cuda)
    if args.chunk_rows:
        choice = loss.LossChoice(choice.setting, choice.vocab, args.chunk_rows, choice.mapping, choice.note)
    loss.keep(model, choice)
    ids = torch.randint(3, args.vocab, (args.seq,), generator=torch.Generator().manual_seed(0)).tolist()
    batch = collate(pad_rows([Example(ids, list(ids))], 0), 0)
    labels = train.shifted_labels(batch, "cpu")
    count = float((labels != -100).sum())
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    seconds, first = [], None
    for _ in range(args.steps):
        start = time.perf_counter()
        total, _ = train.micro_step(model, batch, labels, device, 1.0 / count)
        value = float(total)  # waits for the device
        seconds.append(time.perf_counter() - start)
        first = value / count if first is None else first
        model.zero_grad(set_to_none=True)
    timed = seconds[1:] or seconds
    peak = (torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    print(json.dumps({"bench": "loss", "mode": args.mode, "device": "cuda" if cuda else "cpu",
                      "card": torch.cuda.get_device_name() if cuda else "cpu", "vocab": args.vocab, "seq": args.seq,
                      "hidden": args.hidden, "layers": args.layers, "chunk_rows": choice.rows,
                      "note": choice.note, "peak_gib": peak / 2**30,
                      "peak_kind": "cuda_max_allocated" if cuda else "max_rss", "step_s": seconds,
                      "tokens_per_s": args.seq / statistics.median(timed), "loss": first}), flush=True)


if __name__ == "__main__":
    main()
