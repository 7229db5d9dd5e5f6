"""A checkpoint's files sent straight from one node to another over TCP, where the nodes reach each other
(they do: the training job's own traffic goes that way), instead of through the launcher's two SSH
links. No SSH key between the nodes is needed: the receiving agent listens on a port the system picks
and waits for one connection that starts with a one-time token the launcher gave both agents over
SSH; the bytes are as plain on the wire as the job's own gradients and weights. Each file is written
beside its name (``.part-``) with its SHA-256 computed as it arrives; the launcher compares it with the
sender's and only then names the files (``ckpt_files.seal``).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import threading
import time

from trainer.wire.ckpt_layout import PART_PREFIX

from . import ckpt_files
from .files import open_own

BLOCK = 1 << 20
_RECEIVING: dict[str, dict] = {}
"""Receptions under way or done, by token: their state, the files' SHA-256 and why one failed."""


def listen(root: str, name: str, sizes: dict, timeout_s: float) -> dict:
    """Start receiving ``sizes`` (file -> bytes, in name order) into the checkpoint ``name``; returns the
    port and the token the sender must present."""
    files = {f: int(s) for f, s in sorted(sizes.items())}
    paths = {f: ckpt_files._file(root, name, f) for f in files}  # every name checked before anything opens
    os.makedirs(os.path.dirname(next(iter(paths.values()))) if paths else ckpt_files._folder(root, name),
                exist_ok=True)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("0.0.0.0", 0))
    server.listen(4)
    server.settimeout(timeout_s)
    token = secrets.token_hex(16)
    state = {"state": "waiting", "sums": {}, "error": ""}
    _RECEIVING[token] = state
    threading.Thread(target=_receive, args=(server, token, files, paths, state, timeout_s), daemon=True).start()
    return {"port": server.getsockname()[1], "token": token}


def _receive(server: socket.socket, token: str, files: dict, paths: dict, state: dict, timeout_s: float) -> None:
    conn = None
    try:
        deadline = time.monotonic() + timeout_s
        while conn is None:
            server.settimeout(max(0.1, deadline - time.monotonic()))
            candidate, _ = server.accept()
            candidate.settimeout(timeout_s)
            if _line(candidate) == token:
                conn = candidate
            else:
                candidate.close()  # not the sender: the wrong token, or a port scan
        buffer = bytearray(BLOCK)
        for file, size in files.items():
            part = os.path.join(os.path.dirname(paths[file]), PART_PREFIX + file)
            digest, left = hashlib.sha256(), size
            with open(part, "wb") as out:
                while left:
                    got = conn.recv_into(memoryview(buffer)[: min(BLOCK, left)])
                    if not got:
                        raise ValueError(f"{file}: the sender stopped at {size - left} of its {size} B")
                    out.write(memoryview(buffer)[:got])
                    digest.update(memoryview(buffer)[:got])
                    left -= got
            ckpt_files._RUNNING[part] = (size, digest)
            state["sums"][file] = digest.hexdigest()
        state["state"] = "done"
    except (OSError, ValueError) as err:
        state.update(state="error", error=str(err) or type(err).__name__)
    finally:
        server.close()
        if conn is not None:
            conn.close()


def _line(conn: socket.socket, limit: int = 200) -> str:
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        got = conn.recv(1)
        if not got:
            break
        data += got
    return data.decode("ascii", "replace").strip()


def received(token: str, wait_s: float) -> dict:
    """The reception's state (held up to ``wait_s`` while it is under way); forgotten once it ended."""
    state = _RECEIVING.get(token)
    if state is None:
        return {"state": "error", "error": "no such reception (the agent restarted?)", "sums": {}}
    deadline = time.monotonic() + wait_s
    while state["state"] == "waiting" and time.monotonic() < deadline:
        time.sleep(0.05)
    if state["state"] != "waiting":
        _RECEIVING.pop(token, None)
    return dict(state)


def send(root: str, name: str, sizes: dict, addr: str, port: int, token: str, timeout_s: float) -> dict:
    """Send ``sizes``'s files of checkpoint ``name`` to a listening agent; returns each file's SHA-256 as
    read here. A node that cannot be dialled says so (``cannot connect``): the launcher copies instead."""
    paths = {f: ckpt_files._file(root, name, f, reading=True) for f in sorted(sizes)}
    for f, path in paths.items():
        if os.path.getsize(path) != int(sizes[f]):
            raise ValueError(f"{f}: {os.path.getsize(path)} B here, {sizes[f]} B listed")
    try:
        conn = socket.create_connection((addr, int(port)), timeout=min(timeout_s, 10.0))
    except OSError as err:
        raise ValueError(f"cannot connect to {addr}:{port} for a direct copy: {err.strerror or err}") from None
    sums = {}
    try:
        conn.settimeout(timeout_s)
        conn.sendall((token + "\n").encode("ascii"))
        for f, path in paths.items():
            digest = hashlib.sha256()
            with open_own(path) as source:
                for block in iter(lambda source=source: source.read(BLOCK), b""):
                    digest.update(block)
                    conn.sendall(block)
            sums[f] = digest.hexdigest()
        conn.shutdown(socket.SHUT_WR)
    finally:
        conn.close()
    return {"sums": sums}
