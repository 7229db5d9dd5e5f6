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
    from launcher.workload.machines import Ssh

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
        ran = await asyncio.wait_for(conn.run(PROBE, check=False), 60)
    return {"ok": True, "out": str(ran.stdout).split()}


REFERENCE_WAIT_S = 90
REFERENCE_OPTIONS = ("BatchMode=yes", "ConnectTimeout=20", "ConnectionAttempts=1", "ServerAliveInterval=5",
                     "ServerAliveCountMax=3", "GSSAPIAuthentication=no")
"""Every wait of ``ssh`` bounded: the connect and the banner (ConnectTimeout), a session that stops
answering (ServerAlive*); no Kerberos (the system's ``Host *`` turns GSSAPI on, and its name lookups can
wait on a DNS server the test hosts cannot reach). None of them changes where ``ssh`` lands."""


def _start_reference(case: dict, logs: Path) -> subprocess.Popen:
    """OpenSSH's ``ssh`` on the same files, the workload's user/port/jump given as a user would type them.

    Its output goes to files, not pipes: what it starts (a ProxyCommand relay, a ProxyJump hop) may hold
    a pipe open after ``ssh`` has exited, and reading a pipe to its end would wait for those. It runs in a
    session of its own, so whatever it leaves is ended with it (:func:`_reference_result`)."""
    ssh = case.get("ssh", {})
    args = [shutil.which("ssh") or "/usr/bin/ssh"]
    for option in REFERENCE_OPTIONS:
        args += ["-o", option]
    args += ["-l", ssh["user"]] if "user" in ssh else []
    args += ["-p", str(ssh["port"])] if "port" in ssh else []
    args += ["-J", ssh["proxy_jump"]] if "proxy_jump" in ssh else []
    with open(logs / "out", "w") as out, open(logs / "err", "w") as err:
        return subprocess.Popen([*args, case["target"], PROBE], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _reference_result(proc: subprocess.Popen, logs: Path, started: float) -> dict:
    import signal

    try:
        proc.wait(timeout=REFERENCE_WAIT_S)
        timed_out = ""
    except subprocess.TimeoutExpired:
        timed_out = f"ssh did not end within {REFERENCE_WAIT_S} s; "
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # ssh, if it still runs, and whatever it started
    except ProcessLookupError:
        pass
    proc.wait()
    stdout, stderr = (logs / "out").read_text(errors="replace"), (logs / "err").read_text(errors="replace")
    return {"ok": proc.returncode == 0 and not timed_out, "out": stdout.split(),
            "message": timed_out + stderr.strip()[-300:], "seconds": round(time.monotonic() - started, 3)}


def main() -> None:
    request = json.load(sys.stdin)
    home = Path.home()
    agent_sock = home / ".ssh" / "agent.sock"
    agent_sock.unlink(missing_ok=True)
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(agent_sock)], stdout=subprocess.DEVNULL)
    logs = home / ".reference-ssh"  # its output, per case (see _start_reference)
    logs.mkdir(exist_ok=True)
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
                reference = _start_reference(case, logs) if together else None
                result = {"ours": asyncio.run(_ours(case))}
                result["ours"]["seconds"] = round(time.monotonic() - started, 3)
                scratch = home / ".ssh" / "kh_scratch"
                result["ours"]["kh_scratch"] = scratch.read_text() if scratch.exists() else ""
                if reference is not None:
                    result["ssh"] = _reference_result(reference, logs, started)
                elif request["reference"]:
                    if case.get("action") != "trust":  # after a trust, ssh must accept what was written
                        _reset(home, request["files"], case)
                    started = time.monotonic()
                    result["ssh"] = _reference_result(_start_reference(case, logs), logs, started)
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
