"""``metrics.idle_policy``: when a running run's GPUs count as idle, and whether to stop it then."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from trainer.wire.yaml_words import WordsAsWritten


class IdlePolicy(WordsAsWritten):
    """A run whose every GPU (from the nodes' ``nvidia-smi`` samples) stays under ``below_pct`` for
    ``for_s`` while it runs is flagged (monitor, ``runs``, ``show``, the ``idle`` notification); with
    ``stop_after_s`` it is then stopped, so a hung loop does not hold GPUs for hours. CPU-only nodes
    send no samples: nothing is flagged there."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    below_pct: float = Field(default=5.0, ge=0, le=100)
    """Utilisation (percent) under which a GPU counts as idle."""
    for_s: float = Field(default=600.0, gt=0, le=7 * 86400)
    """How long every GPU must stay idle before the run is flagged."""
    stop_after_s: float | None = Field(default=None, ge=0, le=7 * 86400)
    """Stop (cancel) the run this long after it was flagged and is still idle; none: only flag it."""
