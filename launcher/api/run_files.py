"""A run's files: its node logs as recorded here (and one rank's own output, asked of its node), its
folders on the nodes and here removed (``clean``), and the run forgotten (``rm``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from launcher.api._lazy import lazy_names

if TYPE_CHECKING:
    from launcher.runs.cleanup import CleanReport
    from launcher.runs.core.streams import LineSplitter, tail_offset
    from launcher.runs.read.rank_log import RankLog, RankLogError

__getattr__ = lazy_names(__name__, {
    "launcher.runs.cleanup": ("CleanReport",),
    "launcher.runs.core.streams": ("LineSplitter", "tail_offset"),
    "launcher.runs.read.rank_log": ("RankLog", "RankLogError"),
})

__all__ = ["CleanReport", "LineSplitter", "RankLog", "RankLogError", "RunFiles", "tail_offset"]


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

    def left_behind(self, run_id: str) -> list[str]:
        """Where the run's files stay once its record is forgotten, each with a command that removes it and
        needs no record (the user's own ``rm``, or ``ssh`` to the node as the launch reached it): say them
        before the record goes."""
        import shlex

        from launcher.paths import run_dir
        from launcher.runs.cleanup import files_left
        from launcher.runs.core.layout import load_plan

        try:
            plan = load_plan(run_dir(self.home, run_id))
        except (OSError, ValueError, KeyError):
            plan = None  # recorded before plans were kept: a plain ssh line
        out = []
        for left in files_left(self.home, run_id):
            if left.rank is None:
                out.append(f"its files here stay: {left.path} ({left.size}: checkpoints, exports, outputs); "
                           f"remove them: rm -r {shlex.quote(left.path)}")
            else:
                out.append(f"its files on {left.where} stay there: {left.path}; remove them: "
                           f"{_removal(plan, left.rank, left.path, left.host)}")
        return out

    def folders(self, run_id: str) -> list[str]:
        """Where the run's files are, one line each (its folder here with its size; each other node's run
        directory), for the question before it is deleted; empty once they were removed (``clean``) or for a
        run this data dir does not know."""
        from launcher.runs.cleanup import cleaned, folder_bytes
        from launcher.runs.core.store import RunStore
        from launcher.words import fmt_bytes, node_at
        from launcher.workload.load import LOCAL_NODES_DIR

        record = RunStore(self.home).get_run(run_id)
        if record is None or cleaned(record.directory) is not None:
            return []
        out = []
        here = self.home / LOCAL_NODES_DIR / run_id
        if here.is_dir():
            out.append(f"here: {here} ({fmt_bytes(folder_bytes(here))}: checkpoints, exports, outputs)")
        out += [f"{node_at(n.node_rank, n.host)}: {n.node_dir}" for n in record.nodes
                if not n.node_dir.startswith(str(self.home))]
        return out


def _removal(plan, rank: int, node_dir: str, recorded_host: str) -> str:
    """The user's own ``ssh`` line that removes a run's folder on node ``rank`` (``<root>/runs/<run>``, which
    holds that node's ``node-<rank>``), as the launch reached the node; a plain one without a plan."""
    import shlex

    runs, run, _node = node_dir.rstrip("/").rsplit("/", 2)
    try:
        from launcher.backends.ssh.shell import ssh_argv

        host = plan.nodes[rank].host if plan is not None else None
        if plan is not None and host is not None:
            return shlex.join(ssh_argv(host, plan.workload.ssh, runs, ["rm", "-r", "--", run]))
    except Exception:  # noqa: BLE001 - an ssh config that cannot be read: the plain line below
        pass
    folder = f"{runs}/{run}"
    where = "~/" + shlex.quote(folder[2:]) if folder.startswith("~/") else shlex.quote(folder)  # the node's home
    return f"ssh {shlex.quote(recorded_host)} rm -r -- {where}"
