"""Checkpoint folders of several "hosts", each a folder here, reached through the node agent's own functions:
what the trainer leaves after a save (its shards on each node's disk, ``meta.json`` with the writer, sizes
and digests on node 0), and the part of a backend the gathers and copies use. For fast tests of the
gathers, the copies and the ownership rule without sshd or torch."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from launcher.backends.base import CheckpointListing, NodeLost
from launcher.backends.ckpt_files import HereCheckpointFiles

SHARDS = {"__0_0.distcp": (100, 0), "__1_0.distcp": (120, 0), "__2_0.distcp": (90, 1), "__3_0.distcp": (80, 1)}
"""file -> (bytes, node): two ranks per node, two nodes."""


class NodeFiles(HereCheckpointFiles):
    """One host's disk, a folder here, through the agent's functions; ``lose_after`` bytes read, it dies."""

    def __init__(self, rank: int, lose_after: int | None = None, label: str | None = None) -> None:
        self.rank, self.lose_after, self.sent = rank, lose_after, 0
        self.label = label or f"node {rank} (n{rank})"

    async def read(self, root, name, file, offset, limit):
        if self.lose_after is not None and self.sent + limit > self.lose_after:
            raise NodeLost(f"{self.label}: lost: no connection for 8 s (connection refused)", self.rank)
        self.sent += limit
        return await super().read(root, name, file, offset, limit)


class Disks:
    """The part of a backend the gathers use: each node's listing and files, one folder per node."""

    def __init__(self, roots: list[Path], files: list[NodeFiles]) -> None:
        self.roots, self.files = roots, files

    async def checkpoints(self, output_dir: str, rank: int = 0, root: str | None = None) -> CheckpointListing:
        return await self.files[rank].listing(root or str(self.roots[rank]))

    def checkpoint_files(self, rank: int) -> NodeFiles:
        return self.files[rank]


def shard_bytes(step: int, file: str, size: int, run_id: str | None) -> bytes:
    """A shard's content: different for every step, file and run."""
    seed = hashlib.sha256(f"{run_id}/{step}/{file}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def meta_text(step: int, run_id: str | None, shards: dict[str, tuple[int, int]] | None = None,
              digests: dict[str, str] | None = None, **extra) -> str:
    """``meta.json`` as the trainer writes it (``digests``: file -> SHA-256, ``.metadata`` included)."""
    shards = SHARDS if shards is None else shards
    digests = digests or {}
    listed = {f: {"bytes": b, "node": n, **({"sha256": digests[f]} if f in digests else {})}
              for f, (b, n) in shards.items()}
    top = {"metadata_sha256": digests[".metadata"]} if ".metadata" in digests else {}
    return json.dumps({"step": step, "model_name": "m", **({"run_id": run_id} if run_id else {}), "shards": listed,
                       **top, **extra})


def save(roots: list[Path], step: int, run_id: str | None = None, *, name: str | None = None,
         digests: bool = True, shards: dict[str, tuple[int, int]] | None = None) -> str:
    """What the trainer leaves after a save on nodes with their own disks (``roots[r]`` is node r's
    checkpoints folder; a node shares node 0's disk when its root is the same folder)."""
    name = name or f"step-{step:08d}"
    shards = {f: (b, min(n, len(roots) - 1)) for f, (b, n) in (SHARDS if shards is None else shards).items()}
    sums = {}
    for file, (size, node) in shards.items():
        folder = roots[node] / name
        folder.mkdir(parents=True, exist_ok=True)
        data = shard_bytes(step, file, size, run_id)
        (folder / file).write_bytes(data)
        sums[file] = hashlib.sha256(data).hexdigest()
    (roots[0] / name).mkdir(parents=True, exist_ok=True)
    (roots[0] / name / ".metadata").write_bytes(b"m" * 5)
    sums[".metadata"] = hashlib.sha256(b"m" * 5).hexdigest()
    (roots[0] / name / "meta.json").write_text(meta_text(step, run_id, shards, sums if digests else None))
    return name
