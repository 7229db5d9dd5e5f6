"""The rendezvous port a launch takes on node 0, claimed just before the job starts."""

from __future__ import annotations

from launcher.backends.base import Backend
from launcher.events import RunState
from launcher.runs.owner.outcome import LaunchFailed
from launcher.runs.owner.recorder import Recorder
from launcher.workload.plan import with_rendezvous


async def claim_port(backend: Backend, rec: Recorder) -> None:
    """The default port, when taken, moves to a free one; a port the workload names is the user's
    choice, so a taken one stops the launch.

    A run on this machine alone takes a port the system picks instead of the default: two runs started
    at once would both find the default free (checked now, bound later by torchrun), and the second
    torchrun would join the first one's rendezvous or fail to bind it."""
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
    if pinned:
        raise LaunchFailed(f"{first}: rendezvous port {port} (compute.master_port) is in use "
                           f"({claim.reason or 'taken'}); pick a free one (--set compute.master_port="
                           f"{claim.suggest}) or stop what holds it (ss -ltnp 'sport = :{port}')")
    backend.use_plan(with_rendezvous(plan, port=claim.suggest))
    rec.set_state(RunState.STARTING, f"port {port} is in use on {first}; rendezvous on port "
                                     f"{claim.suggest} instead")
