"""The nodes a run's owner replaced after a failure, as the run's record keeps them (``swaps.json``, written
only by the owner through :mod:`launcher.runs.core.layout`, read by ``show``, the monitor, MLflow and the
notifications).

A swap itself (:class:`~launcher.events.swaps.Swap`) lives with the run events, since ``NodeSwapped``
carries it; here the owner settles one once the first step after it came.
"""

from __future__ import annotations

from dataclasses import replace

from launcher.events.swaps import Swap

__all__ = ["Swap", "settled"]


def settled(swap: Swap, at: float, step: int, verdict: str, differs: tuple[str, ...] = ()) -> Swap:
    """``swap`` once its first step came (``verdict``: the resume check's, or ``none``)."""
    return replace(swap, resumed_at=at, resumed_step=step, verdict=verdict, differs=differs)
