"""Hosts that keep failing, kept in the data dir (``quarantine.json``): each time a run's owner swaps a
host out (the triage named it) or finds a spare failing the doctor, the host's failure is counted; at
``recovery.quarantine_after`` failures it is quarantined. No run takes a quarantined host as a spare, a
launch on one is refused (unless forced), the doctor and the app say so, and ``fsdp-tui quarantine lift
HOST`` lifts it (its count starts again).

Several owners may count at once: every change holds the file's lock and replaces it whole."""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from launcher.runs.core.display import sanitize_line

FILE = "quarantine.json"
KEPT_FAILURES = 20
"""A host's newest failures kept (its count goes on past them)."""


@dataclass(frozen=True)
class HostFailure:
    at: float
    run_id: str
    why: str


@dataclass(frozen=True)
class HostHealth:
    """One host as the data dir's runs found it: its failures and whether it is quarantined."""

    host: str
    failures: int
    quarantined_at: float | None = None
    last: tuple[HostFailure, ...] = ()
    """Its newest failures, oldest first."""

    @property
    def quarantined(self) -> bool:
        return self.quarantined_at is not None

    def words(self) -> str:
        """``gpu-07: quarantined (2 failures; last: run a1f3, node 3 (gpu-07) lost at step 1,840)``."""
        count = f"{self.failures} failure{'s' if self.failures != 1 else ''}"
        last = f"; last: run {self.last[-1].run_id}, {self.last[-1].why}" if self.last else ""
        state = "quarantined" if self.quarantined else "not quarantined"
        return f"{self.host}: {state} ({count}{last})"

    def to_dict(self) -> dict:
        return {"host": self.host, "failures": self.failures, "quarantined": self.quarantined,
                "quarantined_at": self.quarantined_at,
                "last": [{"at": f.at, "run_id": f.run_id, "why": f.why} for f in self.last]}


def _path(home: Path) -> Path:
    return Path(home) / FILE


@contextmanager
def _locked(home: Path):
    lock = Path(home) / f".{FILE}.lock"
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read(home: Path) -> dict[str, HostHealth]:
    """Every host the file knows, decoded once (what the file holds is ours, but may be damaged)."""
    try:
        data = json.loads(_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    hosts = data.get("hosts") if isinstance(data, dict) else None
    out: dict[str, HostHealth] = {}
    for name, entry in (hosts.items() if isinstance(hosts, dict) else ()):
        if not isinstance(entry, dict) or not isinstance(name, str):
            continue
        failures = entry.get("failures")
        at = entry.get("quarantined_at")
        last = tuple(HostFailure(float(f["at"]), sanitize_line(str(f.get("run_id", ""))), sanitize_line(str(f.get("why", ""))))
                     for f in entry.get("last", []) if isinstance(f, dict) and isinstance(f.get("at"), (int, float)))
        out[name] = HostHealth(sanitize_line(name), failures if type(failures) is int else len(last),
                               float(at) if isinstance(at, (int, float)) else None, last)
    return out


def _write(home: Path, hosts: dict[str, HostHealth]) -> None:
    data = {"hosts": {h.host: {k: v for k, v in h.to_dict().items() if k not in ("host", "quarantined")}
                      for h in hosts.values()}}
    tmp = _path(home).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, _path(home))


def hosts(home: Path) -> list[HostHealth]:
    """Every host with a failure counted, quarantined ones first."""
    return sorted(_read(home).values(), key=lambda h: (not h.quarantined, h.host))


def quarantined(home: Path) -> dict[str, HostHealth]:
    """The quarantined hosts, by name as the workloads write them."""
    return {h.host: h for h in _read(home).values() if h.quarantined}


def count_failure(home: Path, host: str, run_id: str, why: str, quarantine_after: int,
                  at: float | None = None) -> HostHealth:
    """One more failure of ``host``; quarantined once it has ``quarantine_after`` of them."""
    with _locked(home):
        known = _read(home)
        old = known.get(host, HostHealth(host, 0))
        now = time.time() if at is None else at
        failure = HostFailure(now, run_id, sanitize_line(why)[:300])
        count = old.failures + 1
        new = HostHealth(host, count, old.quarantined_at or (now if count >= quarantine_after else None),
                         (*old.last, failure)[-KEPT_FAILURES:])
        known[host] = new
        _write(home, known)
        return new


def lift(home: Path, host: str) -> HostHealth | None:
    """``host`` out of quarantine, its count back to 0; ``None`` when it had no failure counted."""
    with _locked(home):
        known = _read(home)
        old = known.pop(host, None)
        if old is not None:
            _write(home, known)
        return old
