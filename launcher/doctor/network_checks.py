"""The doctor's judgement of the nodes' network, purely: node 0's rendezvous port free to bind at
``MASTER_ADDR``, that address resolving on every other node (and not to a loopback address of another
machine), and the interface gloo and NCCL will use on each node."""

from __future__ import annotations

from launcher.doctor.check import Check
from launcher.doctor.reply import InterfaceFacts, MasterFacts
from launcher.workload.plan import IFACE_ENV, NodePlan, RunPlan


def port_check(plan: RunPlan, master: MasterFacts, host: str) -> Check:
    """Node 0: ``MASTER_ADDR:MASTER_PORT`` resolves there and is free to bind (a taken port the launch moves
    off is a warning)."""
    target = f"{plan.master_addr}:{plan.master_port}"
    if master.error:
        return Check("rendezvous", "error", f"could not check {target}: {master.error}")
    if master.resolve_error:
        return Check("rendezvous", "error", f"MASTER_ADDR {plan.master_addr!r} does not resolve on {host}: "
                     f"{master.resolve_error}",
                     "set compute.master_addr to node 0's IP address (an ~/.ssh/config alias is not a DNS name)")
    bind = master.bind_error
    if bind is None:
        return Check("rendezvous", "ok", f"{target} is free to bind")
    if bind.errno == "EADDRINUSE":
        where = "" if bind.where == "addr" else " (held on another interface)"
        held = f"port {plan.master_port} is in use on {host}{where}"
        if plan.workload.compute.master_port is None:
            return Check("rendezvous", "warning", f"{held}; the launch will rendezvous on a free port instead",
                         f"stop what holds it (ss -ltnp 'sport = :{plan.master_port}') or set "
                         "compute.master_port to pin a port")
        return Check("rendezvous", "error", held,
                     f"pick a free one (--set compute.master_port={plan.master_port + 1}), or stop what holds it "
                     f"(ss -ltnp 'sport = :{plan.master_port}')")
    if bind.errno == "EADDRNOTAVAIL":
        return Check("rendezvous", "error", f"MASTER_ADDR {plan.master_addr} ({', '.join(master.addrs)}) "
                     f"is not an address of node 0 ({host})",
                     "set compute.master_addr to node 0's address as the other nodes reach it")
    return Check("rendezvous", "error", f"cannot bind {target}: {bind.errno} {bind.message}",
                 "use a port of 1024 or above that nothing else uses (compute.master_port)")


def resolve_check(plan: RunPlan, master: MasterFacts, host: str, hostname: str | None,
                   node0_hostname: str | None) -> Check:
    """Every other node: ``MASTER_ADDR`` resolves there, and not to a loopback address of another machine."""
    addr = plan.master_addr
    if master.error:
        return Check("master_addr", "error", f"could not resolve {addr}: {master.error}")
    if master.resolve_error:
        return Check("master_addr", "error", f"MASTER_ADDR {addr!r} does not resolve on {host}: "
                     f"{master.resolve_error}",
                     "set compute.master_addr to node 0's IP address (an ~/.ssh/config alias is not a DNS name)")
    addrs = master.addrs
    if (addrs and all(is_loopback(a) for a in addrs)
            and hostname and node0_hostname and hostname != node0_hostname):
        return Check("master_addr", "error", f"MASTER_ADDR {addr} is a loopback address: on {host} "
                     f"({hostname}) it is not node 0 ({node0_hostname})",
                     "set compute.master_addr to node 0's address on the nodes' network")
    return Check("master_addr", "ok", f"{addr} resolves to {', '.join(addrs)}")


def iface_check(plan: RunPlan, node: NodePlan, found: InterfaceFacts, host: str) -> Check:
    """The interface gloo and NCCL will use on this node: the one the workload names (it must exist
    there), else the one that reaches MASTER_ADDR, which the node sets at the job's start."""
    if found.error:
        return Check("interface", "warning", f"could not list the interfaces: {found.error}",
                     f"set env_variables.GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to {host}'s interface on "
                     "the nodes' network if the run hangs at its start")
    named = {n: plan.workload.env_variables[n] for n in IFACE_ENV if n in plan.workload.env_variables}
    names = list(found.names)
    missing = {n: v for n, v in named.items() if names and not iface_exists(n, v, names)}
    if missing:
        what = ", ".join(f"env_variables.{n}={v}" for n, v in missing.items())
        return Check("interface", "error", f"{what}: no such interface on {host} (it has {', '.join(names)})",
                     f"name the interface that reaches MASTER_ADDR {plan.master_addr} on {host}, or remove the "
                     "variable: the launcher then sets it to that interface on each node")
    route = found.route
    if not node.iface_env:
        return Check("interface", "ok", ", ".join(f"{n}={v} (set by the workload)" for n, v in named.items()))
    if not route.iface:
        return Check("interface", "error", f"no interface of {host} reaches MASTER_ADDR {plan.master_addr}: "
                     f"{route.error or 'nothing found'}",
                     f"set env_variables.GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to {host}'s interface on "
                     "the nodes' network")
    return Check("interface", "ok", f"{' and '.join(node.iface_env)}={route.iface} ({route.local}, "
                 f"the interface that reaches MASTER_ADDR {plan.master_addr}; set by the launcher at the start)")


def iface_exists(variable: str, value: str, names: list[str]) -> bool:
    """Whether ``value`` names interfaces of the node: gloo takes exact names (comma-separated); NCCL
    takes prefixes, ``=name`` for an exact one and ``^...`` for exclusions (not judged)."""
    if value.startswith("^"):
        return True
    for item in filter(None, value.split(",")):
        exact = variable == "GLOO_SOCKET_IFNAME" or item.startswith("=")
        item = item.lstrip("=")
        if not any(n == item if exact else n.startswith(item) for n in names):
            return False
    return True


def is_loopback(addr: str) -> bool:
    """Whether a node's resolved address is a loopback one (an address that does not parse is not)."""
    import ipaddress

    try:
        return ipaddress.ip_address(addr.split("%")[0]).is_loopback
    except ValueError:
        return False
