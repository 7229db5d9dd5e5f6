"""A checkpoint listing's "complete" column, the same in ``fsdp-tui ckpt list`` and the checkpoints screen."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.api.checkpoints import CheckpointInfo


def completeness(c: CheckpointInfo) -> str:
    """The "complete" column: ``yes``, ``NO`` (with the nodes whose shards are missing), or ``link`` for
    an entry that is a symbolic link (never followed, never resumed from)."""
    if c.link:
        return "link"
    if c.complete:
        return "yes"
    nodes = c.missing_nodes
    return f"NO (node {', '.join(map(str, nodes))})" if nodes else "NO"
