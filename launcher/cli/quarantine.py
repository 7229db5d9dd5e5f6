"""``fsdp-tui quarantine [lift HOST]``: the hosts that keep failing, and lifting one out of quarantine."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quarantine", help="hosts that keep failing (quarantined ones are no spare and refuse "
                                          "launches); lift one",
                       description="A run's owner counts a failure of a host each time it swaps it out (the "
                       "triage named it) or finds it failing the doctor as a spare; at recovery.quarantine_after "
                       "failures the host is quarantined: no run takes it as a spare, and a launch on it is "
                       "refused (unless --force). With no action, lists every host with a failure counted.")
    p.add_argument("action", nargs="?", choices=("lift",), help="lift HOST out of quarantine (its count starts again)")
    p.add_argument("host", nargs="?", metavar="HOST", help="the host as the workloads write it (alias, user@host, host:port)")
    p.add_argument("--json", action="store_true", help="print the hosts as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.api import Client
    from launcher.workload.hosts import parse_host

    nodes = Client().nodes
    if args.action == "lift":
        if not args.host:
            print("fsdp-tui quarantine lift: name the HOST to lift (fsdp-tui quarantine lists them)", file=sys.stderr)
            return 2
        try:
            parse_host(args.host)
        except ValueError as err:
            print(f"fsdp-tui quarantine lift: {err}", file=sys.stderr)
            return 2
        was = nodes.lift(args.host)
        if was is None:
            print(f"fsdp-tui quarantine lift: {args.host} has no failure counted (fsdp-tui quarantine lists the "
                  "hosts that do)", file=sys.stderr)
            return 1
        print(f"lifted {args.host}" + (" out of quarantine" if was.quarantined else "") + f": its {was.failures} "
              f"failure{'s' if was.failures != 1 else ''} forgotten")
        return 0
    if args.host:
        print("fsdp-tui quarantine: HOST goes with an action (fsdp-tui quarantine lift HOST)", file=sys.stderr)
        return 2
    hosts = nodes.health()
    if args.json:
        print(json.dumps([h.to_dict() for h in hosts], indent=2))
        return 0
    if not hosts:
        print("no host has failed a run (hosts are counted when a run's owner swaps one out)")
        return 0
    for h in hosts:
        print(h.words())
    if any(h.quarantined for h in hosts):
        print("lift one: fsdp-tui quarantine lift HOST")
    return 0
