"""Use a DCP checkpoint outside the distributed job: load it in one plain process, or export it.

    python -m trainer.export CHECKPOINT_DIR OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load_for_inference(checkpoint: str | Path):
    """(model, tokenizer) from a complete checkpoint, in this process, without a process group."""
    import torch.distributed.checkpoint as dcp

    from trainer.ckpt_layout import META, is_complete
    from trainer.config import ModelConfig
    from trainer.model import load_model, load_tokenizer

    path = Path(checkpoint).expanduser()
    if not is_complete(path):
        raise ValueError(f"{path} is not a complete checkpoint")
    meta = json.loads((path / META).read_text())
    model = load_model(meta["model_name"], ModelConfig(from_scratch=True), seed=0)
    tokenizer = load_tokenizer(meta["tokenizer"], ModelConfig())
    state = {"app": {"model": model.state_dict()}}
    dcp.load(state, checkpoint_id=str(path))
    model.load_state_dict(state["app"]["model"])
    return model.eval(), tokenizer


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m trainer.export CHECKPOINT_DIR OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[1]).expanduser()
    if out.exists():
        print(f"{out} exists: pick a new folder (exports never overwrite)", file=sys.stderr)
        return 1
    try:
        model, tokenizer = load_for_inference(argv[0])
    except (ValueError, FileNotFoundError) as err:
        print(f"cannot export: {err}", file=sys.stderr)
        return 1
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    print(f"exported {argv[0]} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
