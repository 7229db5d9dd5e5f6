"""The pure parts around a swap: which failures name a node, what the monitor, the notifications, the doctor
and a launch make of swaps and quarantined hosts. Fast; the policy's cases are in ``test_recovery.py``."""

from __future__ import annotations

import contextlib
import io

import pytest

from launcher.api.doctor import with_quarantine
from launcher.backends.base import SchedulerCause
from launcher.doctor.judge import Check, DoctorReport, NodeReport
from launcher.events import NodeState, NodeStateChanged, NodeSwapped, RunState, RunStateChanged
from launcher.notify.summary import RunFacts, body, build_summary
from launcher.runs.core import quarantine
from launcher.runs.core.swaps import Swap, settled
from launcher.runs.core.triage import TriageReport, triage_run
from launcher.runs.launch_checks import quarantine_refusals
from launcher.runs.owner.recovery import node_fault
from launcher.runs.read.nodes import node_rows
from launcher.runs.read.view import RunView
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from tui.screens.monitor_lines import summary_line


@pytest.mark.parametrize("triage, expect", [
    (TriageReport(node_rank=2, signature="lost", said="node 2 (h2): lost: no connection for 120 s"), "lost"),
    (TriageReport(node_rank=1, exit_code=-9, signature="killed",
                  excerpt="the job was killed by SIGKILL (not by fsdp-tui)"), "killed"),
    (TriageReport(node_rank=1, exit_code=137, signature="killed"), "killed"),
    (TriageReport(node_rank=1, exit_code=-11, signature="killed",
                  excerpt="the job was killed by SIGSEGV (not by fsdp-tui)"), None),  # a crash of the code
    (TriageReport(node_rank=0, signature="gpu_lost", excerpt="lost its GPU"), "gpu_lost"),
    (TriageReport(node_rank=1, signature="node_fail", scheduler="slurmstepd: ... NODE FAILURE"), "node_fail"),
    (TriageReport(node_rank=1, exit_code=1, signature="python_error", excerpt="ValueError: bad shape"), None),
    (TriageReport(node_rank=0, exit_code=1, signature="oom", excerpt="CUDA out of memory"), None),
    (TriageReport(node_rank=0, signature="nccl_timeout"), None),
    (TriageReport(node_rank=None, signature="lost"), None),
    (TriageReport(node_rank=1, exit_code=1, signature="settings", excerpt="parameters.lr: bad"), None),
    (None, None),
])
def test_only_a_failure_that_names_a_node_is_a_nodes_fault(triage, expect):
    fault = node_fault(triage, "h1", 5.0)
    assert (fault.signature if fault else None) == expect
    if fault is not None:
        assert fault.rank == triage.node_rank and fault.at == 5.0 and fault.why == triage.summary


def test_a_slurm_fault_carries_the_name_slurm_excludes():
    triage = TriageReport(node_rank=1, signature="node_fail")
    fault = node_fault(triage, "SLURM node 1 via login", 1.0, SchedulerCause(1, "fsl-n1", "node_fail", "..."))
    assert fault is not None and fault.scheduler_node == "fsl-n1"
    assert node_fault(triage, "x", 1.0, SchedulerCause(0, "fsl-n0", "node_fail", "...")).scheduler_node == ""


def test_the_rank_that_died_first_is_blamed_not_the_survivor_with_the_lower_rank():
    logs = {0: "RuntimeError: Connection reset by peer\n", 1: ""}
    blamed = triage_run(logs, {0: 1, 1: -9})
    assert blamed.node_rank == 0 and blamed.signature == "python_error"  # lowest rank first, as before
    first = triage_run(logs, {0: 1, 1: -9}, first=1)
    assert (first.node_rank, first.signature) == (1, "killed") and "SIGKILL" in first.excerpt


def _swap(**kw) -> Swap:
    base = dict(number=1, kind="spare", node_rank=1, failed_host="h1", why="node 1 (h1): lost", signature="lost",
                failed_at=1000.0, attempt=2, failed_step=6, replacement="s0", checkpoint_step=4,
                hosts_after=("h0", "s0", "h2"))
    return Swap(**{**base, **kw})  # type: ignore[arg-type]


def test_the_monitor_says_a_swap_in_its_header_why_line_and_node_list():
    view = RunView("r")
    for rank, host in enumerate(("h0", "h1", "h2")):
        view.apply(NodeStateChanged("r", rank, host, NodeState.RUNNING), now=1.0)
    view.apply(RunStateChanged("r", RunState.RUNNING, 2, ""), now=1.0)
    view.apply(NodeSwapped("r", _swap()), now=2.0)
    assert view.swap_badge() == "RECOVERING node 1"
    assert view.why() == "recovering: node 1 (h1) lost at step 6; replaced by s0; resuming from step 4"
    rows = node_rows(view, 3.0)
    assert [(r.host, r.swapped_in) for r in rows] == [("h0", ""), ("s0", "replaced h1 (lost at step 6)"), ("h2", "")]
    view.apply(NodeSwapped("r", settled(_swap(), 1030.0, 5, "verified")), now=3.0)
    assert view.swap_badge() == "1 swap VERIFIED"
    assert "1 swap VERIFIED" in summary_line(view, True, "")
    assert view.why().startswith("recovered: node 1 (h1) lost at step 6; replaced by s0; resumed verified at step 4")
    shrunk = settled(_swap(number=2, kind="shrink", replacement="", node_rank=0, hosts_after=("s0", "h2")), 1100.0,
                     5, "resharded")
    view.apply(NodeSwapped("r", shrunk), now=4.0)
    assert [r.host for r in node_rows(view, 5.0)] == ["s0", "h2"]  # the node list follows the shrink
    assert view.swap_badge() == "2 swaps RESHARDED"
    differs = settled(_swap(number=3), 1200.0, 5, "differs", ("seed: 1 then, 2 now",))
    view.apply(NodeSwapped("r", differs), now=6.0)
    assert view.swap_badge() == "3 swaps NOT VERIFIED (differs)"
    assert view.why().startswith("swap NOT verified:")


def test_the_notification_of_a_recovery_leads_with_the_swap():
    words = settled(_swap(), 1094.0, 5, "verified").words()
    facts = RunFacts(run_id="r", experiment="e", event="recovered", attempt=2, step=5, max_steps=20,
                     recovery=(words,))
    summary = build_summary(facts)
    assert summary["title"] == "fsdp-tui: e replaced a failed node and goes on (r)"
    assert body(summary).splitlines()[0] == words
    done = body(build_summary(RunFacts(run_id="r", experiment="e", event="succeeded", recovery=(words,))))
    assert f"recovered: {words}" in done.splitlines()


def _plan(text: str):
    result = validate_text(text, "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id="r", node_root="/n")


def test_quarantined_hosts_are_said_by_the_doctor_refused_by_a_launch_and_warned_in_the_editor(tmp_path):
    from launcher.api import Client
    from launcher.workload.load import plan_file

    for _ in range(2):
        quarantine.count_failure(tmp_path, "h1", "old", "node 1 (h1): lost", 2)
        quarantine.count_failure(tmp_path, "s1", "old", "spare failed the doctor", 2)
    text = "experiment_name: e\ncompute: {hosts: [h0, h1], spares: [s0, s1]}\ncommand: run\n"
    plan = _plan(text)
    report = DoctorReport(tuple(NodeReport(r, f"node {r}", (Check("reachable", "ok", "connected"),)) for r in (0, 1)))
    said = with_quarantine(report, plan, tmp_path)
    assert [c.name for c in said.nodes[1].checks] == ["reachable", "quarantine"]
    assert said.nodes[1].checks[1].status == "error" and said.nodes[1].checks[1].fix.startswith(
        "fsdp-tui quarantine lift h1")
    spares = said.nodes[0].checks[-1]
    assert (spares.name, spares.status) == ("spares", "warning") and "quarantined, never used: s1" in spares.detail
    assert not said.ok
    assert quarantine_refusals(plan, tmp_path) == [
        "node 1 (h1): h1: quarantined (2 failures; last: run old, node 1 (h1): lost); fsdp-tui quarantine lift h1 "
        "once it is fixed (or --force)"]
    wl = tmp_path / "w.yaml"
    wl.write_text(text)
    problems = Client(tmp_path).records.quarantine_problems(plan_file(wl, home=tmp_path))
    assert [(p.line, p.path, p.severity) for p in problems] == [(2, "compute.hosts[1]", "warning"),
                                                                (2, "compute.spares[1]", "warning")]
    assert problems[1].message.endswith("it is never used as a spare")


def test_the_quarantine_command_lists_and_lifts(tmp_path, monkeypatch):
    from launcher.cli.main import main

    monkeypatch.setenv("FSDP_TUI_HOME", str(tmp_path))

    def cli(*args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 2
        return code, out.getvalue(), err.getvalue()

    assert cli("quarantine")[:2] == (0, "no host has failed a run (hosts are counted when a run's owner swaps one "
                                        "out)\n")
    for _ in range(2):
        quarantine.count_failure(tmp_path, "gpu-07", "r1", "node 3 (gpu-07): lost", 2)
    code, out, _ = cli("quarantine")
    assert code == 0 and out.splitlines() == ["gpu-07: quarantined (2 failures; last: run r1, node 3 (gpu-07): lost)",
                                              "lift one: fsdp-tui quarantine lift HOST"]
    assert cli("quarantine", "--json")[1].count('"quarantined": true') == 1
    assert cli("quarantine", "lift", "gpu-07")[:2] == (0, "lifted gpu-07 out of quarantine: its 2 failures forgotten\n")
    code, _, err = cli("quarantine", "lift", "gpu-07")
    assert code == 1 and "gpu-07 has no failure counted" in err
    assert cli("quarantine", "lift", "a b")[0] == 2
    assert cli("quarantine", "lift")[0] == 2


def test_an_owner_that_adopts_a_swapped_run_reads_each_node_on_where_the_record_ends(tmp_path):
    """The owner died after a swap: the next one reads the swaps from the record and with them where each
    node's log (and a new node 0's metrics) begins in the record's copies."""
    from launcher.runs.core.layout import save_swaps
    from launcher.runs.core.store import RunStore
    from launcher.runs.owner.recorder import Recorder
    from launcher.runs.owner.recovery import NodeRecovery

    plan = _plan("experiment_name: e\ncompute: {hosts: [h0, s0], spares: [s1]}\ncommand: run\n")
    store = RunStore(tmp_path)
    store.create_run(plan, None, "x")
    rec = Recorder(store, plan.run_id, {0: "h0", 1: "s0"}, parse_logs=None)
    (rec.dir / "nodes" / "1.log").write_bytes(b"h1's line\nthe spare's line\n")
    (rec.dir / "metrics.jsonl").write_bytes(b'{"step": 1, "loss": 2.0}\n' * 3)
    swap = _swap(node_rank=1, hosts_after=("h0", "s0"), log_shift={1: len(b"h1's line\n")},
                 stream_shift={"metrics.jsonl": 25})
    save_swaps(rec.dir, [swap])
    again = Recorder(store, plan.run_id, {0: "h0", 1: "s0"}, parse_logs=None)
    recovery = NodeRecovery(again, tmp_path, plan.run_id, plan.workload.recovery, 2)
    assert again.log_offset(1) == len(b"the spare's line\n") and again.log_offset(0) == 0
    assert again.metrics_offset() == 50
    assert recovery.pending == swap and recovery.can_act(plan)
    recovery.close(ended=True)  # the run ended before a step came: settled as it stands
    assert recovery.swaps[-1].verdict == "unchecked" and recovery.pending is None


@pytest.mark.slow
def test_the_swaps_become_tags_of_the_runs_mlflow_run_sent_again_only_when_they_change(tmp_path):
    """A real MLflow SQLite store (the default), through the owner's tracker."""
    from mlflow import MlflowClient

    from launcher.runs.owner.tracking import Tracker
    from trainer.wire.protocol import MetricRecord

    plan = _plan("experiment_name: e\ncompute: {hosts: [h0, h1], spares: [s0]}\ncommand: run\n")
    directory = tmp_path / "runs" / plan.run_id
    directory.mkdir(parents=True)
    tracker = Tracker(tmp_path, plan, directory)
    assert tracker.sync([MetricRecord(step=1, loss=2.0, time=1.0)], "metrics")
    pending = _swap()
    assert tracker.sync_swaps([pending])
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    tags = client.get_run(tracker.mlflow_run_id).data.tags
    assert (tags["fsdp_tui.swaps"], tags["fsdp_tui.recovered"], tags["fsdp_tui.swap.1"]) == ("1", "pending",
                                                                                          pending.words())
    done = settled(pending, 1030.0, 5, "verified")
    assert tracker.sync_swaps([done])
    tags = client.get_run(tracker.mlflow_run_id).data.tags
    assert (tags["fsdp_tui.recovered"], tags["fsdp_tui.swap.1"]) == ("yes", done.words())
    assert tracker.state.swap_tags is not None and tracker.state.swap_tags["fsdp_tui.swap.1"] == done.words()  # kept: the same tags are not sent again
