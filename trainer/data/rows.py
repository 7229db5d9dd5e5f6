"""Examples -> token rows: tokenizing each format, prompt masking, packing, and a resumable global order.

Labels use -100 for every position that is not learned (prompts, padding), so padding is never in
the loss and never counted as a training token. With packing, several examples share one
``max_seq_len`` row; ``position_ids`` restart at each example so attention never crosses them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trainer.data.chat import ChatTokens, TemplateRefused, choose_template
from trainer.data.packing import first_fit_decreasing
from trainer.data.position import DataPosition
from trainer.wire import formats
from trainer.wire.config import SettingError
from trainer.wire.data_config import ChatFields
from trainer.wire.data_files import Rows

IGNORE = -100


@dataclass(frozen=True)
class Example:
    input_ids: list[int]
    labels: list[int]
    prompt: str = ""
    answer: str = ""
    lost: int = 0
    """Tokens cut off at ``max_seq_len``."""


def leading_ids(tokenizer) -> list[int]:
    """The special tokens the tokenizer itself puts before a text (a Llama-style BOS; none for GPT-2 or
    Qwen, whatever BOS they declare): a prompt starts with them, as the model's users tokenize it."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start:start + len(plain)] == plain:
            return list(full[:start])
    return []


def _plain_fail(message: str) -> Exception:
    return ValueError(message)


class Tokenize:
    """One raw row -> :class:`Example`, with prompt tokens masked when ``mask_prompt``. Counts the
    examples cut at ``max_seq_len`` in their ``lost`` tokens."""

    def __init__(self, tokenizer, fmt: str, max_seq_len: int, mask_prompt: bool, chat: ChatFields | None = None,
                 template: str | None = None) -> None:
        self.tok = tokenizer
        self.fmt = fmt
        self.max_len = max_seq_len
        self.mask_prompt = mask_prompt
        self.fields = chat or ChatFields()
        self.bos = leading_ids(tokenizer)
        self.eos = tokenizer.eos_token or ""
        self.chat = ChatTokens(tokenizer, template or choose_template(tokenizer, None, "").text, mask_prompt) \
            if fmt == "chat" else None

    def __call__(self, row: dict[str, Any], fail=_plain_fail) -> Example:
        if self.chat is not None:
            messages = formats.conversation(row, self.fields, fail)
            try:
                ids, labels = self.chat(messages, formats.tools_of(row, fail))
            except TemplateRefused as err:
                raise fail(str(err)) from None
            return self._cut(ids, labels)
        if self.fmt == "text":
            ids = self.bos + self._ids(formats.text_of(row, fail) + self.eos)
            return self._cut(ids, list(ids))
        prompt, answer = formats.prompt_answer(self.fmt, row, fail)
        p_ids = self.bos + self._ids(prompt)
        a_ids = self._ids(answer + self.eos)
        labels = ([IGNORE] * len(p_ids) if self.mask_prompt else list(p_ids)) + a_ids
        return self._cut(p_ids + a_ids, labels, prompt, answer)

    def many(self, rows: Rows | list[dict[str, Any]]) -> list[Example]:
        """Every row, with prompts and answers tokenized in two batched calls (the fast tokenizer's
        per-call overhead dominates short examples); the same examples as calling once per row. A bad
        row stops it with a :class:`DataError` naming its line."""
        if not isinstance(rows, Rows):
            rows = Rows(rows, "<rows>")

        def fail_at(i: int):
            return lambda message: rows.error(i, message)

        if self.fmt == "chat":
            return [self(row, fail_at(i)) for i, row in enumerate(rows.items)]
        if self.fmt == "text":
            texts = [formats.text_of(row, fail_at(i)) + self.eos for i, row in enumerate(rows.items)]
            if not texts:
                return []
            return [self._cut(self.bos + ids, self.bos + ids)
                    for ids in self.tok(texts, add_special_tokens=False)["input_ids"]]
        pairs = [formats.prompt_answer(self.fmt, row, fail_at(i)) for i, row in enumerate(rows.items)]
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

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def _cut(self, ids: list[int], labels: list[int], prompt: str = "", answer: str = "") -> Example:
        lost = max(0, len(ids) - self.max_len)
        return Example(ids[: self.max_len], labels[: self.max_len], prompt, answer, lost)


def pack(examples: list[Example], max_len: int, pad_id: int) -> list[dict[str, torch.Tensor]]:
    """First-fit-decreasing packing into ``max_len`` rows (fuller rows than greedy, fewer steps per
    epoch); deterministic: ties keep the examples' order (:func:`trainer.data.packing.first_fit_decreasing`).
    Each row holds input_ids, labels and position_ids that restart at every example."""
    offsets, members = first_fit_decreasing(np.array([len(ex.input_ids) for ex in examples], dtype=np.int64),
                                            max_len)
    rows = []
    for r in range(len(offsets) - 1):
        chosen = [examples[i] for i in members[offsets[r]:offsets[r + 1]].tolist()]
        rows.append(packed_row([ex.input_ids for ex in chosen], [ex.labels for ex in chosen], max_len, pad_id))
    return rows


def packed_row(ids: list[list[int]], labels: list[list[int]], max_len: int, pad_id: int) -> dict[str, torch.Tensor]:
    """One packed row of these examples' ids and labels, in this order, padded to ``max_len``: padding is
    never learned and its positions continue the last example's."""
    flat_ids = [t for one in ids for t in one]
    flat_labels = [t for one in labels for t in one]
    pos = [p for one in ids for p in range(len(one))]
    pad = max_len - len(flat_ids)
    return {
        "input_ids": torch.tensor(flat_ids + [pad_id] * pad),
        "labels": torch.tensor(flat_labels + [IGNORE] * pad),
        "position_ids": torch.tensor(pos + list(range(pos[-1] + 1, pos[-1] + 1 + pad))),
        "real_tokens": torch.tensor(len(flat_ids)),
        "lengths": torch.tensor([len(one) for one in ids]),
    }


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
        self._cached: tuple[int, list[int]] | None = None
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

    def global_indices(self, epoch: int, global_batch: int) -> list[int]:
        """The rows of every rank in global micro-batch ``global_batch`` (this rank's among them)."""
        return self._perm(epoch)[global_batch * self.per_global: (global_batch + 1) * self.per_global]

    def _perm(self, epoch: int) -> list[int]:
        if self._cached is not None and self._cached[0] == epoch:  # asked at every micro-step
            return self._cached[1]
        if not self.shuffle:
            perm = list(range(self.num_rows))
        else:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            perm = torch.randperm(self.num_rows, generator=g).tolist()
        self._cached = (epoch, perm)
        return perm

    def source_counts(self, epoch: int, position: int) -> list[int] | None:
        """Rows taken from each source of a mixture before this point (``None``: one source)."""
        return None

    def rows_done(self, epoch: int, position: int) -> int:
        """Rows of the epoch taken before global micro-batch ``position`` (every rank's)."""
        return position * self.per_global

    def fit(self, state: DataPosition) -> None:
        """A loaded checkpoint's position fitted to this order: on another world size or batch, the same
        rows consumed (rounded down to a whole global micro-batch)."""
        if state.per_global != self.per_global:
            state.position = self.rescale(state.position, state.per_global, self.per_global)
            state.per_global = self.per_global

    def note(self, state: DataPosition) -> None:
        """What the order adds to the state a checkpoint keeps, once a step has taken its rows (a stream's
        position; nothing here)."""

    @staticmethod
    def rescale(position: int, old_per_global: int, new_per_global: int) -> int:
        """Position after a change of world size or batch: the same rows consumed, rounded down."""
        return math.floor(position * old_per_global / new_per_global)
