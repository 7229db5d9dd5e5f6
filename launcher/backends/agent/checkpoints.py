"""Checkpoints on this node (where rank 0 wrote them, or a gather's holder): listed by the one rule of
completeness, deleted (only by the run that wrote it, never its newest complete one: the ownership rule)
and exported to a Hugging Face folder on the node itself, where torch is (a bucket's checkpoint too, read
with the run's credentials; the export checks the bytes against the trainer's digests first)."""

from __future__ import annotations

import os
import shutil
import subprocess

from trainer.wire import ckpt_layout, ckpt_owner, ckpt_paths


def resolve_root(path: str, env: dict, node_dir: str) -> str:
    """A folder as the job would see it: its variables, this node's ``~``, and a relative path inside the
    node's run directory (the job's working directory); absolute and normalised."""
    path = ckpt_paths.expand_path(path, {**os.environ, **env})
    return os.path.normpath(os.path.join(os.path.expanduser(node_dir), path))


def root_of(output_dir: str, env: dict, node_dir: str) -> str:
    """The checkpoints folder of ``output_dir`` as the job saw it."""
    return ckpt_paths.checkpoints_root(resolve_root(output_dir, env, node_dir))


def listing(output_dir: str, env: dict, node_dir: str, root: str | None = None) -> dict:
    """The checkpoints of ``output_dir`` here (or of the folder ``root``: a gather's holder)."""
    root = resolve_root(root, env, node_dir) if root else root_of(output_dir, env, node_dir)
    return {"root": root, "exists": os.path.isdir(root),
            "checkpoints": [c.to_dict() for c in ckpt_layout.list_checkpoints(root)]}


def _find(output_dir: str, env: dict, node_dir: str, name: str, root: str | None = None):
    root = resolve_root(root, env, node_dir) if root else root_of(output_dir, env, node_dir)
    ckpts = ckpt_layout.list_checkpoints(root)
    found = next((c for c in ckpts if c.name == name), None)
    if found is None:
        raise ValueError(f"no checkpoint {name!r} in {root}")
    return ckpts, found


def delete(output_dir: str, env: dict, node_dir: str, name: str, root: str | None = None,
           writer: str | None = None, continues: list | None = None) -> dict:
    """The checkpoint ``name`` removed for the run ``writer`` (whose lineage is ``continues``), when the
    ownership rule lets that run remove it."""
    ckpts, target = _find(output_dir, env, node_dir, name, root)
    lineage = ckpt_owner.Lineage.of(writer, continues or [], output_dir)
    why = ckpt_owner.why_kept(ckpts, target, lineage)
    if why:
        raise ValueError(why)
    if target.link:
        os.unlink(target.path)  # the link only, never what it points at
    else:
        shutil.rmtree(target.path)
    return {"deleted": target.path}


def export(output_dir: str, env: dict, node_dir: str, name: str, python: str, pythonpath: str,
           timeout_s: float, merged: bool = False, root: str | None = None, url: str | None = None,
           job_env: dict | None = None) -> dict:
    """``python -m trainer.export`` on this node into ``<output_dir>/hf/export-<name>`` (a new folder); with
    ``merged`` (a LoRA checkpoint), also the base with the adapter merged, beside it (``...-merged``). What
    the trainer exported of that step itself (``<output_dir>/hf/<name>``, a LoRA run's merged model in
    ``<name>-merged``, each written whole by a rename) is the answer, marked ``reused``, and never written
    twice: a LoRA export asked ``merged`` whose adapter the trainer wrote writes the merged model only.
    ``url``: a checkpoint in a bucket, read with ``job_env`` (the run's credentials), exported into this
    node's run directory. The export checks the checkpoint's bytes against the trainer's digests first."""
    only_merged = False
    if url is not None:
        if ckpt_paths.url_scheme(url) is None or url.rstrip("/").rsplit("/", 1)[-1] != name:
            raise ValueError(f"not a checkpoint in a bucket: {url!r}")
        source, base = url, os.path.join(os.path.expanduser(node_dir), "hf")
    else:
        _ckpts, target = _find(output_dir, env, node_dir, name, root)
        if not target.complete:
            why = ckpt_layout.wholeness(target.path).why_not()
            raise ValueError(f"{target.path} is not whole ({why}): pick a complete one")
        source, base = target.path, os.path.join(os.path.dirname(os.path.dirname(target.path)), "hf")
        own = os.path.join(base, name)
        if _exported(own):
            found = {"path": own, "files": sorted(os.listdir(own)), "reused": True}
            if not merged:
                return found
            if _exported(own + "-merged"):
                return {**found, "merged": own + "-merged"}
            only_merged = True  # the adapter is there already: only the merged model is written
    out, n = os.path.join(base, f"export-{name}"), 1
    while os.path.exists(out) or os.path.exists(out + "-merged"):
        out, n = os.path.join(base, f"export-{name}-{n}"), n + 1
    if only_merged:
        out += "-merged"
    run_env = {**os.environ, **(job_env or {})}
    if pythonpath:
        run_env["PYTHONPATH"] = pythonpath + (os.pathsep + run_env["PYTHONPATH"] if run_env.get("PYTHONPATH") else "")
    try:
        flag = ["--merged-only"] if only_merged else ["--merged"] if merged else []
        done = subprocess.run([python, "-m", "trainer.export", source, out, *flag],
                              capture_output=True,
                              text=True, timeout=timeout_s, env=run_env, stdin=subprocess.DEVNULL)
    except OSError as err:
        raise ValueError(f"cannot run {python}: {err.strerror or err}") from None
    except subprocess.TimeoutExpired:
        raise ValueError(f"the export did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ValueError(f"the export failed (exit {done.returncode}): {' / '.join(tail)}")
    if only_merged:
        own = os.path.join(base, name)
        return {"path": own, "files": sorted(os.listdir(own)), "reused": True, "merged": out}
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    return {"path": out, "files": files, **({"merged": out + "-merged"} if os.path.isdir(out + "-merged") else {})}


def _exported(folder: str) -> bool:
    """A Hugging Face folder the trainer wrote whole: a model (``config.json`` and safetensors) or a LoRA
    adapter in PEFT's format (``adapter_config.json`` and ``adapter_model.safetensors``)."""
    try:
        names = set(os.listdir(folder))
    except OSError:
        return False
    model = "config.json" in names and any(f.endswith(".safetensors") for f in names)
    return model or {"adapter_config.json", "adapter_model.safetensors"} <= names
