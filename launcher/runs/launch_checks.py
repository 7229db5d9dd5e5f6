"""What a launch asks before anything of it is recorded, every question at once: why it cannot start (a
secret with no value here, a node refused for a reason only the user can change, a quarantined host, the
cheap checks every launch runs, a bucket the run cannot write to), and what its ``resume: auto`` would
continue (node 0's checkpoints). A node that does not answer yet is no refusal."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.runs.core.continuing import Continuation, auto_may_continue, continued_by
from launcher.runs.launch import PLACE_TIMEOUT_S
from launcher.words import node_at
from launcher.workload.plan import RunPlan

if TYPE_CHECKING:
    from launcher.backends.base import Reach


async def continuation_of(plan: RunPlan) -> Continuation | None:
    """What ``plan``'s ``resume: auto`` would continue: another run's newest whole checkpoint in node 0's
    folder, as the job will see it (asked of node 0; ``None`` when the node cannot say: the trainer then
    reads only the run's own checkpoints and starts afresh)."""
    from launcher.backends.base import NodeError
    from launcher.backends.registry import backend_for

    if not auto_may_continue(plan) or plan.output_dir is None:
        return None
    backend = backend_for(plan)
    try:
        listing = await asyncio.wait_for(backend.checkpoints(plan.output_dir, 0), PLACE_TIMEOUT_S)
    except (NodeError, asyncio.TimeoutError):
        return None
    finally:
        await backend.close()
    return None if listing.error else continued_by(plan, listing.checkpoints)


async def reach_nodes(plan: RunPlan, timeout_s: float = 5.0) -> list[Reach]:
    """Every node's answer to a cheap connect (host key verified), all at once; nothing starts there."""
    from launcher.backends.registry import backend_for

    backend = backend_for(plan)
    try:
        return list(await asyncio.gather(*(backend.reach(n.node_rank, timeout_s) for n in plan.nodes)))
    finally:
        await backend.close()


async def launch_refusals(plan: RunPlan, home: Path, *, force: bool = False) -> tuple[list[str], bool]:
    """Why ``plan`` cannot start, found before anything of it is recorded: a secret with no value here, a
    node refused for a reason only the user can change (an unknown or changed host key, a refused key), and,
    unless ``force``, the cheap checks every launch runs (no torch where the built-in trainer runs, fewer
    GPUs than processes, an unwritable ``output_dir``, a bucket the run's credentials cannot write to).
    Empty: launch. A node that does not answer yet is no refusal: the run's owner waits for it as for any
    dropped connection. Also whether the cheap checks ran on every node (then the owner need not run them
    again)."""
    from launcher.backends.registry import backend_for
    from launcher.doctor.preflight import preflight
    from launcher.runs.core.bucket import write_check
    from launcher.secrets import MissingSecrets, SecretStore

    said: list[str] = []
    bucket: asyncio.Future | None = None
    checked = False
    try:
        SecretStore(home).resolve(plan.workload.secrets)
    except MissingSecrets as err:
        said.append(str(err))
    else:
        if not force:  # a bucket the run cannot write to would fail it at its first save, minutes in
            bucket = asyncio.ensure_future(asyncio.to_thread(write_check, home, plan))
    if not force:
        said += quarantine_refusals(plan, home)
    backend = backend_for(plan)
    try:
        reached = await asyncio.gather(*(backend.reach(n.node_rank, plan.workload.ssh.connect_timeout_s)
                                         for n in plan.nodes))
        for r in reached:
            if not r.ok and r.blocker:  # "node 1 (gpu-b): unknown host key ...", the node named once
                said.append(f"{r.label}: {r.detail.removeprefix(plan.nodes[r.rank].host_display + ': ')}")
        if not force and all(r.ok for r in reached):
            from launcher.backends.base import NodeError

            try:
                await backend.locate()  # MASTER_ADDR as the nodes dial it (an ~/.ssh/config alias resolved), as the owner does
            except NodeError as err:
                said.append(str(err))
            else:
                said += [str(refusal) for refusal in await preflight(backend)]
                checked = True
    finally:
        await backend.close()
        wrote = await bucket if bucket is not None else None
    if wrote is not None and not wrote.ok and wrote.own_credentials:
        said.append(f"parameters.output_dir: {wrote.url}: {wrote.why}")
    return said, checked


async def before_record(plan: RunPlan, home: Path, *, force: bool = False,
                        continues: Continuation | None = None) -> tuple[list[str], bool, Continuation | None]:
    """What a launch asks the nodes before it records the run, asked at once: :func:`launch_refusals`, and
    (unless already known: ``continues``) what ``resume: auto`` would continue (:func:`continuation_of`,
    node 0's checkpoints), so that neither waits for the other."""
    if continues is not None or not auto_may_continue(plan):
        said, checked = await launch_refusals(plan, home, force=force)
        return said, checked, continues
    (said, checked), found = await asyncio.gather(launch_refusals(plan, home, force=force), continuation_of(plan))
    return said, checked, found


def quarantine_refusals(plan: RunPlan, home: Path) -> list[str]:
    """A node whose host this data dir quarantined (it failed runs ``recovery.quarantine_after`` times)."""
    from launcher.runs.core.quarantine import quarantined

    held = quarantined(home)
    return [f"{node_at(n.node_rank, n.host_display)}: {held[n.host_display].words()}; fsdp-tui quarantine lift "
            f"{n.host_display} once it is fixed (or --force)" for n in plan.nodes if n.host_display in held]
