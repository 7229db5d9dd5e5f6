"""The checkpoint layout and the one rule of completeness, stdlib only: used by the trainer, the launcher
and the node agent (shipped beside it as this single file).

``<output_dir>/checkpoints/step-00000100/`` holds DCP's shard files, its ``.metadata`` (written last
by DCP) and our ``meta.json`` (written after that). ``meta.json`` lists the checkpoint's shard files
(``shards``: each file's size and the node whose ranks wrote it). A checkpoint is **whole** (complete,
resumable) iff ``.metadata`` exists, ``meta.json`` parses, and every listed shard lies in the folder
with its listed size. On one shared disk that holds as soon as the trainer's save ends; when each node
keeps its own disk, node 0's folder is not whole until the launcher has gathered the other nodes'
shards into it (each copy verified by size and checksum before it takes its name), so a split
checkpoint is never "the newest", never resumed from, and says which shards are missing on which node.
A checkpoint saved before ``shards`` existed is complete with ``.metadata`` and ``meta.json``, as then.

Each listed shard also carries the SHA-256 of the bytes the trainer wrote (``sha256``), and
``meta.json`` the digest of ``.metadata`` (``metadata_sha256``): every gather, copy, export and resume
checks the bytes against them (:mod:`trainer.wire.ckpt_digest`). Whoever finds bytes that differ leaves
a mark in the folder (``.fsdp-tui-bytes-differ``, naming the files and their nodes): the checkpoint is
not whole from then on, for every reader, and says why.

A save never reuses a folder (``step-00000100-1`` when the name is taken on any node). Whose a
checkpoint is (``meta.json``'s ``run_id``) and what each run may read, prune or delete is
:mod:`trainer.wire.ckpt_owner`'s rule.

Where ``output_dir`` lies (a path or a bucket's URL, its variables expanded as a node's job sees them) is
:mod:`trainer.wire.ckpt_paths`'s.

Listing never follows a link: an entry that is a symbolic link (``step-00000006 -> /``) is listed as a link,
never complete (so never resumable, never "the newest"), with no size, and nothing behind it is walked.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import asdict, dataclass

META = "meta.json"
DCP_META = ".metadata"
CHECKPOINTS_DIR = "checkpoints"
PREFIX = "step-"
SHARDS = "shards"
"""``meta.json``'s list of the data files: ``{file: {"bytes": size, "node": node rank}}``."""
PART_PREFIX = ".part-"
"""A file being copied into a checkpoint (``.part-__2_0.distcp``): it takes its name once verified."""
PLACE_MARKER = ".fsdp-tui-place-"
"""The file node 0 writes in its checkpoints folder and the other nodes look for: one place, or one each."""
INCOMING_PREFIX = ".incoming-"
"""A whole checkpoint received from node 0 before a resume, on a node that has none: removed after the load."""
BAD_MARK = ".fsdp-tui-bytes-differ"
"""Left in a checkpoint whose bytes were found to differ from the digests its ``meta.json`` lists: a JSON
list of ``[file, node]``. The checkpoint is not whole while it is there."""
_RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
LORA = "lora"
"""``meta.json``'s LoRA settings: a checkpoint that records them holds the adapters (and ``modules_to_save``)
only, its base read from ``model_name``."""


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: str
    complete: bool
    size_bytes: int
    mtime: float
    link: bool = False
    """The entry is a symbolic link, not a folder: shown as such, never followed, never resumed from."""
    missing: tuple[tuple[str, int], ...] = ()
    """Shards the trainer saved that are not in this folder, each with the node that holds it."""
    saved: bool = False
    """The trainer marked its save done (``meta.json`` written): what a gather waits for."""
    adapter: bool = False
    """A LoRA run's checkpoint: the adapters (and ``modules_to_save``) only, the base read from the model."""
    run_id: str | None = None
    """The run that wrote it (``meta.json``'s ``run_id``): whose it is (:mod:`trainer.wire.ckpt_owner`)."""
    why: str = ""
    """Why it is not whole, in words ("" when it is)."""

    @property
    def kind(self) -> str:
        """``adapter`` or ``full``, as listings show it."""
        return "adapter" if self.adapter else "full"

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def missing_nodes(self) -> tuple[int, ...]:
        return tuple(sorted({node for _, node in self.missing}))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Wholeness:
    """What the rule says of one checkpoint folder."""

    complete: bool
    saved: bool
    """``meta.json`` parses: the trainer's save ended (the checkpoint may still await its gather)."""
    step: int | None
    """The step ``meta.json`` names, when it does."""
    missing: tuple[tuple[str, int], ...] = ()
    """Listed shards not in the folder, or there with another size: ``(file, node)``."""
    shards: tuple[tuple[str, int, int], ...] = ()
    """Every listed shard: ``(file, bytes, node)``."""
    problem: str = ""
    """``meta.json`` is there but cannot be taken as it is (a shard name out of the folder, a size that is
    not one): what is wrong with it."""
    differ: tuple[tuple[str, int], ...] = ()
    """Files whose bytes were found to differ from the trainer's digests (:data:`BAD_MARK`): ``(file, node)``."""

    def why_not(self) -> str:
        """Why the folder is not whole, in words ("" when it is)."""
        if self.complete:
            return ""
        if self.problem:
            return f"its {META} cannot be trusted: {self.problem}"
        if not self.saved:
            return f"its save did not finish (no {DCP_META} or {META})"
        if self.differ:
            named = "; ".join(f"{name} (written on node {node})" for name, node in self.differ[:3])
            more = f" and {len(self.differ) - 3} more" if len(self.differ) > 3 else ""
            return (f"the bytes of {named}{more} differ from what the trainer wrote (SHA-256): it is not "
                    "resumed from or exported")
        by_node: dict[int, list[str]] = {}
        for name, node in self.missing:
            by_node.setdefault(node, []).append(name)
        parts = [f"{', '.join(sorted(names)[:3])}{' ...' if len(names) > 3 else ''} "
                 f"({len(names)} shard{'s' if len(names) != 1 else ''}) written on node {node}"
                 for node, names in sorted(by_node.items())]
        return "missing " + "; ".join(parts) + " and not gathered here"


def judge(files: Mapping[str, int], meta_text: str | None, mark_text: str | None = None) -> Wholeness:
    """The completeness rule: ``files`` are the folder's regular files and their sizes, ``meta_text`` the
    content of its ``meta.json`` (``None``: absent), ``mark_text`` that of its :data:`BAD_MARK` (read when
    ``files`` lists one)."""
    meta = parse_meta(meta_text)
    if meta is None or DCP_META not in files:
        return Wholeness(False, False, None)
    step = meta.get("step")
    step = step if isinstance(step, int) and not isinstance(step, bool) else None
    shards, problem = _shards(meta)
    if shards is None:
        return Wholeness(False, False, step, problem=problem)  # a list that is not one: not whole, and why
    missing = tuple((name, node) for name, size, node in shards if files.get(name) != size)
    differ = read_mark(mark_text) if BAD_MARK in files else ()
    if BAD_MARK in files and not differ:
        differ = (("?", 0),)  # a mark that does not say which: still a mark
    return Wholeness(not missing and not differ, True, step, missing, shards, differ=differ)


def read_mark(text: str | None) -> tuple[tuple[str, int], ...]:
    """The files a :data:`BAD_MARK` names, ``(file, node)`` (what is not of that shape is left out)."""
    try:
        entries = json.loads(text or "")
    except ValueError:
        return ()
    return tuple((e[0], e[1]) for e in (entries if isinstance(entries, list) else ())
                 if isinstance(e, list) and len(e) == 2 and plain_name(e[0]) and _count(e[1]))


def parse_meta(text: str | None) -> dict | None:
    """``meta.json``'s table from its text (``None``: absent, not JSON, or not a table)."""
    if text is None:
        return None
    try:
        meta = json.loads(text)
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def shard_list(meta: dict) -> tuple[tuple[str, int, int], ...] | None:
    """``meta.json``'s shards as ``(file, bytes, node)``; ``()`` when it lists none (an older save);
    ``None`` when the list is malformed (a name that is not a plain file name, a size that is not one)."""
    return _shards(meta)[0]


def _shards(meta: dict) -> tuple[tuple[tuple[str, int, int], ...] | None, str]:
    """:func:`shard_list`, and what is wrong with the list when it is malformed (shown, never the name raw)."""
    entries = meta.get(SHARDS)
    if entries is None:
        return (), ""
    if not isinstance(entries, dict):
        return None, f"'{SHARDS}' is not a table of files"
    out = []
    for name, entry in entries.items():
        size = entry.get("bytes") if isinstance(entry, dict) else None
        node = entry.get("node", 0) if isinstance(entry, dict) else None
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        if not plain_name(name):
            return None, f"it lists a shard named {ascii(name)[:80]}, not a file name of this folder"
        if not _count(size) or not _count(node):
            return None, f"shard {name}: its size or node is not a count"
        if digest is not None and not (isinstance(digest, str) and SHA256_HEX.fullmatch(digest)):
            return None, f"shard {name}: its sha256 is not a SHA-256 digest"
        out.append((name, size, node))
    return tuple(sorted(out)), ""


def run_of(meta_text: str | None) -> str | None:
    """The run id a checkpoint's ``meta.json`` records (``None``: none, unreadable, or not an id's shape)."""
    return run_id_or_none((parse_meta(meta_text) or {}).get("run_id"))


def run_id_or_none(value: object) -> str | None:
    """``value`` when it has a run id's shape (letters, digits, ``_.-``), else ``None``."""
    return value if isinstance(value, str) and _RUN_ID.fullmatch(value) else None


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def plain_name(name: object) -> bool:
    """A file name of a checkpoint folder: no folder part, not ``.``/``..``, printable."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name
            and name.isprintable() and len(name) <= 255)


def folder_files(path: str) -> dict[str, int]:
    """The regular files directly in ``path`` (not links, not files being copied in) and their sizes."""
    out = {}
    try:
        entries = list(os.scandir(path))
    except OSError:
        return out
    for entry in entries:
        if entry.name.startswith(PART_PREFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out[entry.name] = st.st_size
    return out


def read_meta(path: str, name: str = META) -> str | None:
    """``meta.json`` of the checkpoint folder ``path`` (or its file ``name``), never through a link."""
    try:
        fd = os.open(os.path.join(path, name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with open(fd, encoding="utf-8") as f:
            return f.read(1 << 24)
    except (OSError, UnicodeDecodeError):
        return None


def meta_of(path: str) -> dict | None:
    """The parsed ``meta.json`` of the checkpoint folder ``path`` (:func:`read_meta`, :func:`parse_meta`)."""
    return parse_meta(read_meta(path))


def holds_adapters(meta: Mapping | None) -> bool:
    """The checkpoint whose parsed ``meta.json`` is ``meta`` is a LoRA run's: the adapters only (:data:`LORA`)."""
    return meta is not None and LORA in meta


def wholeness(path: str) -> Wholeness:
    """The rule applied to a folder on this machine."""
    files = folder_files(path)
    return judge(files, read_meta(path), read_meta(path, BAD_MARK) if BAD_MARK in files else None)


def is_complete(path: str) -> bool:
    return wholeness(str(path)).complete


def step_name(step: int, n: int = 0) -> str:
    """``step-00000100`` (``step-00000100-2`` for the second try of a taken name)."""
    return f"{PREFIX}{step:08d}" + (f"-{n}" if n else "")


def ascii_int(text: str) -> int | None:
    """The number ``text`` writes in ASCII digits (``"12"`` -> 12), else ``None``: the one rule for every
    number read from text, a node's or a step's or a rank's, on every side. ``str.isdigit()`` is true for
    ``"²"`` (which ``int()`` refuses: a crash) and ``int()`` reads ``"١"`` as 1 (another script's digit
    reaching node 1); neither is a number here, nor are more digits than ``int()`` reads (it raises)."""
    if not (text.isascii() and text.isdigit()):
        return None
    try:
        return int(text)
    except ValueError:  # past sys.get_int_max_str_digits()
        return None


def step_of_name(name: str) -> int | None:
    """The step a folder name says, or ``None`` for a folder that is not a checkpoint."""
    digits = name[len(PREFIX):].split("-")[0] if name.startswith(PREFIX) else ""
    return ascii_int(digits)


def step_of_path(path: str) -> int | None:
    """The step of the checkpoint a path or bucket URL names (its last part that is a checkpoint's name:
    ``/out/checkpoints/step-00000100/`` -> 100), or ``None``."""
    return next((s for part in reversed(path.split("/")) if (s := step_of_name(part)) is not None), None)


def info_of(step: int, path: str, files: Mapping[str, int], meta_text: str | None, mtime: float,
            mark_text: str | None = None) -> CheckpointInfo:
    """One listed checkpoint from its files (local or in a bucket), by the rule."""
    verdict = judge(files, meta_text, mark_text)
    if verdict.complete and verdict.step is not None:
        step = verdict.step
    adapter = verdict.complete and holds_adapters(parse_meta(meta_text))
    return CheckpointInfo(step, path, verdict.complete, sum(files.values()), mtime, missing=verdict.missing,
                          saved=verdict.saved, adapter=adapter, run_id=run_of(meta_text), why=verdict.why_not())


def list_checkpoints(root: str) -> list[CheckpointInfo]:
    """Every ``step-*`` folder under ``root``, oldest first, with its size and newest file time."""
    out = []
    try:
        names = os.listdir(root)
    except OSError:
        return out
    for name in names:
        path = os.path.join(root, name)
        step = step_of_name(name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if step is None or not (stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            continue
        if stat.S_ISLNK(st.st_mode):
            out.append(CheckpointInfo(step, path, False, 0, st.st_mtime, link=True,
                                      why="a symbolic link, not a folder: never followed"))
            continue
        size, mtime = _size_and_mtime(path)
        files = folder_files(path)
        info = info_of(step, path, files, read_meta(path), mtime, read_meta(path, BAD_MARK) if BAD_MARK in files else None)
        out.append(dataclasses.replace(info, size_bytes=size))
    return sorted(out, key=lambda c: (c.step, c.name))


def _size_and_mtime(path: str) -> tuple[int, float]:
    """Files under ``path`` by ``lstat``: a link inside a checkpoint counts as itself, not as its target."""
    size, mtime = 0, os.lstat(path).st_mtime
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            size += st.st_size
            mtime = max(mtime, st.st_mtime)
    return size, mtime


def written_by(path: str) -> str | None:
    """The run id a checkpoint's ``meta.json`` records (``None``: not recorded, or unreadable)."""
    return run_of(read_meta(path))


def list_in_bucket(fs, root: str, url_root: str) -> list[CheckpointInfo]:
    """Every ``step-*`` folder under ``root`` of an fsspec filesystem ``fs`` (a bucket: ``fs.ls`` with
    details, ``fs.cat_file``), by the same rule; paths shown as URLs under ``url_root``. The caller
    imports fsspec: this module stays standard library only."""
    try:
        entries = fs.ls(root, detail=True)
    except FileNotFoundError:  # nothing saved yet; a bucket that refuses or does not answer is no "none"
        return []
    out = []
    for entry in entries:
        name = str(entry.get("name", "")).rstrip("/").rsplit("/", 1)[-1]
        step = step_of_name(name)
        if step is None or entry.get("type") != "directory":
            continue
        files, mtime = {}, 0.0
        for item in fs.ls(f"{root.rstrip('/')}/{name}", detail=True):
            base = str(item.get("name", "")).rstrip("/").rsplit("/", 1)[-1]
            if item.get("type") == "file" and not base.startswith(PART_PREFIX):
                files[base] = int(item.get("size") or 0)
                mtime = max(mtime, _entry_time(item))
        meta = _cat(fs, f"{root.rstrip('/')}/{name}/{META}") if META in files else None
        mark = _cat(fs, f"{root.rstrip('/')}/{name}/{BAD_MARK}") if BAD_MARK in files else None
        out.append(info_of(step, f"{url_root.rstrip('/')}/{name}", files, meta, mtime, mark))
    return sorted(out, key=lambda c: (c.step, c.name))


def _cat(fs, path: str) -> str | None:
    try:
        return fs.cat_file(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _entry_time(item: Mapping) -> float:
    """A listed object's modification time, whichever way its filesystem says it."""
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = item.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
    return 0.0
