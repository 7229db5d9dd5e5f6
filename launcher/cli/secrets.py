"""``fsdp-tui secrets set|list|rm``: the local secret store (0600 files in the data dir)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("secrets", help="store secret values for workloads' secrets: NAME: scope/key")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    s = verbs.add_parser("set", help="read the value from stdin (never from the command line)")
    s.add_argument("ref", metavar="SCOPE/KEY")
    verbs.add_parser("list", help="list stored references (never values)")
    r = verbs.add_parser("rm", help="forget a stored value")
    r.add_argument("ref", metavar="SCOPE/KEY")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.api import Client

    records = Client().records
    store = records.secrets
    try:
        if args.verb == "set":
            if sys.stdin.isatty():
                import getpass

                value = getpass.getpass(f"value for {args.ref}: ")
            else:
                value = sys.stdin.read().removesuffix("\n")
            if not value:
                print("fsdp-tui secrets: empty value, nothing stored", file=sys.stderr)
                return 2
            store.set(args.ref, value)
            print(f"stored {args.ref}")
        elif args.verb == "list":
            for ref in store.list():
                print(ref)
            print(f"(environment variables such as {records.secret_env_name('scope/key')} override stored values)",
                  file=sys.stderr)
        elif args.verb == "rm":
            if not store.remove(args.ref):
                print(f"fsdp-tui secrets: {args.ref} was not stored (fsdp-tui secrets list)", file=sys.stderr)
                return 1
            print(f"removed {args.ref}")
    except ValueError as err:
        print(f"fsdp-tui secrets: {err}", file=sys.stderr)
        return 2
    return 0
