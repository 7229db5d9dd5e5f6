"""The agent's request loop: one framed request in, one framed answer out, until the channel closes.

The same loop answers over an SSH channel and over a local pipe, so the launcher starts no process per
poll anywhere. A request that fails on the node (a full disk, a missing file) gets an answer that says
why; the loop itself never dies of one request.
"""

from __future__ import annotations

import json
import os
import sys

from . import files, flight, jobs, ports, probes, processes, scheduler, usage, wire


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
    "gpus": _gpus, "usage": _usage, "port": _port, "run": _run, "stacks": _stacks, "pack": _pack, "slurm": _slurm,
    "remove": _remove,
}
"""The requests any channel may ask; the checkpoints' are in :mod:`.ckpt_serve`, imported at the first one."""


def _handler(op):
    if op in HANDLERS:
        return HANDLERS[op]
    from . import ckpt_serve  # the checkpoints' modules: most channels (a status, a log) never ask for one

    return ckpt_serve.HANDLERS.get(op)


def answer(node_dir: str, req: dict, body: bytes, agent_zip: str) -> bytes:
    op = req.get("op")
    try:
        if op == "start":
            head, data = _start(node_dir, req, body, agent_zip)
        else:
            handler = _handler(op)
            if handler is None:
                return wire.encode({"ok": False, "error": f"unknown request {op!r}"})
            head, data = handler(node_dir, req, body)
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
