"""A real SLURM cluster for tests: munged, slurmctld, one slurmd per compute node, and a login node
reached over SSH, all on this machine.

Each compute node is a network namespace of its own on a bridge (10.252.N.0/24, apart from sshd.py's
10.251.N.0/24), with its own hostname (``fsl-n0``, ``fsl-n1``, ...) and a hosts file bind-mounted over
/etc/hosts in its own mount namespace, so that node names resolve inside jobs. slurmctld runs on this
machine's side of the bridge (``fsl-ctl``, the bridge's address). The login node is an sshd inside node 0's
namespaces: the client HOME's ~/.ssh/config names it ``login``; every session there gets ``SLURM_CONF``.
All of them share this machine's filesystem and /proc, so ``job_dir`` is seen alike everywhere.

Debian bookworm's Slurm 22.05 (``apt-get install --no-install-recommends slurmctld slurmd slurm-client
munge``; ``.ci/run`` installs them). No accounting: ``sacct`` exits 1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.processes import namespace_pids, send
from tests.support.sshd import (
    NS_PORT,
    SSHD,
    TestHost,
    keygen,
    make_client_home,
    ssh_config_entry,
    sshd_config,
)
from tests.support.switches import Switch, make_switch

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "nsenter", "unshare")
PARTITION = "debug"
SHORT_PARTITION = "short"
SHORT_MAX_TIME = 5
"""A second partition on the same nodes whose MaxTime (minutes) a long job exceeds."""
CTL_NAME = "fsl-ctl"
CTL_PORT = 6817
"""slurmctld's port (Slurm's default), on the bridge's address only (NoCtldInAddrAny)."""
SUBNET = "10.252"


@dataclass
class Cluster:
    root: Path
    """Everything the cluster keeps: config, logs, state, spool, munge."""
    conf: Path
    """slurm.conf: give it to slurm commands as ``SLURM_CONF``."""
    job_dir: Path
    """A folder every node and the login see alike (for scripts and job output)."""
    client_home: Path
    """A HOME with ~/.ssh/config naming the login node ``login_alias``, a key and known_hosts."""
    login_home: Path
    """HOME on the login node."""
    node_names: list[str]
    node_addrs: list[str]
    switch: Switch
    partition: str = PARTITION
    short_partition: str = SHORT_PARTITION
    """Same nodes, MaxTime=``SHORT_MAX_TIME`` minutes."""
    login_alias: str = "login"
    login: TestHost | None = None
    munge_dir: Path | None = None
    """munged's socket, key and pid file (under /run: see _bring_up)."""
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    """Every daemon started, by name: munged, slurmctld, slurmd-NODE, sshd-login."""

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment with ``SLURM_CONF``: slurm commands run here act on this cluster
        (as fsdp-tui running on a login node would)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SQUEUE_"))}
        env.update(SLURM_CONF=str(self.conf), **extra)
        return env

    def run(self, argv: list[str], *, timeout: float = 30, check: bool = True,
            **kw) -> subprocess.CompletedProcess:
        """Run a slurm command here against this cluster; text output captured."""
        return subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=timeout, check=check,
                              **kw)

    def ssh_argv(self, *command: str) -> list[str]:
        """``ssh`` to the login node with the client's config (run it with ``ssh_env()``)."""
        return ["ssh", "-F", str(self.client_home / ".ssh" / "config"), "-o", "BatchMode=yes",
                self.login_alias, *command]

    def ssh_env(self) -> dict[str, str]:
        return {**os.environ, "HOME": str(self.client_home)}

    def node_states(self) -> dict[str, str]:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False).stdout
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def jobs(self, states: str = "all") -> dict[str, str]:
        """Job id -> state (``squeue -t STATES``; finished jobs stay listed for MinJobAge)."""
        out = self.run(["squeue", "-h", "-t", states, "-o", "%i %T"], check=False).stdout
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def wait_idle(self, timeout: float = 30) -> None:
        """Until every node is idle and no job is pending, running or completing."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            busy = self.jobs("pending,running,completing,configuring,suspended")
            if not busy and len(states) == len(self.node_names) and set(states.values()) == {"idle"}:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster not idle after {timeout}s: nodes {states}, jobs {busy}")
            time.sleep(0.05)

    def job_pids(self, job_id: str | int) -> list[int]:
        """Live processes of this cluster whose environment has SLURM_JOB_ID=job_id. Only this cluster's: every
        test cluster numbers its jobs from 1, and another worker's cluster may run a job of the same number."""
        needle = f"SLURM_JOB_ID={job_id}".encode()
        found = []
        for pid in self.pids():
            entry = Path(f"/proc/{pid}")
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    if (entry / "stat").read_text().rsplit(") ", 1)[1][0] != "Z":
                        found.append(pid)
            except OSError:
                continue
        return found

    def pids(self) -> list[int]:
        """Live processes this cluster started: its daemons and everything in its nodes' namespaces."""
        pids = {p.pid for p in self.procs.values() if p.poll() is None}
        for ns in self.switch.namespaces:
            pids.update(namespace_pids(ns))
        return sorted(pids)


def _missing() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not os.path.exists(f"/usr/sbin/{b}")]


def _which(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _slurm_conf(root: Path, munge: Path, ctl_addr: str, names: list[str], addrs: list[str], cpus: int) -> str:
    nodes = "\n".join(f"NodeName={n} NodeAddr={a} CPUs={cpus} RealMemory=500 State=UNKNOWN"
                      for n, a in zip(names, addrs, strict=True))
    return f"""ClusterName=fsdptest
SlurmctldHost={CTL_NAME}({ctl_addr})
SlurmctldPort={CTL_PORT}
CommunicationParameters=NoCtldInAddrAny
AuthType=auth/munge
AuthInfo=socket={munge}/munge.socket.2
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={munge}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
ReturnToService=2
KillWait=2
OverTimeLimit=0
MinJobAge=300
InactiveLimit=0
{nodes}
PartitionName={PARTITION} Nodes={",".join(names)} Default=YES MaxTime=INFINITE State=UP
PartitionName={SHORT_PARTITION} Nodes={",".join(names)} Default=NO MaxTime={SHORT_MAX_TIME} State=UP
"""


def _in_node(ns: str, hosts: Path, hostname: str, argv: list[str]) -> list[str]:
    """argv run in network namespace ``ns`` (None: this machine's) with a UTS and mount namespace of its
    own: its hostname, and ``hosts`` over /etc/hosts (unshare makes the mount private: the host never sees it)."""
    enter = ["nsenter", f"--net=/run/netns/{ns}"] if ns else []
    script = 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"'
    return [*enter, "unshare", "--uts", "--mount", "sh", "-c", script, str(hosts), hostname, *argv]


def _daemon(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as err:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-800:]
    except OSError:
        return ""


def _wait(what: str, ok, proc: subprocess.Popen | None, log: Path, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}): {_tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not up after {timeout}s: {_tail(log)}")
        time.sleep(0.03)


def _port_open(addr: str, port: int) -> bool:
    try:
        socket.create_connection((addr, port), timeout=0.5).close()
        return True
    except OSError:
        return False


def start_cluster(tmp_path: Path, *, nodes: int = 2) -> Cluster:
    """Bring the cluster up (~1 s); RuntimeError with the reason when this machine cannot (slurm not
    installed, not root, no network namespaces). A failure half-way stops what was started."""
    if missing := _missing():
        raise RuntimeError(f"slurm is not installed (missing {', '.join(missing)}): apt-get install "
                           "--no-install-recommends slurmctld slurmd slurm-client munge")
    if os.geteuid() != 0:
        raise RuntimeError("a test slurm cluster needs root (namespaces, mounts, daemons)")
    switch = make_switch(nodes, name="fsl", subnet=SUBNET)  # a free /24 of its own; RuntimeError if not allowed
    root = tmp_path / "slurm"
    names = [f"fsl-n{i}" for i in range(nodes)]
    cluster = Cluster(root=root, conf=root / "slurm.conf", job_dir=tmp_path / "jobs",
                      client_home=tmp_path / "client-home", login_home=tmp_path / "login-home",
                      node_names=names, node_addrs=list(switch.addrs), switch=switch)
    try:
        _bring_up(cluster, tmp_path)
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def _bring_up(c: Cluster, tmp_path: Path) -> None:
    root = c.root
    for d in (root / "state", c.job_dir, c.login_home):
        d.mkdir(parents=True, exist_ok=True)
    c.job_dir.chmod(0o777)
    hosts = root / "hosts"
    hosts.write_text("127.0.0.1 localhost\n::1 localhost\n" + f"{c.switch.gateway} {CTL_NAME}\n"
                     + "".join(f"{a} {n}\n" for n, a in zip(c.node_names, c.node_addrs, strict=True)))

    # munged: "Socket is inaccessible" unless the socket's folder is 0755 and every folder above it
    # o+x; pytest's tmp_path root is 0700, so the socket lives in /run (a short path, too: sockets <108 chars).
    munge = c.munge_dir = Path(tempfile.mkdtemp(prefix="fsl-munge-", dir="/run"))
    munge.chmod(0o755)
    # slurmd's spool holds the job steps' sockets (``<spool>/<node>_<job>.<step>``, 108 chars at most): a
    # pytest-xdist worker's tmp_path is too long for them, so the spool lives beside munge's socket.
    for n in c.node_names:
        (munge / "spool" / n).mkdir(parents=True)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = munge / "munge.socket.2"
    log = root / "munged.log"
    c.procs["munged"] = _daemon([_which("munged"), "-F", f"--socket={socket_path}", f"--key-file={key}",
                                 f"--pid-file={munge}/munged.pid", f"--log-file={log}",
                                 f"--seed-file={munge}/munged.seed"], root / "munged.err")
    _wait("munged", socket_path.exists, c.procs["munged"], root / "munged.err")

    c.conf.write_text(_slurm_conf(root, munge, c.switch.gateway, c.node_names, c.node_addrs, os.cpu_count() or 1))
    slurmctld = [_which("slurmctld"), "-D", "-f", str(c.conf)]
    c.procs["slurmctld"] = _daemon(_in_node(None, hosts, CTL_NAME, slurmctld), root / "slurmctld.err")
    _wait("slurmctld", lambda: _port_open(c.switch.gateway, CTL_PORT), c.procs["slurmctld"],
          root / "slurmctld.log")

    slurmd = [_which("slurmd"), "-D", "-f", str(c.conf)]
    for n, ns in zip(c.node_names, c.switch.namespaces, strict=True):
        c.procs[f"slurmd-{n}"] = _daemon(_in_node(ns, hosts, n, slurmd), root / f"slurmd-{n}.err")

    # The login node: an sshd in node 0's namespaces (its hostname, its /etc/hosts, its address).
    client, authorized = make_client_home(tmp_path)
    host_key = root / "login_ed25519"
    keygen(host_key)
    sshd_conf = root / "sshd-login.conf"
    sshd_conf.write_text(sshd_config(c.node_addrs[0], NS_PORT, host_key, authorized, root / "sshd-login.pid",
                                     env={"HOME": str(c.login_home), "SLURM_CONF": str(c.conf)}))

    def nodes_idle() -> bool:
        for n in c.node_names:
            if c.procs[f"slurmd-{n}"].poll() is not None:
                tail = "\n".join(_tail(root / f"slurmd-{n}{ext}") for ext in (".err", ".log"))
                raise RuntimeError(f"slurmd on {n} exited: {tail}")
        states = c.node_states()
        return len(states) == len(c.node_names) and set(states.values()) == {"idle"}

    _wait("slurmd", nodes_idle, None, root / f"slurmd-{c.node_names[0]}.log")

    node0 = c.procs[f"slurmd-{c.node_names[0]}"].pid  # nsenter, unshare and sh exec'd: this is slurmd
    sshd = ["nsenter", "-t", str(node0), "--net", "--uts", "--mount", SSHD, "-D", "-e", "-f", str(sshd_conf)]
    c.procs["sshd-login"] = _daemon(sshd, root / "sshd-login.log")
    c.login = TestHost(c.login_alias, c.node_addrs[0], NS_PORT, host_key, c.procs["sshd-login"], None, c.switch,
                       c.login_home, sshd_conf)
    (client / ".ssh" / "config").write_text(ssh_config_entry(c.login_alias, c.node_addrs[0], NS_PORT, client,
                                                             known_hosts_file=True))
    (client / ".ssh" / "known_hosts").write_text(c.login.known_hosts_line() + "\n")
    _wait("sshd on the login node", lambda: _port_open(c.node_addrs[0], NS_PORT), c.procs["sshd-login"],
          root / "sshd-login.log")


def stop_cluster(cluster: Cluster, timeout: float = 5) -> None:
    """Cancel what is left in the queue, stop every daemon, kill every process left in the nodes'
    namespaces (job steps included), remove the namespaces and the bridge. Safe on a half-built cluster."""
    c = cluster
    ctl = c.procs.get("slurmctld")
    if ctl is not None and ctl.poll() is None and c.conf.exists():
        try:
            live = c.jobs("pending,running,suspended,configuring")
            if live:
                c.run(["scancel", *live], check=False, timeout=10)
                deadline = time.monotonic() + timeout
                while c.jobs("running,completing,configuring") and time.monotonic() < deadline:
                    time.sleep(0.05)
        except (OSError, subprocess.SubprocessError):
            pass
    order = ["sshd-login", *[k for k in c.procs if k.startswith("slurmd-")], "slurmctld", "munged"]
    for name in order:
        p = c.procs.get(name)
        if p is not None and p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + timeout
    for name in order:
        p = c.procs.get(name)
        if p is None:
            continue
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    # slurmstepd and job processes outlive slurmd: everything still in a node's namespace goes.
    for _ in range(50):
        left = [pid for pid in c.pids() if pid != os.getpid()]
        if not left:
            break
        send(left)
        time.sleep(0.05)
    c.switch.remove()
    if c.munge_dir is not None:
        shutil.rmtree(c.munge_dir, ignore_errors=True)
