"""Whose a checkpoint is, and what a run may do with the checkpoints it finds: the one rule the trainer,
the node agent and the launcher ask (standard library only; the agent carries it beside
``ckpt_layout.py``).

- A checkpoint is its **writer's**: the run id its ``meta.json`` records.
- A run may **read** (resume from, list, show) its own checkpoints and those of the runs it continues,
  its **lineage**: ``checkpoint.resume_runs``, recorded when the run was launched (``fsdp-tui resume``,
  the checkpoints screen's ``r``, or a launch whose ``resume: auto`` continues another run and says so).
- A run may **delete, prune, move or rename only its own**, and never its own newest whole one (its
  safe step): ``keep_last`` counts the run's own checkpoints only; another run's are never in its count.
- A copy a run makes of another run's checkpoint for itself (to resume on another node 0) is the run's
  own copy: the run removes it when it ends; nothing else touches the original.

A checkpoint with no recorded writer (one the trainer saved outside fsdp-tui, or a save that never wrote
its ``meta.json``) is nobody's run's: a trainer run by hand (no run id) owns it, and a run owns it only
in a folder no other run writes into (``output_dir`` relative, or naming ``$FSDP_TUI_RUN_ID``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

RUN_ID_VAR = "FSDP_TUI_RUN_ID"

Whose = Literal["own", "continued", "other"]


class Listed(Protocol):
    """What the rule needs of a listed checkpoint (:class:`trainer.wire.ckpt_layout.CheckpointInfo`)."""

    @property
    def run_id(self) -> str | None: ...
    @property
    def complete(self) -> bool: ...
    @property
    def step(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def link(self) -> bool: ...


C = TypeVar("C", bound=Listed)


@dataclass(frozen=True)
class Lineage:
    """One run's claim on checkpoints: itself, the runs it continues, and whether its folder is its alone."""

    run_id: str | None
    """The acting run (``None``: a trainer run by hand, outside fsdp-tui)."""
    continues: tuple[str, ...] = ()
    """The runs it continues, newest first (``checkpoint.resume_runs``)."""
    private: bool = False
    """Its ``output_dir`` is a folder no other run writes into: a checkpoint there with no recorded writer
    is its own."""

    @classmethod
    def of(cls, run_id: str | None, resume_runs: object = (), output_dir: str | None = None) -> Lineage:
        """From the run's id, its ``checkpoint.resume_runs`` as written and its ``output_dir`` as written."""
        runs = resume_runs if isinstance(resume_runs, (list, tuple)) else ()
        continues = tuple(dict.fromkeys(r for r in runs if isinstance(r, str) and r and r != run_id))
        return cls(run_id or None, continues, private_folder(output_dir))

    def whose(self, c: Listed) -> Whose:
        if c.run_id is None:
            return "own" if self.run_id is None or self.private else "other"
        if c.run_id == self.run_id:
            return "own"
        return "continued" if c.run_id in self.continues else "other"

    def owns(self, c: Listed) -> bool:
        return self.whose(c) == "own"

    def may_read(self, c: Listed) -> bool:
        return self.whose(c) != "other"

    def with_run(self, run_id: str) -> Lineage:
        """This lineage continuing ``run_id`` too (a launch whose ``resume: auto`` continues it)."""
        return Lineage(self.run_id, tuple(dict.fromkeys((run_id, *self.continues))), self.private)


def private_folder(output_dir: str | None) -> bool:
    """Whether ``output_dir`` (as written, before the node expands it) is a folder no other run writes
    into: relative (inside the run's own folder on the node) or naming ``$FSDP_TUI_RUN_ID``."""
    if not isinstance(output_dir, str) or not output_dir:
        return False
    if f"${RUN_ID_VAR}" in output_dir or f"${{{RUN_ID_VAR}}}" in output_dir:
        return True
    return inside_run_folder(output_dir)


def inside_run_folder(output_dir: str | None) -> bool:
    """Whether ``output_dir`` is relative: inside the run's own folder on each node (gone with it)."""
    return (isinstance(output_dir, str) and bool(output_dir) and not output_dir.startswith(("/", "~", "$"))
            and "://" not in output_dir)


def whose_words(c: Listed, lineage: Lineage) -> str:
    """``this run's``, ``run B's (continued)`` or ``run B's``, as listings show it."""
    who = lineage.whose(c)
    if who == "own":
        return "this run's"
    name = f"run {c.run_id}'s" if c.run_id else "an unrecorded run's"
    return f"{name} (continued)" if who == "continued" else name


def own(ckpts: Iterable[C], lineage: Lineage) -> list[C]:
    return [c for c in ckpts if lineage.owns(c)]


def readable(ckpts: Iterable[C], lineage: Lineage) -> list[C]:
    return [c for c in ckpts if lineage.may_read(c)]


def whole(ckpts: Iterable[C]) -> list[C]:
    """The complete ones (whole, resumable), in their order."""
    return [c for c in ckpts if c.complete]


def newest_whole(ckpts: Sequence[C]) -> C | None:
    """The newest complete checkpoint of ``ckpts`` (listed oldest first)."""
    done = whole(ckpts)
    return done[-1] if done else None


def safe_step(ckpts: Sequence[C], lineage: Lineage) -> C | None:
    """The run's safe step: its own newest whole checkpoint (another run's is never its safe step)."""
    return newest_whole(own(ckpts, lineage))


def to_prune(ckpts: Sequence[C], lineage: Lineage, keep_last: int | None, keep: Iterable[str] = ()) -> list[C]:
    """``keep_last``: the run's own whole checkpoints beyond its newest ``keep_last`` (never its newest
    whole one; never one named in ``keep``: a copy brought to resume from). Another run's checkpoints,
    the ones this run continues among them, are never in the count and never pruned."""
    if not keep_last:
        return []
    kept = set(keep)
    mine = [c for c in whole(own(ckpts, lineage)) if not c.link]
    old = mine[: max(0, len(mine) - max(keep_last, 1))]
    return [c for c in old if c.name not in kept]


def why_kept(ckpts: Sequence[Listed], target: Listed, lineage: Lineage) -> str:
    """Why the run may not delete ``target`` ("" when it may): another run's, or its own safe step."""
    if not lineage.owns(target):
        who = f"run {target.run_id}'s" if target.run_id else "not recorded as this run's (no meta.json names it)"
        return f"{target.name} is {who}: only its own run deletes it"
    newest = safe_step(ckpts, lineage)
    if newest is not None and newest.path == target.path:
        return f"{target.path} is the newest complete checkpoint: it is kept (resume needs it)"
    return ""


def resume_from(ckpts: Sequence[C], lineage: Lineage, *, step: int | None = None,
                name: str | None = None, own_only: bool = False) -> C | None:
    """What a resume may read: the newest whole checkpoint of the run or its lineage (its own only with
    ``own_only``), of ``step`` or named ``name`` when given."""
    allowed = own(ckpts, lineage) if own_only else readable(ckpts, lineage)
    done = [c for c in whole(allowed) if (step is None or c.step == step) and (name is None or c.name == name)]
    return done[-1] if done else None


def resume_candidates(ckpts: Sequence[C], lineage: Lineage) -> list[C]:
    """``resume: auto``'s choices, best first: the whole checkpoints of the run and its lineage, newest
    first (the first whose bytes check out is the one)."""
    return list(reversed(whole(readable(ckpts, lineage))))


def auto_continues(ckpts: Sequence[C], run_id: str | None) -> C | None:
    """What a new run's ``resume: auto`` would continue in a shared folder: its newest whole checkpoint when
    another recorded run wrote it (the launch names that run in the new run's lineage); ``None`` when there
    is none, it is the run's own (a retry's), or it names no run (never read: the run starts afresh)."""
    newest = newest_whole(ckpts)
    return None if newest is None or newest.run_id is None or newest.run_id == run_id else newest


def nothing_left(step: int, max_steps: int | None) -> bool:
    """A checkpoint of ``step`` leaves nothing to train for a run of ``max_steps`` steps."""
    return max_steps is not None and max_steps > 0 and step >= max_steps
