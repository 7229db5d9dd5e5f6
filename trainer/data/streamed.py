"""A run's data streamed (``data.streaming``): each source opened where it is, its held-out rows read
first, and the stream of training rows that every rank reads ahead of training (:mod:`trainer.data.stream`).

A streamed run needs ``max_steps`` (no length is known ahead) and weights for a mixture's sources
(epoch counts need their sizes). ``streaming: auto`` streams when a source is larger than
``data.streaming_above_gb`` (a local file or a bucket object: their sizes are known cheaply).
"""

from __future__ import annotations

import json

from trainer.data import token_cache
from trainer.data.chat import choose_template
from trainer.data.rows import Tokenize, pad_rows
from trainer.data.run_data import RunData, eval_note
from trainer.data.stream import GlobalStream, SourceStream, StreamRows, evaluation_rows, held_out
from trainer.data.stream_sources import open_reader, source_size
from trainer.model.source import ModelSource
from trainer.wire import formats
from trainer.wire.config import SettingError, TrainerConfig
from trainer.wire.data_files import DataError
from trainer.wire.protocol import DataSummary, SourceSummary


def streaming(cfg: TrainerConfig) -> str | None:
    """Why this run streams (``None``: it does not)."""
    if cfg.data.streaming is True:
        return "data.streaming"
    if cfg.data.streaming == "auto":
        limit = cfg.data.streaming_above_gb * 1e9
        for source in cfg.sources():
            size = source_size(source.path)
            if size is not None and size > limit:
                return f"{source.label()} is {size / 1e9:.1f} GB, over data.streaming_above_gb"
    return None


def build(cfg: TrainerConfig, tokenizer, packing: bool, why: str, model_source: ModelSource) -> RunData:
    """The held-out rows and the stream of training rows (``why``: why the run streams; ``tokenizer``:
    ``model_source``'s, which its notes name)."""
    if not cfg.max_steps:
        raise SettingError(f"parameters.max_steps: the data is streamed ({why}) and a stream's length is not known "
                           "ahead: set max_steps (or data.streaming: false to tokenize it into the cache first)")
    sources = cfg.sources()
    if any(s.epochs is not None for s in sources):
        raise SettingError("parameters.datasets: a streamed source takes a weight, not epochs (its size is not known "
                           "ahead)")
    weights = [s.weight if s.weight is not None else 1.0 for s in sources]
    shares = tuple(w / sum(weights) for w in weights)
    cap = cfg.data.eval_max_rows if cfg.data.eval_fraction > 0 else 0
    streams, held, described, notes = [], [], [], []
    template_used = None
    tok_id = token_cache.tokenizer_identity(tokenizer)
    for index, (source, share) in enumerate(zip(sources, shares, strict=True)):
        data = cfg.source_data(source)
        try:
            reader = open_reader(source.path, data)
            fmt = _format(reader, data)
        except DataError as err:  # named by the key that names the source
            raise err.keyed(cfg.source_key(index)) from None
        template = None
        if fmt == "chat":
            chosen = choose_template(tokenizer, data.chat_template, model_source.tokenizer)
            template, template_used = chosen.text, template_used or chosen.text
            notes.extend(chosen.notes)
        tokenize = Tokenize(tokenizer, fmt, cfg.max_seq_len, data.mask_prompt, data.chat, template)
        if cap is None:
            raise SettingError("parameters.data.eval_max_rows: a streamed source holds out its first rows: give how "
                               "many (null takes a share of a size that is not known)")
        count = max(1, round(cap * share)) if cap else 0
        try:
            if data.eval_split:  # its own evaluation rows: training takes every row of the split it trains on
                examples, start = evaluation_rows(open_reader(source.path, data.model_copy(
                    update={"split": data.eval_split})), tokenize, count or cfg.data.eval_max_rows or 0), reader.start
                said = f"{len(examples):,} rows of its split '{data.eval_split}' held out"
            else:
                examples, start, count = held_out(reader, tokenize, count, cfg.data.eval_fraction)
                said = f"its first {count:,} rows held out"
        except DataError as err:
            raise err.keyed(cfg.source_key(index)) from None
        held += examples
        streams.append(SourceStream(index, reader, tokenize, packing=packing, max_len=cfg.max_seq_len,
                                    pad_id=tokenizer.pad_token_id, seed=cfg.seed, shuffle=data.shuffle, start=start,
                                    key=cfg.source_key(index)))
        label = source.label() if cfg.datasets is not None else reader.source
        described.append({"source": reader.source, "format": fmt, "template": template, "mask": data.mask_prompt,
                          "chat": data.chat.model_dump(), "held": count, "share": share})
        notes.append(f"data: {label}: streamed ({why}): read and tokenized as it is trained on, {said}")
        summary_source = SourceSummary(name=label, format=fmt, examples=0, rows=0, share=round(share, 6))
        described[-1]["summary"] = summary_source
    identity = json.dumps([{k: v for k, v in d.items() if k != "summary"} for d in described] +
                          [tok_id, cfg.max_seq_len, packing, cfg.seed], sort_keys=True, default=str)
    rows = StreamRows(GlobalStream(streams, shares, cfg.seed, cfg.data.shuffle), identity, cfg.data.num_workers)
    fmts = {d["format"] for d in described}
    fmt = described[0]["format"]
    summary = DataSummary(examples=0, eval_examples=len(held), format=fmt if len(fmts) == 1 else "mixed",
                          max_seq_len=cfg.max_seq_len, truncated=0, truncated_tokens=0,
                          sources=tuple(d["summary"] for d in described) if cfg.datasets is not None else (),
                          streamed=True)
    eval_rows = pad_rows(held, tokenizer.pad_token_id)
    notes.append(eval_note(cfg, len(eval_rows)))
    return RunData(rows, eval_rows, tokenizer.pad_token_id, fmt, summary, tuple(notes), None, template_used, rows)


def _format(reader, data) -> str:
    if data.format != "auto":
        return data.format
    first = reader.read(reader.start, 1).rows
    columns = list(first.items[0]) if len(first) else []
    found = formats.detect_format(columns, data.chat)
    if found is None:
        message, hint = formats.column_problem(columns, "auto", data.chat) or ("", "")
        raise DataError(reader.source, f"{message} ({hint})")
    return found
