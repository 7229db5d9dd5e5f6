"""The training and evaluation rows of one run, built the same way on every rank: where the rows come
from (a local file read with its lines, a saved folder, a hub name), their format, and their tokens.
Every problem with the data stops the run with one line naming the file, the row and the key."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.assets import resolve_dataset
from trainer.data.chat import choose_template
from trainer.data.rows import IGNORE, Example, Tokenize, collate, pack, pad_rows
from trainer.wire import formats
from trainer.wire.config import ChatFields, DataConfig, SettingError, TrainerConfig
from trainer.wire.data_files import DataError, Rows, expand, is_saved_folder, looks_local, read_file
from trainer.wire.protocol import DataSummary


@dataclass
class RunData:
    train_rows: list[dict[str, torch.Tensor]]
    eval_rows: list[dict[str, torch.Tensor]]
    pad_id: int
    fmt: str
    summary: DataSummary
    notes: tuple[str, ...] = ()
    """Lines for the start of the run (a chat template that is not the tokenizer's own)."""


def build(cfg: TrainerConfig, tokenizer, packing: bool) -> RunData:
    """Rows to train on (packed when ``packing``) and held-out rows to evaluate on."""
    train_raw, eval_raw = load_rows(cfg.dataset_name, cfg.data)
    fmt = cfg.data.format if cfg.data.format != "auto" else detect_format(train_raw, cfg.data.chat)
    if fmt != "auto" and cfg.data.format != "auto" and hasattr(train_raw.items, "column_names"):
        problem = formats.column_problem(train_raw.items.column_names, fmt, cfg.data.chat)
        if problem:  # a whole column missing: said once, not as its first row
            raise DataError(train_raw.source, f"{problem[0]} ({problem[1]})")
    notes: tuple[str, ...] = ()
    template = None
    if fmt == "chat":
        chosen = choose_template(tokenizer, cfg.data.chat_template, cfg.model.tokenizer or cfg.model_name)
        template, notes = chosen.text, chosen.notes
    tokenize = Tokenize(tokenizer, fmt, cfg.max_seq_len, cfg.data.mask_prompt, cfg.data.chat, template)
    examples = tokenize.many(train_raw)
    examples = [ex for ex in examples if any(label != IGNORE for label in ex.labels[1:])]
    if eval_raw is not None:
        eval_examples = tokenize.many(eval_raw)
    else:
        examples, eval_examples = _hold_out(examples, cfg.data.eval_fraction, cfg.seed)
    if cfg.data.max_examples:
        examples = examples[: cfg.data.max_examples]
    if cfg.logging.eval_max_batches is not None:
        eval_examples = eval_examples[: cfg.logging.eval_max_batches * cfg.per_device_batch_size * 64]
    pad_id = tokenizer.pad_token_id
    rows = pack if packing else (lambda exs, _len, pad: pad_rows(exs, pad))
    summary = DataSummary(examples=len(examples), eval_examples=len(eval_examples), format=fmt,
                          max_seq_len=cfg.max_seq_len, truncated=sum(1 for ex in examples if ex.lost),
                          truncated_tokens=sum(ex.lost for ex in examples))
    return RunData(rows(examples, cfg.max_seq_len, pad_id), pad_rows(eval_examples, pad_id), pad_id, fmt, summary,
                   notes)


def load_rows(name: str, cfg: DataConfig) -> tuple[Rows, Rows | None]:
    """(train, eval-or-None) rows, from a local file (read here, each row with its line), a folder saved
    by ``datasets`` or a hub name. A name that looks like a local path and is not there is an error
    naming it, never a hub lookup."""
    source = resolve_dataset(name)
    path = _local_path(expand(source))
    if path.is_file():
        return read_file(path, source), None
    if is_saved_folder(path):
        import datasets

        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if cfg.split not in loaded:
                raise SettingError(f"{source}: parameters.data.split: no split '{cfg.split}' (it has "
                                   f"{', '.join(loaded)})")
            evaluation = loaded.get(cfg.eval_split) if cfg.eval_split else None
            return (Rows(loaded[cfg.split], f"{source} ({cfg.split})"),
                    Rows(evaluation, f"{source} ({cfg.eval_split})") if evaluation is not None else None)
        return Rows(loaded, source), None
    if path.is_dir():
        raise DataError(source, "this folder was not saved by datasets (no dataset_info.json): name a data file "
                        "in it")
    if looks_local(source):
        read_file(path, source)  # says what is wrong with it: missing, not a data file
    return _hub_rows(source, cfg)


def _local_path(name: str) -> Path:
    """A relative path is read in the working folder (the run's folder on the node), else in the code
    snapshot (``$CODE_SOURCE_PATH``) where it was shipped with the code."""
    path = Path(name)
    code = os.environ.get("CODE_SOURCE_PATH")
    if not path.is_absolute() and not path.exists() and code and (Path(code) / path).exists():
        return Path(code) / path
    return path


def _hub_rows(source: str, cfg: DataConfig) -> tuple[Rows, Rows | None]:
    import datasets

    def split(name: str) -> Rows:
        try:
            return Rows(datasets.load_dataset(source, data_files=cfg.data_files, split=name), f"{source} ({name})")
        except (FileNotFoundError, ValueError, ConnectionError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise DataError(source, f"datasets cannot load split '{name}' of it (a hub name: there is no such "
                            f"local file or folder on this node): {first}") from None

    return split(cfg.split), split(cfg.eval_split) if cfg.eval_split else None


def columns_of(rows: Rows) -> list[str]:
    """Column names of a ``datasets.Dataset``, or of the first row of a list of row dicts."""
    items = rows.items
    return list(items.column_names) if hasattr(items, "column_names") else list(items[0]) if len(items) else []


def detect_format(rows: Rows, chat: ChatFields) -> str:
    """The format the rows' columns show; a :class:`DataError` naming the columns when none fits."""
    columns = columns_of(rows)
    found = formats.detect_format(columns, chat)
    if found is None:
        message, hint = formats.column_problem(columns, "auto", chat) or ("", "")
        raise DataError(rows.source, f"{message} ({hint})")
    return found


def _hold_out(examples: list[Example], fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    if fraction <= 0 or len(examples) < 2:
        return examples, []
    perm = torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed)).tolist()
    k = max(1, round(len(examples) * fraction))
    held = set(perm[-k:])
    return ([ex for i, ex in enumerate(examples) if i not in held],
            [ex for i, ex in enumerate(examples) if i in held])


FIRST_EVAL_BATCHES = 4


def first_eval_batches(eval_max_batches: int | None) -> int:
    """Batches of the step-0 evaluation: a bounded sample (a baseline, not a result), never more than
    ``eval_max_batches``."""
    return min(FIRST_EVAL_BATCHES, eval_max_batches or FIRST_EVAL_BATCHES)


def eval_batches(rows: list[dict[str, torch.Tensor]], rank: int, world: int, batch: int, pad_id: int,
                 max_batches: int | None):
    """The same number of batches on every rank (FSDP needs every rank in every forward)."""
    per_global = world * batch
    count = -(-len(rows) // per_global) if rows else 0
    if max_batches is not None:
        count = min(count, max_batches)
    for g in range(count):
        chunk = rows[g * per_global + rank * batch: g * per_global + (rank + 1) * batch]
        if not chunk:  # this rank ran out: a batch that counts nothing
            dummy = dict(rows[0])
            dummy["labels"] = torch.full_like(rows[0]["labels"], IGNORE)
            chunk = [dummy]
        yield collate(chunk, pad_id)
