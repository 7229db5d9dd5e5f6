"""A Backend in memory, scripted per node, for testing the run policy without processes or sockets."""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.backends.base import (
    CheckpointListing,
    ExportResult,
    LinkState,
    NodeError,
    NodeInfo,
    NodeLost,
    NodeStatus,
    PortClaim,
    PortTaken,
    SchedulerCause,
    ScriptRun,
    StackDump,
    StopOutcome,
    UsageSample,
)
from launcher.events import GpuSample
from launcher.workload.ckpt_place import CheckpointPlace
from launcher.workload.dry_run import DryRun, dry_run_of
from launcher.workload.plan import RunPlan


@dataclass
class FakeNode:
    """One node's script: per attempt, how many status polls it runs, then its exit code."""

    exits: dict[int, int | None] = field(default_factory=dict)
    """attempt -> exit code; ``None``: it never exits by itself."""
    polls_before_exit: int = 2
    log: bytes = b""
    metrics: bytes = b""
    samples: bytes = b""
    start_error: str | None = None
    lost_after_polls: int | None = None
    """Reads raise NodeLost from this poll on (after telling the watcher it reconnects, then is lost)."""
    orphaned: bool = False
    """Its job is recorded as running but nothing records it any more."""
    absent: bool = False
    """No job was ever started there (an adopted run whose launch was interrupted)."""
    gpus: tuple[GpuSample, ...] = ()
    usage: UsageSample | None = None
    """What its job costs, as its agent would sample it (``None``: no figure yet)."""
    hang_at_step: int | None = None
    """Report one more training step per status poll until this step, then none (a hung rank)."""
    queued_polls: dict[int, int] = field(default_factory=dict)
    """attempt -> status polls during which its job waits in a scheduler's queue (``pending: Resources``)."""
    resubmit: dict[int, str] = field(default_factory=dict)
    """attempt -> why its job stopped to go on in a new submission (a scheduler's time limit)."""
    ended_at: float | None = None
    """When its job ended, as its agent records it."""
    requeued: dict[int, str] = field(default_factory=dict)
    """attempt -> the scheduler's words when it puts that attempt's job back into its queue (after
    ``polls_before_exit`` polls)."""
    metrics_of: dict[int, bytes] = field(default_factory=dict)
    """attempt -> metrics lines its job appends to ``metrics`` when it starts (node 0's, on any node set)."""
    probe_facts: dict | None = None
    """What the doctor's probe finds on this node (``None``: the backend's ``probe_facts``)."""
    unreachable: str | None = None
    """Every call raises ``NodeError`` with these words (a spare whose sshd is down)."""
    gpus_gone_after_polls: int | None = None
    """From this status poll of an attempt on, ``nvidia-smi`` lists no GPU (one fell off the bus)."""
    # what happened
    started: list[int] = field(default_factory=list)
    stopped: int = 0
    stopped_attempts: set[int] = field(default_factory=set)
    """Attempts that ended because they were stopped while running."""
    polls: int = 0
    queue_waits: dict[int, int] = field(default_factory=dict)
    attempt: int | None = None
    running: bool = False


class FakeBackend:
    def __init__(self, plan: RunPlan, nodes: list[FakeNode], *, port_free: bool = True,
                 prepare_error: str | None = None, running_attempt: int | None = None,
                 probe_facts: dict | None = None, cause: SchedulerCause | None = None,
                 port_taken_starts: int = 0) -> None:
        self.plan = plan
        self.port_taken_starts = port_taken_starts
        """Starts that node 0 refuses because its rendezvous port was taken meanwhile."""
        self.status_calls = 0
        self.status_calls_of: dict[int, int] = {}
        self.cause = cause
        """What the scheduler says ended a failed attempt."""
        self.probe_facts = probe_facts
        """What the doctor's probe finds on every node (``None``: the probe prints nothing)."""
        self.nodes = nodes
        self.port_free = port_free
        self.prepare_error = prepare_error
        self.prepared = False
        self.on_link = None
        self.calls: list[str] = []
        if running_attempt is not None:  # adopted: the job runs already
            for node in nodes:
                if not node.absent:
                    node.attempt, node.running = running_attempt, True

    def node_info(self, rank: int) -> NodeInfo:
        host = self.plan.nodes[rank].host
        return NodeInfo(rank, f"node {rank} (fake)", "python3", host is None or host.is_local)

    def dry_run(self) -> DryRun:
        return dry_run_of(self.plan)

    async def locate(self) -> RunPlan:
        self.calls.append("locate")
        return self.plan

    def use_plan(self, plan: RunPlan) -> None:
        self.plan = plan

    async def prepare(self) -> None:
        self.calls.append("prepare")
        if self.prepare_error:
            raise NodeError(self.prepare_error)
        self.prepared = True

    async def claim_port(self, port: int) -> PortClaim:
        if port == 0:
            return PortClaim(True, port=41234)  # as the system picks one
        return PortClaim(True, port=port) if self.port_free else PortClaim(False, "Address already in use", port + 7)

    async def start(self, secrets: dict[str, str], attempt: int) -> None:
        self.calls.append(f"start {attempt}")
        if self.port_taken_starts:
            self.port_taken_starts -= 1
            raise PortTaken(f"node 0 (fake): rendezvous port {self.plan.master_port} is taken on this machine", 0)
        errors = {}
        for rank, node in enumerate(self.nodes):
            if node.start_error:
                errors[rank] = f"node {rank} (fake): {node.start_error}"
                continue
            node.started.append(attempt)
            node.attempt, node.running, node.polls = attempt, True, 0
            node.metrics += node.metrics_of.get(attempt, b"")
        if errors:  # as the fleet says it: the node, where only one failed
            raise NodeError("; ".join(errors.values()), next(iter(errors)) if len(errors) == 1 else None)

    def poll_clock(self, per_poll_s: float = 0.01, rank: int | None = None):
        """A clock for the policy that moves ``per_poll_s`` with each status poll (of node ``rank`` only,
        when given: the node whose script the test times), not with the machine's load: time-bound
        policies (timeouts, stalls) judged the same on a busy machine."""
        if rank is None:
            return lambda: self.status_calls * per_poll_s
        return lambda: self.status_calls_of.get(rank, 0) * per_poll_s

    async def status(self, rank: int) -> NodeStatus:
        self.status_calls += 1
        self.status_calls_of[rank] = self.status_calls_of.get(rank, 0) + 1
        node = self.nodes[rank]
        self._maybe_lose(rank)
        if node.absent:
            return NodeStatus(rank, "absent")
        node.polls += 1
        if node.orphaned:
            return NodeStatus(rank, "running", node.attempt, supervisor_alive=False)
        if node.queue_waits.get(node.attempt or 0, 0) < node.queued_polls.get(node.attempt or 0, 0):
            node.queue_waits[node.attempt] = node.queue_waits.get(node.attempt, 0) + 1
            node.polls = 0  # its polls count from when it has its nodes
            return NodeStatus(rank, "starting", node.attempt, supervisor_alive=True, queued="pending: Resources")
        if node.requeued.get(node.attempt or 0) and node.polls > node.polls_before_exit:
            return NodeStatus(rank, "exited", node.attempt, -15, requeued=node.requeued[node.attempt])
        code = node.exits.get(node.attempt or 0, 0)
        if node.running and code is not None and node.polls > node.polls_before_exit:
            node.running = False
        if node.running:
            return NodeStatus(rank, "running", node.attempt, supervisor_alive=True)
        return NodeStatus(rank, "exited", node.attempt, code if node.attempt not in node.stopped_attempts else -15,
                          stopped=node.attempt in node.stopped_attempts, resubmit=node.resubmit.get(node.attempt, ""),
                          ended_at=node.ended_at)

    def _maybe_lose(self, rank: int) -> None:
        node = self.nodes[rank]
        if node.lost_after_polls is not None and node.polls >= node.lost_after_polls:
            if self.on_link:
                self.on_link(rank, LinkState.RECONNECTING, "connection dropped; reconnecting")
                self.on_link(rank, LinkState.LOST, f"node {rank} (fake): lost: no connection for 1 s")
            raise NodeLost(f"node {rank} (fake): lost: no connection for 1 s")

    async def read(self, rank: int, stream: str, offset: int, limit: int, wait_s: float = 0.0) -> bytes:
        self._maybe_lose(rank)
        node = self.nodes[rank]
        data = {"log": node.log, "metrics": node.metrics, "samples": node.samples}[stream]
        if stream == "metrics" and node.hang_at_step is not None:
            from trainer.wire.protocol import MetricRecord

            steps = range(1, min(node.polls, node.hang_at_step) + 1)
            data = "".join(MetricRecord(step=s, loss=1.0).to_json() + "\n" for s in steps).encode()
        return data[offset:offset + limit]

    async def stop(self, grace_s: float, ranks: tuple[int, ...] | None = None) -> tuple[StopOutcome, ...]:
        self.calls.append("stop")
        out = []
        for rank, node in enumerate(self.nodes):
            if node.lost_after_polls is not None and node.polls >= node.lost_after_polls:
                out.append(StopOutcome(rank, f"node {rank} (fake)", False, error="lost"))
                continue
            node.stopped += 1
            was = "running" if node.running else "exited"
            if node.running:
                node.stopped_attempts.add(node.attempt)
            node.running = False
            out.append(StopOutcome(rank, f"node {rank} (fake)", True, (), was, was == "running"))
        return tuple(out)

    async def gpus(self, rank: int) -> tuple[GpuSample, ...]:
        node = self.nodes[rank]
        if node.gpus_gone_after_polls is not None and node.polls >= node.gpus_gone_after_polls:
            return ()
        return node.gpus

    async def usage(self, rank: int) -> UsageSample | None:
        return self.nodes[rank].usage

    async def run_script(self, rank: int, python: str, script: str, timeout_s: float) -> ScriptRun:
        import json

        from launcher.doctor.probe import MARKER

        self.calls.append(f"probe {rank}")
        node = self.nodes[rank]
        if node.unreachable:
            raise NodeError(f"node {rank} (fake): {node.unreachable}", rank)
        facts = node.probe_facts if node.probe_facts is not None else self.probe_facts
        out = "" if facts is None else f"\n{MARKER}{json.dumps(facts)}\n"
        return ScriptRun(0, out, "")

    async def scheduler_checks(self, quick: bool) -> tuple:
        return ()

    async def stacks(self, rank: int) -> tuple[StackDump, ...]:
        return (StackDump(100 + rank, rank, "py-spy", f"Thread {100 + rank}\n    hang_forever (train.py:7)"),)

    async def checkpoints(self, output_dir: str, rank: int = 0, root: str | None = None) -> CheckpointListing:
        return CheckpointListing(rank, f"node {rank} (fake)", root or output_dir)

    async def delete_checkpoint(self, output_dir: str, name: str, rank: int = 0, root: str | None = None, *,
                                writer: str | None = None, continues: tuple[str, ...] = ()) -> None:
        pass

    async def export_checkpoint(self, output_dir: str, name: str, copy_to: str | None = None,
                                merged: bool = False, rank: int = 0, root: str | None = None,
                                url: str | None = None, job_env: dict | None = None) -> ExportResult:
        return ExportResult(output_dir)

    async def checkpoint_place(self, output_dir: str) -> CheckpointPlace:
        """One folder every fake node sees (the gathers have their own tests, on real folders)."""
        return CheckpointPlace("shared", output_dir, (output_dir,) * len(self.plan.nodes),
                               (True,) * len(self.plan.nodes))

    def checkpoint_files(self, rank: int):
        raise NotImplementedError("the fake backend keeps no checkpoint files")

    async def scheduler_cause(self) -> SchedulerCause | None:
        return self.cause

    async def close(self) -> None:
        pass
