"""Dependencies of a job: a venv per (interpreter, requirements), built once per node and reused.

The build is the job's first step (``with-venv``), so pip's output lands in the node's log and a stop
ends it like any job. Nodes sharing a home (NFS) share the cache: a lock makes one build while the
others wait.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

VENV_SPEC = "venv.json"
VENV_READY = ".fsdp-tui-ready"


def write_venv_spec(node_dir: str, spec: dict) -> None:
    with open(os.path.join(node_dir, VENV_SPEC), "w", encoding="utf-8") as f:
        json.dump({"argv": spec["argv"], "python": spec.get("python") or "python3",
                   "dependencies": spec["dependencies"], "venv_root": spec["venv_root"]}, f)


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
