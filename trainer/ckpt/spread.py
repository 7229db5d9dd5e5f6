"""A whole checkpoint on every node before a resume, when only node 0 keeps one.

With one disk per node the launcher gathers each checkpoint into one place (node 0 by default): a
resume on several nodes, or on other nodes than the ones that saved it, finds it whole on node 0 only.
DCP reads any shard from any rank (that is how it reshards), so every node needs the whole folder.
Nodes that lack it receive it from rank 0 over the job's own network (a gloo group of rank 0 and one
rank per such node: no SSH between nodes needed), into ``<checkpoints>/.incoming-<name>`` on their
own disk; it is checked by the same rule as any checkpoint (its bytes against the trainer's digests
too), loaded, and removed after the load.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable

import torch
import torch.distributed as dist

from trainer.parallel import Dist
from trainer.wire import ckpt_digest, ckpt_layout, ckpt_paths
from trainer.wire.ckpt_layout import INCOMING_PREFIX

CHUNK = 32 << 20
"""Bytes per broadcast: large enough to keep the link busy, small enough for any host's memory."""


def node_index(d: Dist) -> int:
    """The node this rank runs on, as the launcher counts them (torchrun's group rank)."""
    for name in ("GROUP_RANK", "NODE_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return d.rank // max(d.local_world, 1)


def local_copy(path: str, root: str, d: Dist) -> tuple[str, Callable[[], None]]:
    """The folder this rank loads ``path`` from, and what to call (on every rank) once loaded: ``path``
    where this node sees it whole, else a copy received from rank 0 under ``root``. Collective."""
    if ckpt_paths.url_scheme(path):
        return path, lambda: None  # a bucket: every rank reads it directly
    seen: list = [None] * d.world
    dist.all_gather_object(seen, (node_index(d), ckpt_layout.is_complete(path)))
    needy = sorted({node for node, whole in seen if not whole})
    if not needy:
        return path, lambda: None
    leaders = [min(r for r, (node, _) in enumerate(seen) if node == n) for n in needy]
    if 0 in leaders:
        raise RuntimeError(f"{path}: rank 0 holds no whole copy to send")  # rank 0 chose it as whole
    members = [0, *leaders]
    group = dist.new_group(members, backend="gloo")  # every rank takes part in making it
    listing: list = [sorted(ckpt_layout.folder_files(path).items()) if d.rank == 0 else None]
    dist.broadcast_object_list(listing, src=0)
    incoming = os.path.join(root, INCOMING_PREFIX + os.path.basename(os.path.normpath(path)))
    mine = node_index(d) in needy
    if d.rank in members:
        _send_or_receive(path, incoming, listing[0], d.rank, d.rank in leaders, group)
    dist.barrier()
    if mine and not ckpt_layout.is_complete(incoming):
        raise RuntimeError(f"{incoming}: the copy of {path} received from node 0 is not whole: "
                           f"{ckpt_layout.wholeness(incoming).why_not()}")
    differs = ckpt_digest.verify(incoming, ckpt_layout.read_meta(incoming)) if d.rank in leaders else ()
    said: list = [None] * d.world
    dist.all_gather_object(said, (node_index(d), ckpt_digest.words(differs) if differs else ""))
    bad = [(node, words) for node, words in said if words]
    if bad:  # every rank stops with the same words, not one rank while the others wait in the load
        node, words = bad[0]
        raise RuntimeError(f"the copy of {path} node {node} received from node 0 is not what the trainer wrote: "
                           f"{words}")
    if d.rank == 0 and d.local_rank == 0:
        print(f"sent {path} ({sum(s for _, s in listing[0]) / 2**20:.1f} MiB) to node{'s' if len(needy) > 1 else ''} "
              f"{', '.join(map(str, needy))} for the resume", flush=True)

    def done() -> None:
        dist.barrier()  # every rank has loaded
        if d.rank in leaders:
            shutil.rmtree(incoming, ignore_errors=True)
        dist.destroy_process_group(group)

    return (incoming if mine else path), done


def _send_or_receive(path: str, incoming: str, files: list[tuple[str, int]], rank: int, leader: bool,
                     group) -> None:
    """Every file of ``path``, chunk by chunk, from rank 0 to the leaders (written under ``incoming``)."""
    if leader:
        shutil.rmtree(incoming, ignore_errors=True)
        os.makedirs(incoming)
    for name, size in files:
        with contextlib.ExitStack() as files_open:
            source = files_open.enter_context(open(os.path.join(path, name), "rb")) if rank == 0 else None
            target = files_open.enter_context(open(os.path.join(incoming, name), "wb")) if leader else None
            for offset in range(0, size, CHUNK):
                count = min(CHUNK, size - offset)
                if source is not None:
                    chunk = torch.frombuffer(bytearray(source.read(count)), dtype=torch.uint8)
                else:
                    chunk = torch.empty(count, dtype=torch.uint8)
                dist.broadcast(chunk, src=0, group=group)
                if target is not None:
                    target.write(chunk.numpy().tobytes())
