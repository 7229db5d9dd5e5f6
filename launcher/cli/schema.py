"""``fsdp-tui schema``: the workload JSON Schema, for editors with a YAML language server."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="print the workload file's JSON Schema",
                       description="Print the JSON Schema of workload files (for yaml-language-server).")
    p.set_defaults(handler=run)


def workload_schema() -> dict:
    """The workload schema; ``parameters`` follows the trainer's schema when there is no ``command``."""
    from launcher.workload.model import Workload
    from trainer.config import TrainerConfig

    schema = Workload.model_json_schema()
    trainer = TrainerConfig.model_json_schema()
    defs = schema.setdefault("$defs", {})
    defs.update(trainer.pop("$defs", {}))
    defs["TrainerConfig"] = trainer
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "fsdp-tui workload"
    schema["if"] = {"not": {"required": ["command"]}}
    schema["then"] = {"properties": {"parameters": {"$ref": "#/$defs/TrainerConfig"}}}
    return schema


def run(args: argparse.Namespace) -> int:
    print(json.dumps(workload_schema(), indent=2))
    return 0
