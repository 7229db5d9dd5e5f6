"""The flight recorder's dumps on this node, asked for with a stack dump: touch the request file the
ranks' dumper threads watch (``trainer/flight.py``), then collect the JSON each rank writes. Stdlib only."""

from __future__ import annotations

import glob
import os
import re
import time

PREFIX = "flight-recorder-"
"""``TORCH_FR_DUMP_TEMP_FILE`` is ``<node dir>/flight-recorder-`` (the launcher sets it)."""
WAIT_S = 5.0
"""How long dumps are waited for (the ranks look for a request every second)."""
QUIET_S = 1.5
"""No new dump for this long after the first one: every rank of the node has answered."""
MAX_BYTES = 1 << 20
"""A rank's dump is cut here (the trainer writes its newest 500 entries, ~300 KB)."""
_DUMP = re.compile(re.escape(PREFIX) + r"(\d+)\.json$")


def ask(node_dir: str) -> int | None:
    """Ask the ranks to dump; the request's time (ns), or ``None`` where no rank runs a dumper."""
    if not os.path.exists(os.path.join(node_dir, PREFIX + "ready")):
        return None
    path = os.path.join(node_dir, PREFIX + "request")
    with open(path, "w", encoding="ascii") as f:
        f.write(str(time.time_ns()))
    return os.stat(path).st_mtime_ns


def collect(node_dir: str, asked: int | None) -> list:
    """The dumps written since ``asked``, as stack entries (``how``: ``flight-recorder``, ``text``: JSON)."""
    if asked is None:
        return []
    deadline, found, last_new = time.monotonic() + WAIT_S, {}, None
    while time.monotonic() < deadline:
        for path in glob.glob(os.path.join(glob.escape(node_dir), PREFIX + "*.json")):
            m = _DUMP.search(os.path.basename(path))
            if m is None:
                continue
            try:
                fresh = os.stat(path).st_mtime_ns >= asked
            except OSError:
                continue
            if fresh and path not in found:
                found[path], last_new = int(m.group(1)), time.monotonic()
        if last_new is not None and time.monotonic() - last_new > QUIET_S:
            break
        time.sleep(0.1)
    out = []
    for path, rank in sorted(found.items(), key=lambda kv: kv[1]):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(MAX_BYTES)
        except OSError:
            continue
        out.append({"pid": 0, "rank": rank, "how": "flight-recorder", "text": text})
    return out
