"""Test hosts: one real sshd per loopback address (127.0.0.2, 127.0.0.3, ...), each with its own host key,
and a client HOME with ~/.ssh/config aliases, a client key and known_hosts, as a user would have."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass
class TestHost:
    alias: str
    addr: str
    port: int
    host_key: Path
    proc: subprocess.Popen

    def known_hosts_line(self) -> str:
        return f"[{self.addr}]:{self.port} {Path(str(self.host_key) + '.pub').read_text().split()[0]} " \
               f"{Path(str(self.host_key) + '.pub').read_text().split()[1]}"

    def connection_pids(self) -> list[int]:
        """sshd processes serving connections (children of the listener), not the listener itself."""
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def start_hosts(tmp: Path, count: int) -> tuple[Path, list[TestHost]]:
    """Start ``count`` sshd hosts; returns the client HOME (with .ssh/config and known_hosts) and them."""
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        raise RuntimeError("openssh-server is not installed (apt-get install openssh-server)")
    Path("/run/sshd").mkdir(exist_ok=True)
    client = tmp / "client-home"
    (client / ".ssh").mkdir(parents=True, mode=0o700)
    keygen(client / ".ssh" / "id_ed25519")
    authorized = tmp / "authorized_keys"
    authorized.write_text((client / ".ssh" / "id_ed25519.pub").read_text())
    hosts, config = [], []
    for i in range(count):
        addr = f"127.0.0.{i + 2}"
        port = _free_port(addr)
        key = tmp / f"host{i}_ed25519"
        keygen(key)
        conf = tmp / f"sshd{i}.conf"
        conf.write_text(f"""Port {port}
ListenAddress {addr}
HostKey {key}
AuthorizedKeysFile {authorized}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
PidFile {tmp}/sshd{i}.pid
Subsystem sftp internal-sftp
MaxStartups 100
MaxSessions 50
LogLevel ERROR
""")
        with open(tmp / f"sshd{i}.log", "w") as log:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(conf)], stderr=log)
        hosts.append(TestHost(f"node{i}", addr, port, key, proc))
        config.append(f"Host node{i}\n  HostName {addr}\n  Port {port}\n  User root\n"
                      f"  IdentityFile {client / '.ssh' / 'id_ed25519'}\n")
    (client / ".ssh" / "config").write_text("\n".join(config))
    (client / ".ssh" / "known_hosts").write_text("".join(h.known_hosts_line() + "\n" for h in hosts))
    for h in hosts:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((h.addr, h.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or h.proc.poll() is not None:
                    raise RuntimeError(f"sshd on {h.addr}:{h.port} did not start: "
                                       f"{(tmp / f'sshd{hosts.index(h)}.log').read_text()[-500:]}") from None
                time.sleep(0.05)
    return client, hosts


def stop_hosts(hosts: list[TestHost]) -> None:
    for h in hosts:
        h.proc.terminate()
        try:
            h.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            h.proc.kill()
