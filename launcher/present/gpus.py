"""Who holds GPU memory on a node, in words: the same in ``fsdp-tui gpus`` and the app's GPU screen, each
naming its own way to stop a leftover."""

from __future__ import annotations

from collections.abc import Mapping


def whose(run_id: str | None, states: Mapping[str, str | None], stop: str = "--stop") -> str:
    """Who a process of run ``run_id`` (a holder's tag; ``None``: not ours) belongs to: not ours, a run this
    data dir does not know, a live run of ours, or an ended one's leftover. ``states`` as
    :attr:`launcher.api.nodes.GpuHolders.states`; ``stop``: what stops a leftover where this is said."""
    if not run_id:
        return "not ours"
    state = states.get(run_id)
    if state is None:
        return f"run {run_id} (not in this data dir)"
    return f"run {run_id} ({state}: a leftover, {stop} stops it)" if state else f"run {run_id} (running)"
