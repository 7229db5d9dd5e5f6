"""Which network interface of this node reaches the rendezvous address.

gloo (and NCCL's bootstrap) pick their interface from the hostname unless ``GLOO_SOCKET_IFNAME`` /
``NCCL_SOCKET_IFNAME`` name one, and stock Debian/Ubuntu hosts files map the hostname to 127.0.1.1:
a multi-node job then hangs at its first collective. The interface that carries traffic to
``MASTER_ADDR`` is the one the other nodes can reach this node on. It is found from the address the
kernel picks as the source of a route to ``MASTER_ADDR`` (a UDP ``connect`` sends nothing), not from
``ip route get``: on node 0 that route goes through ``lo`` although the node is reached on its own
address. Standard library only, Python 3.7 syntax: the doctor's probe sends this file ahead of its own.
"""

import socket

IFACE_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
"""What the node sets to the interface that reaches ``MASTER_ADDR`` when neither the workload nor the
node's own environment names one."""
_SIOCGIFADDR = 0x8915


def _source_address(addr, port):
    """The local address the kernel would send from to reach ``addr`` (no packet leaves)."""
    infos = socket.getaddrinfo(addr, port, 0, socket.SOCK_DGRAM)
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(sockaddr)
        return family, s.getsockname()[0]


def _ipv4_of(name):
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
    return socket.inet_ntoa(packed[20:24])


def _ipv6_names(local):
    """Interface names holding the IPv6 address ``local`` (from ``/proc/net/if_inet6``)."""
    want = socket.inet_pton(socket.AF_INET6, local.split("%")[0]).hex()
    with open("/proc/net/if_inet6") as f:
        return [parts[5] for parts in (line.split() for line in f) if len(parts) >= 6 and parts[0] == want]


def _ip_addr_names(local):
    """Interface names holding ``local`` as ``ip -o addr`` lists them (every address, not only the first)."""
    import subprocess

    try:
        out = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    # "4: eth0    inet 192.0.2.2/24 brd ... scope global eth0"
    return [parts[1] for parts in (line.split() for line in out.splitlines())
            if len(parts) > 3 and parts[3].split("/")[0] == local.split("%")[0]]


def route_interface(addr, port=29500):
    """``{"iface": NAME, "local": ADDRESS}`` for the interface that reaches ``addr``, or ``{"error": why}``."""
    try:
        family, local = _source_address(addr, port)
    except OSError as err:
        return {"error": f"no route to {addr}: {err.strerror or err}"}
    try:
        if family == socket.AF_INET6:
            names = _ipv6_names(local)
        else:
            names = []
            for _, name in socket.if_nameindex():
                try:
                    if _ipv4_of(name) == local:
                        names.append(name)
                except OSError:
                    continue
        names = names or _ip_addr_names(local)  # a secondary address: ioctl reports the primary only
    except (OSError, ValueError) as err:
        return {"error": f"cannot list this node's interfaces: {err}", "local": local}
    if not names:
        return {"error": f"no interface holds {local}, the address that reaches {addr}", "local": local}
    return {"iface": names[0], "local": local}


def interface_names():
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


def fill_iface_env(env, names):
    """Set each of ``names`` missing from ``env`` to the interface that reaches ``env["MASTER_ADDR"]``;
    the interface found (or ``None``). A name the workload or the node already set stays as it is."""
    missing = [n for n in names if not env.get(n)]
    if not missing or not env.get("MASTER_ADDR"):
        return None
    found = route_interface(env["MASTER_ADDR"], int(env.get("MASTER_PORT") or 29500))
    if "iface" not in found:
        return None
    for name in missing:
        env[name] = found["iface"]
    return found["iface"]
