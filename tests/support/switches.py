"""Test switches: a bridge on this machine and one network namespace per host, each host with an address on
the bridge's private /24, as machines on one switch are (tests/support/sshd.py's hosts, the SLURM test
cluster's nodes).

Every claim and removal of a switch is noted in a ledger shared by the suite's processes
(``/run/fsdp-tui-switches/ledger.log``: time, pid, what, bridge, test), and each name's switches take their
numbers in turn from a counter kept there: a number comes back only after every other one was used, so a
process that still held an address of a switch removed before cannot reach the next switch under that
number. A switch that another process claimed or removed while it lived fails its removal, naming who."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.processes import namespace_pids, send

LEDGER = Path("/run/fsdp-tui-switches")
"""The ledger (``ledger.log``) and each name's counter (``NAME.next``); root's, as namespaces are."""

NS_IFACE = "eth0"
"""The namespace host's interface, as a machine's (e.g. for ``GLOO_SOCKET_IFNAME``)."""


@dataclass
class Switch:
    """A bridge on this machine and one namespace per host, each with an address on the bridge's subnet."""

    bridge: str
    namespaces: list[str]
    addrs: list[str]
    gateway: str = ""
    """The bridge's own address: this machine, as the hosts on the switch reach it."""
    claimed_at: float = field(default=0.0, compare=False)
    """When this process claimed it (the ledger's clock); 0 for one it did not claim."""

    def remove(self) -> None:
        """Every veth (its peer goes with it), namespace and the bridge, in one ``ip -force -batch``: what is
        already gone is skipped, the rest still removed. RuntimeError, after the removal, when the ledger
        says another process claimed or removed this switch while this one held it."""
        kill_namespace_processes(self.namespaces)
        lines = [f"link del {self.veth(i)}" for i in range(len(self.namespaces))]
        lines += [f"netns del {ns}" for ns in self.namespaces] + [f"link del {self.bridge}"]
        foreign = meddlers(self.bridge, self.claimed_at) if self.claimed_at else []
        note("remove", self.bridge)
        subprocess.run(["ip", "-force", "-batch", "-"], input="\n".join(lines) + "\n", capture_output=True,
                       text=True)
        if foreign:
            raise RuntimeError(f"switch {self.bridge} ({self.gateway}/24) was touched by another process while "
                               f"this one (pid {os.getpid()}) held it: " + "; ".join(foreign))

    def veth(self, i: int) -> str:
        """The bridge's end of host ``i``'s link (the other end is that namespace's eth0)."""
        return f"{self.bridge.replace('br', 'v', 1)}-{i}"


def kill_namespace_processes(namespaces: list[str]) -> list[int]:
    """Every process still running in ``namespaces`` (a session's shell, an agent uploading into a host a
    test cut off: sshd's children outlive its listener), killed; the pids it found."""
    pids = [pid for ns in namespaces for pid in namespace_pids(ns)]
    send(pids)
    return pids


def make_switch(count: int, *, name: str = "fsdp", subnet: str = "10.251", tag: int | None = None) -> Switch:
    """``count`` namespaces on a private /24 (``subnet``.N.0), named after ``name``; RuntimeError if the
    machine does not allow it (no ``ip``, no CAP_NET_ADMIN). Without ``tag``, N is the first one from the
    name's counter on whose bridge nobody holds: creating the bridge is the claim, so tests running side by
    side (pytest-xdist workers, several clusters) never share or remove each other's switch, and a number
    comes back only after the others were used. With ``tag``, whatever a killed run left under that tag is
    removed first."""
    if shutil.which("ip") is None:
        raise RuntimeError("iproute2 is not installed (apt-get install iproute2)")
    if not 1 <= count <= 253:
        raise ValueError(f"a switch holds 1 to 253 hosts (.2 to .254 of its /24), not {count}")
    if tag is not None:
        _switch(count, name, subnet, tag).remove()  # what a killed run may have left
        note("claim", _switch(count, name, subnet, tag).bridge)
        return _bring_up_switch(_switch(count, name, subnet, tag))
    start = _next_number(name)
    for i in range(250):
        candidate = (start + i) % 250
        if os.path.exists(f"/run/netns/{name}-{candidate}-0"):
            continue
        switch = _switch(count, name, subnet, candidate)
        claim = subprocess.run(["ip", "link", "add", switch.bridge, "type", "bridge"], capture_output=True, text=True)
        if claim.returncode == 0:
            switch.claimed_at = note("claim", switch.bridge)
            return _bring_up_switch(switch, claimed=True)
        if "exists" not in claim.stderr:
            raise RuntimeError(f"network namespaces are not available here: ip link add {switch.bridge} type "
                               f"bridge: {claim.stderr.strip()}")
    raise RuntimeError(f"no free bridge name for {name} test hosts (250 in use)")


def _switch(count: int, name: str, subnet: str, tag: int) -> Switch:
    return Switch(f"{name}br{tag}", [f"{name}-{tag}-{i}" for i in range(count)],
                  [f"{subnet}.{tag}.{i + 2}" for i in range(count)], f"{subnet}.{tag}.1")


def _bring_up_switch(switch: Switch, claimed: bool = False) -> Switch:
    """The bridge, every namespace and its veth in one ``ip -batch`` here, then each namespace's own side
    (address, links up) in one ``ip -n NS -batch`` per namespace, all at once: 64 hosts take a few dozen
    ``ip`` processes, not hundreds one after the other."""
    here = [] if claimed else [f"link add {switch.bridge} type bridge"]
    here += [f"addr add {switch.gateway}/24 dev {switch.bridge}", f"link set {switch.bridge} up"]
    for i, ns in enumerate(switch.namespaces):
        here += [f"netns add {ns}", f"link add {switch.veth(i)} type veth peer name {NS_IFACE} netns {ns}",
                 f"link set {switch.veth(i)} master {switch.bridge} up"]
    done = subprocess.run(["ip", "-batch", "-"], input="\n".join(here) + "\n", capture_output=True, text=True)
    if done.returncode != 0:
        switch.remove()
        raise RuntimeError(f"network namespaces are not available here: ip -batch: {done.stderr.strip()}")
    inside = [(ns, subprocess.Popen(["ip", "-n", ns, "-batch", "-"], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, text=True))
              for ns in switch.namespaces]
    failed = []
    for (ns, proc), addr in zip(inside, switch.addrs, strict=True):
        _, err = proc.communicate(f"addr add {addr}/24 dev {NS_IFACE}\nlink set {NS_IFACE} up\nlink set lo up\n")
        if proc.returncode != 0:
            failed.append(f"{ns}: {err.strip()}")
    if failed:
        switch.remove()
        raise RuntimeError(f"network namespaces are not available here: ip -n NS -batch: {failed[0]}")
    return switch


def note(what: str, bridge: str) -> float:
    """One line in the ledger (``time pid what bridge test``); the time written. A ledger that cannot be
    written (no /run) notes nothing: the switches work the same."""
    now = time.time()
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0] or "-"
    try:
        LEDGER.mkdir(mode=0o755, exist_ok=True)
        fd = os.open(LEDGER / "ledger.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{now:.3f} {os.getpid()} {what} {bridge} {test}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass
    return now


def meddlers(bridge: str, since: float) -> list[str]:
    """The ledger's lines about ``bridge`` written by another process at or after ``since``."""
    try:
        with open(LEDGER / "ledger.log", "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - (1 << 20)))  # the last MiB: a suite's worth and more
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split(" ", 4)
        if len(parts) == 5 and parts[3] == bridge and parts[1] != str(os.getpid()):
            try:
                if float(parts[0]) >= since:
                    found.append(f"pid {parts[1]} {parts[2]} at {parts[0]} ({parts[4]})")
            except ValueError:
                continue
    return found


def _next_number(name: str) -> int:
    """The number to try first for a switch named ``name``: the name's counter, moved on by one under a
    lock (this process id's where the ledger cannot be written)."""
    try:
        LEDGER.mkdir(mode=0o755, exist_ok=True)
        with open(LEDGER / f"{name}.next", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            text = f.read().strip()
            number = int(text) % 250 if text.isdigit() else os.getpid() % 250
            f.seek(0)
            f.truncate()
            f.write(f"{(number + 1) % 250}\n")
            return number
    except OSError:
        return os.getpid() % 250
