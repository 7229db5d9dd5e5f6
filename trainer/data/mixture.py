"""A mixture's order: which source each row of a step comes from, and which of its rows.

One pass of the mixture (its epoch) has a fixed number of row slots: the sources' rows added up (with
weights), or each source's rows times its epoch count. Slots go to the sources by weight as evenly as
counting allows: source ``i``'s ``k``-th slot falls at time ``(k + phase_i) / weight_i`` (phases drawn
from ``seed``), and the slots are taken in time order, so every prefix of the pass holds each source's
share within a slot or two; with ``shuffle`` the slots are then shuffled within blocks of
:data:`BLOCK`. A source's draws run through its rows in a shuffled order per pass over it, the next pass
in another. Everything is a function of the seed, the epoch and the slot: never of the world size, so a
resume on other ranks continues with the same rows, and the rows taken from each source up to any point
are counted from the order itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from trainer.data.rows import GlobalOrder
from trainer.wire.data_config import DataSource

BLOCK = 64
"""Slots shuffled among themselves (shares hold exactly at every block's end)."""


@dataclass(frozen=True)
class Mix:
    """The sources of a mixture, their training rows and their shares of its slots."""

    names: tuple[str, ...]
    rows: tuple[int, ...]
    shares: tuple[float, ...]
    """Each source's share of the slots (summing to 1)."""
    epoch_rows: int
    """Slots in one pass of the mixture."""

    @classmethod
    def of(cls, sources: list[DataSource], rows: list[int]) -> Mix:
        if any(s.weight is not None for s in sources):
            weights = [float(s.weight or 0) for s in sources]
            slots = sum(rows)
        else:
            weights = [(s.epochs or 1.0) * n for s, n in zip(sources, rows, strict=True)]
            slots = int(round(sum(weights)))
        total = sum(weights)
        return cls(tuple(s.label() for s in sources), tuple(rows), tuple(w / total for w in weights), max(slots, 1))

    @property
    def offsets(self) -> np.ndarray:
        """Where each source's rows start in the mixture's concatenated rows."""
        return np.concatenate([[0], np.cumsum(self.rows)]).astype(np.int64)


def slots(mix: Mix, seed: int) -> np.ndarray:
    """The source of each slot of a pass, before any shuffle (the same every pass)."""
    phases = np.random.default_rng([seed, 0x6D6978]).random(len(mix.shares))
    times, owners = [], []
    for i, share in enumerate(mix.shares):
        if share <= 0:
            continue
        k = np.arange(int(np.ceil(mix.epoch_rows * share)) + 2)
        times.append((k + phases[i]) / share)
        owners.append(np.full(len(k), i, dtype=np.int64))
    all_times, all_owners = np.concatenate(times), np.concatenate(owners)
    order = np.lexsort((all_owners, all_times))[: mix.epoch_rows]
    return all_owners[order]


class MixedOrder(GlobalOrder):
    """:class:`trainer.data.rows.GlobalOrder` over a mixture's slots: the same positions, world-size
    independence and rescaling; row ids index the sources' rows one after another."""

    def __init__(self, mix: Mix, world: int, rank: int, batch: int, seed: int, shuffle: bool) -> None:
        self.mix = mix
        self.base = slots(mix, seed)
        self.per_pass = np.bincount(self.base, minlength=len(mix.rows))
        """Slots of each source in every pass of the mixture."""
        self._schedules: dict[int, np.ndarray] = {}
        super().__init__(mix.epoch_rows, world, rank, batch, seed, shuffle)

    def schedule(self, epoch: int) -> np.ndarray:
        """The source of each slot of pass ``epoch``."""
        if epoch not in self._schedules:
            owners = self.base.copy()
            if self.shuffle:
                g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                for at in range(0, len(owners), BLOCK):
                    block = owners[at:at + BLOCK]
                    owners[at:at + BLOCK] = block[torch.randperm(len(block), generator=g).numpy()]
            self._schedules = {epoch: owners}  # the one in use (asked at every micro-step)
        return self._schedules[epoch]

    def _perm(self, epoch: int) -> list[int]:
        if self._cached is not None and self._cached[0] == epoch:
            return self._cached[1]
        owners = self.schedule(epoch)
        out = np.empty(len(owners), dtype=np.int64)
        offsets = self.mix.offsets
        for i, count in enumerate(self.per_pass.tolist()):
            at = np.flatnonzero(owners == i)
            draws = epoch * count + np.arange(count)  # this source's draws so far, over every pass of the mixture
            out[at] = offsets[i] + self._rows_of(i, draws)
        perm = out.tolist()
        self._cached = (epoch, perm)
        return perm

    def _rows_of(self, source: int, draws: np.ndarray) -> np.ndarray:
        size = self.mix.rows[source]
        if not len(draws):
            return draws
        passes, within = draws // size, draws % size
        out = np.empty(len(draws), dtype=np.int64)
        for p in np.unique(passes).tolist():
            chosen = passes == p
            if self.shuffle:
                g = torch.Generator().manual_seed((self.seed * 1_000_003 + source) * 7919 + p)
                order = torch.randperm(size, generator=g).numpy()
            else:
                order = np.arange(size)
            out[chosen] = order[within[chosen]]
        return out

    def source_counts(self, epoch: int, position: int) -> list[int]:
        """Rows taken from each source before global micro-batch ``position`` of pass ``epoch``."""
        taken = self.schedule(epoch)[: position * self.per_global]
        return (epoch * self.per_pass + np.bincount(taken, minlength=len(self.mix.rows))).tolist()
