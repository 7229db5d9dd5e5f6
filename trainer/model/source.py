"""Where a run's model and tokenizer are read from, resolved once.

A model is named in the parameters (``model_name``, ``model.tokenizer``) as a folder, a hub id or a
``builtin:`` asset; the files are read from a folder (a built-in asset is made there on first use) or the
hub id. :meth:`ModelSource.resolve` is the one place the trainer turns those names into what
``from_pretrained`` reads: a job resolves them once, before the process group exists, and passes the
source on; a tool that has a name (an export from a checkpoint's ``meta.json``) resolves it at its start.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.assets import resolve_model


@dataclass(frozen=True)
class ModelSource:
    """A model's name as the parameters give it (what a checkpoint records) and where its files are."""

    name: str
    """As the parameters (or a checkpoint's ``meta.json``) name it."""
    path: str
    """What ``from_pretrained`` reads: a local folder, or the hub id itself."""
    tokenizer: str
    """The tokenizer's name: ``model.tokenizer``, else the model's."""
    tokenizer_path: str

    @classmethod
    def resolve(cls, name: str, tokenizer: str | None = None) -> ModelSource:
        """The names resolved (a built-in model is built now, once per node and version)."""
        path = resolve_model(name)
        tokenizer = tokenizer or name
        return cls(name, path, tokenizer, path if tokenizer == name else resolve_model(tokenizer))
