"""Where a code snapshot's files come from: the ``root_path`` folder as it is on disk, or as committed at a
git branch or commit (``code_source.snapshot.git``), which is exported to a temporary folder first."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

from launcher.workload.model import Snapshot


class SnapshotError(Exception):
    """The snapshot cannot be made as the workload asks (not a git clone, an unknown revision, ...)."""


def source_root(root: Path, snap: Snapshot, tmp: Path) -> Path:
    """The folder whose files ship: ``root`` itself, or its tree at ``snap.git``'s revision written
    under ``tmp``; ``SnapshotError`` when an ``include_paths`` entry is not there."""
    if snap.git is not None:
        exported = tmp / "git-tree"
        exported.mkdir()
        revision = snap.git.commit or snap.git.branch or "HEAD"
        if snap.git.remote not in (False, "", None):
            revision = fetch(root, revision, snap.git.remote, branch=snap.git.branch)
        export(root, revision, exported)
        root = exported
    missing = [p for p in snap.include_paths or () if not os.path.lexists(root / p.strip().strip("/"))]
    if missing:
        raise SnapshotError(f"code_source.snapshot.include_paths: {', '.join(missing)} not found in {root}"
                            + (" at that revision" if snap.git is not None else ""))
    return root


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=300,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SnapshotError("code_source.snapshot.git needs git on this machine (apt-get install git)") from None
    except subprocess.TimeoutExpired:
        raise SnapshotError(f"code_source.snapshot.git: git {args[0]} gave no answer within 300 s") from None


def fetch(root: Path, revision: str, remote: bool | str, *, branch: str | None) -> str:
    """``revision`` fetched from the clone's remote (``remote``: its name, or ``True`` for the branch's
    upstream remote, else ``origin``), as ``air``'s ``git.remote`` asks; the commit fetched."""
    name = remote if isinstance(remote, str) else ""
    if not name and branch:
        name = _git(root, "config", "--get", f"branch.{branch}.remote").stdout.decode().strip()
    name = name or "origin"
    if name.startswith("-") or revision.startswith("-"):
        raise SnapshotError(f"code_source.snapshot.git: '{name}' / '{revision}' is not a remote and a revision")
    done = _git(root, "fetch", "--quiet", "--no-tags", name, revision)
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise SnapshotError(f"code_source.snapshot.git.remote: git fetch {name} {revision} failed: "
                            f"{said[-1] if said else f'exit status {done.returncode}'} (git.remote: false ships "
                            "your local clone instead)")
    return _git(root, "rev-parse", "FETCH_HEAD").stdout.decode().strip()


def export(root: Path, revision: str, dest: Path) -> None:
    """The tree of ``root`` (a folder of a git clone) at ``revision`` written into ``dest``."""
    def git(*args: str, where: Path = root) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(["git", "-C", str(where), *args], capture_output=True, timeout=120)
        except FileNotFoundError:
            raise SnapshotError("code_source.snapshot.git needs git on this machine (apt-get install git)") from None

    top = git("rev-parse", "--show-prefix")
    if top.returncode != 0:
        raise SnapshotError(f"code_source.snapshot.git: {root} is not inside a git clone")
    prefix = top.stdout.decode().strip()
    toplevel = Path(git("rev-parse", "--show-toplevel").stdout.decode().strip() or root)
    if git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}").returncode != 0:
        raise SnapshotError(f"code_source.snapshot.git: '{revision}' is not a branch or commit of the clone at "
                            f"{root}")
    done = git("archive", "--format=tar", f"{revision}:{prefix}" if prefix else revision, where=toplevel)
    if done.returncode != 0:
        raise SnapshotError(f"code_source.snapshot.git: git archive {revision} failed: "
                            f"{done.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(dest, filter="data")
