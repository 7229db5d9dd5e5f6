"""The rendezvous port a launch takes on node 0: claimed there by node 0's agent just before the job starts
and held (bound, then claimed against every other fsdp-tui run) until the job ends, so runs on the same
hosts never meet on one port, however many operators launch at once (``launcher/backends/agent/ports.py``).

A port found taken moves the run once to another one: when the launch claims it (the default port; a port
the workload names is the user's choice and stops the launch instead), when node 0 cannot hold it as the
job starts (:class:`~launcher.backends.base.PortTaken`), or when the job itself finds it taken (a program
that is not fsdp-tui bound it in the moment between our claim and torchrun's own bind)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from launcher.backends.base import Backend, PortTaken
from launcher.events import RunState
from launcher.runs.owner.outcome import LaunchFailed
from launcher.runs.owner.recorder import Recorder
from launcher.workload.plan import with_rendezvous

_TAKEN_IN_LOG = re.compile(r"EADDRINUSE|[Aa]ddress already in use")
"""What torchrun's store (or any job's bind) prints when its port is taken."""
LOG_TAIL_BYTES = 200_000


async def claim_port(backend: Backend, rec: Recorder) -> None:
    """Claim the plan's port on node 0 (held there until the job starts with it). The default port, when
    taken, moves to the free one node 0 claimed in its place; a port the workload names stops the launch.

    A run on this machine alone takes a port the system picks instead of the default (nothing else needs
    to know it in advance)."""
    plan = backend.plan
    port = plan.master_port
    pinned = plan.workload.compute.master_port is not None
    if not pinned and all(backend.node_info(node.node_rank).local for node in plan.nodes):
        claim = await backend.claim_port(0)
        if claim.port:
            backend.use_plan(with_rendezvous(plan, port=claim.port))
            return
    claim = await backend.claim_port(port)
    if claim.free:
        return
    first = f"node 0 ({plan.nodes[0].host_display})"
    if pinned or not claim.suggest:
        raise LaunchFailed(f"{first}: rendezvous port {port}"
                           + (" (compute.master_port)" if pinned else "") + f" is in use ({claim.reason or 'taken'}); "
                           + (f"pick a free one (--set compute.master_port={claim.suggest}) " if claim.suggest else "")
                           + f"or stop what holds it (ss -ltnp 'sport = :{port}')")
    backend.use_plan(with_rendezvous(plan, port=claim.suggest))
    rec.set_state(RunState.STARTING, f"port {port} is in use on {first}; rendezvous on port "
                                     f"{claim.suggest} instead")


class PortMoves:
    """A run's one move to another rendezvous port, when the port is found taken as its job starts or by
    the job itself; never for a port the workload names."""

    def __init__(self, backend: Backend, rec: Recorder, on_plan: Callable[[], None]) -> None:
        self.backend, self.rec, self.on_plan = backend, rec, on_plan
        self.moves = 0
        """Moves to another port (0 or 1)."""
        self.attempts = 0
        """Attempts started again because the job found its port taken: not retries of its own failures."""
        self.said = ""
        """Why the run moved, and where to."""

    @property
    def can_move(self) -> bool:
        return self.moves == 0 and self.backend.plan.workload.compute.master_port is None

    async def start(self, start: Callable[[], Awaitable[None]]) -> None:
        """``start()`` the attempt; node 0 refusing the port (:class:`PortTaken`) moves it and starts again."""
        try:
            await start()
        except PortTaken as err:
            if not self.can_move:
                raise
            await self._move(str(err))
            await start()

    async def moved_after_race(self, node0_exit: int | None) -> bool:
        """After a failed attempt: node 0's job said its port was in use, so the run moved (once) and a new
        attempt begins."""
        port = self.backend.plan.master_port
        if not self.can_move or node0_exit in (0, None):
            return False
        if not port_taken_in_log(self.rec.node_logs().get(0, ""), port):
            return False
        await self._move(f"the rendezvous port {port} was taken on node 0 as its job started")
        self.attempts += 1
        self.rec.attempt += 1
        self.rec.set_state(RunState.RETRYING, f"attempt {self.rec.attempt}: {self.said}")
        return True

    async def _move(self, why: str) -> None:
        old = self.backend.plan.master_port
        claim = await self.backend.claim_port(0)
        if not claim.port:
            raise LaunchFailed(f"{why}; no other port could be claimed on node 0 ({claim.reason or 'none free'})")
        self.moves += 1
        self.backend.use_plan(with_rendezvous(self.backend.plan, port=claim.port))
        self.on_plan()
        self.said = f"{why}; rendezvous on port {claim.port} instead of {old}"
        self.rec.set_state(RunState.STARTING, self.said)


def port_taken_in_log(log: str, port: int) -> bool:
    """Whether node 0's output (this attempt's) says the rendezvous ``port`` was taken: a line that says
    the address is in use and names the port, as torch's store does."""
    return any(_TAKEN_IN_LOG.search(line) and re.search(rf"(?<![0-9]){port}(?![0-9])", line)
               for line in log[-LOG_TAIL_BYTES:].splitlines())
