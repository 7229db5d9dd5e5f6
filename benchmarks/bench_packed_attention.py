"""Packed rows on CPU: one training step of a tiny Llama with sdpa over each whole row under the segment
mask, against sdpa once per example (``trainer/model/packed_sdpa.py``), side by side for several row shapes.

    .venv/bin/python benchmarks/bench_packed_attention.py [--repeat 5] [--window 64] [--eager]
    .venv/bin/python benchmarks/bench_packed_attention.py --mask-build

One process, one thread, fp32, 8 rows a step, forward + backward + AdamW; the same weights and batch for
both, so the losses printed must be equal. Prints CPU milliseconds per step (the process's own CPU
time: on a shared machine the time spent waiting for a core is left out) and the ratio, and the load
average. ``--window W`` makes the model Mistral-shaped (the same sizes, a sliding window of W tokens);
``--eager`` times eager attention under its additive mask in place of sdpa's. Run with ``PYTHONPATH``
set to another checkout to time its trainer with the same script. ``--mask-build`` times only what a
forward pass of packed rows spends on its mask (8 rows of 512 tokens, 300 builds, sdpa's and eager's).
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


def _step_ms(implementation: str, lengths: list[int], repeat: int, window: int | None) -> tuple[float, float]:
    from transformers import AutoConfig, AutoModelForCausalLM, MistralConfig

    from trainer.assets import resolve_model
    from trainer.loop import train

    config = AutoConfig.from_pretrained(resolve_model("builtin:tiny-llama"))
    if window:
        config = MistralConfig(**{k: v for k, v in config.to_dict().items() if k not in ("model_type", "architectures")},
                               sliding_window=window)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=implementation).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    pos = torch.cat([torch.arange(n) for n in lengths]).repeat(8, 1)
    ids = torch.randint(3, config.vocab_size, pos.shape, generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "labels": ids, "position_ids": pos}
    labels = train.shifted_labels(batch, "cpu")

    def step() -> float:
        loss = train.micro_step(model, batch, labels, "cpu", 1.0)
        loss = loss[0] if isinstance(loss, tuple) else loss  # (loss, router loss) from this trainer on
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss)

    first = step()
    step()
    start = time.process_time()  # this process's CPU time: on a shared machine, the wait for a core is left out
    for _ in range(repeat):
        step()
    return (time.process_time() - start) / repeat * 1000, first


def _mask_build_ms(implementation: str, builds: int = 300) -> float:
    """CPU ms to build one 8 x 512 packed-row mask the way the trainer's forward pass does."""
    from transformers import AutoConfig

    from trainer.assets import resolve_model
    from trainer.model import packed_masks

    config = AutoConfig.from_pretrained(resolve_model("builtin:tiny-llama"))
    pos = torch.cat([torch.arange(n) for n in SHAPES[512]]).repeat(8, 1)
    if hasattr(packed_masks, "packed_attention_mask"):  # per layer type, with windows
        from trainer.loop.train import attention_layers

        def build():
            return packed_masks.packed_attention_mask(implementation, pos, attention_layers(config))
    else:  # a trainer from before windows: one mask
        def build():
            return packed_masks.packed_mask(implementation, pos)
    for _ in range(20):
        build()
    start = time.process_time()
    for _ in range(builds):
        build()
    return (time.process_time() - start) / builds * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--window", type=int, default=None)
    parser.add_argument("--eager", action="store_true")
    parser.add_argument("--mask-build", action="store_true")
    args = parser.parse_args()
    import os

    torch.set_num_threads(1)
    if args.mask_build:
        for implementation in ("sdpa", "eager"):
            print(f"{implementation}: {_mask_build_ms(implementation):.3f} CPU ms per 8 x 512 mask "
                  f"(load {os.getloadavg()[0]:.2f})")
        return
    from trainer.model import packed_sdpa

    packed_sdpa.register()
    chosen_from = packed_sdpa.MIN_ROW_LENGTH
    packed_sdpa.MIN_ROW_LENGTH = 0  # every shape per example here, to show where the trainer's switch sits
    masked_kind = "eager" if args.eager else "sdpa"
    print(f"8 rows a step, {args.repeat} timed steps after 2 warm-up steps, 1 thread; the trainer takes "
          f"per-example attention from rows of {chosen_from} tokens; {masked_kind} under the mask; "
          f"{'sliding window ' + str(args.window) if args.window else 'no window'}; load average at start "
          f"{os.getloadavg()[0]:.2f}")
    for length, lengths in SHAPES.items():
        masked, loss_masked = _step_ms(masked_kind, lengths, args.repeat, args.window)
        each, loss_each = _step_ms(packed_sdpa.NAME, lengths, args.repeat, args.window)
        print(f"rows of {length} ({len(lengths)} examples of {lengths}): mask {masked:6.1f} CPU ms/step, "
              f"per example {each:6.1f} CPU ms/step, mask/per-example {masked / each:.2f}x "
              f"(first losses {loss_masked:.6f} / {loss_each:.6f}; load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
