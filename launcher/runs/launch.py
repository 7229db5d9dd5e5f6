"""What the app and the CLI ask of runs: start one (its owner starts detached), adopt the orphaned,
cancel, and render a plan for a dry run. Everything here returns quickly; the owner does the work. What a
launch asks the nodes before it records the run is :mod:`launcher.runs.launch_checks`'."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from launcher.events import RunState, RunStateChanged
from launcher.paths import private_dir, run_dir
from launcher.runs.core import pending
from launcher.runs.core.continuing import Continuation, max_steps_of
from launcher.runs.core.layout import EVENTS, Brought, LaunchOptions, save_options, save_plan
from launcher.runs.core.output_dirs import HINT, deciding, output_dir_users
from launcher.runs.core.ownership import (
    OwnerLock,
    WarmOwner,
    hand_over,
    owned,
    request_cancel,
    spawn_owner,
)
from launcher.runs.core.space import RecordUnwritable, is_write_failure, shortage, write_failure
from launcher.runs.core.store import RunRecord, RunStore
from launcher.runs.owner.recorder import event_line
from launcher.words import node_at
from launcher.workload.load import Planned, plan_file
from launcher.workload.overrides import Override
from launcher.workload.plan import RunPlan

if TYPE_CHECKING:
    from launcher.workload.dry_run import DryRun


class LaunchRefused(RuntimeError):
    """The launch would harm another run (its ``output_dir`` is another workload's): nothing was started
    or recorded. ``str()`` says why and what to do."""


def create_run(plan: RunPlan, home: Path) -> Path:
    """The run's record before it has an owner: store rows, resolved workload, plan, first event."""
    store = RunStore(home)
    resolved = yaml.safe_dump(plan.workload.model_dump(mode="json", exclude_none=True), sort_keys=False)
    directory = store.create_run(plan, plan.source_file, resolved)
    save_plan(directory, plan)
    now = time.time()
    store.set_state(plan.run_id, RunState.PENDING, 1, "created", now)
    event = RunStateChanged(plan.run_id, RunState.PENDING, 1, "created")
    with open(directory / EVENTS, "a", encoding="utf-8") as f:
        f.write(event_line(event, now) + "\n")
    return directory


def start_run(plan: RunPlan, home: Path, *, force: bool = False, tags: dict[str, str] | None = None,
              idempotent: bool = True, resume_from: Brought | None = None, continues: Continuation | None = None,
              checked: bool = False, warm: WarmOwner | None = None) -> str:
    """Record the run and start its owner, detached: the run outlives this process and its terminal.
    The run's lock is taken before its record exists, so nobody can take the new run for an orphan.
    ``force``: skip the cheap checks that refuse a launch that cannot run. ``tags``: extra MLflow tags
    of the run (a sweep's variant names its sweep and its parent MLflow run). A data dir below its floor
    of free space refuses the launch at once (:class:`RecordUnwritable`): the record could not be kept.
    With the workload's ``idempotency_token`` (and ``idempotent``, the default: a relaunch is meant as a
    new run), a token launched before answers with that run's id and nothing starts. An ``output_dir``
    that another workload's run uses on the same node refuses the launch (:class:`LaunchRefused`).
    ``resume_from``: the checkpoint its owner copies to node 0 before the start (:class:`Resumed`);
    ``continues``: the run it continues and from which checkpoint (:mod:`launcher.runs.core.continuing`).
    ``checked``: the cheap checks ran on every node just before (:func:`launcher.runs.launch_checks.launch_refusals`) and found nothing;
    its owner does not run them again. ``warm``: an owner started while those checks ran, which takes the
    run (:class:`launcher.runs.core.ownership.WarmOwner`)."""
    check_room(home)
    with deciding(home, plan):  # two launches into one output_dir at once: the second sees the first
        taken = output_dir_users(home, plan)
        if taken:
            raise LaunchRefused(f"not launched: parameters.output_dir {taken} ({HINT})")
        token = plan.workload.idempotency_token
        if token and idempotent:
            from launcher.runs.core.idempotency import claim

            earlier = claim(home, token, plan.run_id, tags)
            if earlier is not None:
                return earlier
        lock = OwnerLock(run_dir(home, plan.run_id))
        if not lock.acquire():
            raise RuntimeError(f"run {plan.run_id} exists already")
        try:
            create_run(plan, home)
            save_options(run_dir(home, plan.run_id), LaunchOptions(force, tags or {}, resume_from, continues,
                                                                   checked=checked and not force))
            _keep_estimate(home, plan, tags or {})
            hand_over(lock, home, plan.run_id, adopt=False, warm=warm)
        except (OSError, sqlite3.OperationalError) as err:
            _forget(home, plan.run_id)
            if not is_write_failure(err):
                raise
            raise RecordUnwritable(f"not launched: {write_failure(Path(home), err)}, then launch again") from None
        except Exception:
            _forget(home, plan.run_id)  # a launch that could not be recorded leaves nothing that looks like a run
            raise
        finally:
            lock.release()
    return plan.run_id


def _keep_estimate(home: Path, plan: RunPlan, tags: dict[str, str]) -> None:
    """The run's cost as estimated at its launch, kept so its owner compares it with the real one at the
    end (docs/estimate.md); a launch never fails for it. A probe keeps none: it is a measurement, cancelled
    on purpose, never a run to compare."""
    from launcher.runs.core.estimates import PROBE_TAG, estimate_plan, keep_estimate

    if tags.get(PROBE_TAG) == "1":
        return
    try:
        est = estimate_plan(home, plan, exclude=plan.run_id)
        if est is not None:
            keep_estimate(run_dir(home, plan.run_id), est)
    except (OSError, ValueError, sqlite3.Error):
        pass


def check_room(home: Path) -> None:
    """:class:`RecordUnwritable` when the data dir is below its floor of free space: a run's record could
    not be kept, so nothing is launched."""
    private_dir(Path(home))
    problem = shortage(Path(home))
    if problem:
        raise RecordUnwritable(f"not launched: {problem}, then launch again")


def _forget(home: Path, run_id: str) -> None:
    """What a refused or failed launch had written of its run: nothing of it may look like a run later."""
    import shutil

    try:
        store = RunStore(home)
        if store.get_run(run_id) is not None:
            store.set_state(run_id, RunState.FAILED, 1, "not launched: no room for its record")
            store.delete_run(run_id)
    except (LookupError, ValueError, sqlite3.Error):
        pass  # the disk took none of it
    shutil.rmtree(run_dir(home, run_id), ignore_errors=True)


@dataclass(frozen=True)
class CancelReport:
    run_id: str
    state: RunState
    """The run's state once the cancel is done (or when waiting gave up)."""
    already_ended: bool
    nodes: tuple[tuple[int, str, str, str], ...]
    """(rank, host, node state, detail) of every node afterwards."""
    timed_out: bool = False
    detail: str = ""
    """What the run's last state change said (for a failed run: why it failed)."""

    @property
    def leftovers(self) -> list[str]:
        return [f"{node_at(r, h)}: {d}" for r, h, _s, d in self.nodes if d.startswith("processes left")]


async def cancel_run(home: Path, run_id: str, *, timeout_s: float = 120.0) -> CancelReport:
    """Ask the run's owner to cancel (adopting the run first if it has none) and wait for the outcome."""
    store = RunStore(home)
    record = _record(store, run_id)
    if record.summary.state.is_final:
        return _report(record, already_ended=True)
    request_cancel(home, run_id)
    if not owned(home, run_id):
        spawn_owner(home, run_id, adopt=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = _record(store, run_id)
        if record.summary.state.is_final and (not owned(home, run_id) or _only_tracking(home, run_id)):
            return _report(record, already_ended=False)
        await asyncio.sleep(0.1)
    return _report(_record(store, run_id), already_ended=False, timed_out=True)


def _only_tracking(home: Path, run_id: str) -> bool:
    """The run's owner has recorded its end and only sends it to MLflow now."""
    from launcher.runs.core.ownership import owner_note

    return owner_note(home, run_id) == pending.SENDING


def _record(store: RunStore, run_id: str) -> RunRecord:
    """The run's record; ``LookupError`` when the store has none (never created, or removed meanwhile)."""
    record = store.get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    return record


def _report(record: RunRecord, *, already_ended: bool, timed_out: bool = False) -> CancelReport:
    return CancelReport(record.summary.run_id, record.summary.state, already_ended,
                        tuple((n.node_rank, n.host, n.state.value, n.detail) for n in record.nodes), timed_out,
                        record.summary.detail)


def relaunch_plan(home: Path, run_id: str, overrides: Sequence[Override] = ()) -> Planned:
    """The plan of a new run doing what ``run_id`` did: its recorded workload (what ran, not the file as
    it is now), with ``overrides`` on top; code paths stay relative to the original file's folder."""
    record = RunStore(home).get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    text = (record.directory / "workload.yaml").read_text()
    source = Path(record.summary.workload_path) if record.summary.workload_path else record.directory / "workload.yaml"
    return plan_file(source, overrides, home=home, text=text)


@dataclass(frozen=True)
class Resumed:
    """A resume's plan, the checkpoint it starts from, and what its owner brings to node 0 first."""

    planned: Planned
    path: str
    """Where the new run's node 0 finds the checkpoint."""
    bring: Brought | None = None
    """The launch option ``resume_from``: the checkpoint's run, holder and name, when node 0 needs a copy."""
    continues: Continuation | None = None
    """The run it continues, from which checkpoint (kept in the new run's launch options)."""


async def resume_plan(home: Path, run_id: str, step: int | None = None,
                      overrides: Sequence[Override] = (), name: str | None = None) -> Resumed:
    """A relaunch of ``run_id`` resuming from its newest complete checkpoint (or the one of ``step``, or the
    folder ``name``), found where its whole copies are: read there when the new run's node 0 is that
    machine (or a bucket), else copied to the new node 0's own checkpoints folder before the start."""
    from launcher.runs.core.checkpoints import (
        list_checkpoints,
        resume_choice,
        resume_override,
        resume_runs_override,
    )

    listing = await list_checkpoints(home, run_id)
    if listing.error:
        raise LookupError(f"cannot list the checkpoints of {run_id}: {listing.error}")
    chosen = listing.chosen(step=step, name=name)
    if chosen is None:
        which = f"named {name!r}" if name is not None else f"at step {step}" if step is not None else ""
        raise LookupError(listing.none_of_its_own(which))
    record = RunStore(home).get_run(run_id)
    continues = resume_runs_override(run_id, (record.directory / "workload.yaml").read_text() if record else "")
    planned = relaunch_plan(home, run_id, [*overrides, resume_override(chosen.path), continues])
    if planned.plan is None:
        return Resumed(planned, chosen.path)
    going_on = Continuation(run_id, chosen.name, chosen.step, max_steps_of(planned.plan))
    if going_on.nothing_left:
        raise NothingLeft(going_on.refusal(f"{listing.label}: {listing.root}"))
    choice = await resume_choice(home, run_id, chosen, listing, planned.plan)
    if choice.path != chosen.path:
        planned = relaunch_plan(home, run_id, [*overrides, resume_override(choice.path), continues])
    return Resumed(planned, choice.path, choice.bring, going_on)


class NothingLeft(LookupError):
    """A resume whose checkpoint already holds every step the new run would train: nothing launched."""


PLACE_TIMEOUT_S = 10.0
"""How long a dry run waits for the nodes to say where checkpoints land."""


def plan_dry_run(plan: RunPlan, *, ask_nodes: bool = False) -> DryRun:
    """The dry run, as the backend that will run it sees the plan; with ``ask_nodes``, where
    ``output_dir`` lands on the nodes too (they are asked, as a launch asks them)."""
    from dataclasses import replace

    from launcher.backends.registry import backend_for

    if ask_nodes and plan.output_dir is not None and not plan.blockers:
        plan = replace(plan, ckpt_place=asyncio.run(checkpoint_place(plan)))
    return backend_for(plan).dry_run()


async def checkpoint_place(plan: RunPlan):
    """Where ``plan``'s ``output_dir`` lands on its nodes, asked of them (as a launch does), and where whole
    copies would be kept; ``unchecked`` with the reason when a node does not answer."""
    from launcher.backends.base import NodeError
    from launcher.backends.registry import backend_for
    from launcher.workload.ckpt_place import CheckpointPlace, with_holder

    output_dir = plan.output_dir
    if output_dir is None:
        raise ValueError(f"{plan.run_id}: the run writes no checkpoints (parameters.output_dir is unset)")
    backend = backend_for(plan)
    try:
        await backend.locate()
        place = await asyncio.wait_for(backend.checkpoint_place(output_dir), PLACE_TIMEOUT_S)
        return with_holder(place, plan.gather_to)
    except NodeError as err:
        return CheckpointPlace("unchecked", output_dir, detail=str(err))
    except asyncio.TimeoutError:
        return CheckpointPlace("unchecked", output_dir, detail=f"no answer within {PLACE_TIMEOUT_S:.0f} s")
    finally:
        await backend.close()


def is_owned(home: Path, run_id: str) -> bool:
    return owned(home, run_id)


def run_directory(home: Path, run_id: str) -> Path:
    return run_dir(home, run_id)


def send_tracking(home: Path, run_id: str):
    """What ``run_id``'s owner could not send to MLflow, sent now (blocking, each call bounded): a
    :class:`~launcher.runs.owner.send_later.Sent` saying how it went."""
    from launcher.runs.owner.send_later import send

    return send(home, run_id)
