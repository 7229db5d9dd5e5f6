"""The node agent: stdlib only, copied into each node's run directory and run there with python3.

    python3 agent.py NODE_DIR start     < {"argv": [...], "env": {...}, "dir_env": {...}, "secrets": {...}}
    python3 agent.py NODE_DIR status
    python3 agent.py NODE_DIR follow FILE --offset N [--wait]
    python3 agent.py NODE_DIR stop [--grace S]
    python3 agent.py NODE_DIR serve     < one JSON request per line: {"op": "status"},
                                          {"op": "read", "name": FILE, "offset": N, "limit": N, "wait": S},
                                          {"op": "start", "spec": {...}}, {"op": "stop", "grace": S},
                                          {"op": "gpus"} (nvidia-smi samples),
                                          {"op": "port", "port": N} (free for the rendezvous?),
                                          {"op": "write", "name": FILE, "text": "..."}

``start`` detaches a supervisor (new session, no terminal) that runs the command in its own process
group, writes its combined output to ``node.log`` with secret values masked, and records the state
atomically in ``state.json``. Secrets arrive on stdin only: never on a command line, never on disk.
Every process of the job carries ``FSDP_TUI_RUN_ID``, so ``stop`` can sweep what escaped the group
(torchrun starts each worker in a session of its own).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

STATE = "state.json"
LOG = "node.log"
VENV_SPEC = "venv.json"
VENV_READY = ".fsdp-tui-ready"
RUN_ID_ENV = "FSDP_TUI_RUN_ID"
MASK = "******"


def _write_state(node_dir: str, **fields) -> None:
    path = os.path.join(node_dir, STATE)
    state = _read_state(node_dir)
    state.update(fields)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def _read_state(node_dir: str) -> dict:
    try:
        with open(os.path.join(node_dir, STATE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _job_env(node_dir: str, spec: dict) -> dict:
    # The job is no SSH session (it outlives it); without these, bash -c would also read ~/.bashrc,
    # which may put another Python before environment.python on PATH.
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_CLIENT", "SSH2_CLIENT", "SSH_CONNECTION", "SSH_TTY")}
    env.update(spec.get("env", {}))
    for name, rel in spec.get("dir_env", {}).items():
        path = os.path.join(node_dir, rel)
        # A search path the node already sets (e.g. PYTHONPATH to site packages) stays, after ours.
        env[name] = path + os.pathsep + env[name] if name.endswith("PATH") and env.get(name) else path
    env.update(spec.get("secrets", {}))
    python = spec.get("python")
    if python and os.sep in python:
        env["PATH"] = os.path.dirname(os.path.abspath(os.path.expanduser(python))) + os.pathsep + env.get("PATH", "")
    return env


def start(node_dir: str, spec: dict) -> dict:
    """Detach the supervisor and return once it has recorded the job as running."""
    os.makedirs(node_dir, exist_ok=True)
    if _read_state(node_dir).get("state") == "running" and _alive(_read_state(node_dir).get("supervisor_pid")):
        return {"error": "a job is already running in this directory", **_read_state(node_dir)}
    attempt = int(spec.get("attempt", 1))
    _write_state(node_dir, state="starting", attempt=attempt, exit_code=None, run_id=spec["env"].get(RUN_ID_ENV),
                 node_rank=spec["env"].get("NODE_RANK"))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the supervisor: a new session, detached from the caller and its terminal
        os.close(write_end)
        os.setsid()
        if os.fork():
            os._exit(0)
        with os.fdopen(read_end, "rb") as pipe:
            spec = json.loads(pipe.read().decode("utf-8"))
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        code = _supervise(node_dir, spec)
        os._exit(code)
    os.close(read_end)
    with os.fdopen(write_end, "wb") as pipe:
        pipe.write(json.dumps(spec).encode("utf-8"))  # secrets travel through the pipe, not argv
    os.waitpid(pid, 0)
    deadline = time.time() + 30
    while time.time() < deadline:
        state = _read_state(node_dir)
        if state.get("state") in ("running", "exited") and state.get("attempt") == attempt:
            return state
        time.sleep(0.02)
    return {"error": "the job did not start within 30 s", **_read_state(node_dir)}


def _supervise(node_dir: str, spec: dict) -> int:
    secrets = [v for v in spec.get("secrets", {}).values() if v]
    log = open(os.path.join(node_dir, LOG), "ab", buffering=0)  # noqa: SIM115
    argv = spec["argv"]
    if spec.get("dependencies"):
        # The job's first step builds (or reuses) the venv, in the job's own process group and with its
        # environment (PIP_INDEX_URL and the like), so its output is logged and stop ends it too.
        with open(os.path.join(node_dir, VENV_SPEC), "w", encoding="utf-8") as f:
            json.dump({"argv": argv, "python": spec.get("python") or "python3",
                       "dependencies": spec["dependencies"], "venv_root": spec["venv_root"]}, f)
        argv = [sys.executable, os.path.abspath(__file__), node_dir, "with-venv"]
    try:
        proc = subprocess.Popen(argv, cwd=node_dir, env=_job_env(node_dir, spec), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as err:
        log.write(f"fsdp-tui agent: cannot start {spec['argv'][0]!r}: {err}\n".encode())
        _write_state(node_dir, state="exited", exit_code=127, ended_at=time.time())
        return 127
    _write_state(node_dir, state="running", pid=proc.pid, pgid=proc.pid, supervisor_pid=os.getpid(),
                 started_at=time.time())
    for line in proc.stdout:
        for value in secrets:
            line = line.replace(value.encode(), MASK.encode())
        log.write(line)
    code = proc.wait()
    log.close()
    state = _read_state(node_dir)
    _write_state(node_dir, state="exited", exit_code=code, ended_at=time.time(),
                 stopped=bool(state.get("stopping")))
    return 0


def venv_key(python: str, dependencies: list) -> str:
    """The cache key of a venv: the interpreter it is built on and the requirements, as written."""
    return hashlib.sha256(json.dumps([python, dependencies]).encode()).hexdigest()[:16]


def ensure_venv(root: str, python: str, dependencies: list) -> tuple:
    """Build the venv of ``dependencies`` on ``python`` under ``root``, or reuse the one built before.

    Nodes sharing a home (NFS) share the cache: a lock makes one node build while the others wait.
    The venv sees the packages of ``python`` too (torch stays the node's own), its own come first.
    Returns ``(venv path, 0)`` or ``(None, exit code)``; progress goes to stdout (the node's log)."""
    import fcntl

    found = shutil.which(python)
    if found is None:
        print(f"fsdp-tui: environment.python {python!r} is not found on this node", flush=True)
        return None, 127
    base = os.path.abspath(found)  # not its realpath: a venv's python sees that venv's packages
    root = os.path.expanduser(root)
    key = venv_key(base, dependencies)
    path = os.path.join(root, key)
    os.makedirs(root, exist_ok=True)
    with open(path + ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print(f"fsdp-tui: waiting for another run building environment {key}", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(path, VENV_READY)):
            print(f"fsdp-tui: environment {key} is ready ({path})", flush=True)
            return path, 0
        shutil.rmtree(path, ignore_errors=True)
        print(f"fsdp-tui: building environment {key} on {base}: {' '.join(dependencies)}", flush=True)
        steps = [
            [base, "-m", "venv", "--system-site-packages", path],
            [base, "-c", "import json, site, sysconfig; print(json.dumps(site.getsitepackages() + "
                         "[sysconfig.get_path('purelib'), sysconfig.get_path('platlib')]))"],
            [os.path.join(path, "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check",
             "--no-input", *dependencies],
        ]
        for i, argv in enumerate(steps):
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                  stdout=subprocess.PIPE if i == 1 else None, text=True)
            if done.returncode != 0:
                what = "pip install" if i == 2 else "creating the venv"
                print(f"fsdp-tui: {what} for environment.dependencies failed (exit {done.returncode}); "
                      "the job did not start", flush=True)
                shutil.rmtree(path, ignore_errors=True)
                return None, done.returncode or 1
            if i == 1:
                try:
                    _link_base_packages(path, json.loads(done.stdout))
                except (OSError, ValueError, subprocess.CalledProcessError) as err:
                    print(f"fsdp-tui: creating the venv for environment.dependencies failed ({err}); "
                          "the job did not start", flush=True)
                    shutil.rmtree(path, ignore_errors=True)
                    return None, 1
        with open(os.path.join(path, VENV_READY), "w", encoding="utf-8") as f:
            json.dump({"python": base, "dependencies": dependencies}, f)
    return path, 0


def _link_base_packages(venv: str, dirs: list) -> None:
    """A venv made from a venv sees only the base install; a .pth adds the interpreter's own packages."""
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    py = subprocess.run([os.path.join(venv, "bin", "python"), "-c", code],
                        capture_output=True, text=True, check=True).stdout.strip()
    unique = [d for i, d in enumerate(dirs) if d and d not in dirs[:i] and os.path.isdir(d)]
    with open(os.path.join(py, "_fsdp_tui_base.pth"), "w", encoding="utf-8") as f:
        f.write("".join(d + "\n" for d in unique))


def with_venv(node_dir: str) -> int:
    """The job's first step when it has dependencies: get the venv, then become the job inside it."""
    with open(os.path.join(node_dir, VENV_SPEC), encoding="utf-8") as f:
        spec = json.load(f)
    venv, code = ensure_venv(spec["venv_root"], spec["python"], spec["dependencies"])
    if venv is None:
        return code
    bin_dir = os.path.join(venv, "bin")
    env = dict(os.environ, VIRTUAL_ENV=venv, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    argv = list(spec["argv"])
    if argv[0] == spec["python"]:
        argv[0] = os.path.join(bin_dir, "python")
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as err:
        print(f"fsdp-tui agent: cannot start {argv[0]!r}: {err}", flush=True)
        return 127


def _alive(pid) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def tagged_pids(run_id: str, node_rank=None) -> list[int]:
    """Every process whose environment carries this run's id (setsid'd and double-forked included), and
    this node's rank when given: two nodes of a run may share a machine, and each stops only its own."""
    needles = {f"{RUN_ID_ENV}={run_id}".encode()}
    if node_rank is not None:
        needles.add(f"NODE_RANK={node_rank}".encode())
    pids = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needles <= set(f.read().split(b"\0")):
                    pids.append(int(name))
        except OSError:
            continue
    return pids


def stop(node_dir: str, grace_s: float = 10.0) -> dict:
    """SIGTERM the job's group and every tagged process, wait, SIGKILL, sweep; report what is left."""
    state = _read_state(node_dir)
    run_id, rank = state.get("run_id"), state.get("node_rank")
    if state.get("state") == "running":
        _write_state(node_dir, stopping=True)

    def tagged() -> set:
        return set(tagged_pids(run_id, rank)) if run_id else set()

    targets = tagged()
    pgid = state.get("pgid")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if pgid:
            try:
                os.killpg(int(pgid), sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in targets | tagged():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.time() + (grace_s if sig == signal.SIGTERM else 5)
        while time.time() < deadline:
            left = [p for p in tagged() if _alive(p)]
            if not left and not (pgid and _group_alive(int(pgid))):
                return {"stopped": True, "left": []}
            time.sleep(0.1)
    left = [p for p in tagged() if _alive(p)]
    return {"stopped": not left, "left": sorted(left)}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def follow(node_dir: str, name: str, offset: int, wait: bool, limit: int | None = None) -> None:
    """Write the file's bytes from ``offset`` to stdout (at most ``limit``); with ``wait``, until the job
    ended and all is read."""
    path = os.path.join(node_dir, name)
    out = sys.stdout.buffer
    while True:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read(limit if limit is not None else -1)
        except FileNotFoundError:
            chunk = b""
        if chunk:
            out.write(chunk)
            out.flush()
            offset += len(chunk)
            if limit is not None:
                return
            continue
        if not wait or limit is not None or _read_state(node_dir).get("state") == "exited":
            return
        time.sleep(0.2)


def _read(node_dir: str, name: str, offset: int, limit: int) -> bytes:
    if os.path.basename(name) != name or name in ("", ".", ".."):
        return b""  # only files of this node's run directory
    try:
        with open(os.path.join(node_dir, name), "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def read_waiting(node_dir: str, name: str, offset: int, limit: int, wait_s: float) -> bytes:
    """``_read``, held back (a long poll, at most ``wait_s``, 5 s at most) until there are bytes past
    ``offset`` or the job has ended: new output reaches the launcher within ~20 ms, not a poll later."""
    deadline = time.monotonic() + min(max(wait_s, 0.0), 5.0)
    path = os.path.join(node_dir, os.path.basename(name))
    while (time.monotonic() < deadline and _size(path) <= offset
           and _read_state(node_dir).get("state") != "exited"):
        time.sleep(0.02)
    return _read(node_dir, name, offset, limit)


GPU_QUERY = "index,name,memory.used,memory.total,utilization.gpu"


def gpu_samples() -> list:
    """One dict per GPU from ``nvidia-smi`` (index, name, memory used/total MiB, utilisation %); [] without it."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []
    samples = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            samples.append({"index": int(parts[0]), "name": parts[1], "memory_used_mib": float(parts[2]),
                            "memory_total_mib": float(parts[3]),
                            "utilization_pct": float(parts[4]) if parts[4][:1].isdigit() else 0.0})
        except ValueError:
            continue
    return samples


def port_state(port: int) -> dict:
    """Whether ``port`` can be bound on every interface, as torchrun's TCPStore binds it, and a free one.

    SO_REUSEADDR as TCPStore sets it, so a port in TIME_WAIT counts as free."""
    def bind(p: int) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", p))
            s.listen(1)
            return s.getsockname()[1]

    try:
        bind(port)
        return {"free": True}
    except OSError as err:
        return {"free": False, "reason": err.strerror or str(err), "suggest": bind(0)}


def _status(node_dir: str) -> dict:
    result = _read_state(node_dir)
    result["supervisor_alive"] = _alive(result.get("supervisor_pid"))
    return result


READY = "fsdp-tui agent ready"
"""The agent channel's first line once the agent is installed (see ``launcher.nodes.AGENT_BOOT``)."""


def write_file(node_dir: str, name: str, text: str) -> dict:
    """Write a file of this node's run directory atomically (e.g. the run's parameters)."""
    if os.path.basename(name) != name or name in ("", ".", ".."):
        return {"error": f"not a file name of the run directory: {name!r}"}
    path = os.path.join(node_dir, name)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as err:
        return {"error": f"cannot write {path}: {err.strerror or err}"}
    return {"written": path}


def serve(node_dir: str) -> None:
    """Answer requests until stdin closes, so the launcher starts no process per poll. Each answer is
    its length in bytes on a line of its own, then that many bytes."""
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            if request.get("op") == "read":
                body = read_waiting(node_dir, str(request["name"]), int(request["offset"]), int(request["limit"]),
                                    float(request.get("wait", 0)))
            elif request.get("op") == "write":
                body = json.dumps(write_file(node_dir, str(request["name"]), str(request["text"]))).encode()
            elif request.get("op") == "status":
                body = json.dumps(_status(node_dir)).encode()
            elif request.get("op") == "gpus":
                body = json.dumps(gpu_samples()).encode()
            elif request.get("op") == "port":
                body = json.dumps(port_state(int(request["port"]))).encode()
            elif request.get("op") == "start":
                body = json.dumps(start(node_dir, request["spec"])).encode()
            elif request.get("op") == "stop":
                body = json.dumps(stop(node_dir, float(request.get("grace", 10.0)))).encode()
            else:
                body = json.dumps({"error": f"unknown request {request.get('op')!r}"}).encode()
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            body = json.dumps({"error": f"bad request: {err}"}).encode()
        out.write(b"%d\n" % len(body) + body)
        out.flush()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    node_dir, verb = os.path.expanduser(argv[0]), argv[1]
    if verb == "start":
        result = start(node_dir, json.loads(sys.stdin.read()))
    elif verb == "status":
        result = _status(node_dir)
    elif verb == "serve":
        serve(node_dir)
        return 0
    elif verb == "stop":
        grace = float(argv[argv.index("--grace") + 1]) if "--grace" in argv else 10.0
        result = stop(node_dir, grace)
    elif verb == "with-venv":
        return with_venv(node_dir)
    elif verb == "follow":
        offset = int(argv[argv.index("--offset") + 1]) if "--offset" in argv else 0
        limit = int(argv[argv.index("--limit") + 1]) if "--limit" in argv else None
        follow(node_dir, argv[2], offset, "--wait" in argv, limit)
        return 0
    else:
        print(f"unknown verb {verb!r}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
