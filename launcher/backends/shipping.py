"""What travels between this machine and a node through its agent: the code snapshot and the built-in
trainer packed as tar files to upload in chunks, and a folder fetched back (an export), unpacked only
when every entry is a plain file or folder inside one folder."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from launcher.backends.base import NodeError
from launcher.untrusted import printable
from launcher.words import plural
from launcher.workload.plan import TRAINER_PKG_DIR, RunPlan

UPLOAD_CHUNK = 4 << 20
TRAINER_SOURCE = Path(__file__).resolve().parents[2] / "trainer"
TRAINER_EXCLUDE = ("__pycache__", "*.pyc")


@dataclass(frozen=True)
class Tree:
    """A folder to ship, as a tar file on this machine."""

    name: str
    dest: str
    path: Path
    size: int
    sha256: str


def read_chunk(path: Path, offset: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(UPLOAD_CHUNK)


def write_trees(plan: RunPlan, tmp: Path) -> list[Tree]:
    """The code snapshot and the built-in trainer as tar files in ``tmp``, by the snapshot's rule."""
    from launcher.backends.snapshot_source import SnapshotError, source_root
    from launcher.workload.snapshot import SnapshotRefused, write_tar

    wanted: list[tuple[str, str, Path, tuple[str, ...], str, tuple[str, ...]]] = []
    if plan.code_root is not None and plan.workload.code_source is not None:
        snap = plan.workload.code_source.snapshot
        try:
            root = source_root(plan.code_root, snap, tmp)
        except SnapshotError as err:
            raise NodeError(f"{err}: nothing was shipped") from None
        wanted.append(("code.tar", "code", root, tuple(snap.exclude), ".", tuple(snap.include_paths or ())))
    if plan.uses_builtin_trainer:
        wanted.append(("trainer.tar", TRAINER_PKG_DIR, TRAINER_SOURCE, TRAINER_EXCLUDE, "trainer", ()))
    trees = []
    for name, dest, root, exclude, arcname, include in wanted:
        try:
            size, sha = write_tar(root, arcname, exclude, tmp / name, include)
        except SnapshotRefused as err:
            raise NodeError(f"code_source.snapshot.root_path ({root}): nothing was shipped: {err}") from None
        except OSError as err:
            raise NodeError(f"cannot pack {root} to ship it: {err}") from None
        trees.append(Tree(name, dest, tmp / name, size, sha))
    return trees


def download_file(to: Path) -> Path:
    """An empty file beside ``to`` for a download into it (``to`` must not exist: exports never overwrite)."""
    if os.path.lexists(to):
        raise NodeError(f"{to} exists: exports never overwrite, pick a new folder")
    try:
        to.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{to.name}.", suffix=".tar", dir=to.parent)
    except OSError as err:
        raise NodeError(f"cannot write beside {to}: {err.strerror or err}") from None
    os.close(fd)
    return Path(name)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def unpack_here(tar_path: Path, to: Path, label: str) -> Path:
    """A folder fetched from a node as a tar, into ``to`` (which must not exist yet), by the agent's own
    rule (:func:`~launcher.backends.agent.files.checked_members`): a tar with anything else in it (a link, a
    hard link, a device, a path out of the folder, more bytes than it holds) is refused whole, naming the
    node and the entries; nothing is written then."""
    import shutil
    import tarfile

    from launcher.backends.agent.files import checked_members, extract

    if os.path.lexists(to):
        raise NodeError(f"{to} exists: exports never overwrite, pick a new folder")
    try:
        with tarfile.open(tar_path) as tar:
            members, refused = checked_members(tar, tar_path.stat().st_size)
            tops = {m.name.replace("\\", "/").split("/")[0] for m in members}
            if len(tops) > 1:
                refused += sorted(tops)[1:]
            if refused or not members:
                shown = ", ".join(printable(name) for name in refused[:5]) + (" ..." if len(refused) > 5 else "")
                raise NodeError(f"{label}: refusing the export's copy: {plural(len(refused), 'entry')} {'is' if len(refused) == 1 else 'are'} not plain files "
                                f"or folders inside one folder ({shown or 'it is empty'}); nothing was written "
                                "here. Look at the export folder on that node: something other than the export "
                                "wrote into it")
            to.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{to.name}.", suffix=".partial", dir=to.parent))
            try:
                extract(tar, members, str(staging))
                (staging / tops.pop()).rename(to)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except (tarfile.TarError, OSError) as err:
        raise NodeError(f"{label}: the export's copy could not be unpacked into {to}: {printable(err)}") from None
    return to
