"""The training and evaluation rows of one run, built the same way on every rank."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.config import TrainerConfig
from trainer.data import (
    IGNORE,
    Example,
    Tokenize,
    collate,
    columns_of,
    detect_format,
    load_rows,
    pack,
    pad_rows,
)


@dataclass
class RunData:
    train_rows: list[dict[str, torch.Tensor]]
    eval_rows: list[dict[str, torch.Tensor]]
    pad_id: int
    fmt: str


def build(cfg: TrainerConfig, tokenizer, packing: bool) -> RunData:
    """Rows to train on (packed when ``packing``) and held-out rows to evaluate on."""
    train_raw, eval_raw = load_rows(cfg.dataset_name, cfg.data)
    fmt = cfg.data.format if cfg.data.format != "auto" else detect_format(columns_of(train_raw))
    tokenize = Tokenize(tokenizer, fmt, cfg.max_seq_len, cfg.data.mask_prompt)
    examples = tokenize.many(train_raw)
    examples = [ex for ex in examples if any(label != IGNORE for label in ex.labels[1:])]
    if eval_raw is not None:
        eval_examples = tokenize.many(eval_raw)
    else:
        examples, eval_examples = _hold_out(examples, cfg.data.eval_fraction, cfg.seed)
    if cfg.data.max_examples:
        examples = examples[: cfg.data.max_examples]
    if cfg.logging.eval_max_batches is not None:
        eval_examples = eval_examples[: cfg.logging.eval_max_batches * cfg.per_device_batch_size * 64]
    pad_id = tokenizer.pad_token_id
    rows = pack if packing else (lambda exs, _len, pad: pad_rows(exs, pad))
    return RunData(rows(examples, cfg.max_seq_len, pad_id), pad_rows(eval_examples, pad_id), pad_id, fmt)


def _hold_out(examples: list[Example], fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    if fraction <= 0 or len(examples) < 2:
        return examples, []
    perm = torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed)).tolist()
    k = max(1, round(len(examples) * fraction))
    held = set(perm[-k:])
    return ([ex for i, ex in enumerate(examples) if i not in held],
            [ex for i, ex in enumerate(examples) if i in held])


FIRST_EVAL_BATCHES = 4


def first_eval_batches(eval_max_batches: int | None) -> int:
    """Batches of the step-0 evaluation: a bounded sample (a baseline, not a result), never more than
    ``eval_max_batches``."""
    return min(FIRST_EVAL_BATCHES, eval_max_batches or FIRST_EVAL_BATCHES)


def eval_batches(rows: list[dict[str, torch.Tensor]], rank: int, world: int, batch: int, pad_id: int,
                 max_batches: int | None):
    """The same number of batches on every rank (FSDP needs every rank in every forward)."""
    per_global = world * batch
    count = -(-len(rows) // per_global) if rows else 0
    if max_batches is not None:
        count = min(count, max_batches)
    for g in range(count):
        chunk = rows[g * per_global + rank * batch: g * per_global + (rank + 1) * batch]
        if not chunk:  # this rank ran out: a batch that counts nothing
            dummy = dict(rows[0])
            dummy["labels"] = torch.full_like(rows[0]["labels"], IGNORE)
            chunk = [dummy]
        yield collate(chunk, pad_id)
