"""The parts the steps are given, each as a type: the model with what updates it, the data with its
order, what runs around the steps. The checkpoints and the resume's proof are the checkpoint room's
(:class:`trainer.ckpt.run.Checkpoints`, :class:`trainer.ckpt.resume_facts.ResumeWatch`), built on this
room: the steps know them by the protocols here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from trainer.data.dataset import RunData
from trainer.data.rows import GlobalOrder
from trainer.loop.metrics import MetricsLogger
from trainer.loop.samples import Sampler
from trainer.loop.train import StepResult
from trainer.wire.protocol import ResumeCheck


@dataclass(frozen=True)
class Trained:
    """The model the steps train and what updates it."""

    net: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    compiled: bool = False
    """Its decoder blocks are compiled (the steps say when a step compiled again)."""


@dataclass(frozen=True)
class Data:
    """The run's data: the tokenizer, the rows, their order over the ranks and the run's length."""

    tokenizer: Any
    """A Hugging Face tokenizer."""
    rows: RunData
    order: GlobalOrder
    total: int
    """Optimiser steps of the whole run."""


class Saves(Protocol):
    """The run's checkpoints as the steps ask for them (:class:`trainer.ckpt.run.Checkpoints`)."""

    @property
    def saved_step(self) -> int | None:
        """The step of the checkpoint this run last saved or resumed from."""
        ...

    def save(self, step: int) -> float:
        """Start a save of ``step``; the seconds it blocked training."""
        ...

    def save_once(self, step: int) -> None:
        """Save ``step`` unless it is saved already."""
        ...

    def wait_staged(self) -> tuple[float, float] | None:
        """An async save's copy done before the optimiser changes the weights."""
        ...

    def close(self) -> None:
        """Every save complete and finalised."""
        ...


class ResumeProof(Protocol):
    """What a resume must continue, as the steps feed it (:class:`trainer.ckpt.resume_facts.ResumeWatch`)."""

    def logged(self, loss: float) -> None:
        ...

    def first_step(self, result: StepResult, logged_loss: float | None) -> ResumeCheck | None:
        ...


@dataclass(frozen=True)
class Around:
    """What runs around the steps: the metrics, the checkpoints, the resume's proof, the samples."""

    log: MetricsLogger
    saves: Saves
    proof: ResumeProof
    sampler: Sampler | None = None
