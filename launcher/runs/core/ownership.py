"""One owner per run: a detached supervisor process that holds the run's lock until the run ends.

The lock is an ``flock`` on ``runs/<id>/owner.lock``: the kernel drops it when its holder dies however it
dies, so "is anybody supervising this run?" has a true answer, and of two processes that try to adopt
a run at the same moment exactly one gets it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from launcher.paths import run_dir

ROOT = Path(__file__).resolve().parents[3]
"""The folder that holds the ``launcher`` package, put on a spawned owner's PYTHONPATH. Never ``launcher/``
itself: its ``secrets.py`` would shadow the standard library's for the owner and every job it starts."""
LOCK_FILE = "owner.lock"
LOG_FILE = "supervisor.log"
CANCEL_FILE = "cancel-requested"
STACKS_FILE = "stacks-requested"
NOTE_ROOM = 2048
"""Bytes kept in the lock file for the owner's note (written in place: a full disk cannot refuse it)."""


class OwnerLock:
    """The run's ownership, held from :meth:`acquire` until the process ends or :meth:`release`."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock if nobody holds it; ``False`` when another process owns the run."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        _write_pid(fd)
        self.fd = fd
        return True

    @classmethod
    def inherited(cls, directory: Path, fd: int) -> OwnerLock:
        """The lock its spawner took and handed over (the descriptor stays locked across exec)."""
        lock = cls(directory)
        lock.fd = fd
        _write_pid(fd)
        return lock

    def note(self, text: str, end: KeptEnd | None = None) -> None:
        """What the owner is stuck on, for followers to say (``owner_note``), and the run's end it keeps
        for the disk (``kept_end``). Written over the room reserved when the lock was taken, so it needs no
        free space on the disk."""
        if self.fd is None:
            return
        line = f"{os.getpid()}\n".encode()
        room = NOTE_ROOM - len(line)
        kept = ("\n" + end.line()).encode() if end is not None else b""
        data = " ".join(text.split()).encode()[:room - 1 - len(kept)] + kept + b"\n"
        try:
            os.pwrite(self.fd, data.ljust(room, b" "), len(line))
        except OSError:
            pass  # the lock holds without its words

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _write_pid(fd: int) -> None:
    """The owner's pid on the first line, then room for a note (spaces, so it reads as the pid alone)."""
    line = f"{os.getpid()}\n".encode()
    try:  # written over the file's old bytes first: a full disk takes what needs no new room
        os.pwrite(fd, (line + b" " * NOTE_ROOM)[:NOTE_ROOM], 0)
        os.ftruncate(fd, NOTE_ROOM)
    except OSError:
        pass  # the lock holds without its words


def _note_lines(home: Path, run_id: str) -> list[str]:
    try:
        text = (run_dir(home, run_id) / LOCK_FILE).read_text(errors="replace")
    except OSError:
        return []
    return text.partition("\n")[2].strip().splitlines()


def owner_note(home: Path, run_id: str) -> str:
    """What the run's owner said it is stuck on (empty when nothing)."""
    lines = _note_lines(home, run_id)
    return lines[0].strip() if lines else ""


@dataclass(frozen=True)
class KeptEnd:
    """A run's end its owner could not write (the data dir's disk refused it), kept in the lock's note
    (written in place: a full disk cannot refuse it): the run's state, when its job ended, and whether the
    owner gave up waiting for room."""

    state: str
    ended_at: float
    exit_code: int | None = None
    gave_up: bool = False

    def line(self) -> str:
        return END_MARK + json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_line(cls, line: str) -> KeptEnd | None:
        try:
            data = json.loads(line[len(END_MARK):]) if line.startswith(END_MARK) else None
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("state"), str) \
                or not isinstance(data.get("ended_at"), (int, float)):
            return None
        code = data.get("exit_code")
        return cls(data["state"][:20], float(data["ended_at"]), code if type(code) is int else None,
                   data.get("gave_up") is True)


END_MARK = "end "


def kept_end(home: Path, run_id: str) -> KeptEnd | None:
    """The end the run's owner keeps for the disk, when it could not write it (``None``: none kept)."""
    lines = _note_lines(home, run_id)
    return KeptEnd.from_line(lines[1].strip()) if len(lines) > 1 else None


def owned(home: Path, run_id: str) -> bool:
    """Whether a live process owns the run right now."""
    _reap()
    path = run_dir(home, run_id) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:  # asked without writing: the lock file keeps the last owner's words
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def live_owners(home: Path) -> list[tuple[str, int | None]]:
    """Every run whose owner is alive now, with its pid as the lock file says."""
    out = []
    for lock_path in sorted((Path(home) / "runs").glob(f"*/{LOCK_FILE}")):
        run_id = lock_path.parent.name
        if owned(home, run_id):
            try:
                pid: int | None = int(lock_path.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pid = None
            out.append((run_id, pid))
    return out


def spawn_owner(home: Path, run_id: str, *, adopt: bool) -> int | None:
    """Take the run's lock and start its supervisor holding it (see :func:`hand_over`); ``None`` when
    another process owns the run already."""
    lock = OwnerLock(run_dir(home, run_id))
    if not lock.acquire():
        return None
    try:
        return hand_over(lock, home, run_id, adopt=adopt)
    finally:
        lock.release()  # the child's descriptor keeps the lock


def hand_over(lock: OwnerLock, home: Path, run_id: str, *, adopt: bool, warm: WarmOwner | None = None) -> int:
    """Start the run's supervisor, detached (its own session, no terminal, output to its log file),
    holding ``lock``: the lock never lapses in between, so a follower that looks at the same moment
    cannot start a second owner. Secrets reach it through the environment it inherits, never its
    command line. With ``warm`` (started before the run was recorded) that process takes the run, unless
    it cannot (then a new one is started)."""
    fd = lock.fd
    if fd is None:
        raise RuntimeError(f"{run_id}: the owner's lock is not held, so it cannot be handed over")
    directory = run_dir(home, run_id)
    args = ["--home", str(home), run_id] + (["--adopt"] if adopt else [])
    with open(directory / LOG_FILE, "ab") as log:
        if warm is not None:
            pid = warm.take(args, fd, log.fileno())
            if pid is not None:
                return pid
        proc = subprocess.Popen([sys.executable, "-m", "launcher.runs.owner.supervisor", "--lock-fd", str(fd), *args],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, env=_owner_env(), pass_fds=(fd,))
    _STARTED.append(proc)
    _reap()
    return proc.pid


def _owner_env() -> dict[str, str]:
    # Not tagged as the run's processes (a node's sweep must never take its owner for part of the job).
    env = {k: v for k, v in os.environ.items() if k not in ("FSDP_TUI_RUN_ID", "NODE_RANK")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


TAKE_TIMEOUT_S = 30.0
"""How long a warm owner gets to say it has the run (it says so at once once its imports are done)."""


class WarmOwner:
    """A run's supervisor started before the run is recorded: its interpreter starts and imports the
    launcher while the launch checks the nodes, instead of after (a second or more of a launch on a busy
    machine, BENCHMARKS.md, launch fan-out). It waits on a socket; :meth:`take` hands it the run's
    arguments, its lock and its log file (the descriptors travel over the socket, so the lock never
    lapses); :meth:`discard` (a refused launch) or this process ending lets it leave, having done nothing."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair()
        with theirs:
            self.proc = subprocess.Popen([sys.executable, "-m", "launcher.runs.owner.warm", str(theirs.fileno())],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True, env=_owner_env(),
                                         pass_fds=(theirs.fileno(),))
        self.sock: socket.socket | None = mine

    def take(self, args: list[str], lock_fd: int, log_fd: int) -> int | None:
        """Hand the run to the waiting process; its pid once it has the run, ``None`` when it could not
        take it (it ended, or did not answer in time): the caller starts a new one, still holding the lock."""
        sock, self.sock = self.sock, None
        if sock is None:
            return None
        with sock:
            try:
                socket.send_fds(sock, [json.dumps(args).encode()], [lock_fd, log_fd])
                sock.settimeout(TAKE_TIMEOUT_S)
                said = sock.recv(16)
            except OSError:
                said = b""
        if said != b"taken":
            self.proc.kill()
            self.proc.wait()
            return None
        _STARTED.append(self.proc)
        _reap()
        return self.proc.pid

    def discard(self) -> None:
        """No run for it: it leaves without doing anything."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            _STARTED.append(self.proc)  # waited for once it has left


_STARTED: list[subprocess.Popen] = []
"""Owners this process started: waited for once they end, so none stays a zombie while it lives on."""


def _reap() -> None:
    _STARTED[:] = [proc for proc in _STARTED if proc.poll() is None]


def adopt_orphans(home: Path, run_ids: list[str]) -> list[str]:
    """Give every live run without an owner a new one (it catches up from the nodes' files)."""
    return [run_id for run_id in run_ids if spawn_owner(home, run_id, adopt=True) is not None]


def request_cancel(home: Path, run_id: str) -> None:
    """Ask the run's owner to cancel it (it checks at every round); adopted first if it has none."""
    (run_dir(home, run_id) / CANCEL_FILE).touch()


def cancel_requested(directory: Path) -> bool:
    return (directory / CANCEL_FILE).exists()


def request_stacks(home: Path, run_id: str) -> None:
    """Ask the run's owner for every rank's stack on every node (it answers within a round)."""
    (run_dir(home, run_id) / STACKS_FILE).touch()


def take_stacks_request(directory: Path) -> bool:
    """Whether a stack dump was asked for since the last one (the request is used up)."""
    try:
        (directory / STACKS_FILE).unlink()
    except FileNotFoundError:
        return False
    return True
