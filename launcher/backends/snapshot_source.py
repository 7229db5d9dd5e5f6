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
        export(root, snap.git.commit or snap.git.branch or "HEAD", exported)
        root = exported
    missing = [p for p in snap.include_paths or () if not os.path.lexists(root / p.strip().strip("/"))]
    if missing:
        raise SnapshotError(f"code_source.snapshot.include_paths: {', '.join(missing)} not found in {root}"
                            + (" at that revision" if snap.git is not None else ""))
    return root


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
