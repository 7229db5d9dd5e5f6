"""The agent's request loop: one framed request in, one framed answer out, until the channel closes.

The same loop answers over an SSH channel and over a local pipe, so the launcher starts no process per
poll anywhere. A request that fails on the node (a full disk, a missing file) gets an answer that says
why; the loop itself never dies of one request.
"""

from __future__ import annotations

import json
import os
import sys

from . import (
    checkpoints,
    ckpt_direct,
    ckpt_files,
    files,
    flight,
    jobs,
    ports,
    probes,
    processes,
    scheduler,
    usage,
    wire,
)

EXPORT_TIMEOUT_S = 3600.0


def _status(node_dir, req, body):
    return jobs.status(node_dir), b""


def _read(node_dir, req, body):
    data = files.read_waiting(node_dir, str(req["name"]), int(req["offset"]), int(req["limit"]),
                              float(req.get("wait", 0)))
    return {}, data


def _write(node_dir, req, body):
    return {"path": files.write(node_dir, str(req["name"]), body)}, b""


def _put(node_dir, req, body):
    return {"size": files.put(node_dir, str(req["name"]), int(req["offset"]), body)}, b""


def _unpack(node_dir, req, body):
    count = files.unpack(node_dir, str(req["name"]), int(req["total"]), str(req["sha256"]), str(req["dest"]))
    return {"files": count}, b""


def _start(node_dir, req, body, agent_zip):
    spec = json.loads(body.decode("utf-8"))  # in the body: it holds the secrets
    result = jobs.start(node_dir, spec, jobs.agent_argv(agent_zip))
    if result.get("port_taken"):
        return result, b""  # an answer, not a failure: the launcher moves the run to another port
    if result.get("error") and result.get("state") != "running":
        raise ValueError(result["error"])
    return result, b""


def _stop(node_dir, req, body):
    return jobs.stop(node_dir, float(req.get("grace", 10.0))), b""


def _gpus(node_dir, req, body):
    return {"gpus": probes.gpu_samples()}, b""


def _usage(node_dir, req, body):
    """The job's CPU use, RSS and process count (its tagged processes; none when no job ran here yet)."""
    state = jobs.read_state(node_dir)
    run_id, rank = state.get("run_id"), state.get("node_rank")
    pids = processes.tagged_pids(run_id, rank) if run_id else []
    return {"usage": usage.usage(node_dir, pids)}, b""


def _port(node_dir, req, body):
    return ports.claim(int(req["port"])), b""


def _run(node_dir, req, body):
    return probes.run_script(str(req["python"]), body.decode("utf-8"), float(req["timeout"])), b""


def _stacks(node_dir, req, body):
    state = jobs.read_state(node_dir)
    run_id, rank = state.get("run_id"), state.get("node_rank")
    pids = processes.tagged_pids(run_id, rank) if run_id else []
    asked = flight.ask(node_dir) if run_id else None  # the ranks dump while py-spy looks at them
    stacks = probes.stacks(pids, str(req.get("python") or "python3"))
    return {"stacks": stacks + flight.collect(node_dir, asked)}, b""


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


def _pack(node_dir, req, body):
    """A tar of a folder (an export) into the run directory, to be read back in chunks."""
    import hashlib

    folder = os.path.expanduser(str(req["path"]))
    if not os.path.isdir(folder):
        raise ValueError(f"no folder {folder}")
    data = files.tar_bytes(folder, os.path.basename(folder.rstrip("/")))
    name = str(req["name"])
    files.write(node_dir, name, data)
    return {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, b""


def _remove(node_dir, req, body):
    return files.remove_run_dir(node_dir), b""


def _slurm(node_dir, req, body):
    return scheduler.run(node_dir, list(req["argv"]), body, bool(req.get("in_run_dir")),
                         float(req.get("timeout", 60))), b""


HANDLERS = {
    "status": _status, "read": _read, "write": _write, "put": _put, "unpack": _unpack, "stop": _stop,
    "gpus": _gpus, "usage": _usage, "port": _port, "run": _run, "stacks": _stacks, "ckpt_list": _ckpt_list, "ckpt_delete": _ckpt_delete,
    "ckpt_export": _ckpt_export, "pack": _pack, "slurm": _slurm, "remove": _remove, "place": _place,
    "ckpt_files": _ckpt_files, "ckpt_read": _ckpt_read, "ckpt_put": _ckpt_put, "ckpt_seal": _ckpt_seal,
    "ckpt_unpart": _ckpt_unpart, "ckpt_drop": _ckpt_drop, "ckpt_listen": _ckpt_listen,
    "ckpt_received": _ckpt_received, "ckpt_send": _ckpt_send, "ckpt_verify": _ckpt_verify, "ckpt_mark": _ckpt_mark,
    "ckpt_forget": _ckpt_forget, "ckpt_room": _ckpt_room,
}


def answer(node_dir: str, req: dict, body: bytes, agent_zip: str) -> bytes:
    op = req.get("op")
    try:
        if op == "start":
            head, data = _start(node_dir, req, body, agent_zip)
        elif op in HANDLERS:
            head, data = HANDLERS[op](node_dir, req, body)
        else:
            return wire.encode({"ok": False, "error": f"unknown request {op!r}"})
    except OSError as err:
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        return wire.encode({"ok": False, "error": f"{op}: {err.strerror or err}{where}"})
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return wire.encode({"ok": False, "error": f"{op}: {err}"})
    return wire.encode({"ok": True, **head}, data)


def serve(node_dir: str, inp, out, agent_zip: str, build: str) -> None:
    """Answer until the channel closes. ``inp``/``out`` are binary file objects (stdin/stdout)."""
    out.write((wire.ready_line(build) + "\n").encode())
    out.flush()
    while True:
        try:
            frame = wire.read_frame(inp)
        except (wire.FrameError, ValueError) as err:
            out.write(wire.encode({"ok": False, "error": f"bad frame: {err}"}))
            out.flush()
            return
        if frame is None:
            return
        req, body = frame
        out.write(answer(node_dir, req, body, agent_zip))
        out.flush()


def main(node_dir: str, inp, agent_zip: str, build: str) -> None:
    serve(node_dir, inp, sys.stdout.buffer, agent_zip, build)
