"""Folders through one node's agent, in chunks, size- and hash-checked, so no node needs SFTP: a tar
shipped up and unpacked there (the code snapshot, the trainer), a folder fetched back here (an export).
The tars on this machine's side are :mod:`launcher.backends.shipping`'s."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from launcher.backends.agent_client import AgentError, AgentLink
from launcher.backends.base import NodeError
from launcher.backends.shipping import UPLOAD_CHUNK, Tree, append, download_file, read_chunk, unpack_here
from launcher.words import plural


async def upload(link: AgentLink, tree: Tree) -> None:
    """A tar from disk to a node, one chunk in memory at a time, unpacked there once its hash matches."""
    for offset in range(0, max(tree.size, 1), UPLOAD_CHUNK):
        chunk = await asyncio.to_thread(read_chunk, tree.path, offset)
        await link.call("put", chunk, name=tree.name, offset=offset)
    try:
        await link.call("unpack", name=tree.name, total=tree.size, sha256=tree.sha256, dest=tree.dest)
    except AgentError as err:
        raise NodeError(f"{err} (shipping {tree.dest}/ to {link.label})") from None


async def fetch_tree(link: AgentLink, remote: str, to: Path) -> Path:
    """Copy a node's folder ``remote`` to ``to`` here: a tar through the agent, written to a file beside
    ``to`` as it arrives (never more than the size the node announced), hash-checked, then unpacked by
    the agent's own rule."""
    tar_path = await asyncio.to_thread(download_file, to)
    try:
        header, _ = await link.call("pack", path=remote, name=".download.tar")
        size, sha256 = header.get("size"), header.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(sha256, str):
            raise NodeError(f"{link.label}: the export's copy came without its size and hash; try again")
        digest, offset = hashlib.sha256(), 0
        while offset < size:
            _, data = await link.call("read", name=".download.tar", offset=offset,
                                      limit=min(UPLOAD_CHUNK, size - offset))
            if not data:
                raise NodeError(f"{link.label}: the export's copy ended at {offset:,} of {plural(size, 'byte')}")
            digest.update(data)
            await asyncio.to_thread(append, tar_path, data)
            offset += len(data)
        if digest.hexdigest() != sha256:
            raise NodeError(f"{link.label}: the export's copy arrived damaged; try again")
        return await asyncio.to_thread(unpack_here, tar_path, to, link.label)
    finally:
        await asyncio.to_thread(tar_path.unlink, missing_ok=True)
