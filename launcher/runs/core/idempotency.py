"""``idempotency_token``: the first launch of a token claims it (an exclusive file in the data dir, so two
launches at once cannot both win); a later launch with the same token answers with that first run."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from launcher.paths import run_dir

FOLDER = "idempotency"


def claim(home: Path, token: str, run_id: str, scope: dict[str, str] | None = None) -> str | None:
    """Claim ``token`` for ``run_id``; the run that holds it already, if any (``None``: claimed now).
    ``scope`` tells apart launches that share a token on purpose (the variants of one sweep). A claim
    whose run was removed (``fsdp-tui rm``) is taken over."""
    key = hashlib.sha256(json.dumps([token.strip(), scope or {}], sort_keys=True).encode()).hexdigest()
    folder = Path(home) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / key
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            try:
                holder = path.read_text().strip()
            except OSError:
                holder = ""
            if holder and run_dir(home, holder).is_dir():
                return holder
            if not holder:
                continue  # being written by the launch that won; read it again
            path.unlink(missing_ok=True)  # its run is gone
            continue
        with os.fdopen(fd, "w") as f:
            f.write(run_id)
        return None
    return None
