"""Tokens through the node's cache: the rows ``build`` gives are, row for row and tensor for tensor, the
rows of examples tokenized one by one in memory (every format, chat template, mask, cut and packing,
one process or several); a second start reads the cache; one build per key however many processes ask
at once, and a builder that died leaves nothing half-made; the first bad row of a file is the one a
whole-file reader names. One process each (the encoding's own processes aside)."""

from __future__ import annotations

import json
import multiprocessing
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.trainer.chat_tokenizers import CHATML_GENERATION, LLAMA3, QWEN3, chat_tokenizer
from tests.support.trainer.run import source_of
from trainer.data import token_cache
from trainer.data.chat import choose_template
from trainer.data.dataset import build, load_rows
from trainer.data.packing import first_fit_decreasing
from trainer.data.rows import IGNORE, Tokenize, pack, pad_rows
from trainer.wire.config import SettingError, TrainerConfig
from trainer.wire.data_files import Rows, read_file

WORDS = ("hello", "user", "how", "are", "you", "I'm", "good", "assistant", "system", "what", "is", "two", "plus",
         "four", "thanks", "bye")


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def _alpaca(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"instruction": _words(rng, 1, 6), "input": _words(rng, 0, 8) if i % 3 else "",
             "output": _words(rng, 0 if i % 7 == 0 else 1, 30)} for i in range(count)]


def _chat(count: int, seed: int = 0, sharegpt: bool = False) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        turns = [{"role": "system", "content": _words(rng, 1, 4)}] if rng.random() < 0.3 else []
        for _ in range(rng.randint(1, 3)):
            turns += [{"role": "user", "content": _words(rng, 1, 8)},
                      {"role": "assistant", "content": _words(rng, 1, 12)}]
        if sharegpt:
            names = {"system": "system", "user": "human", "assistant": "gpt"}
            rows.append({"conversations": [{"from": names[t["role"]], "value": t["content"]} for t in turns]})
        else:
            rows.append({"messages": turns})
    return rows


def _write(path, rows) -> None:
    suffix = path.suffix
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == ".json":
        path.write_text(json.dumps(rows, indent=1))
    elif suffix == ".csv":
        import csv

        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(rows)
        if suffix == ".parquet":
            pq.write_table(table, path, row_group_size=97)
        else:
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table, max_chunksize=50)


def _in_memory(cfg: TrainerConfig, tok, packing: bool):
    """The rows as the trainer made them before its cache: every example tokenized in memory, those with
    nothing to learn dropped, the held-out ones drawn by ``seed``, packed or one a row."""
    data = cfg.source_data(cfg.sources()[0])
    rows, _ = load_rows(cfg.sources()[0].path, data)
    fmt = data.format
    template = choose_template(tok, data.chat_template, "").text if fmt == "chat" else None
    examples = Tokenize(tok, fmt, cfg.max_seq_len, data.mask_prompt, data.chat, template).many(rows)
    examples = [ex for ex in examples if any(label != IGNORE for label in ex.labels[1:])]
    held: list = []
    if data.eval_fraction > 0 and len(examples) >= 2:
        perm = torch.randperm(len(examples), generator=torch.Generator().manual_seed(cfg.seed)).tolist()
        k = max(1, round(len(examples) * data.eval_fraction))
        if data.eval_max_rows is not None:
            k = min(k, data.eval_max_rows)
        out = set(perm[-k:])
        held = [ex for i, ex in enumerate(examples) if i in out]
        examples = [ex for i, ex in enumerate(examples) if i not in out]
    train = pack(examples, cfg.max_seq_len, tok.pad_token_id) if packing else pad_rows(examples, tok.pad_token_id)
    return train, pad_rows(held, tok.pad_token_id), examples


def _same(got, want) -> None:
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.keys() == b.keys()
        for key in b:
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), (i, key)


@pytest.fixture(scope="module")
def tiny_tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


CASES = [
    # (file, rows, data settings, max_seq_len, tokenizer)
    ("a.jsonl", _alpaca(300), {"format": "alpaca"}, 48, "tiny"),
    ("a.jsonl", _alpaca(300), {"format": "alpaca", "mask_prompt": False}, 32, "tiny"),
    ("a.json", _alpaca(120, 1), {"format": "alpaca"}, 64, "tiny"),
    ("a.csv", _alpaca(120, 2), {"format": "alpaca"}, 64, "tiny"),
    ("a.parquet", _alpaca(250, 3), {"format": "alpaca", "eval_max_rows": 3}, 40, "tiny"),
    ("a.arrow", _alpaca(180, 4), {"format": "alpaca"}, 40, "tiny"),
    ("q.jsonl", [{"context": _words(random.Random(i), 3, 20), "question": _words(random.Random(-i), 2, 6),
                  "answers": {"text": [_words(random.Random(i + 9), 1, 3)], "answer_start": [0]}} for i in range(150)],
     {"format": "squad"}, 48, "tiny"),
    ("t.jsonl", [{"text": _words(random.Random(i), 0, 40)} for i in range(200)], {"format": "text"}, 24, "tiny"),
    ("c.jsonl", _chat(120), {"format": "chat"}, 96, QWEN3),
    ("c.jsonl", _chat(120, 1, sharegpt=True), {"format": "chat", "mask_prompt": True}, 64, LLAMA3),
    ("c.parquet", _chat(90, 2), {"format": "chat"}, 128, CHATML_GENERATION),
    ("c.jsonl", _chat(60, 3), {"format": "chat", "chat_template": LLAMA3}, 80, QWEN3),
    ("c.jsonl", _chat(60, 4), {"format": "chat", "mask_prompt": False}, 80, QWEN3),
]


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "one-a-row"])
@pytest.mark.parametrize(("name", "rows", "data", "max_len", "tokenizer"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_the_cache_gives_the_rows_of_examples_tokenized_one_by_one(tmp_path, tiny_tok, name, rows, data, max_len,
                                                                   tokenizer, packing):
    tok = tiny_tok if tokenizer == "tiny" else chat_tokenizer(tokenizer)
    path = tmp_path / name
    _write(path, rows)
    cfg = TrainerConfig(model_name="m", dataset_name=str(path), output_dir="out", max_seq_len=max_len, seed=7,
                        data={"eval_fraction": 0.1, "cache_dir": str(tmp_path / "cache"), **data})
    got = build(cfg, tok, packing, model_source=source_of(cfg))
    train, held, examples = _in_memory(cfg, tok, packing)
    _same(got.train_rows, train)
    _same(got.eval_rows, held)
    assert got.summary.examples == len(examples)
    assert (got.summary.truncated, got.summary.truncated_tokens) == (sum(1 for e in examples if e.lost),
                                                                    sum(e.lost for e in examples))
    assert got.learned_counts() == [int(((r["labels"][1:] != IGNORE) & (r["position_ids"][1:] != 0)).sum())
                                    for r in train]


def test_several_processes_give_the_rows_of_one_and_a_second_start_reads_the_cache(tmp_path, tiny_tok):
    path = tmp_path / "a.jsonl"
    _write(path, _alpaca(3000, 5))
    base = {"model_name": "m", "dataset_name": str(path), "output_dir": "out", "max_seq_len": 64}
    one = TrainerConfig(**base, data={"cache_dir": str(tmp_path / "one"), "num_proc": 1})
    three = TrainerConfig(**base, data={"cache_dir": str(tmp_path / "three"), "num_proc": 3})
    first = build(three, tiny_tok, True, model_source=source_of(three))
    assert any("tokenized in" in n and "(3 processes)" in n for n in first.notes), first.notes
    _same(first.train_rows, build(one, tiny_tok, True, model_source=source_of(one)).train_rows)
    again = build(three, tiny_tok, True, model_source=source_of(three))
    assert any("read from the cache" in n for n in again.notes), again.notes
    _same(again.train_rows, first.train_rows)
    _write(path, _alpaca(3000, 6))  # other content, the same name: other tokens
    changed = build(three, tiny_tok, True, model_source=source_of(three))
    assert any("tokenized in" in n for n in changed.notes)
    assert len({p.name for p in (tmp_path / "three").iterdir() if p.name.startswith("tokens-")}) == 2


READ_AGAIN = """import json, sys
from transformers import AutoTokenizer
from trainer.data.dataset import build
from trainer.model.source import ModelSource
from trainer.wire.config import TrainerConfig
cfg = TrainerConfig(**json.loads(sys.argv[1]))
got = build(cfg, AutoTokenizer.from_pretrained(sys.argv[2]), True, ModelSource.resolve(cfg.model_name, cfg.model.tokenizer))
print(json.dumps({"pandas": "pandas" in sys.modules, "notes": got.notes, "rows": len(got.train_rows)}))
"""


def test_a_start_that_reads_the_cache_does_not_import_pandas(tmp_path, tiny_tok, tiny_model_dir):
    """What a rank does at each start after the first: the rows come from the cache through pyarrow alone
    (pyarrow's ``to_numpy`` would import pandas: a quarter of a second and its memory in every rank)."""
    path = tmp_path / "a.jsonl"
    _write(path, _alpaca(200, 7))
    params = {"model_name": "m", "dataset_name": str(path), "output_dir": "out", "max_seq_len": 48,
              "data": {"cache_dir": str(tmp_path / "cache")}}
    first = build(TrainerConfig(**params), tiny_tok, True, model_source=source_of(TrainerConfig(**params)))
    out = subprocess.run([sys.executable, "-c", READ_AGAIN, json.dumps(params), str(tiny_model_dir)],
                         cwd=Path(__file__).resolve().parents[3], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    again = json.loads(out.stdout.splitlines()[-1])
    assert any("read from the cache" in n for n in again["notes"]), again["notes"]
    assert again["rows"] == len(first.train_rows) and again["pandas"] is False


def _obtain(root: str, key: str, started, gate) -> None:
    def slow(work):
        started.put(key)
        gate.wait(30)
        (work / "x").write_text("built")
        return {"files": []}

    token_cache.obtain(token_cache.Path(root), key, slow)


def _never(work):
    raise AssertionError("built again")


def test_one_build_per_key_and_a_dead_builder_leaves_nothing_half_made(tmp_path):
    root = tmp_path / "cache"
    ctx = multiprocessing.get_context("fork")
    started, gate = ctx.Queue(), ctx.Event()
    builders = [ctx.Process(target=_obtain, args=(str(root), "k", started, gate)) for _ in range(3)]
    for p in builders:
        p.start()
    assert started.get(timeout=30) == "k"  # one builds, the others wait on the key's lock
    gate.set()
    for p in builders:
        p.join(30)
    assert started.empty() and all(p.exitcode == 0 for p in builders)
    assert (root / "k" / "x").read_text() == "built" and token_cache.read_meta(root / "k") is not None
    # finished by another process since this one began (another rank of this start): said as built for it
    assert token_cache.obtain(root, "k", _never).waited
    meta = token_cache.read_meta(root / "k")
    assert meta is not None
    token_cache.write_json(root / "k" / "meta.json", {**meta, "built_at": meta["built_at"] - 86400})
    assert not token_cache.obtain(root, "k", _never).waited  # an earlier run's: read from the cache

    dying = ctx.Process(target=_obtain, args=(str(root), "d", started, ctx.Event()))
    dying.start()
    assert started.get(timeout=30) == "d"
    dying.kill()  # mid-build: its half-made folder stays behind, its lock goes with it
    dying.join(30)
    assert [p.name for p in root.glob(".build-d-*")]
    got = token_cache.obtain(root, "d", lambda work: {"files": [], "again": True})
    assert got.built and got.meta["again"] and not list(root.glob(".build-d-*"))
    assert not token_cache.obtain(root, "d", _never).waited  # this process's own build


def _reference_ffd(lengths: list[int], capacity: int) -> list[list[int]]:
    """First-fit decreasing one example at a time (the trainer's earlier packer)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rows: list[list[int]] = []
    free: list[int] = []
    for i in order:
        row = next((r for r, room in enumerate(free) if room >= lengths[i]), len(rows))
        if row == len(rows):
            rows.append([])
            free.append(capacity)
        rows[row].append(i)
        free[row] -= lengths[i]
    return [sorted(r) for r in rows]


def test_packing_on_arrays_places_every_example_as_one_by_one_does():
    rng = random.Random(3)
    for trial in range(200):
        capacity = rng.choice([1, 7, 10, 64, 500])
        lengths = [rng.randint(1, capacity) for _ in range(rng.randint(0, 200))]
        if trial % 4 == 0:  # many equal lengths: a run of them fills rows together
            lengths = [rng.choice([capacity, max(1, capacity // 2), max(1, capacity // 3), 1]) for _ in lengths]
        offsets, members = first_fit_decreasing(np.array(lengths, dtype=np.int64), capacity)
        got = [members[offsets[r]:offsets[r + 1]].tolist() for r in range(len(offsets) - 1)]
        assert got == _reference_ffd(lengths, capacity), (lengths, capacity)


def test_the_first_bad_row_is_named_as_a_whole_file_reader_names_it_whatever_process_finds_it(tmp_path, tiny_tok):
    """Bad bytes win over bad JSON, bad JSON over a row the format cannot read; then the first line: the
    line ``read_file`` names, though another process reads it."""
    lines = "".join(json.dumps(r) + "\n" for r in _alpaca(6000, 8)).encode().split(b"\n")
    lines[5000] = b'{"instruction": "x"}'  # a row without its answer, late
    lines[3000] = b'{"instruction": "x", "output": }'  # bad JSON, earlier
    lines[3500] = b'{"instruction": "x", "output": 1'
    path = tmp_path / "bad.jsonl"
    cfg = TrainerConfig(model_name="m", dataset_name=str(path), output_dir="out",
                        data={"cache_dir": str(tmp_path / "c"), "num_proc": 3})
    said = []
    for change in (None, (5500, '{"instruction": "caf\u00e9", "output": "x"}'.encode("latin-1"))):
        if change is not None:  # bytes, later still
            lines[change[0]] = change[1]
        path.write_bytes(b"\n".join(lines))
        with pytest.raises(SettingError) as whole:
            read_file(path)
        with pytest.raises(SettingError) as err:
            build(cfg, tiny_tok, False, model_source=source_of(cfg))
        assert str(err.value) == str(whole.value)
        assert (":3001: " if change is None else ":5501: ") in str(err.value)
        said.append(str(err.value))
    root = tmp_path / "c"
    assert not [f for f in root.glob("tokens-*") if f.is_dir()] and not list(root.glob(".build-*"))
    # each problem is remembered: the ranks that waited for the build, and the next run, say it without building
    calls: list = []
    again = []
    for failed in root.glob("tokens-*.failed.json"):
        with pytest.raises(SettingError) as err:
            token_cache.obtain(root, failed.name.removesuffix(".failed.json"), lambda work: calls.append(work) or {})
        again.append(str(err.value))
    assert sorted(again) == sorted(said) and not calls


def test_rows_of_a_part_are_named_by_their_place_in_the_source():
    rows = Rows([{"a": 1}, {"a": 2}], "d.parquet", first=1000)
    assert str(rows.error(1, "bad")) == "d.parquet: parameters.dataset_name: row 1002: bad"


def test_a_cache_that_cannot_be_written_is_said_in_one_line(tmp_path):
    import errno

    def full(work):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(SettingError) as err:
        token_cache.obtain(tmp_path / "cache", "k", full)
    assert str(err.value) == (f"parameters.data.cache_dir: cannot write the token cache in {tmp_path}/cache: No space "
                              "left on device (free space there, or point data.cache_dir or $FSDP_TUI_DATA_CACHE at a "
                              "disk that has it)")
    assert not list((tmp_path / "cache").glob(".build-*")) and not (tmp_path / "cache" / "k").exists()

    def lost(work):
        raise FileNotFoundError(errno.ENOENT, "gone")  # not the cache's own trouble: as it is

    with pytest.raises(FileNotFoundError):
        token_cache.obtain(tmp_path / "cache", "k", lost)


def test_a_remembered_data_problem_names_the_file_as_this_run_names_it(tmp_path):
    """The same bytes under another path have the same key: the problem a build found in one is said of
    the other by the other's own name, never by the path of the run that found it."""
    from trainer.wire.data_files import DataError

    def bad(work):
        raise DataError("/old/run/data.jsonl", "row has no 'output'", line=26)

    with pytest.raises(DataError):
        token_cache.build_or_read(tmp_path, "tokens-k", bad, source="/old/run/data.jsonl")
    with pytest.raises(DataError) as again:
        token_cache.build_or_read(tmp_path, "tokens-k", bad, source="/new/run/data.jsonl")
    assert again.value.source == "/new/run/data.jsonl" and again.value.line == 26
