"""Run the interconnect self-test on a workload's own nodes: the workload launched as a run of its own
with its command replaced by ``trainer/nettest/node.py`` under ``torchrun``, so the local, SSH and SLURM
backends, logs, cancel and the reap of leftovers all work unchanged. Rank 0 prints its result into node
0's log, which reaches this machine with the log; the result is kept as a record under the data dir."""

from __future__ import annotations

import json
import shlex
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from launcher.nettest.figures import BadResult, Measured, decode
from launcher.nettest.health import NodeHealth
from launcher.nettest.records import RECORDS
from launcher.paths import new_run_id, run_dir
from launcher.runs.core.run_kind import NETTEST_TAG
from launcher.runs.core.store import RunStore
from launcher.runs.launch import is_owned, start_run
from launcher.words import node_at, plural
from launcher.workload.model import CodeSource, Mlflow, Snapshot
from launcher.workload.plan import RunPlan, build_plan
from trainer.wire.nettest_pairs import NEIGHBOUR_ROUNDS, TOURNAMENT_ROUNDS

_TRAINER = Path(__file__).resolve().parents[2] / "trainer"
NODE_FILES = {"nettest.py": _TRAINER / "nettest" / "node.py", "nettest_health.py": _TRAINER / "nettest" / "health.py",
              "nettest_model.py": _TRAINER / "nettest" / "model.py",
              "nettest_pairs.py": _TRAINER / "wire" / "nettest_pairs.py",
              "nettest_budget.py": _TRAINER / "wire" / "nettest_budget.py"}
"""What the nodes get, by the name each has there: the script and the modules it imports (the GPU health, the
model's message size, the pairs' plan, the time budget), side by side in one folder."""
RESULT_MARK = "FSDP_TUI_NETTEST "
"""The mark before rank 0's result line (``trainer/nettest/node.py`` prints it)."""
HEALTH_MARK = "FSDP_TUI_NETTEST_HEALTH "
"""The mark before each GPU node's health line."""
REACH_SLACK_S = 5.0
"""The connect phase's deadline is the workload's ``ssh.connect_timeout_s`` plus this."""
OWNER_GRACE_S = 60.0
"""How long an ended test's owner may take to finish mirroring and reaping before the result is read."""
MIB = 1 << 20


@dataclass(frozen=True)
class Options:
    quick: bool = False
    max_bytes: int | None = None
    """The largest message; by default the node script takes one decoder block's all-gather where the
    model's ``config.json`` is readable on the nodes, else 256 MiB (``quick``: 16 MiB)."""
    phase_deadline_s: float = 120.0
    """The most one phase (rendezvous, one scope, one round of pairs) may take before the job gives up."""
    cpu: bool = False


@dataclass(frozen=True)
class Outcome:
    run_id: str
    state: str
    measured: Measured | None
    """Rank 0's figures, decoded (``None``: none, or not readable; :attr:`problems` says why)."""
    nodes: tuple[str, ...]
    """Each node's name, by node rank."""
    problems: tuple[str, ...]
    """Why there is no result, node by node (empty when there is one)."""
    started_at: float
    wall_s: float
    health: dict[int, NodeHealth] = field(default_factory=dict)
    """Each GPU node's health report, by node rank (none on CPU nodes)."""
    unreachable: tuple[str, ...] = ()
    """The workload's nodes that did not answer in the connect phase, each named with what to do; the test
    ran on the others (renumbered among themselves), where there were any."""
    connect_s: float | None = None
    """How long the connect phase took (SSH nodes only)."""


def deadlines(plan: RunPlan, options: Options) -> dict[str, float]:
    """Each phase's deadline in seconds, as the test prints them: a node that stops answering ends the
    phase it is in, never the test's patience."""
    test = nettest_plan_limit_s(plan.topology.num_nodes, options)
    return {"connect": reach_deadline_s(plan), "each measuring phase": options.phase_deadline_s, "whole test": test}


def reach_deadline_s(plan: RunPlan) -> float:
    return plan.workload.ssh.connect_timeout_s + REACH_SLACK_S


def nettest_plan_limit_s(num_nodes: int, options: Options) -> float:
    """The run's own time limit: every phase at its deadline, plus five minutes to start and stop."""
    phases = 8 + (num_nodes > 1) * (NEIGHBOUR_ROUNDS + TOURNAMENT_ROUNDS)
    return phases * options.phase_deadline_s + 300


def node_code(home: Path) -> Path:
    """The folder shipped as the test's code snapshot: the node script and the module it imports."""
    code = home / RECORDS / "node-code"
    code.mkdir(parents=True, exist_ok=True)
    for name, source in NODE_FILES.items():
        target = code / name
        if not target.exists() or target.read_bytes() != source.read_bytes():
            tmp = code / f"{name}.tmp"
            shutil.copyfile(source, tmp)
            tmp.replace(target)
    return code


def node_command(plan: RunPlan, options: Options) -> str:
    """The shell text each node runs: the node script under torchrun over the rendezvous the plan gives;
    with one process per node, the script alone with the variables torchrun would set (one process, and
    one import of torch, less per node: the larger part of a quick test's time)."""
    env = plan.workload.environment
    python = "python" if env.dependencies else env.python
    flags = [f"--phase-deadline-s={options.phase_deadline_s:g}"]
    if options.max_bytes:
        flags.append(f"--max-bytes={options.max_bytes}")
    if options.quick:
        flags.append("--quick")
    if options.cpu:
        flags.append("--cpu")
    script = "\"$CODE_SOURCE_PATH/nettest.py\" " + " ".join(flags) + " --out=\"$CODE_SOURCE_PATH/../nettest.json\"\n"
    if plan.topology.procs_per_node == 1:
        return ("export RANK=\"$NODE_RANK\" WORLD_SIZE=\"$NUM_NODES\" LOCAL_RANK=0\n"
                f"exec {shlex.quote(python)} " + script)
    return (f"exec {shlex.quote(python)} -m torch.distributed.run --nnodes=\"$NUM_NODES\" "
            "--node_rank=\"$NODE_RANK\" --nproc_per_node=\"$LOCAL_WORLD_SIZE\" --master_addr=\"$MASTER_ADDR\" "
            "--master_port=\"$MASTER_PORT\" " + script)


def nettest_plan(plan: RunPlan, options: Options, home: Path) -> RunPlan:
    """The workload's plan with its command replaced by the test: the same nodes, processes per node,
    backend, interpreter and environment; no MLflow run, no retries, a time limit."""
    w = plan.workload
    name = f"nettest-{w.experiment_name}"[:100]
    limit_min = nettest_plan_limit_s(plan.topology.num_nodes, options) / 60
    workload = w.model_copy(update={
        "experiment_name": name, "command": node_command(plan, options),
        "code_source": CodeSource(snapshot=Snapshot(root_path=str(node_code(home)))),
        "mlflow": Mlflow(enabled=False), "sweep": None, "max_retries": 0, "timeout_minutes": limit_min})
    return build_plan(workload, run_id=new_run_id(name), source_file=plan.source_file, node_root=plan.node_root)


def without_nodes(plan: RunPlan, ranks: set[int]) -> RunPlan:
    """The plan on the other nodes only (the same processes per node, interpreter and environment)."""
    c = plan.workload.compute
    kept = [h for i, h in enumerate(c.hosts) if i not in ranks]
    accelerators = c.num_accelerators // len(c.hosts) * len(kept) if c.num_accelerators and c.hosts else None
    compute = c.model_copy(update={"hosts": kept, "num_accelerators": accelerators})
    return build_plan(plan.workload.model_copy(update={"compute": compute}), run_id=plan.run_id,
                      source_file=plan.source_file, node_root=plan.node_root)


def reach(plan: RunPlan) -> list[tuple[int | None, str]]:
    """The connect phase: every node at once, within :func:`reach_deadline_s`; each node that did not
    answer (its rank; ``None``: all of them), named with what to do. Nothing starts on any node."""
    import asyncio

    from launcher.runs.launch_checks import reach_nodes

    limit = reach_deadline_s(plan)
    try:
        answers = asyncio.run(asyncio.wait_for(reach_nodes(plan, plan.workload.ssh.connect_timeout_s), limit))
    except asyncio.TimeoutError:
        return [(None, f"no node answered within the connect phase's deadline of {limit:g} s: check that the "
                       "nodes are up and that ssh reaches them from here without a password")]
    return [(a.rank, f"{a.label}: not reached within the connect phase ({limit:g} s): {a.detail}; check that it is up and "
            f"that `{_ssh_words(plan.nodes[a.rank])}` works from here without a password")
            for a in answers if not a.ok]


def run_nettest(plan: RunPlan, options: Options, home: Path, *, on_state=None, poll_s: float = 0.2) -> Outcome:
    """Reach the nodes, launch the test on those that answered, wait for its run to end and read rank 0's
    result; the record is kept. A node that does not answer is named and left out; the others are tested."""
    started = time.time()
    unreachable: tuple[str, ...] = ()
    connect_s = None
    if plan.workload.compute.slurm is None and plan.workload.compute.hosts:
        answers = reach(plan)
        connect_s = time.time() - started
        unreachable = tuple(line for _rank, line in answers)
        down = {rank for rank, _line in answers if rank is not None}
        if any(rank is None for rank, _line in answers) or len(down) == len(plan.nodes):
            return Outcome("", "not started", None, tuple(n.host_display for n in plan.nodes),
                           (*unreachable, "nothing was started: no node to test"), started,
                           time.time() - started, unreachable=unreachable, connect_s=connect_s)
        if down:
            plan = without_nodes(plan, down)
    test = nettest_plan(plan, options, home)
    run_id = start_run(test, home, tags={NETTEST_TAG: "1"})
    try:
        _wait(home, run_id, on_state, poll_s)
    except KeyboardInterrupt:
        # Nobody wants a test to go on alone: it is cancelled, and nothing stays on the nodes.
        import asyncio

        from launcher.runs.launch import cancel_run

        asyncio.run(cancel_run(home, run_id))
        raise
    collected, result = collect(home, run_id, started)
    outcome = replace(collected, connect_s=connect_s)
    if unreachable:
        outcome = replace(outcome, unreachable=unreachable,
                          problems=(*unreachable, f"the test ran on the other {plural(len(outcome.nodes), 'node')}, "
                                    "numbered among themselves", *outcome.problems))
    save_record(home, outcome, plan, result)
    return outcome


def _wait(home: Path, run_id: str, on_state, poll_s: float) -> None:
    store = RunStore(home)
    last, final_since = None, None
    while True:
        record = store.get_run(run_id)
        if record is not None and record.summary.state != last:
            last = record.summary.state
            if on_state is not None:
                on_state(last.value, record.summary.detail)
        # The owner leaves once the nodes' logs are mirrored to the end and nothing runs on them: only
        # then is rank 0's line surely here.
        if record is not None and record.summary.state.is_final:
            final_since = final_since or time.monotonic()
            if not is_owned(home, run_id) or time.monotonic() - final_since > OWNER_GRACE_S:
                return
        time.sleep(poll_s)


def collect(home: Path, run_id: str, started_at: float) -> tuple[Outcome, dict | None]:
    """The result of an ended test run: rank 0's line from node 0's log, or why there is none; and that line's
    figures as it printed them (``None``: none readable), which the test's kept record holds verbatim."""
    record = RunStore(home).get_run(run_id)
    if record is None:
        raise LookupError(f"no test run '{run_id}'")
    nodes = tuple(n.host for n in sorted(record.nodes, key=lambda n: n.node_rank))
    log = run_dir(home, run_id) / "nodes" / "0.log"
    raw = None
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_MARK):
            try:
                raw = json.loads(line[len(RESULT_MARK):])
            except ValueError:
                raw = None
            break
    problems: list[str] = []
    measured = None
    if raw is not None:
        try:
            measured = decode(raw)
        except BadResult as err:
            problems.append(f"node 0 ({nodes[0] if nodes else '?'}): its result is not readable: {err}")
            raw = None
    if measured is None:
        problems.append(f"the test run {run_id} {record.summary.state.value}: {record.summary.detail or 'no result'}")
        for n in sorted(record.nodes, key=lambda n: n.node_rank):
            if n.state.value == "pending":
                problems.append(f"{node_at(n.node_rank, n.host)}: not started: the test stopped before its job "
                                "began (see above)")
            elif n.state.value != "succeeded":
                problems.append(f"{node_at(n.node_rank, n.host)}: {n.state.value}"
                                + (f": {n.detail}" if n.detail else ""))
        problems.append(f"see its logs: fsdp-tui logs {run_id}")
    return Outcome(run_id, record.summary.state.value, measured, nodes, tuple(problems), started_at,
                   time.time() - started_at, read_health(home, run_id, len(nodes))), raw


def read_health(home: Path, run_id: str, num_nodes: int) -> dict[int, NodeHealth]:
    """Each node's last health line from its log's local mirror (only GPU nodes print one), decoded."""
    out: dict[int, NodeHealth] = {}
    for rank in range(num_nodes):
        log = run_dir(home, run_id) / "nodes" / f"{rank}.log"
        if not log.exists():
            continue
        for line in reversed(log.read_text(errors="replace").splitlines()):
            if line.startswith(HEALTH_MARK):
                try:
                    data = json.loads(line[len(HEALTH_MARK):])
                except ValueError:
                    data = {"smi_readable": False}
                out[rank] = NodeHealth.from_wire(data) or NodeHealth(smi_readable=False)
                break
    return out


def save_record(home: Path, outcome: Outcome, plan: RunPlan, result: dict | None) -> Path:
    """``<data dir>/nettests/<run id>.json``: nodes, workload, figures (``result``: rank 0's, as it printed
    them) and date, comparable later."""
    folder = home / RECORDS
    folder.mkdir(parents=True, exist_ok=True)
    data = {"run_id": outcome.run_id, "state": outcome.state, "started_at": outcome.started_at,
            "wall_s": round(outcome.wall_s, 2), "nodes": list(outcome.nodes),
            "workload": str(plan.source_file) if plan.source_file else None,
            "experiment": plan.workload.experiment_name, "result": result, "problems": list(outcome.problems),
            "health": {str(k): v.to_dict() for k, v in outcome.health.items()}}
    path = folder / f"{outcome.run_id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
    return path


def _ssh_words(node) -> str:
    return node.host.ssh_words if node.host is not None else "ssh localhost"
