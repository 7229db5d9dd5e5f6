"""Flex attention's mask for packed rows: host memory and time to build it, the trainer's tiled builder
(``trainer.model.packed_masks.block_mask``) against torch's ``create_block_mask`` in eager mode.

    .venv/bin/python benchmarks/bench_block_mask.py [--rows 2] [--lengths 2048 4096 16384]

Each build runs in a fresh process on CPU (examples of ~1000 tokens, 128-token tiles) and reports the
growth of its peak resident memory over the resident memory just before the build, and the seconds.
torch's builder is run up to 4096 tokens only: beyond, it needs several GiB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

WORKER = """
import json, time, torch
from trainer.model.packed_masks import block_mask, segment_ids
from torch.nn.attention.flex_attention import create_block_mask

def eager(pos):
    seg = segment_ids(pos)
    def same_example_causal(b, h, q, kv):
        return (seg[b, q] == seg[b, kv]) & (q >= kv)
    return create_block_mask(same_example_causal, pos.shape[0], None, pos.shape[1], pos.shape[1], device="cpu")

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

build = {{"tiled": block_mask, "eager": eager}}[{which!r}]
rows, length = {rows}, {length}
gen = torch.Generator().manual_seed(0)
starts = torch.rand(rows, length, generator=gen) < 1 / 1000
starts[:, 0] = True
index = torch.arange(length).expand(rows, length)
pos = index - torch.where(starts, index, 0).cummax(-1).values
build(pos[:, :300])
open("/proc/self/clear_refs", "w").write("5")
idle, start = status("VmRSS"), time.perf_counter()
build(pos)
print(json.dumps({{"seconds": time.perf_counter() - start, "growth": status("VmHWM") - idle}}))
"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=2)
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 16384])
    args = p.parse_args()
    print("| builder | rows x length | peak growth | B x L x L bytes | seconds |\n|---|---|---|---|---|")
    for length in args.lengths:
        for which in ("eager", "tiled"):
            if which == "eager" and length > 4096:
                continue
            out = subprocess.run([sys.executable, "-c", WORKER.format(which=which, rows=args.rows, length=length)],
                                 capture_output=True, text=True, check=True)
            got = json.loads(out.stdout)
            pairs = args.rows * length * length
            print(f"| {which} | {args.rows} x {length} | {got['growth'] / 2**20:,.1f} MiB | {pairs / 2**20:,.0f} MiB "
                  f"| {got['seconds']:.3f} |")


if __name__ == "__main__":
    main()
