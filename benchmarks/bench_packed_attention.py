"""Packed rows on CPU: one training step of a tiny Llama with sdpa over each whole row under the segment
mask, against sdpa once per example (``trainer/packed_sdpa.py``), side by side for several row shapes.

    .venv/bin/python benchmarks/bench_packed_attention.py [--repeat 5]

One process, one thread, fp32, 8 rows a step, forward + backward + AdamW; the same weights and batch for
both, so the losses printed must be equal. Prints milliseconds per step and the ratio.
"""

from __future__ import annotations

import argparse
import time

import torch

SHAPES = {  # row length -> the examples' lengths in each row
    128: [40, 30, 35, 23],
    256: [90, 100, 66],
    512: [170, 200, 142],
}


def _step_ms(implementation: str, lengths: list[int], repeat: int) -> tuple[float, float]:
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer import train
    from trainer.assets import resolve_model

    config = AutoConfig.from_pretrained(resolve_model("builtin:tiny-llama"))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=implementation).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    pos = torch.cat([torch.arange(n) for n in lengths]).repeat(8, 1)
    ids = torch.randint(3, config.vocab_size, pos.shape, generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "labels": ids, "position_ids": pos}
    labels = train.shifted_labels(batch, "cpu")

    def step() -> float:
        loss = train.micro_step(model, batch, labels, "cpu", 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss)

    first = step()
    step()
    start = time.perf_counter()
    for _ in range(repeat):
        step()
    return (time.perf_counter() - start) / repeat * 1000, first


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from trainer import packed_sdpa

    packed_sdpa.register()
    chosen_from = packed_sdpa.MIN_ROW_LENGTH
    packed_sdpa.MIN_ROW_LENGTH = 0  # every shape per example here, to show where the trainer's switch sits
    print(f"8 rows a step, {args.repeat} timed steps after 2 warm-up steps, 1 thread; the trainer takes "
          f"per-example attention from rows of {chosen_from} tokens")
    for length, lengths in SHAPES.items():
        masked, loss_masked = _step_ms("sdpa", lengths, args.repeat)
        each, loss_each = _step_ms(packed_sdpa.NAME, lengths, args.repeat)
        print(f"rows of {length} ({len(lengths)} examples of {lengths}): mask {masked:6.1f} ms/step, "
              f"per example {each:6.1f} ms/step, mask/per-example {masked / each:.2f}x "
              f"(first losses {loss_masked:.6f} / {loss_each:.6f})")


if __name__ == "__main__":
    main()
