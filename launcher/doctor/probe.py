"""The doctor's probe: runs on a node under the workload's Python and prints what it finds as JSON.

Stdlib only, and nothing newer than Python 3.7 needs: the probe must report an interpreter that is too
old rather than fail on it. The launcher sends this file (after the agent's ``netif.py``) on stdin (``PYTHON -``) with one
line appended that calls ``main`` with the parameters as a JSON string literal, so nothing travels on
the command line. Each part catches its own failure and reports it, so one broken part never hides the
others. The result is the last stdout line, after ``MARKER`` (shell start-up files may print first).
"""

import errno
import json
import os
import shutil
import socket
import subprocess
import sys

MARKER = "FSDP_TUI_PROBE "

# Run in a child interpreter: an import can hang, crash the process, or print to stdout.
_IMPORT_CHILD = """
import json, sys
out = {}
for name in %r:
    try:
        module = __import__(name)
        out[name] = {"import": "ok"}
        if name == "torch":
            out[name]["cuda"] = module.version.cuda
    except BaseException as err:
        lines = str(err).strip().splitlines() or [""]
        out[name] = {"import": "%%s: %%s" %% (type(err).__name__, lines[0][:300])}
sys.stdout.write("\\n" + %r + json.dumps(out) + "\\n")
"""


def _guard(fn, *args):
    """``fn(*args)``, or the error it raised as data: the probe reports, it does not crash."""
    try:
        return fn(*args)
    except Exception as err:  # the boundary: every failure becomes a reported fact
        return {"error": f"{type(err).__name__}: {err}"}


def _python():
    return {"version": list(sys.version_info[:3]), "executable": sys.executable}


def _torch_cuda_without_import():
    """torch's CUDA version read from its ``version.py`` (importing torch takes seconds)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    with open(path) as f:
        match = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", f.read(), re.MULTILINE)
    return match.group(1) if match else None


def _packages(packages, timeout_s, quick=False):
    """``{dist: {"version": str | None, "import": "ok" | error, ...}}``; versions from metadata first.
    ``quick``: versions only, nothing imported (``import`` is ``skipped``; torch's CUDA read from a file)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:
        return {dist: {"error": "importlib.metadata needs Python 3.8+"} for dist, _ in packages}
    out = {}
    for dist, _module in packages:
        try:
            out[dist] = {"version": version(dist)}
        except PackageNotFoundError:
            out[dist] = {"version": None}
    modules = [module for dist, module in packages if out[dist]["version"] is not None]
    if quick:
        for dist, _module in packages:
            if out[dist]["version"] is not None:
                out[dist]["import"] = "skipped"
                if dist == "torch":
                    out[dist]["cuda"] = _torch_cuda_without_import()
        return out
    if not modules:
        return out
    try:
        child = subprocess.run([sys.executable, "-"], input=_IMPORT_CHILD % (modules, MARKER),
                               capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        imports = {m: {"import": f"import timed out after {timeout_s}s"} for m in modules}
    else:
        imports = _last_marked(child.stdout)
        if imports is None:
            why = f"import crashed (exit {child.returncode}): {child.stderr.strip()[-300:]}"
            imports = {m: {"import": why} for m in modules}
    for dist, module in packages:
        if module in imports:
            out[dist].update(imports[module])
    return out


def _last_marked(text):
    for line in reversed(text.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    return None


def _gpus():
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"smi": None, "names": []}
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return {"smi": smi, "error": (done.stdout + done.stderr).strip()[-300:] or f"exit {done.returncode}"}
    # "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)"; MIG devices are indented lines under their GPU.
    names = [line.split(":", 1)[1].split("(UUID")[0].strip()
             for line in done.stdout.splitlines() if line.startswith("GPU ")]
    sizes = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"], capture_output=True,
                           text=True, timeout=30)
    memory = [int(v) for v in sizes.stdout.split() if v.isdigit()] if sizes.returncode == 0 else []
    return {"smi": smi, "names": names, "memory_mib": memory}


def _ram():
    """The node's memory (``MemTotal``) and what is available now, in bytes."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                out["total_bytes" if key == "MemTotal" else "available_bytes"] = int(rest.split()[0]) * 1024
    return out


def _disk(run_root):
    path = os.path.abspath(os.path.expanduser(run_root))
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    usage = shutil.disk_usage(existing)
    return {"path": path, "existing": existing, "free_bytes": usage.free, "total_bytes": usage.total,
            "writable": os.access(existing, os.W_OK)}


def _output_dir(template, env, base):
    """Where the job's ``output_dir`` lands on this node (its variables, ``~``, relative to the run
    directory) and whether it can be written there."""
    import re

    values = dict(os.environ, **env)

    def value(match: "re.Match[str]") -> str:  # a string: the probe runs on Pythons before 3.9
        return values.get(match.group(1) or match.group(2) or "", match.group(0))

    path = os.path.expanduser(re.sub(r"\$(?:\{(\w+)\}|(\w+))", value, template))
    path = os.path.abspath(os.path.join(os.path.expanduser(base), path))
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    return {"path": path, "existing": existing, "writable": os.access(existing, os.W_OK),
            "is_dir": os.path.isdir(existing)}


def _data(paths, env):
    """Each data file the workload names on this node (its variables and ``~`` expanded): whether it is
    there and readable, and its columns and first row as read from its start (the launcher judges them)."""
    import re

    values = dict(os.environ, **env)

    def value(match: "re.Match[str]") -> str:
        return values.get(match.group(1) or match.group(2) or "", match.group(0))

    out = []
    for template in paths:
        path = os.path.expanduser(re.sub(r"\$(?:\{(\w+)\}|(\w+))", value, template))
        entry: dict = {"path": path}
        if not os.path.exists(path):
            entry["kind"] = "missing"
        elif os.path.isdir(path):
            entry["kind"] = "folder"
            entry.update(_guard(_folder_columns, path))
        else:
            entry["kind"] = "file"
            entry["size"] = os.path.getsize(path)
            entry["readable"] = os.access(path, os.R_OK)
            if entry["readable"]:
                entry.update(_guard(_file_head, path))
        out.append(entry)
    return out


def _folder_columns(path):
    for name in ("dataset_info.json", os.path.join("train", "dataset_info.json")):
        info = os.path.join(path, name)
        if os.path.exists(info):
            with open(info) as f:
                features = json.load(f).get("features") or {}
            return {"columns": list(features) if isinstance(features, dict) else []}
    return {"problem": "this folder was not saved by datasets (no dataset_info.json)"}


def _file_head(path):
    """The columns and first row of a data file, from its first 64 KiB (parquet and arrow: their schema)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in (".parquet", ".arrow"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            return {}
        import pyarrow as pa
        import pyarrow.parquet as pq

        if suffix == ".parquet":
            return {"columns": list(pq.read_schema(path).names)}
        with pa.memory_map(path) as source:
            try:
                return {"columns": list(pa.ipc.open_stream(source).schema.names)}
            except pa.ArrowInvalid:
                return {"columns": list(pa.ipc.open_file(source).schema.names)}
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 4:
            return {"problem": f"not UTF-8 text: byte 0x{head[err.start]:02x} near the start (save the file as UTF-8)"}
        text = head[:err.start].decode("utf-8")
    text = text.lstrip("\ufeff")
    if suffix == ".csv":
        import csv
        import io

        rows = list(csv.reader(io.StringIO(text)))[:2]
        if not rows:
            return {"problem": "the file has no rows"}
        names = [h.strip() for h in rows[0]]
        first = dict(zip(names, rows[1])) if len(rows) > 1 else None  # noqa: B905 (Python 3.7 has no strict=)
        return {"columns": names, "row": first}
    start = text.lstrip()
    if start.startswith("["):
        try:
            row, _ = json.JSONDecoder().raw_decode(start[1:].lstrip())
        except ValueError:
            return {}
    else:
        line = next((ln for ln in text.split("\n") if ln.strip()), "")
        if not line:
            return {"problem": "the file has no rows"} if len(head) < (1 << 16) else {}
        try:
            row = json.loads(line)
        except ValueError as err:
            return {"problem": f"line 1: not JSON: {getattr(err, 'msg', err)}"} if len(line) < len(text) else {}
    if not isinstance(row, dict):
        return {"problem": "a row must be a JSON object"}
    small = len(json.dumps(row)) <= 8192
    return {"columns": list(row), "row": row if small else None}


def _bind(family, sockaddr):
    # torchrun's TCPStore sets SO_REUSEADDR too, so a port in TIME_WAIT counts as free.
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(sockaddr)
        s.listen(1)


def _master(addr, port, bind):
    """Resolve MASTER_ADDR; on node 0 also bind MASTER_PORT there and on every interface (TCPStore's)."""
    try:
        infos = socket.getaddrinfo(addr, port, 0, socket.SOCK_STREAM)
    except socket.gaierror as err:
        return {"resolve_error": str(err)}
    out: dict[str, object] = {"addrs": sorted({str(info[4][0]) for info in infos})}
    if bind:
        family, _, _, _, sockaddr = infos[0]
        wildcard = ("::", port, 0, 0) if family == socket.AF_INET6 else ("0.0.0.0", port)
        for where, target in (("addr", sockaddr), ("any", wildcard)):
            try:
                _bind(family, target)
            except OSError as err:
                out["bind_error"] = {"where": where, "errno": errno.errorcode.get(err.errno or 0, str(err.errno)),
                                     "message": err.strerror or str(err)}
                break
    return out


def _interfaces(addr, port):
    """The interface that reaches MASTER_ADDR and every interface of this node (``netif.py``, sent
    ahead of this file, defines both functions)."""
    return {"route": route_interface(addr, port), "names": interface_names()}  # noqa: F821  # pyright: ignore[reportUndefinedVariable]


def main(params_json):
    params = json.loads(params_json)
    facts = {
        "hostname": socket.gethostname(),
        "python": _guard(_python),
        "packages": _guard(_packages, params["packages"], params["import_timeout_s"], params.get("quick", False)),
        "gpus": _guard(_gpus),
        "ram": _guard(_ram),
        "disk": _guard(_disk, params["run_root"]),
        "output_dir": (_guard(_output_dir, params["output_dir"], params.get("env", {}),
                              params.get("node_dir") or params["run_root"])
                       if params.get("output_dir") else None),
        "master": _guard(_master, params["master_addr"], params["master_port"], params["bind"]),
        "containers": {name: shutil.which(name) for name in ("docker", "podman")},
        "interfaces": _guard(_interfaces, params["master_addr"], params["master_port"]),
        "data": _guard(_data, params.get("data") or [], params.get("env", {})),
    }
    sys.stdout.write("\n" + MARKER + json.dumps(facts) + "\n")
