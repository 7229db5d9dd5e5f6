"""Nothing touches another run's checkpoints: a model-based test (Hypothesis's rule-based state machine).

Random sequences of run, cancel (a last save never gathered), resume (from the newest, or ``--from`` a
step), resume onto swapped or fewer hosts, retry, relaunch (``resume: auto`` in a shared folder), sweep
variant, export, delete, ``clean`` and ``rm`` over shared, per-node (gathered) and bucket folders with
``keep_last`` 1 to 3, acted on by the product's own code (:mod:`tests.support.ckpt_world`). After every
step: each checkpoint a run lists as complete is whole where it lies and is that run's or its lineage's;
the only checkpoints ever removed are the acting run's own (or a copy it brought for itself), by its
``keep_last``, ``clean``, ``rm`` or delete; a run's safe step is its own; ``keep_last`` holds. The
real-part sequence on two private-disk hosts is in ``tests/runs/owner/test_ckpt_invariant_real.py``."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.support.ckpt_world import HOSTS, World

KINDS = st.sampled_from(["shared", "per_node", "bucket"])
KEEP = st.integers(1, 3)
SAVES = st.integers(1, 3)


class WhoseCheckpoints(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ckpt-world-"))
        self.world = World(self.tmp)
        self.before = self.world.snapshot()
        self.actor: str | None = None
        self.allowed: set[tuple[str, str]] = set()
        """Copies the acting run brought for itself: its to remove, whoever wrote what they copy."""
        self.saved: set[str] = set()
        """Runs that saved in this step: keep_last is checked on them."""
        self.had: dict[str, bool] = {}
        """Whether each run had a whole checkpoint of its own before the step (its safe step is never pruned)."""

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------------------

    def _act(self, run_id: str) -> None:
        self.actor = run_id
        self.allowed = set(self.world.runs[run_id].brought)
        self.had = {r: bool([c for c in self.world.view(run).own if c.complete])
                    for r, run in self.world.runs.items() if not run.forgotten}

    def _live(self, data) -> str | None:
        live = sorted(r for r, run in self.world.runs.items() if not run.forgotten)
        return data.draw(st.sampled_from(live)) if live else None

    # -- rules ----------------------------------------------------------------------------------------

    @rule(kind=KINDS, keep=KEEP, saves=SAVES, hosts=st.sampled_from([("h0", "h1"), ("h1", "h2"), ("h0",)]),
          cancelled=st.booleans())
    def run(self, kind, keep, saves, hosts, cancelled):
        """A new run of the workload (its fixed folder); cancelled: its last save is never gathered."""
        run = self.world.new_run(kind, hosts, keep)
        self._act(run.run_id)
        self.world.saves(run, saves, last_gathered=not cancelled)
        self.saved = {run.run_id}

    @rule(keep=KEEP, saves=SAVES)
    def sweep_variant(self, keep, saves):
        """A sweep's variant: a folder of its own (``<output_dir>/$FSDP_TUI_RUN_ID``)."""
        run = self.world.new_run("own", ("h0", "h1"), keep)
        self._act(run.run_id)
        self.world.saves(run, saves)
        self.saved = {run.run_id}

    @precondition(lambda self: self.world.runs)
    @rule(data=st.data(), arrangement=st.sampled_from(["same", "swapped", "fewer"]), saves=SAVES, keep=KEEP,
          pick=st.integers(0, 5), newest=st.booleans())
    def resume(self, data, arrangement, saves, keep, pick, newest):
        """``fsdp-tui resume OLD [--from STEP]``, on the same hosts, swapped ones or one fewer."""
        old_id = self._live(data)
        if old_id is None:
            return
        old = self.world.runs[old_id]
        view = self.world.view(old)
        own = [c for c in view.own if c.complete]
        chosen = view.chosen() if newest or not own else view.chosen(step=own[pick % len(own)].step)
        if chosen is None:
            assert not own  # it has none of its own: resume exits saying what the folder holds
            return
        assert view.whose(chosen) == "own"
        hosts = {"same": old.hosts, "swapped": tuple(reversed(old.hosts)), "fewer": old.hosts[:1]}[arrangement]
        new = self.world.new_run(old.kind, hosts, keep, (old.run_id, *old.continues))
        self._act(new.run_id)
        self.world.bring_for(old, new, chosen.name)
        self.allowed = set(new.brought)
        event(f"resume {old.kind} {arrangement}{' (a copy brought)' if new.brought else ''}")
        new.step = chosen.step
        self.world.saves(new, saves)
        self.world.finish(new)
        self.saved = {new.run_id}

    @precondition(lambda self: self.world.runs)
    @rule(data=st.data(), saves=SAVES)
    def retry(self, data, saves):
        """The run's next attempt: its trainer resumes from what ``resume: auto`` may read."""
        run_id = self._live(data)
        if run_id is None:
            return
        run = self.world.runs[run_id]
        self._act(run_id)
        path = self.world.resume_auto(run)
        if path is not None:
            (found,) = [c for c in self.world.view(run).listing.checkpoints if c.path == path]
            assert run.lineage().may_read(found), (path, found.run_id, run.lineage())
        self.world.saves(run, saves)
        self.saved = {run_id}

    @rule(kind=KINDS, keep=KEEP, saves=SAVES, hosts=st.sampled_from([("h0", "h1"), ("h1", "h0"), ("h2",)]))
    def relaunch(self, kind, keep, saves, hosts):
        """The same workload launched again: ``resume: auto`` continues another run only as its lineage."""
        found = self.world.continued_by_auto(kind, hosts)
        event(f"relaunch {kind}: {'continues a run' if found else 'starts afresh'}")
        run = self.world.new_run(kind, hosts, keep, (found.run_id,) if found else ())
        if found is not None:
            run.continues = (found.run_id, *self.world.runs[found.run_id].continues)
        self._act(run.run_id)
        path = self.world.resume_auto(run)
        if path is not None:
            (chosen,) = [c for c in self.world.view(run).listing.checkpoints if c.path == path]
            assert chosen.run_id in (found.run_id if found else None, run.run_id), (chosen, found)
        self.world.saves(run, saves)
        self.saved = {run.run_id}

    @precondition(lambda self: self.world.runs)
    @rule(data=st.data())
    def export(self, data):
        """``fsdp-tui export RUN``: the run's own newest whole checkpoint, its bytes the trainer's."""
        run_id = self._live(data)
        if run_id is None:
            return
        run = self.world.runs[run_id]
        self._act(run_id)
        chosen = self.world.view(run).chosen()
        if chosen is not None:
            assert chosen.run_id in (run_id, None) and not self.world.store(run).verify(chosen.path)

    @precondition(lambda self: self.world.runs)
    @rule(data=st.data(), pick=st.integers(0, 20))
    def delete(self, data, pick):
        """The checkpoints screen's ``d`` on any checkpoint the folder holds: the rule decides."""
        run_id = self._live(data)
        if run_id is None:
            return
        run = self.world.runs[run_id]
        listed = list(self.world.view(run).listing.checkpoints)
        if not listed:
            return
        target = listed[pick % len(listed)]
        self._act(run_id)
        why = self.world.delete(run, target.name)
        event(f"delete of {'its own' if target.run_id == run_id else 'another run' + chr(39) + 's'}: "
              f"{'refused' if why else 'done'}")
        if target.run_id != run_id:
            assert why, f"{run_id} deleted {target.name} of {target.run_id}"

    @precondition(lambda self: self.world.runs)
    @rule(data=st.data(), files=st.booleans())
    def clean_or_rm(self, data, files):
        """``fsdp-tui clean RUN`` (or ``rm --files``: the same, and the record forgotten), or a bare ``rm``."""
        run_id = self._live(data)
        if run_id is None:
            return
        run = self.world.runs[run_id]
        self._act(run_id)
        if files:
            self.world.clean(run)
            assert not [c for c in self.world.view(run).own]
        run.forgotten = files or run.forgotten

    # -- what must hold after every step -----------------------------------------------------------------

    @invariant()
    def only_the_actors_own_went(self):
        after = self.world.snapshot()
        for key, (whole, writer) in self.before.items():
            if key in after and not (whole and not after[key][0]):
                continue  # still there, as whole as it was
            if writer is None:  # a node's part of a split save: the run whose node 0 holds its meta.json
                folder = Path(key[0]).parent.name  # the same output_dir on another host (names are unique there)
                writer = next((w for (root, name), (_whole, w) in self.before.items()
                               if name == key[1] and w and Path(root).parent.name == folder), None)
            assert writer == self.actor or key in self.allowed, (
                f"{key[1]} in {key[0]} (run {writer}'s) went while run {self.actor} acted")
        self.before = after
        self.actor, self.allowed = None, set()

    @invariant()
    def what_a_run_lists_is_whole_and_its_own_or_its_lineages(self):
        for run in self.world.runs.values():
            if run.forgotten:
                continue
            view = self.world.view(run)
            for c in view.checkpoints:
                assert view.whose(c) in ("own", "continued")
                if c.complete:
                    assert c.run_id in (run.run_id, *run.continues)
                    if not c.path.startswith("memory://"):
                        assert ckpt_layout_whole(c.path), c.path
            safe = view.safe()
            assert safe is None or safe.run_id == run.run_id

    @invariant()
    def keep_last_holds_for_the_runs_that_saved(self):
        for run_id in self.saved:
            run = self.world.runs[run_id]
            mine = [c for c in self.world.view(run).own if c.complete]
            assert len(mine) <= run.keep_last, (run_id, [c.name for c in mine], run.keep_last)
            assert mine or not self.had.get(run_id), f"{run_id} lost its safe step to its own keep_last"
        self.saved = set()


def ckpt_layout_whole(path: str) -> bool:
    from trainer.wire.ckpt_layout import wholeness

    return wholeness(path).complete


WhoseCheckpoints.TestCase.settings = settings(
    max_examples=25, stateful_step_count=12, derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_nothing_touches_another_runs_checkpoints = WhoseCheckpoints.TestCase

assert HOSTS  # the hosts the rules draw from
