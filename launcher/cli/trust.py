"""``fsdp-tui trust HOST[:PORT]``: add a host's key to known_hosts on purpose, after showing it."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trust", help="show a host's SSH key fingerprint and add it to known_hosts",
                       description="Resolve HOST as ssh does (~/.ssh/config read by `ssh -G`, jump hosts included), "
                       "show the key it presents and, once confirmed, add it under its HostKeyAlias (else "
                       "host or [host]:port) to the first UserKnownHostsFile.")
    p.add_argument("host", metavar="HOST[:PORT]")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from launcher.api import Client
    from launcher.api.nodes import HostUnreachable

    nodes = Client().nodes
    try:
        check = asyncio.run(nodes.host_key(args.host))
    except ValueError as err:  # not a host
        print(f"fsdp-tui trust: {err}", file=sys.stderr)
        return 2
    except HostUnreachable as err:
        print(f"fsdp-tui trust: cannot reach {args.host}: {err}. Check that the host is up and that "
              f"`ssh {args.host}` reaches it (its name in ~/.ssh/config, its port), then try again.", file=sys.stderr)
        return 1
    if check.presented in check.known:
        print(f"{args.host} is already trusted ({check.presented})")
        return 0
    if check.changed:
        print(f"{args.host}: known_hosts has {', '.join(check.known)}; the server now presents "
              f"{check.presented}. Remove the old entry first (ssh-keygen -R '{check.known_hosts_name}' -f {check.file}).",
              file=sys.stderr)
        return 1
    print(f"{args.host} presents {check.presented}")
    if not args.yes:
        if not sys.stdin.isatty():
            print("run again with --yes to trust it", file=sys.stderr)
            return 1
        if input("trust this key? [y/N] ").strip().lower() not in ("y", "yes"):
            return 1
    path = nodes.trust(check)
    print(f"added {check.presented} for {args.host} to {path}")
    return 0
