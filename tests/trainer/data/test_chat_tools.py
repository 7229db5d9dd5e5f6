"""Tool-use conversations learn what the model writes: a turn's text, its tool calls, its reasoning where
the template keeps it and its end-of-turn token, found without ``{% generation %}`` markers, exactly the
tokens the same template with the markers gives (transformers' ``return_assistant_tokens_mask``); tool
results are never learned, ``mask_prompt`` true or false. Templates and tokenizers built here
(:mod:`tests.support.trainer.tool_templates`); no model, one process."""

from __future__ import annotations

import pytest

from tests.support.trainer.chat_tokenizers import PLAIN, chat_tokenizer
from tests.support.trainer.run import source_of
from tests.support.trainer.tool_templates import (
    CONVERSATION,
    PARALLEL,
    TEMPLATES,
    TOOLS,
    marked,
    plain,
    tool_tokenizer,
    tools_marked,
)
from trainer.data.chat import FALLBACK_TEMPLATE, IGNORE, ChatTokens
from trainer.data.rows import Tokenize
from trainer.wire import formats
from trainer.wire.data_config import ChatFields

CASES = [(family, name) for family in TEMPLATES for name in ("sequential", "parallel")
         if (family, name) != ("llama3.1", "parallel")]  # Llama 3.1 takes one call a turn


def _messages(name: str) -> list[dict]:
    row = {"messages": CONVERSATION if name == "sequential" else PARALLEL}
    return formats.conversation(row, ChatFields(), ValueError)  # as the trainer reads a row


def _reference(tok, template: str, messages: list[dict]) -> tuple[list[int], list[bool]]:
    out = tok.apply_chat_template(messages, tools=TOOLS, chat_template=template, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    return list(out["input_ids"]), [bool(m) for m in out["assistant_masks"]]


def _runs(tok, ids: list[int], learned: list[bool]) -> list[str]:
    runs, current = [], []
    for token, keep in zip(ids, learned, strict=True):
        if keep:
            current.append(token)
        elif current:
            runs.append(tok.decode(current))
            current = []
    return runs + ([tok.decode(current)] if current else [])


@pytest.mark.parametrize(("family", "name"), CASES)
def test_assistant_turns_learn_their_whole_rendering_as_the_generation_markers_say(family, name):
    tok = tool_tokenizer(family)
    messages = _messages(name)
    template = TEMPLATES[family]
    text = tok.apply_chat_template(messages, tools=TOOLS, chat_template=plain(template), tokenize=False)
    for variant in (marked(template), tools_marked(template)):  # the markers render nothing
        assert tok.apply_chat_template(messages, tools=TOOLS, chat_template=variant, tokenize=False) == text

    want_ids, want = _reference(tok, marked(template), messages)
    ids, labels = ChatTokens(tok, plain(template), mask_prompt=True)(messages, TOOLS)
    assert ids == want_ids
    got = [label != IGNORE for label in labels]
    assert _runs(tok, ids, got) == _runs(tok, ids, want)
    assert all(label in (IGNORE, token) for label, token in zip(labels, ids, strict=True))
    assert sum(want) > 0 and any("get_weather" in run for run in _runs(tok, ids, got))  # the calls are learned

    _, results = _reference(tok, tools_marked(template), messages)
    ids, labels = ChatTokens(tok, plain(template), mask_prompt=False)(messages, TOOLS)
    assert ids == want_ids
    assert [label == IGNORE for label in labels] == results  # everything is learned but the tool results
    assert any(results) and '"temp"' not in "".join(_runs(tok, ids, [label != IGNORE for label in labels])
                                                     ).replace(" ", "")


def test_a_rows_tools_reach_the_template_and_each_turn_is_learned_through_the_data_path():
    tok = tool_tokenizer("qwen2.5")
    row = {"messages": CONVERSATION, "tools": TOOLS}
    example = Tokenize(tok, "chat", 4096, True, None, plain(TEMPLATES["qwen2.5"]))(row)
    text = tok.decode(example.input_ids)
    assert "# Tools" in text and '"get_weather"' in text
    learned = _runs(tok, example.input_ids, [label != IGNORE for label in example.labels])
    assert learned[0] == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    assert learned[1:] == ["It is 21 degrees in Paris.<|im_end|>",
                           'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n'
                           "</tool_call><|im_end|>", "18 in Rome.<|im_end|>"]
    as_text = Tokenize(tok, "chat", 4096, True, None, plain(TEMPLATES["qwen2.5"]))(
        {"messages": CONVERSATION, "tools": __import__("json").dumps(TOOLS)})  # a CSV or parquet cell
    assert as_text == example


@pytest.mark.parametrize(("template", "said"), [
    (PLAIN, "chat template: an assistant turn ends with no special token (it renders 'Hi there\\n'), so the model "
            "never learns to end its answer and generation runs on to max_new_tokens; set data.chat_template to a "
            "template that closes each assistant turn with a special token, e.g. {{ eos_token }} (<|im_end|>) after "
            "the message"),
    ("{% for m in messages %}{{ m.role | upper + ': ' + m.content + '\\n\\n' }}{% endfor %}"
     "{% if add_generation_prompt %}ASSISTANT: {% endif %}", "it renders 'Hi there\\n\\n'"),
    (FALLBACK_TEMPLATE, None),
    (plain(TEMPLATES["own"]), None),
], ids=["plain", "role-colon", "fallback-eos", "own"])
def test_a_template_that_cannot_end_a_turn_is_said_with_what_to_do(template, said):
    tok = tool_tokenizer("own") if template == plain(TEMPLATES["own"]) else chat_tokenizer(template)
    note = ChatTokens(tok, template, mask_prompt=True).closes_turns()
    if said is None:
        assert note is None
    else:
        assert note is not None and said in note and "\n" not in note


def test_the_run_says_so_at_start_when_its_template_cannot_end_a_turn(tmp_path):
    import json

    from trainer.data import dataset
    from trainer.wire.config import TrainerConfig

    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Hello there {i}"},
                                                     {"role": "assistant", "content": "hello user"}]}) + "\n"
                            for i in range(8)))
    tok = chat_tokenizer(None)
    for template, ends in ((PLAIN, False), (FALLBACK_TEMPLATE, True)):
        cfg = TrainerConfig.model_validate({"model_name": "m", "dataset_name": str(data), "output_dir": "o",
                                            "data": {"chat_template": template, "eval_fraction": 0.0}})
        notes = dataset.build(cfg, tok, packing=False, model_source=source_of(cfg)).notes
        assert notes[0] == "chat template: parameters.data.chat_template (inline)"
        said = [n for n in notes if "ends with no special token" in n]
        assert said == ([] if ends else [said[0]]) and (ends or "set data.chat_template" in said[0]), notes
