"""Torch's flight recorder (the last collectives of every process group, with their sequence numbers),
dumped when the run's owner asks: on a stall it shows which rank never entered the collective the others
wait in. Torch records with ``TORCH_FR_BUFFER_SIZE`` set (the launcher sets it); this thread only writes
what torch recorded, as JSON, to ``$TORCH_FR_DUMP_TEMP_FILE<rank>.json`` when
``$TORCH_FR_DUMP_TEMP_FILE``\\ ``request`` changes. A thread, not a signal handler: a rank stuck in a
collective waits in C++, where a Python signal handler would never run; the wait releases the GIL.

Any script can use it: ``from trainer.flight import start; start(dist.get_rank())`` after
``init_process_group``.
"""

from __future__ import annotations

import os
import threading
import time

DUMP_ENV = "TORCH_FR_DUMP_TEMP_FILE"
REQUEST = "request"
READY = "ready"
"""Written once a rank's dumper runs, so the node's agent asks only where someone will answer."""
POLL_S = 1.0
KEEP = 500
"""Newest entries written (the stuck collective is among them): a dump stays ~300 KB a rank, whatever
the buffer's size, so a stall of hundreds of ranks is fetched quickly."""


def start(rank: int) -> bool:
    """Dump on request from a daemon thread; ``False`` where the launcher set no dump path or torch
    cannot dump its recorder as JSON."""
    import torch

    prefix = os.environ.get(DUMP_ENV)
    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace_json", None)
    if not prefix or dump is None:
        return False
    try:
        with open(prefix + READY, "a", encoding="ascii"):
            pass
    except OSError:
        return False
    threading.Thread(target=_watch, args=(prefix, rank, dump), daemon=True, name="flight-recorder-dump").start()
    return True


def _watch(prefix: str, rank: int, dump) -> None:
    seen = _mtime(prefix + REQUEST)
    while True:
        time.sleep(POLL_S)
        asked = _mtime(prefix + REQUEST)
        if asked is None or asked == seen:
            continue
        seen = asked
        try:
            data = _newest(dump())
            tmp = f"{prefix}{rank}.json.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, f"{prefix}{rank}.json")
        except (OSError, RuntimeError, ValueError):
            continue  # the next request tries again; the stacks still come


def _newest(data: bytes) -> bytes:
    import json

    parsed = json.loads(data)
    entries = parsed.get("entries")
    if isinstance(entries, list) and len(entries) > KEEP:
        parsed["entries"] = entries[-KEEP:]
        return json.dumps(parsed).encode()
    return data


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
