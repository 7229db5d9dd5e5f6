"""A launch: start every node, stream logs and metrics into the local record, retry, stop, remember.

The app and the headless CLI both use :func:`launch` and :func:`attach`; they get a
:class:`RunHandle` whose ``events()`` yields :mod:`launcher.events` dataclasses.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import traceback
from collections.abc import AsyncIterator
from pathlib import Path

import yaml

from launcher.events import (
    GpuSample,
    GpuTelemetry,
    MetricsRecorded,
    NodeLines,
    NodeState,
    NodeStateChanged,
    RunEvent,
    RunFinished,
    RunState,
    RunStateChanged,
    event_to_dict,
)
from launcher.nodes import NodeError, node_backend
from launcher.paths import run_dir
from launcher.plan import RunPlan, with_master_port
from launcher.secrets import MissingSecrets, SecretStore
from launcher.store import RunStore
from launcher.streams import LineSplitter, LogMetrics
from launcher.triage import triage_run
from trainer.protocol import MetricRecord

POLL_S = 0.2
"""How long a node holds a read back while it has no new output (its answer comes as soon as it has)."""
MIN_ROUND_S = 0.05
"""A follower's shortest round (read, status): a node printing without pause is read 20 times a second."""
GPU_POLL_S = 5.0
"""How often each node's GPUs are sampled (``nvidia-smi`` costs tens of ms)."""
READ_CHUNK = 4 << 20
REPLAY_TAIL_BYTES = 2 << 20
"""How much of each node's log a reopened run shows (the panes keep 20,000 lines anyway)."""
MAX_QUEUED = 20_000
STOP_GRACE_S = 10.0
_END = object()


class RunHandle:
    """A running (or replayed) launch. Leaving it never stops the run; :meth:`cancel` does."""

    def __init__(self, run_id: str, home: Path) -> None:
        self.run_id = run_id
        self.home = home
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task: asyncio.Task | None = None
        self.cancel_requested = asyncio.Event()

    async def events(self) -> AsyncIterator[RunEvent]:
        while True:
            event = await self.queue.get()
            if event is _END:
                return
            yield event

    async def cancel(self) -> None:
        self.cancel_requested.set()

    async def wait(self) -> None:
        if self.task is not None:
            await asyncio.shield(self.task)


async def launch(plan: RunPlan, *, home: Path) -> RunHandle:
    """Record the run and start it; events flow until :class:`RunFinished`."""
    store = RunStore(home)
    resolved = yaml.safe_dump(plan.workload.model_dump(mode="json", exclude_none=True), sort_keys=False)
    store.create_run(plan, plan.source_file, resolved)
    handle = RunHandle(plan.run_id, home)
    runner = _Runner(plan, handle, store, home)
    handle.task = asyncio.create_task(runner.run())
    return handle


class _Runner:
    def __init__(self, plan: RunPlan, handle: RunHandle, store: RunStore, home: Path) -> None:
        self.plan, self.handle, self.store, self.home = plan, handle, store, home
        self.nodes = [node_backend(plan, n, self._connection_watcher(n.node_rank)) for n in plan.nodes]
        self.started = False
        self.dir = run_dir(home, plan.run_id)
        self.offsets = {(n.node_rank, s): 0 for n in plan.nodes for s in ("log", "metrics")}
        self.splitters = {(n.node_rank, s): LineSplitter() for n in plan.nodes for s in ("log", "metrics")}
        self.log_metrics = LogMetrics(plan.workload.metrics.pattern) if plan.workload.metrics.from_logs else None
        self.reporter_seen = False
        self.pending_records: list[MetricRecord] = []
        self.mlflow = None
        self.attempt = 1
        self.exit_codes: dict[int, int | None] = {}
        self.statuses: dict[int, dict] = {}
        """Each node's latest status, as its follower read it."""
        self.polled = asyncio.Event()
        self.unfollowing = asyncio.Event()
        self.events_file = open(self.dir / "events.jsonl", "a", encoding="utf-8")  # noqa: SIM115

    def emit(self, event: RunEvent) -> None:
        if not isinstance(event, NodeLines):
            self.events_file.write(json.dumps(event_to_dict(event)) + "\n")
            self.events_file.flush()
        elif self.handle.queue.qsize() >= MAX_QUEUED:
            return  # nobody is reading (a screen was left); the mirror keeps every line
        self.handle.queue.put_nowait(event)

    def set_state(self, state: RunState, detail: str = "") -> None:
        self.store.set_state(self.plan.run_id, state, self.attempt, detail)
        self.emit(RunStateChanged(self.plan.run_id, state, self.attempt, detail))

    def _connection_watcher(self, rank: int):
        def changed(reconnecting: bool, detail: str) -> None:
            self.set_node(rank, NodeState.RECONNECTING if reconnecting else NodeState.RUNNING, detail=detail)

        return changed

    def set_node(self, rank: int, state: NodeState, code: int | None = None, detail: str = "") -> None:
        self.store.set_node(self.plan.run_id, rank, state, code, detail)
        self.emit(NodeStateChanged(self.plan.run_id, rank, self.plan.nodes[rank].host_display, state, code, detail))

    async def run(self, adopted: bool = False) -> None:
        self.store.set_launcher(self.plan.run_id, os.getpid())
        final, code, triage = RunState.FAILED, None, None
        self.started = adopted
        try:
            secrets = SecretStore(self.home).resolve(self.plan.workload.secrets)
            if not adopted:
                await self._start_mlflow()
                await self._prepare_all()
                await self._claim_port()
            while True:
                final, code = await self._attempt(secrets, adopted)
                adopted = False
                if final != RunState.FAILED or self.attempt > self.plan.workload.max_retries:
                    break
                self.attempt += 1
                self.set_state(RunState.RETRYING, f"attempt {self.attempt} of {self.plan.workload.max_retries + 1}")
            if final == RunState.FAILED:
                triage = self._triage()
        except (MissingSecrets, NodeError, OSError) as err:
            final, triage = RunState.FAILED, {"summary": str(err)}
            self.set_state(RunState.FAILED, str(err))
            if self.started:
                await self._stop_all()
        except Exception as err:  # noqa: BLE001 - a launcher bug must still end the run and say where to look
            (self.dir / "launcher-error.txt").write_text(traceback.format_exc())
            summary = f"the launcher failed: {type(err).__name__}: {err} (details in {self.dir / 'launcher-error.txt'})"
            final, triage = RunState.FAILED, {"summary": summary}
            self.set_state(RunState.FAILED, summary)
            if self.started:
                await self._stop_all()
        except asyncio.CancelledError:
            # The launcher is going away (the app quit): the run keeps going on its nodes and is
            # adopted by the next launcher that opens it.
            self._save_offsets()
            self.store.set_launcher(self.plan.run_id, None)
            self.events_file.close()
            raise
        await self._finish(final, code, triage)

    async def _attempt(self, secrets: dict[str, str], adopted: bool = False) -> tuple[RunState, int | None]:
        self.exit_codes.clear()
        if adopted:
            self.set_state(RunState.RUNNING, "re-attached after the launcher stopped")
        else:
            self.set_state(RunState.STARTING)
            for n in self.nodes:
                self.set_node(n.node.node_rank, NodeState.STARTING)
            self.started = True
            starts = await asyncio.gather(*(n.start(secrets, self.attempt) for n in self.nodes),
                                          return_exceptions=True)
            errors = [str(r) for r in starts if isinstance(r, BaseException)]
            if errors:
                await self._stop_all()
                self.set_state(RunState.FAILED, "; ".join(errors))
                return RunState.FAILED, None
            for n in self.nodes:
                self.set_node(n.node.node_rank, NodeState.RUNNING)
            self.set_state(RunState.RUNNING)
        timeout = self.plan.workload.timeout_minutes
        deadline = time.monotonic() + timeout * 60 if timeout else None
        self.statuses.clear()
        self.unfollowing.clear()
        followers = [asyncio.create_task(self._follow(n)) for n in self.nodes]
        try:
            outcome = await self._watch(followers, deadline)
        finally:
            await self._unfollow(followers)
        return await self._end(outcome)

    async def _watch(self, followers: list[asyncio.Task], deadline: float | None) -> str:
        """Judge the nodes' latest statuses until the attempt ends; says how."""
        last_offsets = time.monotonic()
        while True:
            for task in followers:
                if task.done() and task.exception() is not None:
                    raise task.exception()  # a node was lost: the run fails and every node is stopped
            if time.monotonic() - last_offsets > 2:
                self._save_offsets()
                last_offsets = time.monotonic()
            exited = self._exited()
            if self.handle.cancel_requested.is_set() or any(s.get("stopped") for s in exited.values()):
                return "cancel"
            if len(exited) == len(self.nodes) or any(s.get("exit_code") != 0 for s in exited.values()):
                return "exited"
            if deadline and time.monotonic() > deadline:
                return "timeout"
            self.polled.clear()
            try:
                await asyncio.wait_for(self.polled.wait(), POLL_S)
            except asyncio.TimeoutError:
                pass

    def _exited(self) -> dict[int, dict]:
        return {rank: s for rank, s in self.statuses.items()
                if s.get("state") == "exited" and s.get("attempt") == self.attempt}

    async def _end(self, outcome: str) -> tuple[RunState, int | None]:
        """Stop what must stop and read every node's output to its end."""
        if outcome == "cancel":
            self.set_state(RunState.CANCELLING)
            await self._stop_all()
            await self._pump()
            return RunState.CANCELLED, None
        if outcome == "timeout":
            await self._stop_all()
            await self._pump(final=True)
            return RunState.TIMED_OUT, None
        exited = self._exited()
        failed = {r: s for r, s in exited.items() if s.get("exit_code") != 0}
        for rank, s in exited.items():
            self.exit_codes[rank] = s.get("exit_code")
            self.set_node(rank, NodeState.EXITED, s.get("exit_code"))
        if failed:
            await self._stop_all()
        await self._pump(final=True)
        if not failed:
            return RunState.SUCCEEDED, 0
        return RunState.FAILED, failed[min(failed)].get("exit_code")

    async def _follow(self, node) -> None:
        """One node, on its own: its log (node 0: metrics too), its status, its GPUs. A node that is
        reconnecting holds only itself; the others' output keeps flowing."""
        rank, last_gpus = node.node.node_rank, 0.0
        while not self.unfollowing.is_set():
            began = time.monotonic()
            await self._pump_node(node, final=False, wait=POLL_S)  # a long poll: back as output appears
            self.statuses[rank] = await node.status()
            self.polled.set()
            if time.monotonic() - last_gpus > GPU_POLL_S:
                await self._sample_gpus(node)
                last_gpus = time.monotonic()
            rest = MIN_ROUND_S - (time.monotonic() - began)  # busy output is read in batches, not per line
            if rest > 0:
                try:
                    await asyncio.wait_for(self.unfollowing.wait(), rest)
                except asyncio.TimeoutError:
                    pass

    async def _unfollow(self, followers: list[asyncio.Task]) -> None:
        """Let each follower finish its round (never cut one mid-read: the mirror and offsets move together)."""
        self.unfollowing.set()
        await asyncio.gather(*followers, return_exceptions=True)

    async def _pump(self, final: bool = False) -> None:
        """Read everything new on every node, all at once."""
        await asyncio.gather(*(self._pump_node(n, final) for n in self.nodes))

    async def _pump_node(self, node, final: bool, wait: float = 0.0) -> None:
        await self._pump_log(node, final, wait)
        if node.node.node_rank == 0:
            await self._pump_metrics(node)
            await self._flush_metrics()

    async def _pump_metrics(self, node) -> None:
        while True:
            chunk = await node.read("metrics.jsonl", self.offsets[(0, "metrics")], READ_CHUNK)
            self.offsets[(0, "metrics")] += len(chunk)
            for line in self.splitters[(0, "metrics")].feed(chunk):
                record = MetricRecord.from_json(line)
                if record is not None:
                    self.reporter_seen = True
                    self._record(record)
            if len(chunk) < READ_CHUNK:
                return

    async def _sample_gpus(self, node) -> None:
        """GPU telemetry from ``nvidia-smi`` where there is one (nothing on CPU-only nodes)."""
        try:
            found = await node.gpus()
        except (NodeError, OSError, ValueError):
            return
        if found:
            self.emit(GpuTelemetry(self.plan.run_id, node.node.node_rank, tuple(GpuSample(**g) for g in found)))

    async def _pump_log(self, node, final: bool, wait: float = 0.0) -> None:
        rank = node.node.node_rank
        while True:
            chunk = await node.read("node.log", self.offsets[(rank, "log")], READ_CHUNK, wait)
            wait = 0.0
            self.offsets[(rank, "log")] += len(chunk)
            caught_up = len(chunk) < READ_CHUNK
            lines = self.splitters[(rank, "log")].feed(chunk)
            if final and caught_up:
                lines += self.splitters[(rank, "log")].flush()
            if lines:
                await self._lines(rank, lines)
            if caught_up:
                return

    async def _lines(self, rank: int, lines: list[str]) -> None:
        await asyncio.to_thread(_append, self.dir / "nodes" / f"{rank}.log", lines)
        # The mirror and its offset move together, so a re-attach never duplicates a line.
        consumed = self.offsets[(rank, "log")] - len(self.splitters[(rank, "log")].rest)
        self.store.save_offset(self.plan.run_id, rank, "log", consumed)
        self.emit(NodeLines(self.plan.run_id, rank, tuple(lines), self.offsets[(rank, "log")]))
        if rank == 0 and self.log_metrics and not self.reporter_seen:
            for line in lines:
                record = self.log_metrics.parse(line)
                if record is not None:
                    self._record(record)

    def _record(self, record: MetricRecord) -> None:
        self.pending_records.append(record)
        self.emit(MetricsRecorded(self.plan.run_id, record))

    async def _flush_metrics(self) -> None:
        if not self.pending_records:
            return
        records, self.pending_records = self.pending_records, []
        await asyncio.to_thread(_append, self.dir / "metrics.jsonl", [r.to_json() for r in records])
        train = [r for r in records if r.loss is not None]
        evals = [r.eval_loss for r in records if r.eval_loss is not None]
        self.store.record_metric_summary(
            self.plan.run_id, last_loss=train[-1].loss if train else None,
            best_eval_loss=min(evals) if evals else None, step=max(r.step for r in records),
            max_steps=next((r.max_steps for r in reversed(records) if r.max_steps), None))
        if self.mlflow is not None:
            await asyncio.to_thread(self.mlflow.log_records, records)

    def _save_offsets(self) -> None:
        for (rank, stream), offset in self.offsets.items():
            consumed = offset - len(self.splitters[(rank, stream)].rest)
            self.store.save_offset(self.plan.run_id, rank, stream, consumed)

    async def _prepare_all(self) -> None:
        """Upload to every node at once; one unreachable node fails the launch, naming every node that failed."""
        results = await asyncio.gather(*(n.prepare() for n in self.nodes), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        for r in failed:
            if not isinstance(r, (NodeError, OSError)):
                raise r
        if failed:
            raise NodeError("; ".join(str(r) for r in failed))

    async def _claim_port(self) -> None:
        """Check the rendezvous port on node 0 before anything starts. The default port, when taken, moves
        to a free one; a port the workload names is the user's choice, so a taken one stops the launch."""
        port, first = self.plan.master_port, self.nodes[0]
        answer = await first.port(port)
        if answer.get("free", True):
            return
        if self.plan.workload.compute.master_port is not None:
            raise NodeError(f"{first.label}: rendezvous port {port} (compute.master_port) is in use "
                            f"({answer.get('reason', 'taken')}); pick a free one "
                            f"(--set compute.master_port={answer['suggest']}) or stop what holds it "
                            f"(ss -ltnp 'sport = :{port}')")
        self.plan = with_master_port(self.plan, answer["suggest"])
        for backend, node in zip(self.nodes, self.plan.nodes, strict=True):
            backend.plan, backend.node = self.plan, node
        self.set_state(RunState.STARTING, f"port {port} is in use on {first.label}; "
                                          f"rendezvous on port {self.plan.master_port} instead")

    async def _stop_all(self) -> None:
        results = await asyncio.gather(*(n.stop(STOP_GRACE_S) for n in self.nodes), return_exceptions=True)
        for n, r in zip(self.nodes, results, strict=True):
            if n.node.node_rank in self.exit_codes:
                continue  # it had exited by itself: keep its exit code
            left = r.get("left") if isinstance(r, dict) else None
            self.set_node(n.node.node_rank, NodeState.STOPPED,
                          detail=f"processes left: {left}" if left else "")

    def _triage(self) -> dict:
        logs = {}
        for n in self.nodes:
            path = self.dir / "nodes" / f"{n.node.node_rank}.log"
            logs[n.node.node_rank] = path.read_text(errors="replace")[-2_000_000:] if path.exists() else ""
        report = triage_run(logs, dict(self.exit_codes)).to_dict()
        (self.dir / "triage.json").write_text(json.dumps(report, indent=2))
        return report

    async def _start_mlflow(self) -> None:
        cfg = self.plan.workload.mlflow
        if not cfg.enabled:
            return
        from launcher.mlflow_sink import MlflowSink

        sink = MlflowSink(cfg.tracking_uri, cfg.experiment or self.plan.workload.experiment_name,
                          cfg.run_name or self.plan.run_id, self.home)
        params = self.plan.workload.parameters
        await asyncio.to_thread(sink.start, params, {"fsdp_tui.run_id": self.plan.run_id})
        self.mlflow = sink

    async def _finish(self, final: RunState, code: int | None, triage: dict | None) -> None:
        self._save_offsets()
        record = self.store.get_run(self.plan.run_id)
        if record is None or not record.summary.state.is_final:
            self.set_state(final, triage["summary"] if triage else "")
        if self.mlflow is not None:
            status = {RunState.SUCCEEDED: "FINISHED", RunState.CANCELLED: "KILLED"}.get(final, "FAILED")
            artifacts = sorted((self.dir / "nodes").glob("*.log")) + [self.dir / "triage.json",
                                                                     self.dir / "workload.yaml"]
            try:
                await asyncio.to_thread(self.mlflow.finish, status, artifacts)
            except Exception as err:  # noqa: BLE001 - the run's own outcome must still be reported
                self.emit(RunStateChanged(self.plan.run_id, final, self.attempt, f"MLflow: {err}"))
        self.store.set_launcher(self.plan.run_id, None)
        await asyncio.gather(*(n.close() for n in self.nodes), return_exceptions=True)
        self.emit(RunFinished(self.plan.run_id, final, code, triage))
        self.events_file.close()
        self.handle.queue.put_nowait(_END)


async def replay(run_id: str, *, home: Path) -> RunHandle:
    """A finished run from its local record: node lines, metrics and its end, as events."""
    store = RunStore(home)
    record = store.get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    handle = RunHandle(run_id, home)
    for node in record.nodes:
        path = record.directory / "nodes" / f"{node.node_rank}.log"
        handle.queue.put_nowait(NodeStateChanged(run_id, node.node_rank, node.host, node.state, node.exit_code))
        if path.exists():
            lines = _tail_lines(path, REPLAY_TAIL_BYTES)
            for i in range(0, len(lines), 2000):
                handle.queue.put_nowait(NodeLines(run_id, node.node_rank, tuple(lines[i:i + 2000]), 0))
    metrics = record.directory / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            rec = MetricRecord.from_json(line)
            if rec is not None:
                handle.queue.put_nowait(MetricsRecorded(run_id, rec))
    triage_path = record.directory / "triage.json"
    triage = json.loads(triage_path.read_text()) if triage_path.exists() else None
    handle.queue.put_nowait(RunStateChanged(run_id, record.summary.state, record.summary.attempt))
    if record.summary.state.is_final:
        handle.queue.put_nowait(RunFinished(run_id, record.summary.state, None, triage))
        handle.queue.put_nowait(_END)
    return handle


async def attach(run_id: str, *, home: Path) -> RunHandle:
    """Re-open a run: replay a finished one; follow a live one (adopting it if its launcher died)."""
    store = RunStore(home)
    record = store.get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    if record.summary.state.is_final:
        return await replay(run_id, home=home)
    if record.launcher_pid is not None and _pid_alive(record.launcher_pid):
        handle = await replay(run_id, home=home)  # what is recorded so far...
        handle.task = asyncio.create_task(_follow_mirror(handle, store, record))  # ...then what comes
        return handle
    return await adopt(run_id, home=home)


async def adopt(run_id: str, *, home: Path) -> RunHandle:
    """Become the launcher of a live run whose launcher died: resume tailing at the saved offsets."""
    store = RunStore(home)
    record = store.get_run(run_id)
    plan = _plan_of(record, run_id)
    handle = await replay(run_id, home=home)
    runner = _Runner(plan, handle, store, home)
    runner.attempt = record.summary.attempt
    for key, offset in record.offsets.items():
        runner.offsets[key] = offset
    handle.task = asyncio.create_task(runner.run(adopted=True))
    return handle


async def _follow_mirror(handle: RunHandle, store: RunStore, record) -> None:
    """Another process launches this run: follow its local mirror until the run ends."""
    offsets = {n.node_rank: (record.directory / "nodes" / f"{n.node_rank}.log").stat().st_size
               if (record.directory / "nodes" / f"{n.node_rank}.log").exists() else 0 for n in record.nodes}
    metrics_path = record.directory / "metrics.jsonl"
    metrics_offset = metrics_path.stat().st_size if metrics_path.exists() else 0
    splitters = {rank: LineSplitter() for rank in offsets}
    metric_split = LineSplitter()
    while True:
        for rank in offsets:
            chunk = await asyncio.to_thread(_read_from, record.directory / "nodes" / f"{rank}.log", offsets[rank])
            offsets[rank] += len(chunk)
            lines = splitters[rank].feed(chunk)
            if lines:
                handle.queue.put_nowait(NodeLines(handle.run_id, rank, tuple(lines), offsets[rank]))
        chunk = await asyncio.to_thread(_read_from, metrics_path, metrics_offset)
        metrics_offset += len(chunk)
        for line in metric_split.feed(chunk):
            rec = MetricRecord.from_json(line)
            if rec is not None:
                handle.queue.put_nowait(MetricsRecorded(handle.run_id, rec))
        now = store.get_run(handle.run_id)
        if now is None or now.summary.state.is_final:
            state = now.summary.state if now else RunState.FAILED
            handle.queue.put_nowait(RunFinished(handle.run_id, state))
            handle.queue.put_nowait(_END)
            return
        await asyncio.sleep(0.3)


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(4 << 20)
    except FileNotFoundError:
        return b""


def cancel_run(run_id: str, *, home: Path) -> dict:
    """Stop every node of a run from any process; the launcher tailing it records it as cancelled."""
    return asyncio.run(cancel_run_async(run_id, home=home))


async def cancel_run_async(run_id: str, *, home: Path) -> dict:
    store = RunStore(home)
    record = store.get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    plan = _plan_of(record, run_id)
    nodes = [node_backend(plan, n) for n in plan.nodes]
    outcomes = await asyncio.gather(*(n.stop(STOP_GRACE_S) for n in nodes), return_exceptions=True)
    await asyncio.gather(*(n.close() for n in nodes), return_exceptions=True)
    results = {n.node.node_rank: (o if isinstance(o, dict) else {"error": str(o), "left": ["unknown"]})
               for n, o in zip(nodes, outcomes, strict=True)}
    if record.launcher_pid is None or not _pid_alive(record.launcher_pid):
        if not record.summary.state.is_final:
            store.set_state(run_id, RunState.CANCELLED, record.summary.attempt, "cancelled; no launcher was attached")
    return results


def _plan_of(record, run_id: str) -> RunPlan:
    """The plan of a recorded run, rebuilt from its resolved workload and node directories."""
    from launcher.plan import build_plan
    from launcher.validate import validate_text

    result = validate_text((record.directory / "workload.yaml").read_text(), str(record.directory / "workload.yaml"))
    if result.workload is None:
        raise NodeError(f"run {run_id}: its recorded workload no longer validates")
    node_root = record.nodes[0].node_dir.rsplit(f"/{run_id}/", 1)[0]
    return build_plan(result.workload, run_id=run_id, node_root=node_root)


def _tail_lines(path: Path, max_bytes: int) -> list[str]:
    """The last lines of a log, reading at most ``max_bytes`` from its end (a 1 GB log opens at once)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - max_bytes))
        data = f.read()
    lines = data.decode("utf-8", "replace").splitlines()
    if size > max_bytes:
        lines[0] = f"··· {size - len(data):,} earlier bytes are in {path} (fsdp-tui logs RUN)"
    return lines


def _append(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
