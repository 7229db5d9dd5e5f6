"""Training and evaluation rows made from encoded examples on demand: which examples train, which are
held out, which share a packed row (a :class:`Plan`), and each row's tensors built from the mapped files
when it is asked for (:class:`TokenRows`), as :func:`trainer.data.rows.pack` and
:func:`trainer.data.rows.pad_rows` make them from examples in memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import numpy as np
import torch

from trainer.data.encode import Encoded
from trainer.data.packing import first_fit_decreasing
from trainer.data.rows import IGNORE


@dataclass(frozen=True)
class Plan:
    """Which examples train (in their order) and which are held out for evaluation, and with packing,
    which train examples share each row (row ``r``: ``train[members[offsets[r]:offsets[r + 1]]]``)."""

    train: np.ndarray
    held: np.ndarray
    offsets: np.ndarray | None = None
    members: np.ndarray | None = None

    def save(self, path: Path) -> None:
        import os

        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
        arrays = {"train": self.train, "held": self.held}
        if self.offsets is not None and self.members is not None:
            arrays.update(offsets=self.offsets, members=self.members)
        np.savez(tmp, **arrays)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> Plan | None:
        try:
            with np.load(path) as f:
                return cls(f["train"], f["held"], f.get("offsets"), f.get("members"))
        except (OSError, ValueError, KeyError):
            return None


def hold_out(count: int, fraction: float, seed: int, cap: int | None) -> np.ndarray:
    """Which of ``count`` examples are held out (a mask): ``fraction`` of them (at least one, at most
    ``cap``), drawn by ``seed`` as the trainer always has."""
    held = np.zeros(count, dtype=bool)
    if fraction <= 0 or count < 2:
        return held
    perm = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).numpy()
    k = max(1, round(count * fraction))
    if cap is not None:
        k = min(k, cap)
    held[perm[-k:]] = True
    return held


def make_plan(encoded: Encoded, *, fraction: float, seed: int, eval_cap: int | None, max_examples: int | None,
              packing: bool, max_len: int, held_elsewhere: bool) -> Plan:
    """Examples with nothing to learn are left out; the rest train, less the held-out ones (none when the
    source has an evaluation split of its own, ``held_elsewhere``), at most ``max_examples`` of them."""
    usable = np.flatnonzero(encoded.learned_count > 0)
    if held_elsewhere:
        train, held = usable, np.zeros(0, dtype=np.int64)
    else:
        mask = hold_out(len(usable), fraction, seed, eval_cap)
        train, held = usable[~mask], usable[mask]
    if max_examples:
        train = train[:max_examples]
    if not packing:
        return Plan(train, held)
    offsets, members = first_fit_decreasing(encoded.lengths[train], max_len)
    return Plan(train, held, offsets, members)


class TokenRows(Sequence):
    """Rows of encoded examples, each built when asked: one example per row, or packed rows of
    ``max_len`` (padding never learned, positions restarting at each example and continuing into the
    padding), the same tensors as the in-memory rows."""

    def __init__(self, encoded: Encoded, examples: np.ndarray, pad_id: int, max_len: int | None = None,
                 offsets: np.ndarray | None = None) -> None:
        self.encoded, self.examples, self.pad_id, self.max_len = encoded, examples, pad_id, max_len
        self.offsets = offsets
        """Packed: row ``r`` holds ``examples[offsets[r]:offsets[r + 1]]``; ``None``: one example a row."""

    def __len__(self) -> int:
        return len(self.examples) if self.offsets is None else len(self.offsets) - 1

    @overload
    def __getitem__(self, index: int) -> dict[str, torch.Tensor]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, torch.Tensor]]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        if self.offsets is None:
            return self._single(int(self.examples[index]))
        return self._packed(self.examples[self.offsets[index]:self.offsets[index + 1]])

    def members(self, index: int) -> np.ndarray:
        """The examples (ids in the encoded files) of row ``index``."""
        if self.offsets is None:
            return self.examples[index:index + 1]
        return self.examples[self.offsets[index]:self.offsets[index + 1]]

    def learned_counts(self) -> np.ndarray:
        """Each row's learned tokens as the loss counts them (none at an example's first position),
        from the per-example counts: no row is built."""
        counts = self.encoded.learned_count[self.examples].astype(np.int64)
        if self.offsets is None:
            return counts
        summed = np.concatenate([[0], np.cumsum(counts)])
        return summed[self.offsets[1:]] - summed[self.offsets[:-1]]

    def example_lengths(self) -> np.ndarray:
        return self.encoded.lengths[self.examples]

    def _single(self, example: int) -> dict[str, torch.Tensor]:
        ids, learned = self.encoded.example(example)
        ids64 = torch.from_numpy(ids.astype(np.int64))
        return {"input_ids": ids64, "labels": torch.from_numpy(np.where(learned != 0, ids, IGNORE).astype(np.int64)),
                "position_ids": torch.arange(len(ids)), "real_tokens": torch.tensor(len(ids)),
                "lengths": torch.tensor([len(ids)])}

    def _packed(self, members: np.ndarray) -> dict[str, torch.Tensor]:
        assert self.max_len is not None
        parts = [self.encoded.example(int(e)) for e in members]
        lengths = [len(ids) for ids, _ in parts]
        ids = np.concatenate([p[0] for p in parts]).astype(np.int64)
        learned = np.concatenate([p[1] for p in parts]) != 0
        used, pad = len(ids), self.max_len - len(ids)
        positions = np.concatenate([np.arange(n) for n in lengths] + [np.arange(pad) + lengths[-1]])
        return {"input_ids": torch.from_numpy(np.concatenate([ids, np.full(pad, self.pad_id, np.int64)])),
                "labels": torch.from_numpy(np.concatenate([np.where(learned, ids, IGNORE),
                                                           np.full(pad, IGNORE, np.int64)])),
                "position_ids": torch.from_numpy(positions.astype(np.int64)), "real_tokens": torch.tensor(used),
                "lengths": torch.tensor(lengths)}
