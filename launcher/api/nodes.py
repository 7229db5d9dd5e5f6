"""What is on the nodes besides a run's own work: the leftovers of runs whose nodes were lost (reaped once
the node answers again), the processes holding GPU memory (ours, of ended runs, or not ours), the nodes'
host keys, the ``ssh`` command line that opens a shell on a run's node, and the hosts that keep failing
(quarantined after ``recovery.quarantine_after`` failures, until lifted)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.api._lazy import lazy_names

if TYPE_CHECKING:
    from launcher.backends.base import NodeError, Reach
    from launcher.backends.ssh.common import SshConfigError
    from launcher.backends.ssh.hostkeys import KeyCheck
    from launcher.runs.core.quarantine import HostHealth
    from launcher.runs.gpu_holders import GpuHolder, NodeHolders
    from launcher.runs.leftovers import NodeReaped, SweepFailed
    from launcher.workload.plan import RunPlan

__getattr__ = lazy_names(__name__, {
    "launcher.backends.base": ("NodeError", "Reach"),
    "launcher.backends.ssh.common": ("SshConfigError",),
    "launcher.backends.ssh.hostkeys": ("KeyCheck",),
    "launcher.runs.core.quarantine": ("HostHealth",),
    "launcher.runs.gpu_holders": ("GpuHolder", "NodeHolders"),
    "launcher.runs.leftovers": ("NodeReaped", "SweepFailed"),
})

__all__ = ["GpuHolder", "GpuHolders", "HostHealth", "HostUnreachable", "KeyCheck", "NodeError", "NodeHolders", "NodeReaped", "Nodes",
           "Reach", "SshConfigError", "SweepFailed"]


class HostUnreachable(RuntimeError):
    """A host could not be asked for its key; ``str()`` says why in one line."""


@dataclass(frozen=True)
class GpuHolders:
    """Every process holding GPU memory on some nodes, per node, and whose each one is."""

    nodes: tuple[NodeHolders, ...]
    states: Mapping[str, str | None]
    """Run id of a holder -> that run's final state (a leftover), ``""`` while it runs, ``None`` when this
    data dir has no such run (:func:`launcher.present.gpus.whose` says whose a holder is)."""

    @property
    def leftovers(self) -> list[str]:
        """The ended runs of ours that still hold GPU memory."""
        return [run_id for run_id, state in self.states.items() if state]


class Nodes:
    """The nodes of one data dir's runs and workloads, asked through each plan's own backend."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)

    def health(self) -> list[HostHealth]:
        """Every host a run's owner counted a failure of (swapped out, or a spare that failed the doctor),
        quarantined ones first."""
        from launcher.runs.core.quarantine import hosts

        return hosts(self.home)

    def lift(self, host: str) -> HostHealth | None:
        """``host`` out of quarantine and its failures forgotten; what was known of it (``None``: nothing)."""
        from launcher.runs.core.quarantine import lift

        return lift(self.home, host)

    def reap_lost(self) -> list[NodeReaped | SweepFailed]:
        """Stop and sweep what runs left on nodes that were lost while they ran and answer again now (each
        node tried briefly, again 10 s later at the earliest); each node reaped, with the words recorded in
        its detail, and each run whose sweep failed, to tell once
        (each one's ``line()``)."""
        from launcher.runs.leftovers import sweep_lost_now

        return sweep_lost_now(self.home)

    async def gpu_holders(self, plan: RunPlan, *, stop_ended: bool = False) -> GpuHolders:
        """The GPU memory holders on ``plan``'s nodes; with ``stop_ended``, the processes of our runs that
        have ended are stopped (SIGTERM, then SIGKILL after 10 s) and the nodes asked again."""
        from launcher.backends.registry import backend_for
        from launcher.runs.core.store import RunStore
        from launcher.runs.gpu_holders import gpu_holders, holder_states

        ranks = [n.node_rank for n in plan.nodes]
        nodes = await gpu_holders(backend_for(plan), ranks)
        states = holder_states(RunStore(self.home), nodes)
        leftovers = [r for r, state in states.items() if state]
        if stop_ended and leftovers:
            nodes = await gpu_holders(backend_for(plan), ranks, stop=leftovers)
        return GpuHolders(tuple(nodes), states)

    async def gpu_holders_of_run(self, run_id: str, *, stop_ended: bool = False) -> GpuHolders:
        """As :meth:`gpu_holders`, on the nodes of ``run_id``'s recorded plan (``OSError``/``ValueError``: no
        plan on record)."""
        from launcher.runs.gpu_holders import run_gpu_holders

        nodes, states = await run_gpu_holders(self.home, run_id, stop=stop_ended)
        return GpuHolders(tuple(nodes), states)

    async def reach(self, plan: RunPlan, timeout_s: float = 5.0) -> list[Reach]:
        """Every node's answer to a cheap connect (host key verified), all at once; nothing starts there."""
        from launcher.runs.launch_checks import reach_nodes

        return await reach_nodes(plan, timeout_s)

    async def host_key(self, host: str) -> KeyCheck:
        """The key ``host`` (``HOST[:PORT]``, resolved as ssh does) presents, and what known_hosts has for it.
        ``ValueError``: not a host; :class:`HostUnreachable`: it did not answer (why, in one line)."""
        import asyncio

        from launcher.backends.ssh.connect import SshError, asyncssh_errors, check_host_key
        from launcher.workload.hosts import parse_host
        from launcher.workload.machines import Ssh

        target = parse_host(host)
        try:
            return await check_host_key(target, Ssh())
        except (OSError, asyncio.TimeoutError, SshError, asyncssh_errors()) as err:
            raise HostUnreachable(str(err) or ("no answer within 10 s" if isinstance(err, asyncio.TimeoutError)
                                               else type(err).__name__)) from None

    def trust(self, check: KeyCheck) -> Path:
        """Add the key of ``check`` to the first ``UserKnownHostsFile``; the file written."""
        from launcher.backends.ssh.connect import trust
        from launcher.workload.machines import Ssh

        return trust(check, Ssh())

    def shell_argv(self, plan: RunPlan, rank: int, command: list[str], *, binary: str) -> list[str]:
        """The user's own ``ssh`` command line (``binary``) that opens a shell (or runs ``command``) in node
        ``rank``'s run directory, with the host, user, port, key, known_hosts and jump hosts the launch
        used. :class:`SshConfigError` when ``~/.ssh/config`` cannot be read for that host."""
        from launcher.backends.ssh.shell import ssh_argv

        node = plan.nodes[rank]
        if node.host is None:
            raise ValueError(f"node {rank} is this machine: its folder is {node.node_dir}, no ssh needed")
        return ssh_argv(node.host, plan.workload.ssh, node.node_dir, command, binary=binary)
