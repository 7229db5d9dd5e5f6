"""The job on a node: started detached from the channel, supervised, recorded, stopped.

``start`` forks a supervisor into a new session (no terminal), which runs the command in its own
process group, writes its combined output to ``node.log`` with secret values masked, and records the
state atomically in ``state.json``. Secrets arrive through a pipe: never on a command line, never on
disk. Every process of the job carries ``FSDP_TUI_RUN_ID`` and ``NODE_RANK``, so ``stop`` can sweep
what escaped the group (torchrun starts each worker in a session of its own).
"""

from __future__ import annotations

import errno
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time

from . import ports
from .netif import fill_iface_env
from .processes import RUN_ID_ENV, alive, group_alive, signal_group, tagged_pids
from .ranklogs import RankFiles

STATE = "state.json"
LOG = "node.log"
TEE_DIR = "ranks"
"""Where torchrun tees each rank's output when the launcher asked for it (``PET_LOG_DIR``, the plan's ``TEE_DIR``)."""
MASK = "******"
START_TIMEOUT_S = 30.0
ATTEMPT_MARKER = "=== fsdp-tui: attempt "
"""How a retried run's attempts are told apart in a node's log (the launcher's ``launcher.events``
has the same text)."""


def write_state(node_dir: str, **fields) -> None:
    path = os.path.join(node_dir, STATE)
    state = read_state(node_dir)
    state.update(fields)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def read_state(node_dir: str) -> dict:
    try:
        with open(os.path.join(node_dir, STATE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def job_env(node_dir: str, spec: dict) -> dict:
    # The job is no SSH session (it outlives it); without these, bash -c would also read ~/.bashrc,
    # which may put another Python before environment.python on PATH.
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_CLIENT", "SSH2_CLIENT", "SSH_CONNECTION", "SSH_TTY")}
    env.update(spec.get("env", {}))
    for name, rel in spec.get("dir_env", {}).items():
        path = os.path.join(node_dir, rel)
        # A search path the node already sets (e.g. PYTHONPATH to site packages) stays, after ours.
        env[name] = path + os.pathsep + env[name] if name.endswith("PATH") and env.get(name) else path
    env.update(spec.get("secrets", {}))
    for name, value in (spec.get("rank_tag") or {}).items():
        env.setdefault(name, value)  # torchrun's line prefix: each line says its rank (the node's own stays)
    python = spec.get("python")
    if python and os.sep in python:
        env["PATH"] = os.path.dirname(os.path.abspath(os.path.expanduser(python))) + os.pathsep + env.get("PATH", "")
    return env


LOW_SPACE_BYTES = 1 << 20
"""Less free space than this where a dead supervisor kept its files: it died of a full disk."""


def boot_id() -> str | None:
    """This boot of the machine (Linux): a pid recorded before a restart names another process after it."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def status(node_dir: str) -> dict:
    state = read_state(node_dir)
    restarted = state.get("boot_id") not in (None, boot_id())
    state["supervisor_alive"] = not restarted and alive(state.get("supervisor_pid"))
    if restarted and state.get("state") in ("starting", "running") and not state.get("error"):
        state["error"] = "the machine restarted since its job started"
    if state.get("state") in ("starting", "running") and not state["supervisor_alive"] and not state.get("error"):
        # Its last words could not be written: the disk may say why.
        try:
            free = shutil.disk_usage(node_dir).free
        except OSError:
            free = None
        if free is not None and free < LOW_SPACE_BYTES:
            state["error"] = (f"no space left on device: {node_dir} has {free / 2**20:.1f} MiB free; the job "
                              "was stopped because its output could not be recorded")
    return state


def start(node_dir: str, spec: dict, agent_argv: list) -> dict:
    """Detach the supervisor and answer once it has recorded the job as running. Asking again for an
    attempt that already started answers its state (a request retried after a dropped channel)."""
    os.makedirs(node_dir, exist_ok=True)
    attempt = int(spec.get("attempt", 1))
    now = read_state(node_dir)
    if now.get("attempt") == attempt and now.get("state") in ("starting", "running", "exited"):
        return now
    if now.get("state") == "running" and alive(now.get("supervisor_pid")):
        return {"state": "busy", "error": f"attempt {now.get('attempt')} is still running in {node_dir}"}
    claim = None
    if spec.get("rendezvous_port"):  # node 0: the port is this run's until its job ends
        claim, why = ports.take(int(spec["rendezvous_port"]))
        if claim is None:
            return {"state": "refused", "port_taken": True,
                    "error": f"rendezvous port {spec['rendezvous_port']} is taken on this machine ({why})"}
    write_state(node_dir, state="starting", attempt=attempt, exit_code=None, stopped=False, stopping=False,
                error=None, run_id=spec["env"].get(RUN_ID_ENV), node_rank=spec["env"].get("NODE_RANK"),
                boot_id=boot_id())
    read_end, write_end = os.pipe()
    said_end, say_end = os.pipe()  # the supervisor's word on the start (see ``_wait_started``)
    pid = os.fork()
    if pid == 0:  # the supervisor: a new session, detached from the caller and its terminal
        os.close(write_end)
        os.close(said_end)
        os.setsid()
        if os.fork():
            os._exit(0)
        with os.fdopen(read_end, "rb") as pipe:
            spec = json.loads(pipe.read().decode("utf-8"))
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            code = supervise(node_dir, spec, agent_argv, say_end, claim)
        except BaseException:  # noqa: BLE001 - the supervisor must never leave "running" behind
            code = 1
        os._exit(code)
    if claim is not None:
        claim.close()  # the supervisor holds it now (its own copies, inherited by the fork)
    os.close(read_end)
    os.close(say_end)
    # The middle process holds copies of the claim until it exits: the supervisor waits for the spec,
    # so it lets the job bind the port only once nobody but the supervisor holds the listener.
    os.waitpid(pid, 0)
    with os.fdopen(write_end, "wb") as pipe:
        pipe.write(json.dumps(spec).encode("utf-8"))  # secrets travel through the pipe, not argv
    try:
        return _wait_started(node_dir, attempt, said_end)
    finally:
        os.close(said_end)


def _wait_started(node_dir: str, attempt: int, said_end: int) -> dict:
    """The job's state once its supervisor recorded it as running (or exited). The supervisor closes its
    end of ``said_end`` once it has, or writes why it could not (the disk filled as the job started) and
    ends: that answer comes at once, not after the start timeout."""
    deadline = time.time() + START_TIMEOUT_S
    said, listening = b"", True
    while time.time() < deadline:
        state = read_state(node_dir)
        if state.get("state") in ("running", "exited") and state.get("attempt") == attempt:
            return state
        if not listening:
            time.sleep(0.02)
            continue
        if select.select([said_end], [], [], 0.02)[0]:
            chunk = os.read(said_end, 4096)
            said += chunk
            if not chunk:  # the supervisor recorded the job, or ended without a word
                listening = False
                state = read_state(node_dir)
                if state.get("state") in ("running", "exited") and state.get("attempt") == attempt:
                    return state
                why = said.decode("utf-8", "replace") or _no_record_words(node_dir)
                return {**state, "state": "exited", "attempt": attempt, "error": why}
    return {**read_state(node_dir), "error": f"the job did not start within {START_TIMEOUT_S:.0f} s"}


def _no_record_words(node_dir: str) -> str:
    """Why a supervisor that ended without recording its job did, as far as the node can tell."""
    try:
        free = shutil.disk_usage(node_dir).free
    except OSError:
        free = None
    if free is not None and free < LOW_SPACE_BYTES:
        return (f"no space left on device: {node_dir} has {free / 2**20:.1f} MiB free; the job could not be "
                "recorded, so it was not started")
    return f"the job's supervisor ended before it recorded the job in {node_dir}"


def _disk_words(path: str, err: OSError) -> str:
    try:
        free = shutil.disk_usage(os.path.dirname(path)).free
        room = f", {free / 2**20:.1f} MiB free there"
    except OSError:
        room = ""
    what = "no space left on device" if err.errno in (errno.ENOSPC, errno.EDQUOT) else (err.strerror or str(err))
    return f"{what}: cannot write {path}{room}; the job was stopped"


def _say(say_end: int | None, words: str) -> None:
    """Tell ``start`` why the job could not be recorded as started (see ``_wait_started``)."""
    if say_end is not None:
        try:
            os.write(say_end, words.encode("utf-8", "replace"))
        except OSError:
            pass


def _refuse_for_space(node_dir: str, path: str, err: OSError, say_end: int | None) -> int:
    """A job that cannot be recorded (``path`` could not be written) does not run: say why to ``start``
    and in the node's state where that can still be written; the exit status."""
    words = _disk_words(path, err)
    _say(say_end, words)
    try:
        write_state(node_dir, state="exited", exit_code=1, ended_at=time.time(), error=words)
    except OSError:
        pass  # start has the words already
    return 1


def _done_saying(say_end: int | None) -> None:
    if say_end is not None:
        os.close(say_end)


def supervise(node_dir: str, spec: dict, agent_argv: list, say_end: int | None = None, claim=None) -> int:
    """Run the job to its end and record it. ``say_end``: closed once the job is recorded as running, or
    given the words of why it could not be. ``claim``: node 0's rendezvous port (:mod:`.ports`), bound
    until the job starts and claimed until it ends."""
    secrets = [v.encode() for v in spec.get("secrets", {}).values() if v]
    log_path = os.path.join(node_dir, LOG)
    argv = spec["argv"]
    if spec.get("dependencies"):
        # The job's first step builds (or reuses) the venv, in the job's own process group and with its
        # environment (PIP_INDEX_URL and the like), so its output is logged and stop ends it too.
        from .venv import write_venv_spec

        write_venv_spec(node_dir, spec)
        argv = [*agent_argv, "with-venv", node_dir]
    marker = b""
    try:
        log = open(log_path, "ab", buffering=0)  # noqa: SIM115
        if spec.get("marker"):
            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            marker = f"{ATTEMPT_MARKER}{spec['marker']}, started {stamp} ===\n".encode()
            log.write(marker)
    except OSError as err:
        return _refuse_for_space(node_dir, log_path, err, say_end)
    template = next(iter((spec.get("rank_tag") or {}).values()), None)
    ranks = RankFiles(node_dir, template, marker) if template else None
    env = job_env(node_dir, spec)
    iface = fill_iface_env(env, spec.get("iface_env", ()))
    if iface is not None:
        names = " and ".join(n for n in spec["iface_env"] if env.get(n) == iface)
        try:
            log.write(f"fsdp-tui agent: {names}={iface} (the interface that reaches MASTER_ADDR "
                      f"{env['MASTER_ADDR']})\n".encode())
        except OSError:
            pass  # the job's own output finds the full disk and says so
    if claim is not None:
        claim.release_listener()  # the job binds the port now; the claim stays until it ends
    try:
        proc = subprocess.Popen(argv, cwd=spec.get("cwd") or node_dir, env=env,
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as err:
        log.write(f"fsdp-tui agent: cannot start {spec['argv'][0]!r}: {err}\n".encode())
        write_state(node_dir, state="exited", exit_code=127, ended_at=time.time())
        return 127
    try:
        write_state(node_dir, state="running", pid=proc.pid, pgid=proc.pid, supervisor_pid=os.getpid(),
                    started_at=time.time())
    except OSError as err:  # the disk filled as the job started: a job nobody can record does not run
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        return _refuse_for_space(node_dir, os.path.join(node_dir, STATE), err, say_end)
    _done_saying(say_end)
    error = None
    assert proc.stdout is not None  # stdout=PIPE
    for line in proc.stdout:
        for value in secrets:
            line = line.replace(value, MASK.encode())
        try:
            if ranks is not None and b"\x1b_" in line:
                line = ranks.split(line)  # each rank's part into its own file; the log as the job wrote it
            log.write(line)
        except OSError as err:  # a full or failing disk: the job cannot be recorded, so it stops
            error = _disk_words(log_path, err)
            signal_group(proc.pid, signal.SIGTERM)
            break
    if error is not None:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
    code = proc.wait()
    log.close()
    if ranks is not None:
        ranks.close()
    if (spec.get("dir_env") or {}).get("PET_LOG_DIR") == TEE_DIR:
        # torchrun's per-rank copies of what the log has, tagged and masked: they would keep secrets unmasked.
        shutil.rmtree(os.path.join(node_dir, TEE_DIR), ignore_errors=True)
    stopped = bool(read_state(node_dir).get("stopping"))
    try:
        write_state(node_dir, state="exited", exit_code=code, ended_at=time.time(), stopped=stopped, error=error)
    except OSError:
        pass  # the launcher sees a dead supervisor and says so
    return 0


def stop(node_dir: str, grace_s: float = 10.0) -> dict:
    """SIGTERM the job's group and every tagged process, wait, SIGKILL, sweep; report what is left."""
    state = read_state(node_dir)
    run_id, rank = state.get("run_id"), state.get("node_rank")
    was = state.get("state")
    if was == "running":
        try:
            write_state(node_dir, stopping=True)
        except OSError:
            pass  # a full disk: stop anyway

    def tagged() -> set:
        return set(tagged_pids(run_id, rank)) if run_id else set()

    targets = tagged()
    pgid = state.get("pgid")
    found = bool(targets) or bool(pgid and group_alive(int(pgid)))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if pgid:
            signal_group(int(pgid), sig)
        for pid in targets | tagged():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.time() + (grace_s if sig == signal.SIGTERM else 5)
        while time.time() < deadline:
            left = [p for p in tagged() if alive(p)]
            if not left and not (pgid and group_alive(int(pgid))):
                return {"stopped": True, "left": [], "was": was, "found": found}
            time.sleep(0.1)
    left = [p for p in tagged() if alive(p)]
    return {"stopped": not left, "left": sorted(left), "was": was, "found": found}


def agent_argv(agent_zip: str) -> list:
    """How the job's first step (``with-venv``) runs this agent again: the same interpreter, the zip."""
    return [sys.executable, agent_zip]
