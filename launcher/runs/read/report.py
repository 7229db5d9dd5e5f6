"""One run told in full, for ``fsdp-tui show`` and the app: state and why, nodes, triage, MLflow."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from launcher.notify.delivery import Delivery
from launcher.paths import run_dir
from launcher.runs.core import pending
from launcher.runs.core.estimates import KeptEstimate, read_kept
from launcher.runs.core.gathers import Gather, GatherNote, read_gathers
from launcher.runs.core.layout import (
    METRICS,
    RecordedPlan,
    ResumeCheck,
    last_lines,
    read_mlflow_run_id,
    read_options,
    read_plan,
    read_resume_check,
    read_swaps,
    read_triage,
)
from launcher.runs.core.notifying import read_deliveries
from launcher.runs.core.ownership import kept_end, owned, owner_note
from launcher.runs.core.resume_badge import trusted
from launcher.runs.core.safe_step import SafeStep, lead_time_of_run
from launcher.runs.core.settings_prices import prices_set
from launcher.runs.core.store import NodeRecord, RunStore
from launcher.runs.core.swaps import Swap
from launcher.runs.core.triage import TriageReport
from launcher.runs.core.usage import Usage, usage_of_record
from launcher.runs.read.ranks import RankReport, rank_report
from launcher.runs.read.report_parts import DataSeen, MlflowLink, NettestSeen, ResumedFrom
from launcher.words import fmt_duration
from trainer.wire.ckpt_layout import step_of_path
from trainer.wire.fit_record import MemoryCheck
from trainer.wire.protocol import DataSummary


@dataclass(frozen=True)
class RunReport:
    """One run told in full (``fsdp-tui show``, ``--json`` through :meth:`to_dict`); every part a type."""

    run_id: str
    experiment: str
    state: str
    detail: str
    attempt: int
    max_attempts: int
    started_at: float | None
    ended_at: float | None
    duration: str
    step: int | None
    max_steps: int | None
    last_loss: float | None
    best_eval_loss: float | None
    owner: str
    """``pid N`` of its owner, what happens to a live run without one, or empty."""
    nodes: tuple[NodeRecord, ...]
    triage: TriageReport | None
    mlflow: MlflowLink | None
    directory: str
    workload_path: str | None
    output_dir: str | None
    next: tuple[str, ...]
    """Commands worth running next, in words."""
    usage: Usage | None
    """GPU-hours (CPU-hours) and, with prices in the settings, their cost."""
    estimate: KeptEstimate | None
    """The launch's estimate and, once the run ended, the real figures beside it; ``None``: none made."""
    notifications: tuple[Delivery, ...]
    lead_time: str
    ranks: RankReport
    odd_nodes: tuple[str, ...]
    data: DataSeen | None
    """What the run trained on (its trainer's ``data`` record, and a mixture's rows so far); ``None`` for a
    run without one (a script)."""
    resumed_from: ResumedFrom | None
    router_aux_loss: float | None
    checkpoints_place: str
    gathers: tuple[Gather | GatherNote, ...]
    """The run's gathers (checkpoints made whole, or not, and the notes between them), oldest first."""
    resume_check: ResumeCheck | None
    """The newest resume's check; ``None``: the run did not resume."""
    swaps: tuple[Swap, ...] = ()
    """The failed nodes its owner replaced, oldest first (each with the resume after it)."""
    resume_ignored: str = ""
    """A resume check the job wrote though the run did not resume (the launcher knows), ignored, in words."""
    end_waits: str = ""
    """A live run whose owner could not write its end (the data dir's disk refused it): when its job ended
    and what the owner says (waiting for room, or gave up); empty otherwise."""
    nettest: NettestSeen | None = None
    """The newest interconnect test of the same nodes (filled in by the API, which may read tests)."""
    last_safe_step: SafeStep | None = None
    """The newest complete checkpoint as its holder says (filled in by the API: it asks a node)."""
    memory: MemoryCheck | None = None
    """Each rank's predicted peak memory beside the highest one measured (the built-in trainer's)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``fsdp-tui show --json``: the fields as named, states and the triage as text."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["nodes"] = [{"node_rank": n.node_rank, "host": n.host, "state": n.state.value, "exit_code": n.exit_code,
                          "detail": n.detail, "node_dir": n.node_dir} for n in self.nodes]
        data["triage"] = self.triage.to_dict() if self.triage is not None else None
        data["ranks"] = self.ranks.to_dict()
        data["usage"] = self.usage.to_dict() if self.usage is not None else None
        data["resume_check"] = (None if self.resume_check is None else
                                {**asdict(self.resume_check), "text": self.resume_check.words()})
        data["last_safe_step"] = (None if self.last_safe_step is None else
                                  {**self.last_safe_step.to_dict(), "text": self.last_safe_step.text()})
        for key in ("next", "odd_nodes"):
            data[key] = list(data[key])
        data["gathers"] = [g.to_dict() for g in self.gathers]
        data["estimate"] = self.estimate.to_dict() if self.estimate is not None else None
        data["notifications"] = [d.to_dict() for d in self.notifications]
        data["data"] = None if self.data is None else self.data.to_dict()
        data["memory"] = None if self.memory is None else _memory_json(self.memory)
        for key in ("mlflow", "resumed_from", "nettest"):
            data[key] = None if data[key] is None else data[key].to_dict()
        data["swaps"] = [s.to_dict() for s in self.swaps]
        return data


def run_report(home: Path, run_id: str) -> RunReport:
    record = RunStore(home).get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    s = record.summary
    directory = record.directory
    triage = read_triage(directory)
    plan = read_plan(directory)
    workload = plan.workload if plan is not None else {}
    mlflow_run_id = read_mlflow_run_id(directory)
    mlflow = None
    unsent = pending.why_pending(directory)
    if mlflow_run_id or unsent:
        uri = (plan and plan.text("mlflow", "tracking_uri")) or f"sqlite:///{Path(home) / 'mlflow.db'}"
        experiment = (plan and plan.text("mlflow", "experiment")) or s.experiment
        mlflow = MlflowLink(mlflow_run_id, experiment, uri, f"mlflow ui --backend-store-uri {uri}",
                            unsent and f"not all sent yet ({unsent}); sent on the next look, or now: "
                                       f"fsdp-tui mlflow sync {run_id}")
    records = _newest_records(directory / METRICS)
    swaps = read_swaps(directory)
    ranks = rank_report(records, len(record.nodes) or None)
    if triage is not None and ranks.slow:  # a slow rank is worth reading beside why the run ended
        triage = replace(triage, slow_ranks=tuple(r.says for r in ranks.slow))
    live = not s.state.is_final
    odd = _odd_nodes(record)
    if triage is not None and odd:
        triage = replace(triage, odd_nodes=tuple(odd))
    check, ignored = trusted(read_resume_check(directory), plan.workload if plan is not None else None, s.attempt)
    kept = kept_end(home, run_id) if live else None
    end_waits = ""
    if kept is not None:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(kept.ended_at))
        end_waits = f"its job ended {kept.state} at {at}; not recorded yet: {owner_note(home, run_id)}"
    next_steps = []
    if live:
        next_steps += [f"fsdp-tui logs {run_id} --follow", f"fsdp-tui cancel {run_id}"]
    elif s.state.value in ("failed", "timed_out", "cancelled"):
        next_steps += [f"fsdp-tui logs {run_id} --tail 50", f"fsdp-tui relaunch {run_id}"]
        if s.output_dir:
            next_steps.append(f"fsdp-tui resume {run_id}  (from its newest complete checkpoint)")
    return RunReport(
        run_id=s.run_id, experiment=s.experiment, state=s.state.value, detail=s.detail,
        attempt=s.attempt, max_attempts=(plan.max_retries if plan is not None else 0) + 1 + len(swaps),
        started_at=s.started_at, ended_at=s.ended_at, duration=fmt_duration(s.duration_s),
        step=s.step, max_steps=s.max_steps, last_loss=s.last_loss, best_eval_loss=s.best_eval_loss,
        owner=(f"pid {record.launcher_pid}" if record.launcher_pid and owned(home, run_id)
               else ("none (the next command that lists runs adopts it)" if live else "")),
        nodes=tuple(record.nodes), triage=triage, mlflow=mlflow, directory=str(directory),
        workload_path=s.workload_path, output_dir=s.output_dir, next=tuple(next_steps),
        usage=_usage(record, plan, kept.ended_at if kept else None), estimate=read_kept(directory),
        notifications=tuple(read_deliveries(directory)),
        lead_time=lead_time_of_run(directory, workload), ranks=ranks,
        odd_nodes=tuple(odd), data=_data_summary(directory / METRICS, records),
        resumed_from=_resumed_from(home, workload, run_id), router_aux_loss=_router_aux_loss(records),
        checkpoints_place=plan.place_words() if plan is not None else "", gathers=tuple(read_gathers(directory)),
        resume_check=check, resume_ignored=ignored, end_waits=end_waits, swaps=tuple(swaps),
        memory=_memory(directory / METRICS, records),
    )


def _resumed_from(home: Path, workload: Mapping[str, Any], run_id: str) -> ResumedFrom | None:
    """The checkpoint this run started from (``parameters.checkpoint.resume``: ``resume`` and the
    checkpoints screen set it) and, when its path names one, the run that wrote it."""
    path = ((workload.get("parameters") or {}).get("checkpoint") or {}).get("resume")
    # What its launch said it continues (resume, or resume: auto): continuing.recorded, read here without
    # the workload's models that module holds.
    found = read_options(run_dir(home, run_id)).continues
    if found is not None:
        named = path if isinstance(path, str) and path not in ("", "auto", "never") else None
        return ResumedFrom(named or found.name, found.step, found.run_id, found.auto)
    if not isinstance(path, str) or path in ("", "auto", "never"):
        return None
    step = step_of_path(path)
    brought = read_options(run_dir(home, run_id)).resume_from  # copied to this run's node 0 first
    if brought is not None:
        return ResumedFrom(path, step, brought.run)
    runs = [r for r in RunStore(home).runs_named_in(path) if r != run_id]
    return ResumedFrom(path, step, runs[0] if runs else None)


def _router_aux_loss(records: list) -> float | None:
    """The newest router load-balancing loss a mixture-of-experts run reported (``None``: none)."""
    return next((r.router_aux_loss for r in reversed(records) if r.router_aux_loss is not None), None)


def _odd_nodes(record) -> list[str]:
    """``node 3 (host-3): no output for 40 s (others: 1 s)`` for each node far from the others."""
    from launcher.runs.read.recorded_nodes import recorded_rows

    return [r.odd_words() for r in recorded_rows(record) if r.odd]


def _usage(record, plan: RecordedPlan | None, ended_at: float | None) -> Usage | None:
    """GPU-hours (CPU-hours) and, with prices in the settings, their cost; ``ended_at``: when the job of a
    run whose end is not recorded yet ended (its usage stops there)."""
    return usage_of_record(record, plan, prices_set(), ended_at or time.time())


TAIL_BYTES = 8 << 20
"""The end of the metrics file that the rank report reads: its window is the newest steps, and a long run
of many ranks writes hundreds of MB of records."""


def _newest_records(path: Path) -> list:
    from trainer.wire.protocol import MetricRecord

    return [r for line in last_lines(path, TAIL_BYTES)
            if (r := MetricRecord.from_json(line.decode("utf-8", errors="replace")))]


HEAD_BYTES = 64 << 10
"""The start of the metrics file, where the trainer's ``data`` record is (written before the first step)."""


def _head_records(path: Path) -> list:
    """The records at the start of the metrics file (what the trainer says before its first step)."""
    from trainer.wire.protocol import MetricRecord

    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return []
    return [r for line in head.split(b"\n")[:-1] if (r := MetricRecord.from_json(line.decode("utf-8", "replace")))]


def _data_summary(path: Path, records: list) -> DataSeen | None:
    """What the run trained on, from its ``data`` record: examples, and how many were cut at
    ``max_seq_len`` with how many tokens lost; a mixture's realised share of each source (from the newest
    step that said) against its weight; ``None`` for a run without one (a user script)."""
    from trainer.wire.protocol import mix_rows

    for record in _head_records(path):
        summary = DataSummary.from_record(record)
        if summary is not None:
            return DataSeen(summary, next((mix_rows(r) for r in reversed(records) if mix_rows(r)), ()))
    return None


def _memory(path: Path, newest: list) -> MemoryCheck | None:
    """The run's memory prediction (its ``fit`` record, at the start) beside each rank's highest peak
    (the newest records: a peak only grows); ``None`` for a run that predicted nothing."""
    from trainer.wire.fit_record import memory_check

    return memory_check([*_head_records(path), *newest])


def _memory_json(check: MemoryCheck) -> dict[str, Any]:
    return {"predicted_gib": check.fit.expected_gib, "need_gib": check.fit.need_gib, "memory_gib": check.fit.memory_gib,
            "device": check.fit.device, "sharding": check.fit.sharding, "parts_gib": dict(check.fit.parts),
            "peak_gib": check.peak_gib, "peak_rank": check.peak_rank, "error": check.error, "text": check.words()}
