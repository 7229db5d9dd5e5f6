"""Runs a table of ssh_config cases as a user would: ``~`` is the passwd home (the test bind-mounts the
client home over it in a mount namespace of this process alone), each case's config written to
``~/.ssh/config``, then fsdp-tui's connect function (and, with ``reference``, OpenSSH's ``ssh`` on the same
files) runs ``id -un; echo $SSH_CONNECTION`` on whatever it reached. Reads JSON on stdin, prints JSON."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

PROBE = "id -un; echo $SSH_CONNECTION"


def _reset(home: Path, files: dict[str, str], case: dict) -> None:
    ssh_dir = home / ".ssh"
    for stale in ("kh_scratch", "conf.d", "keys"):
        path = ssh_dir / stale
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    for rel, text in {**files, **case.get("files", {})}.items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for rel, src in case.get("copies", {}).items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(home / src, home / rel)
        os.chmod(home / rel, 0o600)
    (ssh_dir / "config").write_text(case["config"])


async def _ours(case: dict) -> dict:
    from launcher.backends.ssh.connect import SshError, connect
    from launcher.workload.hosts import parse_host
    from launcher.workload.model import Ssh

    target, ssh = parse_host(case["target"]), Ssh(**case.get("ssh", {}))
    try:
        if case.get("action") == "trust":  # as `fsdp-tui trust NAME --yes` does, then connect
            from launcher.backends.ssh.connect import check_host_key, trust

            trust(await check_host_key(target, ssh), ssh)
        conn = await asyncio.wait_for(connect(target, ssh), 60)
    except SshError as err:
        return {"ok": False, "message": str(err)}
    except BaseException:  # the test fails on any of these: no traceback may reach a user
        return {"ok": False, "traceback": traceback.format_exc()}
    async with conn:
        ran = await conn.run(PROBE, check=False)
    return {"ok": True, "out": str(ran.stdout).split()}


def _start_reference(case: dict) -> subprocess.Popen:
    """OpenSSH's ``ssh`` on the same files, the workload's user/port/jump given as a user would type them."""
    ssh = case.get("ssh", {})
    args = [shutil.which("ssh") or "/usr/bin/ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]
    args += ["-l", ssh["user"]] if "user" in ssh else []
    args += ["-p", str(ssh["port"])] if "port" in ssh else []
    args += ["-J", ssh["proxy_jump"]] if "proxy_jump" in ssh else []
    return subprocess.Popen([*args, case["target"], PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def _reference_result(proc: subprocess.Popen, started: float) -> dict:
    out, err = proc.communicate(timeout=90)
    return {"ok": proc.returncode == 0, "out": out.split(), "message": err.strip()[-300:],
            "seconds": round(time.monotonic() - started, 3)}


def main() -> None:
    request = json.load(sys.stdin)
    home = Path.home()
    agent_sock = home / ".ssh" / "agent.sock"
    agent_sock.unlink(missing_ok=True)
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(agent_sock)], stdout=subprocess.DEVNULL)
    results = {}
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(["ssh-add", "-q", str(home / ".ssh" / "agentkey")], capture_output=True,
                             env={**os.environ, "SSH_AUTH_SOCK": str(agent_sock)}).returncode != 0:
            if time.monotonic() > deadline:  # poll: the agent listens a moment after it starts
                raise RuntimeError("ssh-agent did not start")
            time.sleep(0.05)
        for case in request["cases"]:
            _reset(home, request["files"], case)
            saved = dict(os.environ)
            os.environ.pop("SSH_AUTH_SOCK", None)
            os.environ.update({k: v.replace("{agent}", str(agent_sock)) for k, v in case.get("env", {}).items()})
            try:
                # ssh and fsdp-tui side by side on the same files, unless one of them writes some
                together = request["reference"] and not case.get("alone")
                started = time.monotonic()
                reference = _start_reference(case) if together else None
                result = {"ours": asyncio.run(_ours(case))}
                result["ours"]["seconds"] = round(time.monotonic() - started, 3)
                scratch = home / ".ssh" / "kh_scratch"
                result["ours"]["kh_scratch"] = scratch.read_text() if scratch.exists() else ""
                if reference is not None:
                    result["ssh"] = _reference_result(reference, started)
                elif request["reference"]:
                    if case.get("action") != "trust":  # after a trust, ssh must accept what was written
                        _reset(home, request["files"], case)
                    started = time.monotonic()
                    result["ssh"] = _reference_result(_start_reference(case), started)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            results[case["id"]] = result
    finally:
        agent.terminate()
        agent.wait()
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
