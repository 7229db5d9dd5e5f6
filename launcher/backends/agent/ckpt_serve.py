"""The agent's checkpoint requests: list, place, read, write, seal, verify, move between nodes, delete and
export a run's checkpoints. Imported by :mod:`.serve` at a channel's first such request, so the many
channels that ask none (a status, a log's lines) never load the checkpoints' modules."""

from __future__ import annotations

import json
import os

from . import checkpoints, ckpt_direct, ckpt_files, files, wire

EXPORT_TIMEOUT_S = 3600.0


def _ckpt_list(node_dir, req, body):
    return checkpoints.listing(str(req["output_dir"]), dict(req.get("env", {})), node_dir,
                               str(req["root"]) if req.get("root") else None), b""


def _ckpt_root(node_dir, req):
    """The checkpoints folder a request means: ``root`` as given (this node's own answer before), or
    ``output_dir`` resolved as the job resolves it."""
    if req.get("root"):
        return checkpoints.resolve_root(str(req["root"]), dict(req.get("env", {})), node_dir)
    return checkpoints.root_of(str(req["output_dir"]), dict(req.get("env", {})), node_dir)


def _place(node_dir, req, body):
    root, token = _ckpt_root(node_dir, req), str(req["token"])
    action = req.get("action")
    if action == "mark":
        return ckpt_files.place_mark(root, token), b""
    if action == "clear":
        return ckpt_files.place_clear(root, token, list(req.get("created", []))), b""
    return ckpt_files.place_look(root, token), b""


def _ckpt_files(node_dir, req, body):
    return ckpt_files.files(_ckpt_root(node_dir, req), str(req["name"])), b""


def _ckpt_read(node_dir, req, body):
    return {}, ckpt_files.read(_ckpt_root(node_dir, req), str(req["name"]), str(req["file"]), int(req["offset"]),
                               min(int(req["limit"]), wire.MAX_BODY))


def _ckpt_put(node_dir, req, body):
    size = ckpt_files.put(_ckpt_root(node_dir, req), str(req["name"]), str(req["file"]), int(req["offset"]), body)
    return {"size": size}, b""


def _ckpt_seal(node_dir, req, body):
    sums = {str(k): (int(v[0]), str(v[1])) for k, v in dict(req["sums"]).items()}
    return ckpt_files.seal(_ckpt_root(node_dir, req), str(req["name"]), sums), b""


def _ckpt_unpart(node_dir, req, body):
    files = [str(f) for f in req["files"]] if isinstance(req.get("files"), list) else None
    return ckpt_files.unpart(_ckpt_root(node_dir, req), str(req["name"]), files), b""


def _ckpt_listen(node_dir, req, body):
    return ckpt_direct.listen(_ckpt_root(node_dir, req), str(req["name"]), dict(req["sizes"]),
                              float(req.get("timeout", 60))), b""


def _ckpt_received(node_dir, req, body):
    return ckpt_direct.received(str(req["token"]), min(float(req.get("wait", 0)), files.MAX_WAIT_S)), b""


def _ckpt_send(node_dir, req, body):
    return ckpt_direct.send(_ckpt_root(node_dir, req), str(req["name"]), dict(req["sizes"]), str(req["addr"]),
                            int(req["port"]), str(req["token"]), float(req.get("timeout", 60))), b""


def _ckpt_drop(node_dir, req, body):
    return ckpt_files.drop(_ckpt_root(node_dir, req), str(req["name"]),
                           str(req["writer"]) if req.get("writer") else None), b""


def _ckpt_verify(node_dir, req, body):
    return ckpt_files.verify(_ckpt_root(node_dir, req), str(req["name"])), b""


def _ckpt_mark(node_dir, req, body):
    return ckpt_files.mark(_ckpt_root(node_dir, req), str(req["name"]), list(req["differs"])), b""


def _ckpt_forget(node_dir, req, body):
    return ckpt_files.forget(_ckpt_root(node_dir, req), str(req["name"]), list(req["files"])), b""


def _ckpt_room(node_dir, req, body):
    return ckpt_files.room(_ckpt_root(node_dir, req)), b""


def _ckpt_delete(node_dir, req, body):
    return checkpoints.delete(str(req["output_dir"]), dict(req.get("env", {})), node_dir, str(req["name"]),
                              str(req["root"]) if req.get("root") else None,
                              str(req["writer"]) if req.get("writer") else None,
                              [str(r) for r in req.get("continues", [])]), b""


def _ckpt_export(node_dir, req, body):
    pythonpath = os.path.join(node_dir, str(req["pythonpath"])) if req.get("pythonpath") else ""
    job_env = json.loads(body.decode("utf-8")) if body else {}  # in the body: it may hold the run's secrets
    return checkpoints.export(str(req["output_dir"]), dict(req.get("env", {})), node_dir, str(req["name"]),
                              str(req["python"]), pythonpath, float(req.get("timeout", EXPORT_TIMEOUT_S)),
                              req.get("merged") is True, str(req["root"]) if req.get("root") else None,
                              str(req["url"]) if req.get("url") else None,
                              {str(k): str(v) for k, v in dict(job_env).items()}), b""


HANDLERS = {
    "ckpt_list": _ckpt_list, "ckpt_delete": _ckpt_delete, "ckpt_export": _ckpt_export, "place": _place,
    "ckpt_files": _ckpt_files, "ckpt_read": _ckpt_read, "ckpt_put": _ckpt_put, "ckpt_seal": _ckpt_seal,
    "ckpt_unpart": _ckpt_unpart, "ckpt_drop": _ckpt_drop, "ckpt_listen": _ckpt_listen,
    "ckpt_received": _ckpt_received, "ckpt_send": _ckpt_send, "ckpt_verify": _ckpt_verify, "ckpt_mark": _ckpt_mark,
    "ckpt_forget": _ckpt_forget, "ckpt_room": _ckpt_room,
}
