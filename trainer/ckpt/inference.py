"""A whole checkpoint outside the distributed job: checked whole, then loaded in one plain process."""

from __future__ import annotations

import os
from pathlib import Path


def load_for_inference(checkpoint: str | Path):
    """(model, tokenizer) from a whole checkpoint (a folder, or a bucket URL read with this process's
    credentials), in this process, without a process group. The model is built with the attention its
    class has for inference (sdpa, else eager: BLOOM, Gemma 2, GPT-OSS), as any model that trains can be
    exported."""
    import torch.distributed.checkpoint as dcp

    from trainer.ckpt.store import open_store
    from trainer.model.build import load_model, load_tokenizer
    from trainer.model.source import ModelSource
    from trainer.wire.ckpt_layout import parse_meta
    from trainer.wire.ckpt_paths import url_scheme
    from trainer.wire.config import ModelConfig

    path = str(checkpoint)
    path = path.rstrip("/") if url_scheme(path) else os.path.expanduser(path)
    store = open_store(path.rsplit("/", 1)[0] if url_scheme(path) else os.path.dirname(os.path.abspath(path)))
    check_whole(store, path)
    meta = parse_meta(store.read_meta(path))
    assert meta is not None  # a whole checkpoint's meta.json parses
    source = ModelSource.resolve(meta["model_name"], meta["tokenizer"])
    model = load_model(source, ModelConfig(from_scratch=True), seed=0)  # sdpa, else eager
    tokenizer = load_tokenizer(source, ModelConfig())
    state = {"app": {"model": model.state_dict()}}
    dcp.load(state, storage_reader=store.reader(path))
    model.load_state_dict(state["app"]["model"])
    return model.eval(), tokenizer


def check_whole(store, path: str) -> None:
    """``ValueError`` unless ``path`` is whole and its bytes are the ones the trainer wrote (a file that
    differs is marked in the checkpoint: it is not whole for any reader after this)."""
    from trainer.wire.ckpt_digest import words

    verdict = store.judge(path)
    if not verdict.complete:
        raise ValueError(f"{path} is not a whole checkpoint: {verdict.why_not()}")
    differs = store.verify(path)
    if differs:
        raise ValueError(f"{path} is not a whole checkpoint: {words(differs)}")
