"""``fsdp-tui schema``: the workload JSON Schema, for editors with a YAML language server."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="print the workload file's JSON Schema",
                       description="Print the JSON Schema of workload files (for yaml-language-server).")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.workload.schema_walk import workload_schema

    print(json.dumps(workload_schema(), indent=2))
    return 0
