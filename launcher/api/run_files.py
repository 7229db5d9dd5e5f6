"""A run's files: its node logs as recorded here (and one rank's own output, asked of its node), its
folders on the nodes and here removed (``clean``), and the run forgotten (``rm``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.api._lazy import lazy_names

if TYPE_CHECKING:
    from launcher.runs.cleanup import CleanReport, Left
    from launcher.runs.core.streams import LineSplitter, tail_offset
    from launcher.runs.read.rank_log import RankLog, RankLogError

__getattr__ = lazy_names(__name__, {
    "launcher.runs.cleanup": ("CleanReport", "Left"),
    "launcher.runs.core.streams": ("LineSplitter", "tail_offset"),
    "launcher.runs.read.rank_log": ("RankLog", "RankLogError"),
})

__all__ = ["CleanReport", "Left", "LeftBehind", "LineSplitter", "RankLog", "RankLogError", "RunFiles", "tail_offset"]


@dataclass(frozen=True)
class LeftBehind:
    """A folder of a run that stays once its record is forgotten, and the command that removes it then."""

    left: Left
    removal: str
    """The shell command line that removes it and needs no record: the user's own ``rm -r``, or ``ssh`` to
    the node as the launch reached it."""


class RunFiles:
    """The files of one data dir's runs, here and on their nodes."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)

    def node_log(self, run_id: str, node_rank: int) -> Path:
        """Where node ``node_rank``'s log of the run is mirrored here (it may not exist yet)."""
        from launcher.paths import run_dir
        from launcher.runs.core.layout import mirror_path

        return mirror_path(run_dir(self.home, run_id), node_rank)

    def rank_log(self, run_id: str, rank: int) -> RankLog:
        """A reader of global rank ``rank``'s own output on the node that ran it (close it when done);
        :class:`RankLogError` says why it cannot be read (no such rank, no plan on record)."""
        from launcher.runs.read.rank_log import RankLog

        return RankLog(self.home, run_id, rank)

    def ranks_of_node(self, run_id: str, node_rank: int) -> list[int]:
        """The global ranks node ``node_rank`` of the run ran (empty: no plan on record)."""
        from launcher.runs.read.rank_log import ranks_of_node

        return ranks_of_node(self.home, run_id, node_rank)

    async def clean(self, run_id: str) -> CleanReport:
        """Remove the run's directory on every node and its folder here, keeping its record; what each node
        said. ``ValueError``: the run has not ended."""
        from launcher.runs.cleanup import remove_run_files

        return await remove_run_files(self.home, run_id)

    def cleaned(self, run_id: str) -> bool:
        """Whether the run's folders were removed from its nodes (``clean``)."""
        from launcher.paths import run_dir
        from launcher.runs.cleanup import cleaned

        return cleaned(run_dir(self.home, run_id)) is not None

    def left_behind(self, run_id: str) -> list[LeftBehind]:
        """Where the run's files stay once its record is forgotten, each with a command that removes it and
        needs no record (the user's own ``rm``, or ``ssh`` to the node as the launch reached it): say them
        before the record goes (:func:`launcher.present.run_files.left_behind_line`)."""
        import shlex

        from launcher.paths import run_dir
        from launcher.runs.cleanup import files_left
        from launcher.runs.core.layout import load_plan

        try:
            plan = load_plan(run_dir(self.home, run_id))
        except (OSError, ValueError, KeyError):
            plan = None  # recorded before plans were kept: a plain ssh line
        return [LeftBehind(left, f"rm -r {shlex.quote(left.path)}" if left.rank is None
                           else _removal(plan, left.rank, left.path, left.host))
                for left in files_left(self.home, run_id)]

    def folders(self, run_id: str) -> list[Left]:
        """Where the run's files are (its folder here with its size; each other node's run directory), for the
        question before it is deleted; empty once they were removed (``clean``) or for a run this data dir
        does not know (:func:`launcher.present.run_files.folder_line`)."""
        from launcher.runs.cleanup import files_left

        return files_left(self.home, run_id)


def _removal(plan, rank: int, node_dir: str, recorded_host: str) -> str:
    """The user's own ``ssh`` line that removes a run's folder on node ``rank`` (``<root>/runs/<run>``, which
    holds that node's ``node-<rank>``), as the launch reached the node; a plain one without a plan."""
    import shlex

    from launcher.paths import shell_path

    runs, run, _node = node_dir.rstrip("/").rsplit("/", 2)
    try:
        from launcher.backends.ssh.shell import ssh_argv

        host = plan.nodes[rank].host if plan is not None else None
        if plan is not None and host is not None:
            return shlex.join(ssh_argv(host, plan.workload.ssh, runs, ["rm", "-r", "--", run]))
    except Exception:  # noqa: BLE001 - an ssh config that cannot be read: the plain line below
        pass
    return f"ssh {shlex.quote(recorded_host)} rm -r -- {shell_path(f'{runs}/{run}')}"  # in the node's home
