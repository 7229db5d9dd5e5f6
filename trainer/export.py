"""Use a DCP checkpoint outside the distributed job: load it in one plain process, or export it.

    python -m trainer.export CHECKPOINT_DIR OUT_DIR [--merged | --merged-only]

A LoRA run's checkpoint holds the adapter only: it is exported in PEFT's format, and with ``--merged``
also merged into the base (``OUT_DIR-merged``), a folder ``from_pretrained`` loads; ``--merged-only``
writes the merged model alone, into ``OUT_DIR`` (the adapter was exported already).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load_for_inference(checkpoint: str | Path):
    """(model, tokenizer) from a whole checkpoint (a folder, or a bucket URL read with this process's
    credentials), in this process, without a process group. The model is built with the attention its
    class has for inference (sdpa, else eager: BLOOM, Gemma 2, GPT-OSS), as any model that trains can be
    exported."""
    import os

    import torch.distributed.checkpoint as dcp

    from trainer.ckpt.store import open_store
    from trainer.model.build import load_model, load_tokenizer
    from trainer.wire.ckpt_paths import url_scheme
    from trainer.wire.config import ModelConfig

    path = str(checkpoint)
    path = path.rstrip("/") if url_scheme(path) else os.path.expanduser(path)
    store = open_store(path.rsplit("/", 1)[0] if url_scheme(path) else os.path.dirname(os.path.abspath(path)))
    _whole(store, path)
    meta = json.loads(store.read_meta(path))
    model = load_model(meta["model_name"], ModelConfig(from_scratch=True), seed=0)  # sdpa, else eager
    tokenizer = load_tokenizer(meta["tokenizer"], ModelConfig())
    state = {"app": {"model": model.state_dict()}}
    dcp.load(state, storage_reader=store.reader(path))
    model.load_state_dict(state["app"]["model"])
    return model.eval(), tokenizer


def _whole(store, path: str) -> None:
    """``ValueError`` unless ``path`` is whole and its bytes are the ones the trainer wrote (a file that
    differs is marked in the checkpoint: it is not whole for any reader after this)."""
    from trainer.wire.ckpt_digest import words

    verdict = store.judge(path)
    if not verdict.complete:
        raise ValueError(f"{path} is not a whole checkpoint: {verdict.why_not()}")
    differs = store.verify(path)
    if differs:
        raise ValueError(f"{path} is not a whole checkpoint: {words(differs)}")


def main(argv: list[str]) -> int:
    only = "--merged-only" in argv
    merged = "--merged" in argv or only
    argv = [a for a in argv if a not in ("--merged", "--merged-only")]
    if len(argv) != 2:
        print("usage: python -m trainer.export CHECKPOINT_DIR OUT_DIR [--merged | --merged-only]", file=sys.stderr)
        return 2
    out = Path(argv[1]).expanduser()
    if out.exists():
        print(f"{out} exists: pick a new folder (exports never overwrite)", file=sys.stderr)
        return 1
    if _is_adapter(Path(argv[0]).expanduser()):
        return _export_adapter(Path(argv[0]).expanduser(), out, merged, adapter=not only)
    if merged:
        print(f"{argv[0]} is a full fine-tune's checkpoint: its export is the whole model already (no "
              "adapter to merge); leave out --merged", file=sys.stderr)
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


def _is_adapter(path: Path) -> bool:
    """Whether the checkpoint at ``path`` holds a LoRA adapter only (its ``meta.json`` says so)."""
    from trainer.wire.ckpt_layout import META

    try:
        return "lora" in json.loads((path / META).read_text())
    except (OSError, ValueError, TypeError):
        return False


def _export_adapter(checkpoint: Path, out: Path, merged: bool, adapter: bool = True) -> int:
    from trainer.ckpt.store import open_store
    from trainer.lora.export import MERGED_SUFFIX, load_adapter, write_adapter, write_merged
    from trainer.model.build import load_tokenizer
    from trainer.wire.config import LoraConfig, ModelConfig

    try:
        _whole(open_store(str(checkpoint.parent)), str(checkpoint))
    except ValueError as err:
        print(f"cannot export: {err}", file=sys.stderr)
        return 1
    meta, state = load_adapter(checkpoint)
    cfg = LoraConfig.model_validate(meta["lora"])
    tok = load_tokenizer(meta["tokenizer"], ModelConfig())
    if adapter:
        print(f"exported {checkpoint} -> {write_adapter(state, cfg, meta['model_name'], False, out, tok)} (LoRA adapter)")
    if merged:
        target = out.with_name(out.name + MERGED_SUFFIX) if adapter else out
        print(f"exported {checkpoint} -> {write_merged(state, cfg, meta['model_name'], False, target, tok)} (merged)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
