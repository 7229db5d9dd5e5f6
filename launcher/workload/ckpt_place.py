"""Where a run's checkpoints land, as found on its nodes, and where whole copies are kept. Pure.

A launch (and the doctor) asks the nodes, never the path: node 0 writes a marker in its checkpoints
folder and every other node looks for it in its own (:meth:`Backend.checkpoint_place`). The answer is
recorded in the run's plan, and every checkpoint tool reads it from there:

- ``shared``: every node sees node 0's folder (one disk: NFS, a shared home, one machine); a save is
  whole as soon as the trainer ends it.
- ``per_node``: some nodes write elsewhere (their own disks, or a relative ``output_dir``, which is
  inside each node's run directory); after each save the launcher gathers the shards into the holder
  named by ``parameters.checkpoint.gather_to``.
- ``bucket``: ``output_dir`` is a URL (``s3://...``); every rank writes and reads it directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

PlaceKind = Literal["shared", "per_node", "bucket", "unchecked"]


@dataclass(frozen=True)
class Holder:
    """Where whole copies of a run's checkpoints are kept: a node's folder, or this machine."""

    node: int | None
    """The node (its rank in the run); ``None``: this machine (where fsdp-tui runs)."""
    root: str
    """The folder of ``step-*`` checkpoints there; empty for this machine's default (the run's record)."""
    gathered: bool = True
    """Copies are made there by the launcher (``False``: where the trainer's rank 0 wrote them)."""

    def words(self) -> str:
        where = "this machine" if self.node is None else f"node {self.node}"
        return f"{where}: {self.root}" if self.root else f"{where} (the run's record folder)"


@dataclass(frozen=True)
class CheckpointPlace:
    """What the nodes said of ``output_dir``, and what follows for the run's checkpoints."""

    kind: PlaceKind
    output_dir: str
    roots: tuple[str, ...] = ()
    """Each node's checkpoints folder, as it resolves ``output_dir`` (a bucket: the URL, once)."""
    shares: tuple[bool, ...] = ()
    """Per node: it sees node 0's folder (node 0 itself: ``True``)."""
    holder: Holder | None = None
    """Where the whole checkpoints are: node 0's folder, or the gather target."""
    detail: str = ""
    """Why it is ``unchecked`` (a node did not answer), or what else was seen."""

    @property
    def gathers(self) -> bool:
        """The launcher copies shards after each save (some node writes elsewhere, or the holder is not
        node 0's folder)."""
        return self.kind == "per_node" and self.holder is not None and self.holder.gathered

    def separate_nodes(self) -> tuple[int, ...]:
        """Nodes whose shards do not land in node 0's folder."""
        return tuple(rank for rank, same in enumerate(self.shares) if not same)

    def words(self) -> str:
        """One line for the dry run, the doctor and ``show``."""
        if self.kind == "bucket":
            return f"a bucket ({self.output_dir}): every node writes and reads it directly"
        if self.kind == "unchecked":
            return f"not checked ({self.detail})" if self.detail else "not checked"
        if self.kind == "shared":
            why = f" ({self.detail})" if self.detail else ""
            return f"one place every node sees: {self.roots[0] if self.roots else self.output_dir}{why}"
        apart = self.separate_nodes()
        who = ", ".join(f"node {n}" for n in apart)
        return (f"one folder per node ({who} apart from node 0's): each save's shards are gathered into "
                f"{self.holder_words()} after the save, verified, off the training path")

    def holder_words(self) -> str:
        """Where the whole copies are, in words."""
        node0 = self.roots[0] if self.roots else self.output_dir
        h = self.holder
        if h is None or (h.node == 0 and h.root == node0):
            return f"node 0's folder ({node0})"
        return h.words()


def parse_gather_to(value: str, node0_root: str) -> Holder:
    """``parameters.checkpoint.gather_to`` (validated by the trainer's schema) as a holder."""
    if value in ("node0", ""):
        return Holder(0, node0_root, gathered=True)
    if value == "here":
        return Holder(None, "")
    if value.startswith("here:"):
        return Holder(None, value[len("here:"):])
    match = re.fullmatch(r"node([0-9]+):(.+)", value)
    if match is None:
        raise ValueError(f"parameters.checkpoint.gather_to: '{value}' is not a place")
    return Holder(int(match.group(1)), match.group(2))


def with_holder(place: CheckpointPlace, gather_to: str | None) -> CheckpointPlace:
    """The place with its holder: node 0's own folder unless the nodes keep separate folders and
    ``gather_to`` names another place."""
    node0 = place.roots[0] if place.roots else place.output_dir
    if place.kind != "per_node":
        return replace(place, holder=Holder(0, node0, gathered=False))
    return replace(place, holder=parse_gather_to(gather_to or "node0", node0))


def place_to_json(place: CheckpointPlace | None) -> dict | None:
    if place is None:
        return None
    holder = place.holder
    return {"kind": place.kind, "output_dir": place.output_dir, "roots": list(place.roots),
            "shares": list(place.shares), "detail": place.detail,
            "holder": None if holder is None else {"node": holder.node, "root": holder.root,
                                                   "gathered": holder.gathered}}


def place_from_json(data: object) -> CheckpointPlace | None:
    if not isinstance(data, dict):
        return None
    h = data.get("holder")
    holder = Holder(h.get("node"), h.get("root", ""), h.get("gathered", True)) if isinstance(h, dict) else None
    return CheckpointPlace(data.get("kind", "unchecked"), data.get("output_dir", ""), tuple(data.get("roots", ())),
                           tuple(data.get("shares", ())), holder, data.get("detail", ""))


def judge_marks(output_dir: str, roots: list[str], seen: list[bool | None], errors: list[str]) -> CheckpointPlace:
    """The place from what each node said: ``seen[i]`` whether node i found node 0's marker (``None``:
    it could not be asked, ``errors[i]`` says why)."""
    failed = [f"node {i} did not answer ({e})" for i, e in enumerate(errors) if e]
    if failed:
        return CheckpointPlace("unchecked", output_dir, tuple(roots), detail="; ".join(failed))
    shares = tuple(bool(s) for s in seen)
    kind: PlaceKind = "shared" if all(shares) else "per_node"
    return CheckpointPlace(kind, output_dir, tuple(roots), shares)
