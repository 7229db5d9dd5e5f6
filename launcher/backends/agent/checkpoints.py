"""Checkpoints where rank 0 wrote them: listed, deleted (never the newest complete one) and exported to
a Hugging Face folder on the node itself, where torch is."""

from __future__ import annotations

import os
import shutil
import subprocess

from trainer import ckpt_layout


def root_of(output_dir: str, env: dict, node_dir: str) -> str:
    """The checkpoints folder of ``output_dir`` as the job saw it: its variables, this node's ``~``, and
    a relative path inside the node's run directory (the job's working directory)."""
    path = ckpt_layout.expand_path(output_dir, {**os.environ, **env})
    return ckpt_layout.checkpoints_root(os.path.join(node_dir, path))


def listing(output_dir: str, env: dict, node_dir: str) -> dict:
    root = root_of(output_dir, env, node_dir)
    return {"root": root, "exists": os.path.isdir(root),
            "checkpoints": [c.to_dict() for c in ckpt_layout.list_checkpoints(root)]}


def _find(output_dir: str, env: dict, node_dir: str, name: str):
    root = root_of(output_dir, env, node_dir)
    ckpts = ckpt_layout.list_checkpoints(root)
    found = next((c for c in ckpts if c.name == name), None)
    if found is None:
        raise ValueError(f"no checkpoint {name!r} in {root}")
    return ckpts, found


def delete(output_dir: str, env: dict, node_dir: str, name: str) -> dict:
    ckpts, target = _find(output_dir, env, node_dir, name)
    if not ckpt_layout.deletable(ckpts, target):
        raise ValueError(f"{target.path} is the newest complete checkpoint: it is kept (resume needs it)")
    if target.link:
        os.unlink(target.path)  # the link only, never what it points at
    else:
        shutil.rmtree(target.path)
    return {"deleted": target.path}


def export(output_dir: str, env: dict, node_dir: str, name: str, python: str, pythonpath: str,
           timeout_s: float, merged: bool = False) -> dict:
    """``python -m trainer.export`` on this node into ``<output_dir>/hf/export-<name>`` (a new folder); with
    ``merged`` (a LoRA checkpoint), also the base with the adapter merged, beside it (``...-merged``). Unless
    the trainer exported that step itself (``<output_dir>/hf/<name>``, written whole by a rename) and no
    merged copy is asked for: that folder is the answer, marked ``reused``, and nothing is written twice."""
    _ckpts, target = _find(output_dir, env, node_dir, name)
    if not target.complete:
        raise ValueError(f"{target.path} is not complete (no DCP .metadata or meta.json): pick a complete one")
    base = os.path.join(os.path.dirname(os.path.dirname(target.path)), "hf")
    own = os.path.join(base, name)
    if not merged and os.path.isfile(os.path.join(own, "config.json")) and any(
            f.endswith(".safetensors") for f in os.listdir(own)):
        return {"path": own, "files": sorted(os.listdir(own)), "reused": True}
    out, n = os.path.join(base, f"export-{name}"), 1
    while os.path.exists(out) or os.path.exists(out + "-merged"):
        out, n = os.path.join(base, f"export-{name}-{n}"), n + 1
    run_env = dict(os.environ)
    if pythonpath:
        run_env["PYTHONPATH"] = pythonpath + (os.pathsep + run_env["PYTHONPATH"] if run_env.get("PYTHONPATH") else "")
    try:
        done = subprocess.run([python, "-m", "trainer.export", target.path, out, *(["--merged"] if merged else [])],
                              capture_output=True,
                              text=True, timeout=timeout_s, env=run_env, stdin=subprocess.DEVNULL)
    except OSError as err:
        raise ValueError(f"cannot run {python}: {err.strerror or err}") from None
    except subprocess.TimeoutExpired:
        raise ValueError(f"the export did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ValueError(f"the export failed (exit {done.returncode}): {' / '.join(tail)}")
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    return {"path": out, "files": files, **({"merged": out + "-merged"} if os.path.isdir(out + "-merged") else {})}
