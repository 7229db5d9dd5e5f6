"""Checkpoint files of one machine for gathers and copies (:class:`~launcher.backends.base.CheckpointFiles`):
a node through its agent, or this machine, where the agent's own functions run in a thread. What a
node answers is checked where it enters: plain file names, sizes that are counts, text that prints."""

from __future__ import annotations

import asyncio

from launcher.backends.agent import checkpoints as agent_checkpoints
from launcher.backends.agent import ckpt_files
from launcher.backends.agent_client import AgentLink
from launcher.backends.base import CheckpointListing, ExportResult, NodeError
from launcher.untrusted import printable
from trainer.wire.ckpt_digest import Differs
from trainer.wire.ckpt_layout import plain_name


def _differs(header: dict) -> tuple[Differs, ...]:
    """A node's ``ckpt_verify`` answer: ``[file, node, why]`` entries of another shape are left out."""
    found = header.get("differs")
    out = []
    for entry in found if isinstance(found, list) else ():
        if (isinstance(entry, list) and len(entry) == 3 and plain_name(entry[0]) and isinstance(entry[1], int)
                and not isinstance(entry[1], bool) and entry[1] >= 0 and isinstance(entry[2], str)):
            out.append(Differs(entry[0], entry[1], printable(entry[2])[:300]))
    return tuple(out)


def _free(header: dict) -> int:
    free = header.get("free")
    return free if isinstance(free, int) and not isinstance(free, bool) and free >= 0 else 0


def _files(header: dict) -> tuple[dict[str, int], str | None]:
    files = header.get("files")
    clean = {name: size for name, size in (files.items() if isinstance(files, dict) else ())
             if plain_name(name) and isinstance(size, int) and not isinstance(size, bool) and size >= 0}
    meta = header.get("meta")
    return clean, meta if isinstance(meta, str) else None


class NodeCheckpointFiles:
    """A node's checkpoint files through its agent (``env``: the job's variables, for ``$NAME`` in roots)."""

    def __init__(self, link: AgentLink, env: dict[str, str]) -> None:
        self.link, self.env = link, env
        self.label = link.label

    async def listing(self, root: str) -> CheckpointListing:
        try:
            header, _ = await self.link.call("ckpt_list", output_dir="", root=root, env=self.env)
        except NodeError as err:
            return CheckpointListing(self.link.rank, self.label, root, error=str(err))
        return CheckpointListing.from_wire(self.link.rank, self.label, root, header)

    async def files(self, root: str, name: str) -> tuple[dict[str, int], str | None]:
        header, _ = await self.link.call("ckpt_files", root=root, name=name, env=self.env)
        return _files(header)

    async def read(self, root: str, name: str, file: str, offset: int, limit: int) -> bytes:
        _, data = await self.link.call("ckpt_read", root=root, name=name, file=file, offset=offset, limit=limit,
                                       env=self.env)
        return data

    async def put(self, root: str, name: str, file: str, offset: int, data: bytes) -> None:
        await self.link.call("ckpt_put", data, root=root, name=name, file=file, offset=offset, env=self.env)

    async def seal(self, root: str, name: str, sums: dict[str, tuple[int, str]]) -> None:
        await self.link.call("ckpt_seal", root=root, name=name, sums={k: list(v) for k, v in sums.items()},
                             env=self.env)

    async def unpart(self, root: str, name: str, files: list[str] | None = None) -> None:
        await self.link.call("ckpt_unpart", root=root, name=name, env=self.env, files=files)

    async def drop(self, root: str, name: str, writer: str | None = None) -> None:
        await self.link.call("ckpt_drop", root=root, name=name, env=self.env, writer=writer)

    async def verify(self, root: str, name: str) -> tuple[Differs, ...]:
        header, _ = await self.link.call("ckpt_verify", root=root, name=name, env=self.env)
        return _differs(header)

    async def mark(self, root: str, name: str, differs: tuple[Differs, ...]) -> None:
        await self.link.call("ckpt_mark", root=root, name=name, differs=[[d.file, d.node] for d in differs],
                             env=self.env)

    async def forget(self, root: str, name: str, files: list[str]) -> None:
        await self.link.call("ckpt_forget", root=root, name=name, files=files, env=self.env)

    async def room(self, root: str) -> int:
        header, _ = await self.link.call("ckpt_room", root=root, env=self.env)
        return _free(header)

    # -- straight from node to node (DirectCopy) -------------------------------------------------

    async def listen(self, root: str, name: str, sizes: dict[str, int], timeout_s: float) -> tuple[int, str]:
        header, _ = await self.link.call("ckpt_listen", root=root, name=name, sizes=sizes, timeout=timeout_s,
                                         env=self.env)
        port, token = header.get("port"), header.get("token")
        if not isinstance(port, int) or not isinstance(token, str):
            raise NodeError(f"{self.label}: its agent did not say where to send the copy")
        return port, token

    async def received(self, token: str) -> dict[str, str]:
        """Each received file's SHA-256, once the reception ended; ``NodeError`` with why it failed."""
        while True:
            header, _ = await self.link.call("ckpt_received", token=token, wait=5.0)
            if header.get("state") == "done":
                sums = header.get("sums")
                return {k: v for k, v in sums.items() if isinstance(v, str)} if isinstance(sums, dict) else {}
            if header.get("state") != "waiting":
                raise NodeError(f"{self.label}: the direct copy failed: {header.get('error') or 'no reason given'}")

    async def send(self, root: str, name: str, sizes: dict[str, int], addr: str, port: int, token: str,
                   timeout_s: float) -> dict[str, str]:
        header, _ = await self.link.call("ckpt_send", root=root, name=name, sizes=sizes, addr=addr, port=port,
                                         token=token, timeout=timeout_s, env=self.env)
        sums = header.get("sums")
        return {k: v for k, v in sums.items() if isinstance(v, str)} if isinstance(sums, dict) else {}


class HereCheckpointFiles:
    """This machine's checkpoint files (``gather_to: here``): the agent's functions, run in a thread."""

    label = "this machine"

    async def listing(self, root: str) -> CheckpointListing:
        data = await asyncio.to_thread(agent_checkpoints.listing, "", {}, "/", root)
        return CheckpointListing.from_wire(-1, self.label, root, data)

    async def files(self, root: str, name: str) -> tuple[dict[str, int], str | None]:
        return _files(await self._call(ckpt_files.files, root, name))

    async def read(self, root: str, name: str, file: str, offset: int, limit: int) -> bytes:
        return await self._call(ckpt_files.read, root, name, file, offset, limit)

    async def put(self, root: str, name: str, file: str, offset: int, data: bytes) -> None:
        await self._call(ckpt_files.put, root, name, file, offset, data)

    async def seal(self, root: str, name: str, sums: dict[str, tuple[int, str]]) -> None:
        await self._call(ckpt_files.seal, root, name, sums)

    async def unpart(self, root: str, name: str, files: list[str] | None = None) -> None:
        await self._call(ckpt_files.unpart, root, name, files)

    async def drop(self, root: str, name: str, writer: str | None = None) -> None:
        await self._call(ckpt_files.drop, root, name, writer)

    async def verify(self, root: str, name: str) -> tuple[Differs, ...]:
        return _differs(await self._call(ckpt_files.verify, root, name))

    async def mark(self, root: str, name: str, differs: tuple[Differs, ...]) -> None:
        await self._call(ckpt_files.mark, root, name, [[d.file, d.node] for d in differs])

    async def forget(self, root: str, name: str, files: list[str]) -> None:
        await self._call(ckpt_files.forget, root, name, files)

    async def room(self, root: str) -> int:
        return _free(await self._call(ckpt_files.room, root))

    async def _call(self, fn, *args):
        try:
            return await asyncio.to_thread(fn, *args)
        except (OSError, ValueError) as err:
            raise NodeError(f"{self.label}: {err}") from None


def export_here(root: str, name: str, copy_to: str | None, merged: bool = False) -> ExportResult:
    """``python -m trainer.export`` on this machine (a copy kept here); ``NodeError`` when this machine's
    Python has no torch (export on a node instead: ``gather_to: node0``)."""
    import shutil
    import sys
    from pathlib import Path

    try:
        done = agent_checkpoints.export("", {}, "/", name, sys.executable, str(Path(__file__).resolve().parents[2]),
                                        3600.0, merged=merged, root=root)
    except (OSError, ValueError) as err:
        raise NodeError(f"this machine: {err}") from None
    result = ExportResult(done["path"], tuple(done["files"]), merged=done.get("merged") or None)
    if copy_to is None:
        return result
    shutil.copytree(done["path"], copy_to)
    merged_copy = None
    if result.merged:
        merged_copy = copy_to + "-merged"
        shutil.copytree(result.merged, merged_copy)
    return ExportResult(result.path, result.files, copy_to, merged=result.merged, merged_copy=merged_copy)
