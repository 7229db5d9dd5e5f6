"""The data's sections of the built-in trainer's parameters (``parameters.data``, a mixture's
``parameters.datasets``, a chat's field names): which examples, in which format, and how they become
sequences. Part of :class:`trainer.wire.config.TrainerConfig`, torch-free like it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from trainer.wire.section import Section


class ChatFields(Section):
    """Where a chat row keeps its turns and what its speakers are called, when not the usual names."""

    messages_field: str | None = None
    """Column holding the list of turns; unset: ``messages`` (OpenAI style) or ``conversations``
    (ShareGPT), whichever the data has."""
    role_key: str | None = None
    """Key of a turn's speaker; unset: ``role``, or ``from`` in ShareGPT turns."""
    content_key: str | None = None
    """Key of a turn's text; unset: ``content``, or ``value`` in ShareGPT turns."""
    roles: dict[str, Literal["system", "user", "assistant", "tool"]] = {}
    """Speaker names of your data mapped to the template's roles, beside the built-in ones (``human``:
    user, ``gpt``/``model``/``bot``: assistant, ...), e.g. ``{customer: user, agent: assistant}``. Only
    ``assistant`` turns are learned."""


class DataConfig(Section):
    """Which examples, in which format, and how they become sequences."""

    format: Literal["auto", "alpaca", "squad", "chat", "text"] = "auto"
    """Example format; ``auto`` looks at the columns of the first example. ``chat`` reads OpenAI-style
    ``messages`` and ShareGPT ``conversations`` (``data.chat`` maps other names)."""
    chat: ChatFields = ChatFields()
    chat_template: str | None = None
    """Jinja chat template for chat data, instead of the tokenizer's: the template text itself, or a
    file holding it (a path on the nodes; relative: in the run's folder, then in the code snapshot)."""
    split: str = "train"
    """Split of the dataset to train on."""
    data_files: str | list[str] | None = None
    """Extra ``data_files`` for ``datasets.load_dataset`` (hub datasets with several files)."""
    packing: bool | None = None
    """Pack examples into full ``max_seq_len`` rows, with no attention across example boundaries (each
    layer keeps its sliding window inside each example). ``null`` packs wherever it is exact for the
    model: not for ALiBi models without position ids (BLOOM, MPT), models that carry a state along the
    sequence (Mamba, RWKV, hybrids such as Jamba or Qwen3-Next) or layer types other than full and
    sliding-window attention (Llama 4's chunked layers); ``true`` for such a model is refused."""
    mask_prompt: bool = True
    """Leave prompt tokens out of the loss; only responses are learned."""
    eval_fraction: float = Field(default=0.05, ge=0.0, lt=1.0)
    """Share of examples held out for evaluation when the dataset has no eval split (at most
    ``eval_max_rows`` of them)."""
    eval_max_rows: int | None = Field(default=1000, gt=0)
    """Hold out at most this many examples (the rest train); ``null``: all of ``eval_fraction``. A
    mixture holds out at most this many over all its sources (each its share by weight)."""
    eval_split: str | None = None
    """Name of an existing evaluation split; takes precedence over ``eval_fraction``."""
    max_examples: int | None = Field(default=None, gt=0)
    """Use at most this many training examples (quick experiments)."""
    shuffle: bool = True
    """Shuffle the order of examples (deterministically, from ``seed``)."""
    num_workers: int = Field(default=0, ge=0)
    """Streaming: ``1`` (or more) reads and tokenizes ahead of training in a process of each rank's own;
    ``0`` in a thread of the rank (its Python work then shares the training thread's interpreter lock)."""
    num_proc: int | None = Field(default=None, gt=0)
    """Processes that tokenize a dataset into the node's cache (once per node); ``null``: the node's
    cores, one per 20,000 rows."""
    cache_dir: str | None = None
    """Where each node keeps tokenized data (``null``: ``$FSDP_TUI_DATA_CACHE``, else
    ``~/.cache/fsdp-tui/data``); a path every node of one machine shares."""
    streaming: bool | Literal["auto"] = "auto"
    """Read the data as it is trained on, tokenized and packed on the fly, instead of tokenizing it
    into the cache first: ``true``; ``auto`` streams a source larger than ``streaming_above_gb`` (a
    local file or a bucket object). Needs ``max_steps``."""
    streaming_above_gb: float = Field(default=20.0, gt=0)
    """With ``streaming: auto``: a source of more than this many GB is streamed."""


class DataSource(Section):
    """One source of a mixture (``parameters.datasets``): where its rows are, how they read, and its
    part of the mix. Unset fields take ``parameters.data``'s."""

    path: str
    """A local json/jsonl/csv/parquet/arrow file, a folder saved by ``datasets``, a hub dataset name, or
    a bucket URL (``s3://bucket/data.jsonl``)."""
    name: str | None = None
    """How logs, the monitor and ``show`` call it (default: the file's name, or the hub name)."""
    weight: float | None = Field(default=None, gt=0)
    """Its share of the rows trained on (relative to the others' weights)."""
    epochs: float | None = Field(default=None, gt=0)
    """Instead of a weight: how many passes over it the run makes (its share follows its size)."""
    format: Literal["auto", "alpaca", "squad", "chat", "text"] | None = None
    split: str | None = None
    eval_split: str | None = None
    data_files: str | list[str] | None = None
    chat: ChatFields | None = None
    chat_template: str | None = None

    @model_validator(mode="after")
    def _one_share(self) -> DataSource:
        if self.weight is not None and self.epochs is not None:
            raise ValueError("give weight or epochs, not both")
        return self

    def label(self) -> str:
        if self.name:
            return self.name
        tail = self.path.rstrip("/").rsplit("/", 1)[-1]
        return tail if "." in tail or "://" in self.path else self.path
