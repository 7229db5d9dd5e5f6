"""Examples -> token rows: loading, formats, prompt masking, packing, and a resumable global order.

Labels use -100 for every position that is not learned (prompts, padding), so padding is never in
the loss and never counted as a training token. With packing, several examples share one
``max_seq_len`` row; ``position_ids`` restart at each example so attention never crosses them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.assets import resolve_dataset
from trainer.config import DataConfig, SettingError

IGNORE = -100
_LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}


@dataclass(frozen=True)
class Example:
    input_ids: list[int]
    labels: list[int]
    prompt: str = ""
    answer: str = ""


def load_rows(name: str, cfg: DataConfig) -> tuple[Any, Any | None]:
    """(train, eval-or-None) as sequences of row dicts (``datasets.Dataset`` objects or lists), from a
    hub name, a file or a saved folder. A local JSON Lines file is read directly: importing
    ``datasets`` and converting to Arrow costs seconds of start-up for nothing."""
    source = resolve_dataset(name)
    path = Path(source).expanduser()
    if path.is_file() and path.suffix.lower() == ".jsonl":
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()], None
    import datasets

    if path.is_file():
        builder = _LOCAL_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise ValueError(f"parameters.dataset_name: '{source}' is not json/jsonl/parquet/arrow/csv")
        ds = datasets.load_dataset(builder, data_files=str(path), split="train")
        return ds, None
    if path.is_dir() and ((path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists()):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            return loaded[cfg.split], loaded.get(cfg.eval_split) if cfg.eval_split else None
        return loaded, None
    train = datasets.load_dataset(source, data_files=cfg.data_files, split=cfg.split)
    evaluation = datasets.load_dataset(source, data_files=cfg.data_files, split=cfg.eval_split) \
        if cfg.eval_split else None
    return train, evaluation


def columns_of(rows) -> list[str]:
    """Column names of a ``datasets.Dataset`` or of a list of row dicts (its first row)."""
    return list(rows.column_names) if hasattr(rows, "column_names") else list(rows[0]) if rows else []


def detect_format(columns: list[str]) -> str:
    cols = set(columns)
    if {"instruction", "output"} <= cols:
        return "alpaca"
    if {"context", "question", "answers"} <= cols:
        return "squad"
    if "messages" in cols:
        return "chat"
    if "text" in cols:
        return "text"
    raise ValueError(f"parameters.data.format: cannot tell the format from columns {sorted(cols)}; "
                     "set data.format to alpaca, squad, chat or text")


class Tokenize:
    """One raw row -> :class:`Example`, with prompt tokens masked when ``mask_prompt``."""

    def __init__(self, tokenizer, fmt: str, max_seq_len: int, mask_prompt: bool) -> None:
        self.tok = tokenizer
        self.fmt = fmt
        self.max_len = max_seq_len
        self.mask_prompt = mask_prompt
        self.bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        self.eos = tokenizer.eos_token or ""

    def __call__(self, row: dict[str, Any]) -> Example:
        if self.fmt == "chat":
            return self._chat(row["messages"])
        if self.fmt == "text":
            ids = self.bos + self._ids(row["text"] + self.eos)
            return self._cut(ids, list(ids))
        prompt, answer = self._prompt_answer(row)
        p_ids = self.bos + self._ids(prompt)
        a_ids = self._ids(answer + self.eos)
        labels = ([IGNORE] * len(p_ids) if self.mask_prompt else list(p_ids)) + a_ids
        return self._cut(p_ids + a_ids, labels, prompt, answer)

    def many(self, rows) -> list[Example]:
        """Every row, with prompts and answers tokenized in two batched calls (the fast tokenizer's
        per-call overhead dominates short examples); the same examples as calling once per row."""
        if self.fmt in ("chat", "text"):
            return [self(row) for row in rows]
        pairs = [self._prompt_answer(row) for row in rows]
        if not pairs:
            return []
        prompts = self.tok([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
        answers = self.tok([a + self.eos for _, a in pairs], add_special_tokens=False)["input_ids"]
        out = []
        for (prompt, answer), p_ids, a_ids in zip(pairs, prompts, answers, strict=True):
            p_ids = self.bos + p_ids
            labels = ([IGNORE] * len(p_ids) if self.mask_prompt else list(p_ids)) + a_ids
            out.append(self._cut(p_ids + a_ids, labels, prompt, answer))
        return out

    def _prompt_answer(self, row: dict[str, Any]) -> tuple[str, str]:
        if self.fmt == "alpaca":
            prompt = f"### Instruction:\n{row['instruction']}\n\n"
            if row.get("input"):
                prompt += f"### Input:\n{row['input']}\n\n"
            return prompt + "### Response:\n", str(row["output"])
        answers = row["answers"]
        text = answers["text"][0] if isinstance(answers, dict) else answers[0]
        return f"Context: {row['context']}\nQuestion: {row['question']}\nAnswer: ", str(text)

    def _chat(self, messages: list[dict[str, str]]) -> Example:
        ids: list[int] = []
        labels: list[int] = []
        for i, message in enumerate(messages):
            rendered = self._render(messages[: i + 1])
            new = self._ids(rendered)[len(ids):] if rendered else []
            learn = message["role"] == "assistant" or not self.mask_prompt
            ids += new
            labels += new if learn else [IGNORE] * len(new)
        return self._cut(ids, labels)

    def _render(self, messages: list[dict[str, str]]) -> str:
        if getattr(self.tok, "chat_template", None):
            return self.tok.apply_chat_template(messages, tokenize=False)
        return "".join(f"{m['role']}: {m['content']}{self.eos}\n" for m in messages)

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def _cut(self, ids: list[int], labels: list[int], prompt: str = "", answer: str = "") -> Example:
        return Example(ids[: self.max_len], labels[: self.max_len], prompt, answer)


def pack(examples: list[Example], max_len: int, pad_id: int) -> list[dict[str, torch.Tensor]]:
    """First-fit-decreasing packing into ``max_len`` rows (fuller rows than greedy, fewer steps per
    epoch); deterministic: ties keep the examples' order. Each row holds input_ids, labels and
    position_ids that restart at every example."""
    order = sorted(range(len(examples)), key=lambda i: -len(examples[i].input_ids))
    bins: list[list[int]] = []
    free = _FreeSpace(len(examples), max_len)
    for i in order:
        row = free.first_fit(len(examples[i].input_ids))
        if row == len(bins):
            bins.append([])
        bins[row].append(i)
    rows = []
    for members in bins:
        ids: list[int] = []
        labels: list[int] = []
        pos: list[int] = []
        for i in sorted(members):
            ids += examples[i].input_ids
            labels += examples[i].labels
            pos += range(len(examples[i].input_ids))
        pad = max_len - len(ids)
        rows.append({
            "input_ids": torch.tensor(ids + [pad_id] * pad),
            "labels": torch.tensor(labels + [IGNORE] * pad),
            "position_ids": torch.tensor(pos + list(range(pos[-1] + 1, pos[-1] + 1 + pad))),
            "real_tokens": torch.tensor(len(ids)),
            "lengths": torch.tensor([len(examples[i].input_ids) for i in sorted(members)]),
        })
    return rows


class _FreeSpace:
    """Free space of up to ``count`` rows in a max-segment tree: the first row with room for an item
    in O(log count)."""

    def __init__(self, count: int, capacity: int) -> None:
        self.size = 1
        while self.size < max(count, 1):
            self.size *= 2
        self.tree = [capacity] * (2 * self.size)

    def first_fit(self, length: int) -> int:
        node = 1
        while node < self.size:
            node = 2 * node if self.tree[2 * node] >= length else 2 * node + 1
        self.tree[node] -= length
        row = node - self.size
        node //= 2
        while node:
            self.tree[node] = max(self.tree[2 * node], self.tree[2 * node + 1])
            node //= 2
        return row


def pad_rows(examples: list[Example], pad_id: int) -> list[dict[str, torch.Tensor]]:
    """One example per row (no packing); rows are padded per batch by :func:`collate`."""
    return [{"input_ids": torch.tensor(ex.input_ids), "labels": torch.tensor(ex.labels),
             "position_ids": torch.arange(len(ex.input_ids)), "real_tokens": torch.tensor(len(ex.input_ids)),
             "lengths": torch.tensor([len(ex.input_ids)])}
            for ex in examples]


def collate(rows: list[dict[str, torch.Tensor]], pad_id: int) -> dict[str, torch.Tensor]:
    """Stack rows, right-padding to the longest; padding gets label -100 and positions that continue
    its row. A restart at 0 would read as one more packed example: transformers then builds a 4-D
    mask for the whole batch (never the flash kernel) and checks it on the device at every forward.
    Padding comes after every real token, so nothing real attends to it."""
    width = max(len(r["input_ids"]) for r in rows)

    def padded(key: str, fill: int) -> torch.Tensor:
        out = torch.full((len(rows), width), fill, dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, : len(r[key])] = r[key]
        return out

    batch = {"input_ids": padded("input_ids", pad_id), "labels": padded("labels", IGNORE)}
    positions = padded("position_ids", 0)
    for i, r in enumerate(rows):
        used = len(r["position_ids"])
        positions[i, used:] = torch.arange(used, width) - used + int(r["position_ids"][-1]) + 1
    batch["position_ids"] = positions
    batch["real_tokens"] = torch.stack([r["real_tokens"] for r in rows]).sum()
    batch["lengths"] = torch.cat([r["lengths"] for r in rows])
    return batch


def needs_segment_mask(batch: dict[str, torch.Tensor]) -> bool:
    """Whether any learned token comes after an example boundary. If none does (one example per row,
    at most trailing padding), plain causal attention gives the same loss, and SDPA may use its flash
    kernel instead of a masked one. Computed on the host: no device sync."""
    pos, labels = batch["position_ids"], batch["labels"]
    boundary = pos == 0
    boundary[:, 0] = False
    after = boundary.long().cumsum(-1) > 0
    return bool((after & ~boundary & (labels != IGNORE)).any())


class GlobalOrder:
    """A deterministic, resumable order of rows shared by all ranks.

    Global micro-batch ``g`` of an epoch is rows ``perm[g*W*B:(g+1)*W*B]``; rank ``r`` takes its slice
    ``r*B:(r+1)*B``. The position is "global micro-batches consumed", so resuming on another world size
    starts at the same row.
    """

    def __init__(self, num_rows: int, world: int, rank: int, batch: int, seed: int, shuffle: bool) -> None:
        self.num_rows, self.world, self.rank, self.batch = num_rows, world, rank, batch
        self.seed, self.shuffle = seed, shuffle
        self.per_global = world * batch
        if num_rows < self.per_global:
            raise SettingError(f"parameters.per_device_batch_size: {num_rows} training rows cannot fill one global "
                             f"batch of {self.per_global} ({batch} a process x {world} processes): use more "
                             "data, a smaller per_device_batch_size or fewer processes")

    @property
    def batches_per_epoch(self) -> int:
        return self.num_rows // self.per_global

    def indices(self, epoch: int, global_batch: int) -> list[int]:
        perm = self._perm(epoch)
        start = global_batch * self.per_global + self.rank * self.batch
        return perm[start: start + self.batch]

    def _perm(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.num_rows))
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_rows, generator=g).tolist()

    @staticmethod
    def rescale(position: int, old_per_global: int, new_per_global: int) -> int:
        """Position after a change of world size or batch: the same rows consumed, rounded down."""
        return math.floor(position * old_per_global / new_per_global)
