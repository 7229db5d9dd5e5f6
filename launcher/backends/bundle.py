"""The agent as it travels: a zip of ``launcher/backends/agent`` (as package ``fsdp_tui_agent``) and the
shared checkpoint rules (layout and completeness, digests, ownership), plus the boot script that installs
it on a node and starts serving.

The boot script is the whole command line (``PYTHON -c BOOT NODE_DIR BUILD``); the zip follows on
stdin (a length line, then the bytes), so a node needs no upload before its first request.
"""

from __future__ import annotations

import functools
import hashlib
import io
import shlex
import zipfile
from pathlib import Path

AGENT_DIR = Path(__file__).with_name("agent")
WIRE = Path(__file__).resolve().parents[2] / "trainer" / "wire"
RULES = ("ckpt_layout.py", "ckpt_paths.py", "ckpt_digest.py", "ckpt_owner.py")
"""The checkpoint rules the agent applies, carried as they are (standard library only)."""
PACKAGE = "fsdp_tui_agent"

BOOT = """import errno, os, shutil, sys
d = os.path.expanduser(sys.argv[1])
i = sys.stdin.buffer
z = i.read(int(i.readline()))
p = os.path.join(d, "agent-%s.zip" % sys.argv[2])
t = "%s.%d" % (p, os.getpid())
try:
    os.makedirs(d, exist_ok=True)
    with open(t, "wb") as f:
        f.write(z)
    os.replace(t, p)
except OSError as e:
    if os.path.exists(t):
        os.remove(t)
    try:
        e2 = d
        while not os.path.isdir(e2):
            e2 = os.path.dirname(e2)
        free = ", %.1f MiB free there" % (shutil.disk_usage(e2).free / 2**20)
    except OSError:
        free = ""
    why = "no space left on device" if e.errno in (errno.ENOSPC, errno.EDQUOT) else (e.strerror or str(e))
    sys.exit("%s: cannot write %s%s" % (why, e.filename or d, free))
sys.path.insert(0, p)
from fsdp_tui_agent.serve import main
main(d, i, p, sys.argv[2])
"""
"""Makes the node directory, installs the zip sent on stdin (named by its build, so an agent still
running from an older one is never disturbed) and serves; the buffered stdin carries on into ``serve``."""

_ROOT_MAIN = f"import sys\nfrom {PACKAGE}.__main__ import _main\nsys.exit(_main(sys.argv[1:]))\n"
_STAMP = (2020, 1, 1, 0, 0, 0)


@functools.lru_cache(maxsize=1)
def agent_zip() -> tuple[bytes, str]:
    """The zip's bytes and its build id (a hash of its content; the same sources give the same zip)."""
    entries = {f"{PACKAGE}/{p.name}": p.read_bytes() for p in sorted(AGENT_DIR.glob("*.py"))}
    entries["trainer/__init__.py"] = b'"""The checkpoint rules only (the agent\'s copy)."""\n'
    entries["trainer/wire/__init__.py"] = b'"""The checkpoint rules only (the agent\'s copy)."""\n'
    for name in RULES:
        entries[f"trainer/wire/{name}"] = (WIRE / name).read_bytes()
    entries["__main__.py"] = _ROOT_MAIN.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(entries):
            zf.writestr(zipfile.ZipInfo(name, _STAMP), entries[name], compress_type=zipfile.ZIP_DEFLATED)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()[:12]


def boot_payload() -> bytes:
    """What follows the boot command on stdin."""
    data, _build = agent_zip()
    return b"%d\n" % len(data) + data


def boot_argv(python: str, node_dir: str) -> list[str]:
    return [python, "-c", BOOT, node_dir, agent_zip()[1]]


def boot_command(python: str, node_dir: str) -> str:
    """The boot as one shell command line (over SSH), every part quoted once."""
    return shlex.join(boot_argv(python, node_dir))
