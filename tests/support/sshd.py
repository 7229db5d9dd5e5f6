"""Test hosts: one real sshd per host, each with its own host key, and a client HOME with ~/.ssh/config
aliases, a client key and known_hosts, as a user would have.

A host is a loopback address (127.0.0.2, 127.0.0.3, ...) or, with ``netns=True``, a network namespace of
its own (its own interfaces, routes and ports), joined to the others and to this machine by a bridge on a
private subnet, as machines on one switch are."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import send
from tests.support.switches import Switch, make_switch

SSHD = "/usr/sbin/sshd"


@dataclass
class TestHost:
    alias: str
    addr: str
    port: int
    host_key: Path
    proc: subprocess.Popen
    netns: str | None = None
    switch: Switch | None = None
    home: Path | None = None
    """The login's home on this host (sshd sets HOME there): tests never touch the real home."""
    conf: Path | None = None
    disk: Path | None = None
    """With private disks: this host's own folder, bind-mounted over ``home`` in the host's own mount
    namespace (what it writes under its home no other host sees; the test reads it here)."""
    bin: Path | None = None
    """With host bins: a folder first on this host's sessions' PATH, empty until a test puts a program
    there (a stand-in ``nvidia-smi`` on one host only)."""

    def restart(self) -> None:
        """Start this host's sshd again (after a test killed it), with the same keys, address and disk."""
        with open(str(self.conf) + ".log", "a") as log:
            self.proc = subprocess.Popen(_sshd_argv(self.netns, self.conf, self.disk, self.home), stderr=log)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((self.addr, self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def known_hosts_line(self) -> str:
        name = self.addr if self.port == 22 else f"[{self.addr}]:{self.port}"
        key_type, key = Path(str(self.host_key) + ".pub").read_text().split()[:2]
        return f"{name} {key_type} {key}"

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


NS_PORT = 22
"""sshd's port in a namespace host: the namespace is the host's own, nothing else listens there."""
def make_client_home(tmp: Path) -> tuple[Path, Path]:
    """A client HOME (``tmp/client-home``) with ~/.ssh and a key; returns it and an authorized_keys file
    holding that key, for the servers."""
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        raise RuntimeError("openssh-server is not installed (apt-get install openssh-server)")
    Path("/run/sshd").mkdir(exist_ok=True)
    client = tmp / "client-home"
    (client / ".ssh").mkdir(parents=True, mode=0o700)
    keygen(client / ".ssh" / "id_ed25519")
    authorized = tmp / "authorized_keys"
    authorized.write_text((client / ".ssh" / "id_ed25519.pub").read_text())
    return client, authorized


def sshd_config(addr: str, port: int, host_key: Path, authorized: Path, pid_file: Path, *, sftp: bool = True,
                env: dict[str, str] | None = None) -> str:
    """An sshd_config for a test host: key login as root only; ``env`` is set in every session."""
    setenv = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    return f"""Port {port}
ListenAddress {addr}
HostKey {host_key}
AuthorizedKeysFile {authorized}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
PidFile {pid_file}
{"Subsystem sftp internal-sftp" if sftp else ""}
MaxStartups 100
MaxSessions 50
LogLevel ERROR
{f"SetEnv {setenv}" if setenv else ""}
"""


def ssh_config_entry(alias: str, addr: str, port: int, client: Path, *, known_hosts_file: bool = False) -> str:
    """The client's ~/.ssh/config entry naming a test host. ``known_hosts_file``: name the client HOME's
    known_hosts too, for the ``ssh`` binary (it finds ~ from the passwd entry, not from ``$HOME``)."""
    known = f"  UserKnownHostsFile {client / '.ssh' / 'known_hosts'}\n" if known_hosts_file else ""
    return (f"Host {alias}\n  HostName {addr}\n  Port {port}\n  User root\n"
            f"  IdentityFile {client / '.ssh' / 'id_ed25519'}\n{known}")


def _sshd_argv(netns: str | None, conf: Path, disk: Path | None, home: Path | None) -> list[str]:
    """sshd in the host's network namespace; with ``disk``, in a mount namespace of its own too, where
    ``disk`` is bind-mounted over ``home`` (``ip netns exec`` makes a mount namespace whose mounts stay
    there; a loopback host gets one from ``unshare``)."""
    enter = ["ip", "netns", "exec", netns] if netns else []
    if disk is None:
        return [*enter, SSHD, "-D", "-e", "-f", str(conf)]
    if not netns:
        enter = ["unshare", "--mount", "--propagation", "private"]
    return [*enter, "sh", "-c", f'mount --bind "{disk}" "{home}" && exec {SSHD} -D -e -f "{conf}"']


SESSION_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def start_hosts(tmp: Path, count: int, netns: bool = False, sftp: bool = True,
                shared_key: bool = False, private_disks: bool = False,
                host_bins: bool = False) -> tuple[Path, list[TestHost]]:
    """Start ``count`` sshd hosts; returns the client HOME (with .ssh/config and known_hosts) and them.
    ``sftp=False``: hosts without an SFTP subsystem, as some hardened servers are. ``shared_key``: one host
    key for every host (each known under its own address), for tests that do not care whose key is whose:
    16-64 hosts start without a key generated each. ``private_disks``: every host's home is a folder of its
    own (``TestHost.disk``), as machines without a shared filesystem have. ``host_bins``: every host's
    sessions find programs in a folder of its own first (``TestHost.bin``). The sshds start all at once and
    are waited for together."""
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        raise RuntimeError("openssh-server is not installed (apt-get install openssh-server)")
    switch = make_switch(count) if netns else None
    try:
        client, authorized = make_client_home(tmp)
        keys = _host_keys(tmp, count, shared_key)
    except BaseException:
        if switch is not None:
            switch.remove()
        raise
    remote_home = tmp / "remote-home"  # one home for every host, as an NFS-mounted home would be
    remote_home.mkdir()
    hosts, config = [], []
    for i in range(count):
        ns = switch.namespaces[i] if switch else None
        addr = switch.addrs[i] if switch else f"127.0.0.{i + 2}"
        port = NS_PORT if switch else _free_port(addr)
        conf = tmp / f"sshd{i}.conf"
        bin_dir = None
        env = {"HOME": str(remote_home)}
        if host_bins:
            bin_dir = tmp / f"bin{i}"
            bin_dir.mkdir()
            env["PATH"] = f"{bin_dir}:{SESSION_PATH}"
        conf.write_text(sshd_config(addr, port, keys[i], authorized, tmp / f"sshd{i}.pid", sftp=sftp, env=env))
        disk = None
        if private_disks:
            disk = tmp / f"disk{i}"
            disk.mkdir()
        with open(str(conf) + ".log", "w") as log:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(_sshd_argv(ns, conf, disk, remote_home), stderr=log)  # it execs sshd
        hosts.append(TestHost(f"node{i}", addr, port, keys[i], proc, ns, switch, remote_home, conf, disk, bin_dir))
        config.append(ssh_config_entry(f"node{i}", addr, port, client))
    (client / ".ssh" / "config").write_text("\n".join(config))
    (client / ".ssh" / "known_hosts").write_text("".join(h.known_hosts_line() + "\n" for h in hosts))
    waiting = list(hosts)
    deadline = time.monotonic() + 10 + count * 0.25  # many sshds starting at once share the cores
    while waiting:
        for h in list(waiting):
            try:
                socket.create_connection((h.addr, h.port), timeout=1).close()
                waiting.remove(h)
            except OSError:
                if time.monotonic() > deadline or h.proc.poll() is not None:
                    stop_hosts(hosts)
                    raise RuntimeError(f"sshd on {h.addr}:{h.port} did not start: "
                                       f"{Path(str(h.conf) + '.log').read_text()[-500:]}") from None
        if waiting:
            time.sleep(0.05)
    return client, hosts


def _host_keys(tmp: Path, count: int, shared: bool) -> list[Path]:
    """A host key per host (generated side by side), or one for all of them."""
    paths = [tmp / "host_ed25519"] * count if shared else [tmp / f"host{i}_ed25519" for i in range(count)]
    gens = [subprocess.Popen(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)])
            for path in dict.fromkeys(paths)]
    if any(g.wait() != 0 for g in gens):
        raise RuntimeError("ssh-keygen failed to make a host key")
    return paths


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (its children, theirs...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_hosts(hosts: list[TestHost]) -> None:
    """Every sshd (SIGTERM to all, then each waited for) and every session it still serves (its children
    outlive it), then the switch: nothing is left behind."""
    sessions = [pid for h in hosts if h.proc.poll() is None for pid in descendants(h.proc.pid)]
    for h in hosts:
        h.proc.terminate()
    send(sessions)
    for h in hosts:
        try:
            h.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            h.proc.kill()
            h.proc.wait()
    if hosts and hosts[0].switch is not None:
        hosts[0].switch.remove()


@dataclass
class SshWorld:
    """Namespace hosts for reading ssh_config as OpenSSH does: two hosts (``a``, ``b``), each with several
    sshds, a second user ``alice``, a certificate-only sshd and one sshd reachable only through a jump."""

    client: Path
    """The client's ~ (``.ssh`` with keys, certificates, known_hosts files)."""
    a: str
    b: str
    sshds: dict[str, TestHost]
    files: dict[str, str]
    """Client files (relative to ``client``) and their contents, rewritten before each case."""
    switch: Switch
    known: dict[str, str]
    """Each sshd's known_hosts line, by name."""

    shared: Path | None = None

    def stop(self) -> None:
        stop_hosts(list(self.sshds.values()))
        self.switch.remove()
        if self.shared is not None:
            shutil.rmtree(self.shared, ignore_errors=True)


def _host_key(tmp: Path, name: str) -> tuple[Path, str]:
    key = tmp / f"hostkey-{name}"
    keygen(key)
    return key, " ".join(Path(str(key) + ".pub").read_text().split()[:2])


def start_world(tmp: Path) -> SshWorld:
    """Build the hosts once: on ``a``: :22, :2222 and :2022 on its own loopback (reached only through a
    jump via ``a``); on ``b``: :22, :2200 (user certificates only) and :2222 (its key only in the extra
    known-hosts file). Users root and alice (uid 4242, through a passwd file bind-mounted for the sshds).
    RuntimeError where namespaces or sshd are not available."""
    client, _ = make_client_home(tmp)
    switch = make_switch(2, name="sshw", subnet="10.249")
    a, b = switch.addrs
    ssh_dir = client / ".ssh"
    for name in ("agentkey", "alicekey", "certkey"):
        keygen(ssh_dir / name)
    keygen(tmp / "user-ca")
    subprocess.run(["ssh-keygen", "-q", "-s", str(tmp / "user-ca"), "-I", "conformance", "-n", "root",
                    str(ssh_dir / "certkey.pub")], check=True)
    pub = {n: (ssh_dir / f"{n}.pub").read_text() for n in ("id_ed25519", "agentkey", "alicekey")}
    # sshd reads a user's keys as that user: alice's must lie where she can reach them (not under pytest's
    # 0700 folders); removed by ``stop``.
    shared = Path(tempfile.mkdtemp(prefix="fsdp-sshworld-"))
    shared.chmod(0o755)
    keys = shared / "authorized"
    keys.mkdir()
    keys.chmod(0o755)  # modes set outright: the process umask may be owner-only (the data dir's)
    (keys / "root").write_text(pub["id_ed25519"] + pub["agentkey"])
    (keys / "alice").write_text(pub["agentkey"] + pub["alicekey"])
    for user in ("root", "alice"):
        (keys / user).chmod(0o644)
    alice_home = shared / "alice-home"
    alice_home.mkdir()
    os.chown(alice_home, 4242, 4242)
    passwd, group = tmp / "passwd", tmp / "group"
    passwd.write_text(Path("/etc/passwd").read_text() + f"alice:x:4242:4242::{alice_home}:/bin/sh\n")
    group.write_text(Path("/etc/group").read_text() + "alice:x:4242:\n")
    passwd.chmod(0o644)
    group.chmod(0o644)  # every user reads them, alice's shell too
    layout = {"a22": (0, a, 22, ""), "a2222": (0, a, 2222, ""), "inner": (0, "127.0.0.1", 2022, ""),
              "b22": (1, b, 22, ""), "b2222": (1, b, 2222, ""),
              "b2200": (1, b, 2200, f"TrustedUserCAKeys {tmp / 'user-ca.pub'}\nAuthorizedPrincipalsFile none\n")}
    sshds: dict[str, TestHost] = {}
    known: dict[str, str] = {}
    try:
        for name, (ns_i, addr, port, extra) in layout.items():
            key, line = _host_key(tmp, name)
            known[name] = f"{addr if port == 22 else f'[{addr}]:{port}'} {line}"
            conf = tmp / f"sshd-{name}.conf"
            text = sshd_config(addr, port, key, keys / "%u", tmp / f"sshd-{name}.pid", env={"HOME": str(alice_home)})
            if extra:
                text = text.replace(f"AuthorizedKeysFile {keys / '%u'}", "AuthorizedKeysFile none") + extra
            conf.write_text(text.replace("PermitRootLogin prohibit-password", "PermitRootLogin prohibit-password\n"
                                         "AllowUsers root alice"))
            ns = switch.namespaces[ns_i]
            with open(str(conf) + ".log", "w") as log:
                proc = subprocess.Popen(
                    ["ip", "netns", "exec", ns, "sh", "-c", f'mount --bind "{passwd}" /etc/passwd && '
                     f'mount --bind "{group}" /etc/group && exec {SSHD} -D -e -f "{conf}"'], stderr=log)
            sshds[name] = TestHost(name, addr, port, key, proc, ns, switch, None, conf)
        for host in sshds.values():
            _wait_listening(host)
    except BaseException:
        stop_hosts(list(sshds.values()))
        switch.remove()
        shutil.rmtree(shared, ignore_errors=True)
        raise
    files = {".ssh/known_hosts": "".join(known[n] + "\n" for n in ("a22", "a2222", "inner", "b22", "b2200"))
             + f"bee {known['b2222'].split(' ', 1)[1]}\n",
             ".ssh/kh_extra": known["b2222"] + "\n"}
    return SshWorld(client, a, b, sshds, files, switch, known, shared)


def _wait_listening(host: TestHost) -> None:
    """Poll until the sshd accepts connections (inside its namespace: some listen on its loopback)."""
    deadline = time.monotonic() + 15
    probe = f"import socket; socket.create_connection(('{host.addr}', {host.port}), timeout=1).close()"
    while True:
        done = subprocess.run(["ip", "netns", "exec", host.netns, "python3", "-c", probe], capture_output=True)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline or host.proc.poll() is not None:
            raise RuntimeError(f"sshd {host.alias} on {host.addr}:{host.port} did not start: "
                               f"{Path(str(host.conf) + '.log').read_text()[-500:]}")
        time.sleep(0.05)
