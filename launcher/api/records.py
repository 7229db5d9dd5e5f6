"""The data dir itself: the run store's health and its rebuild from the run folders, the secret store, the
user's settings and a sample notification to each configured sink, the ``output_dir`` other workloads'
runs use, and a workload rendered for another engine (eject: text only, nothing reaches a machine)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from launcher.api._lazy import lazy_names

if TYPE_CHECKING:
    from launcher.eject.targets import Ejected, Target
    from launcher.notify.deliver import Delivery
    from launcher.runs.core.output_dirs import HINT as OUTPUT_DIR_HINT
    from launcher.runs.core.output_dirs import OutputDirUsers
    from launcher.runs.core.rebuild import RebuildReport
    from launcher.runs.core.user_settings import SettingsError
    from launcher.secrets import SecretStore
    from launcher.workload.load import Planned
    from launcher.workload.notify import Notify
    from launcher.workload.plan import RunPlan
    from launcher.workload.problems import Problem

__getattr__ = lazy_names(__name__, {
    "launcher.eject.targets": ("Ejected",),
    "launcher.notify.deliver": ("Delivery",),
    "launcher.runs.core.output_dirs": ("OUTPUT_DIR_HINT=HINT", "OutputDirUsers"),
    "launcher.runs.core.rebuild": ("RebuildReport",),
    "launcher.runs.core.user_settings": ("SettingsError",),
    "launcher.secrets": ("SecretStore",),
})

__all__ = ["OUTPUT_DIR_HINT", "Delivery", "Ejected", "NoSink", "OutputDirUsers", "Records", "RebuildReport",
           "SecretStore", "SettingsError"]


class NoSink(LookupError):
    """No notification sink is configured; ``str()`` says where to add one."""


class Records:
    """One data dir's own records, beside its runs."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)

    @property
    def store_file(self) -> Path:
        """The run store (an index of the run folders, rebuilt from them by :meth:`rebuild_store`)."""
        return self.home / "runs.db"

    def store_problem(self) -> str | None:
        """What is wrong with the run store, in words; ``None``: it is sound (or not there yet)."""
        from launcher.runs.core.rebuild import check_store

        return check_store(self.home)

    def live_owners(self) -> list[tuple[str, int | None]]:
        """Runs whose owner is alive now (each with its pid when known): they still write to the store."""
        from launcher.runs.core.ownership import live_owners

        return live_owners(self.home)

    def rebuild_store(self) -> RebuildReport:
        """Move the run store aside and rebuild it from the run folders; what was found."""
        from launcher.runs.core.rebuild import rebuild_store

        return rebuild_store(self.home)

    @property
    def secrets(self) -> SecretStore:
        """The secret store (``secrets.json``, the user's alone); environment variables override it."""
        from launcher.secrets import SecretStore

        return SecretStore(self.home)

    @staticmethod
    def secret_env_name(ref: str) -> str:
        """The environment variable that overrides the secret ``ref`` (``scope/key``)."""
        from launcher.secrets import env_name

        return env_name(ref)

    def output_dir_users(self, plan: RunPlan) -> OutputDirUsers | None:
        """Other workloads' runs that use ``plan``'s ``output_dir`` on the same node (``None``: none;
        :meth:`OutputDirUsers.words` says them as a launch's refusal does); a launch refuses such a plan
        (:data:`OUTPUT_DIR_HINT` says what to do)."""
        from launcher.runs.core.output_dirs import users_of_output_dir

        return users_of_output_dir(self.home, plan)

    def quarantine_problems(self, planned: Planned) -> list[Problem]:
        """A warning at each host and spare of ``planned``'s workload that this data dir has quarantined (a
        launch on such a host is refused, a quarantined spare is never used), at the line that names it."""
        from launcher.runs.core.quarantine import quarantined

        w = planned.result.workload
        held = quarantined(self.home) if w is not None else {}
        if not held or w is None:
            return []
        out = []
        for key, hosts in (("hosts", w.compute.hosts), ("spares", w.compute.spares)):
            for i, host in enumerate(hosts):
                if host in held:
                    use = "a launch on it is refused" if key == "hosts" else "it is never used as a spare"
                    out.append(planned.result.problem(("compute", key, i), "warning", f"{held[host].words()}: {use}",
                                                      f"fsdp-tui quarantine lift {host} once the machine is fixed"))
        return out

    def send_sample_notification(self, workload_notify: Notify | None = None) -> list[Delivery]:
        """A sample run summary sent to every sink of the user settings (and of ``workload_notify``): what
        happened at each. :class:`SettingsError`: the settings cannot be read; :class:`NoSink`: none set."""
        from launcher.notify.deliver import deliver
        from launcher.notify.summary import CheckpointFact, RunFacts, build_summary
        from launcher.runs.core.triage import TriageReport
        from launcher.runs.core.user_settings import effective_notify, load_user_settings, settings_file
        from launcher.secrets import SecretStore

        notify = effective_notify(workload_notify, load_user_settings())
        if notify is None:
            raise NoSink(str(settings_file()))
        triage = TriageReport(node_rank=1, rank=9, exit_code=1, signature="oom", line_no=4242,
                              excerpt="torch.OutOfMemoryError: CUDA out of memory (a sample)")
        facts = RunFacts(run_id="20260101-000000-sample-0000", experiment="sample", event="test",
                         detail="a sample sent by fsdp-tui notify test", duration_s=3723.0, step=120, max_steps=1000,
                         last_loss=1.2345, best_eval_loss=1.3012, usage={"kind": "gpu", "hours": 16.5, "cost": None},
                         checkpoint=CheckpointFact("step-00000100", 100, 300.0),
                         triage=triage.to_dict())
        return deliver(notify, build_summary(facts), SecretStore(self.home))

    @staticmethod
    def eject(plan: RunPlan, target: Target) -> Ejected:
        """``plan`` as another engine (``kubeflow``, ``jobset``, ``skypilot``, ``sbatch``) takes it, and what
        does not carry over; nothing is submitted."""
        from launcher.eject.targets import eject

        return eject(plan, target)
