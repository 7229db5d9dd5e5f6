"""Local data files through the trainer's data entry (``trainer.data.dataset.build``, one process): every
format read with each row's line, and every bad file stopped with one line naming the file, the line
and the key. The same files through ``fsdp-tui validate``: tests/workload/test_data_validation.py."""

from __future__ import annotations

import json

import pytest

from tests.support.trainer.run import source_of
from trainer.data.dataset import build
from trainer.data.rows import IGNORE
from trainer.wire.config import SettingError, TrainerConfig
from trainer.wire.data_peek import peek

ALPACA = [{"instruction": f"Say {w}.", "input": "", "output": w} for w in ("one", "two", "three", "four")]
SQUAD_CSV = ('context,question,answers\n'
             '"Paris is in France.",Where is Paris?,"{""text"": [""France""], ""answer_start"": [12]}"\n'
             '"Rome is in Italy.",Where is Rome?,"{""text"": [""Italy""], ""answer_start"": [11]}"\n'
             '"Bern is in Switzerland.",Where is Bern?,Switzerland\n')


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _parquet(rows) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out.getvalue()


def _arrow_stream(rows) -> bytes:
    import pyarrow as pa

    table = pa.Table.from_pylist(rows)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _build(tmp_path, name: str, content: bytes | None, tok, max_seq_len: int = 64, **data):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    cfg = TrainerConfig(model_name="builtin:tiny-llama", dataset_name=str(path), output_dir="out",
                        max_seq_len=max_seq_len, data={"eval_fraction": 0.0, **data})
    return path, build(cfg, tok, packing=False, model_source=source_of(cfg))


@pytest.mark.parametrize(("name", "content", "data", "fmt"), [
    ("a.jsonl", _jsonl(ALPACA), {}, "alpaca"),
    ("a.json", json.dumps(ALPACA, indent=2).encode(), {}, "alpaca"),
    ("a.json", json.dumps({k: [r[k] for r in ALPACA] for k in ALPACA[0]}).encode(), {}, "alpaca"),  # columns
    ("a.json", _jsonl(ALPACA), {}, "alpaca"),  # JSON Lines under .json, as datasets reads it
    ("a.csv", ("instruction,input,output\n" + "".join(f"{r['instruction']},,{r['output']}\n" for r in ALPACA)).encode(),
     {}, "alpaca"),
    ("a.parquet", _parquet(ALPACA), {}, "alpaca"),
    ("a.arrow", _arrow_stream(ALPACA), {}, "alpaca"),
    ("q.csv", SQUAD_CSV.encode(), {}, "squad"),
    ("t.jsonl", "\ufeff".encode() + _jsonl([{"text": "one two"}, {"text": "three"}]), {}, "text"),
    ("s.parquet", _parquet([{"conversations": json.dumps([{"from": "human", "value": "hi"},
                                                          {"from": "gpt", "value": "yo"}])}]), {}, "chat"),
], ids=["jsonl", "json-array", "json-columns", "json-lines-in-json", "csv", "parquet", "arrow", "squad-csv-json-cells",
        "text-with-bom", "sharegpt-parquet-json-cell"])
def test_every_local_format_is_read_row_by_row(tmp_path, tok, name, content, data, fmt):
    _, run = _build(tmp_path, name, content, tok, 256, **data)
    assert run.fmt == fmt and run.summary.examples == len(run.train_rows) > 0
    if name == "q.csv":  # the answers cell is JSON text: parsed, never the answer "{"
        learned = [tok.decode([t for t, lab in zip(r["input_ids"].tolist(), r["labels"].tolist(), strict=True)
                               if lab != IGNORE]) for r in run.train_rows]
        assert learned == ["France</s>", "Italy</s>", "Switzerland</s>"]


BAD = [
    ("empty.jsonl", b"", {}, "{p}: parameters.dataset_name: the file has no rows"),
    ("blank.jsonl", b"\n  \n", {}, "{p}: parameters.dataset_name: the file has no rows"),
    ("header.csv", b"instruction,output\n", {}, "{p}: parameters.dataset_name: the file has no rows"),
    ("gap.jsonl", _jsonl(ALPACA[:2]) + b'{"instruction": "x", "outptu": "y"}\n', {},
     "{p}:3: parameters.dataset_name: row has no 'output' (did you mean 'outptu'?); the alpaca format needs "
     "instruction, output"),
    ("latin1.jsonl", _jsonl(ALPACA[:1]) + '{"instruction": "caf\u00e9", "output": "x"}\n'.encode("latin-1"), {},
     "{p}:2: parameters.dataset_name: not UTF-8 text: byte 0xe9 at column 21 (save the file as UTF-8)"),
    ("broken.jsonl", _jsonl(ALPACA[:1]) + b'{"instruction": "x" "output": "y"}\n', {},
     "{p}:2: parameters.dataset_name: not JSON: Expecting ',' delimiter (column 21)"),
    ("list.json", json.dumps(ALPACA[:2] + [{"instruction": "x"}], indent=1).encode(), {},
     "{p}:12: parameters.dataset_name: row has no 'output'; the alpaca format needs instruction, output"),
    ("bad.csv", b'context,question,answers\nx,y,"{""text"": [France]}"\n', {},
     "{p}:2: parameters.dataset_name: 'answers' is text that looks like JSON but is not: Expecting value "
     "(column 11 of the cell)"),
    ("short.csv", b"instruction,output\nonly an instruction\n", {"format": "alpaca"},
     "{p}:2: parameters.dataset_name: 'output' is empty; the alpaca format needs instruction, output"),
    ("hole.parquet", _parquet([ALPACA[0], {"instruction": "x", "input": ""}]), {},
     "{p}: parameters.dataset_name: row 2: 'output' is empty; the alpaca format needs instruction, output"),
    ("what.jsonl", _jsonl([{"prompt": "x", "completion": "y"}]), {},
     "{p}: parameters.dataset_name: cannot tell the format from columns [prompt, completion] (name the columns "
     "as a format needs them (alpaca: instruction, output; squad: context, question, answers; chat: messages or "
     "conversations; text: text), or set parameters.data.format)"),
    ("nowhere.jsonl", None, {},
     "{p}: parameters.dataset_name: no such file on this node (a local path: it must be here, or on storage every "
     "node sees)"),
    ("notes.txt", b"hello\n", {},
     "{p}: parameters.dataset_name: '.txt' is not a data file this trainer reads: use .jsonl, .json, .csv, "
     ".parquet, .arrow or a folder saved by datasets"),
]


@pytest.mark.parametrize(("name", "content", "data", "said"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_file_stops_the_data_entry_with_one_line(tmp_path, tok, name, content, data, said):
    with pytest.raises(SettingError) as err:
        _build(tmp_path, name, content, tok, **data)
    assert str(err.value) == said.format(p=tmp_path / name)
    assert "\n" not in str(err.value)


def test_a_plain_folder_is_not_taken_for_a_hub_name(tmp_path, tok):
    (tmp_path / "shards").mkdir()
    with pytest.raises(SettingError, match=r"shards: parameters\.dataset_name: this folder was not saved by datasets"):
        _build(tmp_path, "shards", None, tok)


def test_examples_cut_at_max_seq_len_are_counted_for_the_start_of_the_run(tmp_path, tok):
    long = {"instruction": "Say it.", "input": "", "output": " ".join(["one two three"] * 40)}
    _, run = _build(tmp_path, "a.jsonl", _jsonl([long, *ALPACA, long]), tok)
    assert (run.summary.examples, run.summary.truncated) == (6, 2)
    full = len(tok("### Instruction:\nSay it.\n\n### Response:\n", add_special_tokens=False)["input_ids"]) + 1 \
        + len(tok(long["output"] + "</s>", add_special_tokens=False)["input_ids"])
    assert run.summary.truncated_tokens == 2 * (full - 64)
    assert run.summary.words() == f"6 examples (alpaca), 2 cut at max_seq_len 64 ({2 * (full - 64):,} tokens lost)"


def _one_mib_cut_in_a_character() -> bytes:
    from trainer.wire.data_peek import PEEK_BYTES

    first = b'{"text": "short"}\n'
    if (PEEK_BYTES - len(first) - len(b'{"text": "')) % 2 == 0:
        first = b'{"text": "shorts"}\n'
    return first + ('{"text": "' + "\u00e9" * PEEK_BYTES + '"}\n').encode()


@pytest.mark.parametrize(("name", "content", "columns", "problem"), [
    ("d.jsonl", _jsonl(ALPACA * 40000), ("instruction", "input", "output"), None),  # only the first MiB is read
    # a character cut in two where the first MiB ends is not bad UTF-8; a bad byte within it is
    ("d.jsonl", _one_mib_cut_in_a_character(), ("text",), None),
    ("d.jsonl", b"\n".join([json.dumps(ALPACA[0]).encode()] * 3) + b"\n\xff\n", (),
     "line 4: not UTF-8 text: byte 0xff at column 1 (save the file as UTF-8)"),
    ("d.jsonl", b'{"a": 1}\n{"a": \n', (), "line 2: not JSON: Expecting value (column 7)"),
    ("d.jsonl", b"", (), "the file has no rows"),
    # what the first MiB cannot tell is left to the run: one long first row, one large object
    ("d.jsonl", _jsonl([{"text": "x" * (1 << 21)}]), (), None),
    ("d.json", json.dumps({"text": ["x"] * 400000}, indent=1).encode(), (), None),
    ("d.json", json.dumps(ALPACA * 20000, indent=1).encode(), ("instruction", "input", "output"), None),
], ids=["first-mib-only", "character-cut-at-the-mib", "bad-byte-within", "bad-json", "empty", "long-first-row",
        "large-object", "large-array"])
def test_validate_peeks_at_the_first_rows_only(tmp_path, name, content, columns, problem):
    path = tmp_path / name
    path.write_bytes(content)
    found = peek(path)
    assert (found.columns, found.problem) == (columns, problem)
    assert len(found.rows) <= 20
