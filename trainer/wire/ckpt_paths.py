"""Where a run's checkpoints lie, stdlib only: an ``output_dir`` as a node's job sees it (``$NAME`` and
``~`` expanded, ``file://`` a path) or a bucket's URL (``s3://...``), and its ``checkpoints`` folder. Used by
the trainer, the launcher and the node agent (which carries this file with the other checkpoint rules)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from trainer.wire.ckpt_layout import CHECKPOINTS_DIR

_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def url_scheme(path: str) -> str | None:
    """``s3`` for ``s3://bucket/x``; ``None`` for a path (``file://`` URLs are paths: see :func:`expand_path`)."""
    match = _URL.match(path)
    return match.group(1).lower() if match and match.group(1).lower() != "file" else None


def expand_vars(path: str, env: Mapping[str, str]) -> str:
    """``$NAME``/``${NAME}`` from ``env``; unknown names stay as written (``~`` too)."""
    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        return env.get(name, match.group(0))

    return _VAR.sub(value, path)


def expand_path(path: str, env: dict) -> str:
    """``$NAME``/``${NAME}`` from ``env`` (unknown names stay as written), then ``~``: how a node's job
    sees its ``output_dir`` (the trainer expands it in the job's environment). ``file:///x`` is ``/x``;
    another URL (``s3://...``) keeps its ``//``."""
    expanded = expand_vars(path, env)
    if expanded.lower().startswith("file://"):
        expanded = expanded[len("file://"):]
    return expanded if url_scheme(expanded) else os.path.expanduser(expanded)


def checkpoints_root(output_dir: str) -> str:
    if url_scheme(output_dir):
        return output_dir.rstrip("/") + "/" + CHECKPOINTS_DIR
    return os.path.join(os.path.expanduser(output_dir), CHECKPOINTS_DIR)
