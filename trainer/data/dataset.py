"""The training and evaluation rows of one run, the same on every rank: each source tokenized once per
node into the cache (:mod:`trainer.data.token_cache`, :mod:`trainer.data.encode`), then its rows made
from the memory-mapped tokens as they are asked for (:mod:`trainer.data.token_rows`); a mixture's
sources side by side with their shares (:mod:`trainer.data.mixture`). Every problem with the data
stops the run with one line naming the file, the row and the key."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainer.assets import resolve_dataset
from trainer.data import encode, streamed, token_cache
from trainer.data.chat import choose_template
from trainer.data.mixture import Mix
from trainer.data.rows import IGNORE, Tokenize, collate
from trainer.data.run_data import MixedRows, RunData, eval_note
from trainer.data.sources import RawSource, local_path, raw_sources
from trainer.data.token_rows import Plan, TokenRows, make_plan
from trainer.model.source import ModelSource
from trainer.wire import formats
from trainer.wire.config import TrainerConfig
from trainer.wire.data_config import ChatFields, DataConfig, DataSource
from trainer.wire.data_files import DataError, Rows, expand, is_saved_folder, looks_local, read_file
from trainer.wire.protocol import DataSummary, SourceSummary

RULES = ("trainer/data/rows.py", "trainer/data/chat.py", "trainer/wire/formats.py", "trainer/wire/data_files.py",
         "trainer/data/encode.py", "trainer/data/sources.py", "trainer/data/turns.py")
"""The code that decides an example's tokens: a change to it is a new cache key."""


@dataclass
class _Source:
    """One source tokenized: its encoded examples, format and what the start of the run says of it."""

    label: str
    encoded: encode.Encoded
    eval_encoded: encode.Encoded | None
    fmt: str
    template: str | None
    notes: list[str]
    key: str
    folder: Path


def build(cfg: TrainerConfig, tokenizer, packing: bool, model_source: ModelSource) -> RunData:
    """Rows to train on (packed when ``packing``) and held-out rows to evaluate on, from the node's cache
    (tokenized into it first when this node has not yet); ``tokenizer`` is ``model_source``'s, which its notes name."""
    why = streamed.streaming(cfg)
    if why is not None:
        return streamed.build(cfg, tokenizer, packing, why, model_source)
    root = token_cache.cache_root(cfg.data.cache_dir)
    sources = cfg.sources()
    tokenized = []
    for index, source in enumerate(sources):
        try:
            tokenized.append(_tokenized(cfg, source, tokenizer, model_source.tokenizer, root))
        except DataError as err:  # named by the key that names the source
            raise err.keyed(cfg.source_key(index)) from None
    usable = [int((t.encoded.learned_count > 0).sum()) for t in tokenized]
    caps = _eval_caps(cfg.data.eval_max_rows, sources, usable)
    plans = [_plan(cfg, t, packing, cap) for t, cap in zip(tokenized, caps, strict=True)]
    pad_id = tokenizer.pad_token_id
    train = [TokenRows(t.encoded, p.train if p.members is None else p.train[p.members], pad_id, cfg.max_seq_len,
                       p.offsets) for t, p in zip(tokenized, plans, strict=True)]
    evals = [_eval_rows(cfg, t, p, pad_id) for t, p in zip(tokenized, plans, strict=True)]
    notes = [n for t in tokenized for n in t.notes]
    examples = [len(p.train) for p in plans]
    lost = [t.encoded.lost[p.train] for t, p in zip(tokenized, plans, strict=True)]
    fmt = tokenized[0].fmt
    mix = Mix.of(sources, [len(r) for r in train]) if cfg.datasets is not None else None
    summary = DataSummary(
        examples=sum(examples), eval_examples=sum(len(e) for e in evals),
        format=fmt if len({t.fmt for t in tokenized}) == 1 else "mixed", max_seq_len=cfg.max_seq_len,
        truncated=sum(int((x > 0).sum()) for x in lost), truncated_tokens=sum(int(x.sum()) for x in lost),
        sources=tuple(SourceSummary(name=t.label, format=t.fmt, examples=n, rows=len(r), share=round(share, 6))
                      for t, n, r, share in zip(tokenized, examples, train, mix.shares, strict=True))
        if mix is not None else ())
    train_rows: Sequence[dict[str, torch.Tensor]] = train[0] if mix is None else MixedRows(train)
    eval_rows: Sequence[dict[str, torch.Tensor]] = evals[0] if len(evals) == 1 else MixedRows(evals)
    notes.append(eval_note(cfg, len(eval_rows)))
    template = next((t.template for t in tokenized if t.template is not None), None)
    return RunData(train_rows, eval_rows, pad_id, fmt, summary, tuple(n for n in notes if n), mix, template)


def _tokenized(cfg: TrainerConfig, source: DataSource, tokenizer, tokenizer_name: str, root: Path) -> _Source:
    """A source's examples from the node's cache, tokenized into it first when they are not there."""
    data = cfg.source_data(source)
    train_raw, eval_raw = raw_sources(source.path, data, root)
    fmt = train_raw.format_of(data)
    notes: list[str] = []
    template = None
    if fmt == "chat":
        chosen = choose_template(tokenizer, data.chat_template, tokenizer_name)
        template = chosen.text
        notes.extend(chosen.notes)
    tokenize = Tokenize(tokenizer, fmt, cfg.max_seq_len, data.mask_prompt, data.chat, template)
    settings = {"format": fmt, "tokenizer": token_cache.tokenizer_identity(tokenizer), "template": template,
                "max_seq_len": cfg.max_seq_len, "mask_prompt": data.mask_prompt, "chat": data.chat.model_dump(),
                "rules": rules_digest()}
    label = source.label() if cfg.datasets is not None else train_raw.source
    encoded, key, folder, said = _cached(root, train_raw, tokenize, settings, data.num_proc)
    notes.append(f"data: {label}: {said}")
    eval_encoded = None
    if eval_raw is not None:
        eval_encoded, _, _, said = _cached(root, eval_raw, tokenize, settings, data.num_proc)
        notes.append(f"data: {eval_raw.source}: {said}")
    return _Source(label, encoded, eval_encoded, fmt, template, notes, key, folder)


def _cached(root: Path, raw: RawSource, tokenize: Tokenize, settings: dict,
            num_proc: int | None) -> tuple[encode.Encoded, str, Path, str]:
    key = "tokens-" + token_cache.digest({"source": raw.identity, **settings})
    started = time.perf_counter()
    got = token_cache.obtain(root, key, lambda work: encode.encode(raw, tokenize, work, num_proc),
                            source=raw.source)
    encoded = encode.Encoded.load(got.path, got.meta["files"])
    procs = f"{got.meta['processes']} process{'es' if got.meta['processes'] != 1 else ''}"
    if got.built:
        said = f"{len(encoded):,} examples tokenized in {got.seconds:.1f} s ({procs}), cached in {got.path}"
    elif got.waited:
        said = (f"{len(encoded):,} examples tokenized in {got.meta.get('build_s', 0):.1f} s by another process of "
                f"this node ({procs}; ready here after {time.perf_counter() - started:.1f} s), cached in {got.path}")
    else:
        said = (f"{len(encoded):,} examples read from the cache in {time.perf_counter() - started:.1f} s "
                f"({got.path}, tokenized in {got.meta.get('build_s', 0):.1f} s)")
    return encoded, key, got.path, said


def _plan(cfg: TrainerConfig, source: _Source, packing: bool, eval_cap: int | None) -> Plan:
    """Which examples train, which are held out and which share a row: kept beside the tokens (every rank
    and every later run with these settings reads it)."""
    settings = {"packing": packing, "max_seq_len": cfg.max_seq_len, "seed": cfg.seed, "cap": eval_cap,
                "fraction": cfg.data.eval_fraction, "max_examples": cfg.data.max_examples,
                "held_elsewhere": source.eval_encoded is not None}
    path = source.folder / f"plan-{token_cache.digest(settings)}.npz"
    found = Plan.load(path)
    if found is not None:
        return found
    plan = make_plan(source.encoded, fraction=cfg.data.eval_fraction, seed=cfg.seed, eval_cap=eval_cap,
                     max_examples=cfg.data.max_examples, packing=packing, max_len=cfg.max_seq_len,
                     held_elsewhere=source.eval_encoded is not None)
    try:
        plan.save(path)
    except OSError:
        pass  # a cache this process may not write to: the plan is made again next time
    return plan


def _eval_rows(cfg: TrainerConfig, source: _Source, plan: Plan, pad_id: int) -> TokenRows:
    if source.eval_encoded is not None:
        encoded, examples = source.eval_encoded, np.arange(len(source.eval_encoded))
        if cfg.data.eval_max_rows is not None:
            examples = examples[: cfg.data.eval_max_rows]
    else:
        encoded, examples = source.encoded, plan.held
    if cfg.logging.eval_max_batches is not None:
        examples = examples[: cfg.logging.eval_max_batches * cfg.per_device_batch_size * 64]
    return TokenRows(encoded, examples, pad_id)


def _eval_caps(cap: int | None, sources: list[DataSource], usable: list[int]) -> list[int | None]:
    """Each source's most held-out examples: ``eval_max_rows`` shared out by weight (or size)."""
    if cap is None:
        return [None] * len(sources)
    if len(sources) == 1:
        return [cap]
    weights = [s.weight if s.weight is not None else (s.epochs or 1.0) * n for s, n in zip(sources, usable,
                                                                                          strict=True)]
    total = sum(weights) or 1.0
    return [max(1, int(cap * w / total)) for w in weights]


_RULES_DIGEST: list[str] = []


def rules_digest() -> str:
    """A hash of the encoding rules' source (:data:`RULES`)."""
    if not _RULES_DIGEST:
        import hashlib

        root = Path(__file__).resolve().parents[2]
        h = hashlib.sha256()
        for name in RULES:
            h.update((root / name).read_bytes())
        _RULES_DIGEST.append(h.hexdigest()[:16])
    return _RULES_DIGEST[0]


def load_rows(name: str, cfg: DataConfig) -> tuple[Rows, Rows | None]:
    """(train, eval-or-None) rows in memory, from a local file (read here, each row with its line), a
    folder saved by ``datasets`` or a hub name: what a comparison with another trainer feeds it."""
    source = resolve_dataset(name)
    path = local_path(expand(source))
    if path.is_file():
        return read_file(path, source), None
    if is_saved_folder(path):
        import datasets

        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            evaluation = loaded.get(cfg.eval_split) if cfg.eval_split else None
            return (Rows(loaded[cfg.split], f"{source} ({cfg.split})"),
                    Rows(evaluation, f"{source} ({cfg.eval_split})") if evaluation is not None else None)
        return Rows(loaded, source), None
    if looks_local(source):
        read_file(path, source)  # says what is wrong with it
    import datasets

    split = datasets.load_dataset(source, data_files=cfg.data_files, split=cfg.split)
    return Rows(split, f"{source} ({cfg.split})"), None


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


FIRST_EVAL_BATCHES = 4


def first_eval_batches(eval_max_batches: int | None) -> int:
    """Batches of the step-0 evaluation: a bounded sample (a baseline, not a result), never more than
    ``eval_max_batches``."""
    return min(FIRST_EVAL_BATCHES, eval_max_batches or FIRST_EVAL_BATCHES)


def eval_batches(rows: Sequence[dict[str, torch.Tensor]], rank: int, world: int, batch: int, pad_id: int,
                 max_batches: int | None):
    """The same number of batches on every rank (FSDP needs every rank in every forward)."""
    per_global = world * batch
    count = -(-len(rows) // per_global) if len(rows) else 0
    if max_batches is not None:
        count = min(count, max_batches)
    for g in range(count):
        chunk = rows[g * per_global + rank * batch: g * per_global + (rank + 1) * batch]
        if not chunk:  # this rank ran out: a batch that counts nothing
            dummy = dict(rows[0])
            dummy["labels"] = torch.full_like(rows[0]["labels"], IGNORE)
            chunk = [dummy]
        yield collate(chunk, pad_id)
