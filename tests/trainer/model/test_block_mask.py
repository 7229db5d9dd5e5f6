"""Flex attention's mask for packed rows is built tile by tile: the same ``BlockMask`` as torch's
``create_block_mask`` (which evaluates every query-key pair), without B x L x L memory. The builder
runs on CPU (flex attention itself is refused there at start; the mask is not)."""

import json
import subprocess
import sys

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

from trainer.model.packed_masks import block_mask, segment_ids

FIELDS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices", "q_num_blocks", "q_indices",
          "full_q_num_blocks", "full_q_indices")


def _rows(examples: list[list[int]], length: int) -> torch.Tensor:
    """Packed rows' position ids: the examples' lengths in order, the rest of the row one more example
    (as padding is)."""
    rows = []
    for lengths in examples:
        pos = [p for n in lengths for p in range(n)]
        rows.append((pos + list(range(length - len(pos))))[:length])
    return torch.tensor(rows)


def _reference(position_ids: torch.Tensor, window: int | None = None):
    seg = segment_ids(position_ids)

    def same_example_causal(b, h, q, kv):
        inside = (seg[b, q] == seg[b, kv]) & (q >= kv)
        return inside & (q - kv < window) if window else inside

    rows, length = position_ids.shape
    return create_block_mask(same_example_causal, rows, None, length, length, device="cpu")


@pytest.mark.parametrize(("length", "examples", "window"), [
    (1, [[1]], None),
    (128, [[128], [5, 60, 63], [127]], None),
    (300, [[20, 280], [129, 1, 100], [300]], None),  # a last block shorter than a tile
    (700, [[300, 300, 50], [1] * 20 + [256], [128, 128, 128, 128]], None),
    # sliding windows: shorter than a tile, of tiles, between; empty tiles below the diagonal
    (700, [[300, 300, 50], [1] * 20 + [256], [700]], 100),
    (700, [[700], [129, 571], [256, 256, 188]], 256),
    (1000, [[1000], [500, 500]], 300),
    (300, [[20, 280], [300]], 4096),  # a window longer than every example: the plain mask
])
def test_the_tiled_mask_is_torchs_block_mask(length, examples, window):
    position_ids = _rows(examples, length)
    got, want = block_mask(position_ids, window), _reference(position_ids, window)
    for name in FIELDS:
        mine, theirs = getattr(got, name), getattr(want, name)
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), name
    assert (got.seq_lengths, got.BLOCK_SIZE) == (want.seq_lengths, want.BLOCK_SIZE)
    assert torch.equal(got.to_dense(), want.to_dense())
    q, kv = torch.arange(length), torch.arange(length)
    for b in range(len(examples)):  # the per-element rule the kernel applies inside partial tiles
        assert torch.equal(got.mask_mod(b, 0, q[:, None], kv[None, :]), want.mask_mod(b, 0, q[:, None], kv[None, :]))
    if length == 700 and window is None:
        assert int(got.full_kv_num_blocks.sum()) > 0  # whole tiles are skipped from the mask function
    if window and window < length:  # tiles wholly out of the window are skipped too
        assert int(got.kv_num_blocks.sum() + got.full_kv_num_blocks.sum()) < \
            int(block_mask(position_ids).kv_num_blocks.sum() + block_mask(position_ids).full_kv_num_blocks.sum())


_PEAK = """
import json, torch
from trainer.model.packed_masks import block_mask
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
rows, length = {rows}, {length}
gen = torch.Generator().manual_seed(0)
starts = torch.rand(rows, length, generator=gen) < 1 / 1000  # examples of ~1000 tokens
starts[:, 0] = True
index = torch.arange(length).expand(rows, length)
pos = index - torch.where(starts, index, 0).cummax(-1).values
block_mask(pos[:, :300])  # code paths warm
open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) restarts from the current RSS
idle = status("VmRSS")
mask = block_mask(pos)
print(json.dumps({{"idle": idle, "peak": status("VmHWM"), "tiles": int(mask.kv_num_blocks.sum())}}))
"""


def test_building_it_for_long_rows_never_holds_a_row_by_row_mask():
    rows, length = 2, 16384
    out = subprocess.run([sys.executable, "-c", _PEAK.format(rows=rows, length=length)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    pair_mask = rows * length * length  # bytes of the booleans create_block_mask materialises (512 MiB)
    assert got["tiles"] > 0 and got["peak"] - got["idle"] < pair_mask / 32, (got, pair_mask)
