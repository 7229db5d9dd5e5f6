"""Chat data as the template means it: tokens from one render of the whole conversation, labels on what
the assistant writes (its text and the end-of-turn token after it), ShareGPT and mapped fields read,
a workload's template used, a missing one said. Tokenizers built here; no model, one process."""

from __future__ import annotations

import pytest

from tests.support.trainer.chat_tokenizers import CHATML_GENERATION, LLAMA3, PLAIN, QWEN3, chat_tokenizer
from trainer.data.chat import FALLBACK_TEMPLATE, IGNORE, ChatTokens, choose_template
from trainer.data.rows import Tokenize
from trainer.wire.config import SettingError
from trainer.wire.data_config import ChatFields
from trainer.wire.data_files import DataError, Rows

TWO_TURNS = [{"role": "system", "content": "Be brief, please."},
             {"role": "user", "content": "Hello there!"}, {"role": "assistant", "content": "hello user"},
             {"role": "user", "content": "what is two plus two"}, {"role": "assistant", "content": "four"}]


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer(QWEN3)


def _learned(tok, ids: list[int], labels: list[int]) -> list[str]:
    """The learned tokens, decoded run by run."""
    runs, current = [], []
    for token, label in zip(ids, labels, strict=True):
        if label != IGNORE:
            assert label == token
            current.append(token)
        elif current:
            runs.append(tok.decode(current))
            current = []
    return runs + ([tok.decode(current)] if current else [])


def test_a_qwen3_style_template_is_tokenized_from_one_render_with_exact_labels(tok):
    """The last assistant turn gets an empty think block, the earlier one none: prefix renders lost the
    next user header and labelled the earlier turn's think block. Here every token is the one render's
    and exactly what the model writes after its generation prompt is learned: the last turn's (empty)
    reasoning, each turn's text and its <|im_end|>."""
    ids, labels = ChatTokens(tok, QWEN3, mask_prompt=True)(TWO_TURNS)
    segments = [("<|im_start|>system\nBe brief, please.<|im_end|>\n<|im_start|>user\nHello there!<|im_end|>\n"
                 "<|im_start|>assistant\n", False), ("hello user<|im_end|>", True),
                ("\n<|im_start|>user\nwhat is two plus two<|im_end|>\n<|im_start|>assistant\n", False),
                ("<think>\n\n</think>\n\nfour<|im_end|>", True), ("\n", False)]
    render = "".join(text for text, _ in segments)
    assert tok.apply_chat_template(TWO_TURNS, tokenize=False) == render
    assert ids == tok.apply_chat_template(TWO_TURNS, tokenize=True, return_dict=False)
    expected = []
    for text, learned in segments:
        piece = tok(text, add_special_tokens=False)["input_ids"]
        expected += piece if learned else [IGNORE] * len(piece)
    assert labels == expected


@pytest.mark.parametrize(("template", "learned"), [
    (QWEN3, ["hello user<|im_end|>", "<think>\n\n</think>\n\nfour<|im_end|>"]),  # the last turn's reasoning
    (LLAMA3, ["hello user<|eot_id|>", "four<|eot_id|>"]),
    (CHATML_GENERATION, ["hello user<|im_end|>", "four<|im_end|>"]),  # the template's own markers
    # No end-of-turn token to learn: the text alone. A token that starts in the template's text and ends in
    # the message's is learned (" four" after "Assistant:"): the model writes it.
    (PLAIN, ["hello user", " four"]),
    (FALLBACK_TEMPLATE, ["hello user<|im_end|>", " four<|im_end|>"]),  # ends each turn with eos
], ids=["qwen3", "llama3", "chatml-generation-markers", "plain", "fallback"])
def test_each_template_learns_the_assistant_text_and_its_end_of_turn_from_one_render(template, learned):
    tok = chat_tokenizer(template)
    ids, labels = ChatTokens(tok, template, mask_prompt=True)(TWO_TURNS)
    assert ids == tok.apply_chat_template(TWO_TURNS, chat_template=template, tokenize=True, return_dict=False)
    assert _learned(tok, ids, labels) == learned
    everything = ChatTokens(tok, template, mask_prompt=False)(TWO_TURNS)
    assert everything == (ids, ids)


def test_a_reasoning_trace_is_learned_where_the_template_shows_it(tok):
    turns = [{"role": "user", "content": "what is two plus two"},
             {"role": "assistant", "content": "<think>\nfour\n</think>\n\nfour"},
             {"role": "user", "content": "thanks"}, {"role": "assistant", "content": "bye"}]
    ids, labels = ChatTokens(tok, QWEN3, mask_prompt=True)(turns)
    # an earlier turn's trace is dropped by the template, so nothing of it is in the tokens or the labels; the
    # last turn's (empty) one is what the model writes before its answer
    assert "</think>\n\nfour" not in tok.decode(ids)
    assert _learned(tok, ids, labels) == ["four<|im_end|>", "<think>\n\n</think>\n\nbye<|im_end|>"]


SHAREGPT = {"conversations": [{"from": "system", "value": "Be brief, please."},
                              {"from": "human", "value": "Hello there!"}, {"from": "gpt", "value": "hello user"},
                              {"from": "human", "value": "what is two plus two"}, {"from": "gpt", "value": "four"}]}
MAPPED = {"dialog": [{"speaker": "rules", "text": "Be brief, please."}, {"speaker": "customer", "text": "Hello there!"},
                     {"speaker": "agent", "text": "hello user"}, {"speaker": "customer", "text": "what is two plus two"},
                     {"speaker": "agent", "text": "four"}]}
MAPPING = ChatFields(messages_field="dialog", role_key="speaker", content_key="text",
                     roles={"rules": "system", "customer": "user", "agent": "assistant"})


@pytest.mark.parametrize(("row", "fields"), [
    ({"messages": TWO_TURNS}, ChatFields()),
    (SHAREGPT, ChatFields()),
    ({"conversations": TWO_TURNS}, ChatFields()),
    (MAPPED, MAPPING),
    ({"messages": '[{"role": "user", "content": "Hello there!"}, {"role": "assistant", "content": "hi"}]'},
     ChatFields()),  # a CSV or parquet cell holding the turns as JSON text
], ids=["messages", "sharegpt", "conversations-with-role-content", "mapped", "json-text-cell"])
def test_sharegpt_and_mapped_fields_give_the_same_tokens_as_messages(tok, row, fields):
    t = Tokenize(tok, "chat", 512, True, fields, QWEN3)
    got = t(row)
    if "hi" in str(row):
        assert _learned(tok, got.input_ids, got.labels) == ["<think>\n\n</think>\n\nhi<|im_end|>"]
        return
    assert got == Tokenize(tok, "chat", 512, True)({"messages": TWO_TURNS})


@pytest.mark.parametrize(("row", "fields", "said"), [
    ({"messages": [{"role": "narrator", "content": "x"}]}, ChatFields(),
     "f.jsonl:7: parameters.dataset_name: 'messages' turn 1: unknown role 'narrator' (known: system, user, "
     "assistant, tool, developer, ipython, function, human, gpt, chatgpt, bot, model, function_call, observation; "
     "map it with parameters.data.chat.roles, e.g. {narrator: user})"),
    ({"messages": "hello"}, ChatFields(),
     "f.jsonl:7: parameters.dataset_name: 'messages' must be a non-empty list of turns, not \"hello\""),
    ({"messages": "[{\"role\": 1,"}, ChatFields(),
     "f.jsonl:7: parameters.dataset_name: 'messages' is text that looks like JSON but is not: Expecting "
     "property name enclosed in double quotes (column 13 of the cell)"),
    ({"chat": []}, ChatFields(),
     "f.jsonl:7: parameters.dataset_name: row has no 'messages'; a chat row needs messages or conversations, "
     "or the column parameters.data.chat.messages_field names"),
    ({"dialog": [{"speaker": "customer", "words": "hi"}]}, MAPPING,
     "f.jsonl:7: parameters.dataset_name: 'dialog' turn 1 has no 'text' (its keys: [speaker, words]; "
     "parameters.data.chat.content_key names another)"),
    ({"messages": [{"content": "hi"}]}, ChatFields(),
     "f.jsonl:7: parameters.dataset_name: 'messages' turn 1 has no 'role' (its keys: [content]; "
     "parameters.data.chat.role_key names another)"),
], ids=["unknown-role", "not-a-list", "bad-json-cell", "no-turns-column", "mapped-content-missing", "no-role"])
def test_a_bad_conversation_is_named_by_its_line_and_key(tok, row, fields, said):
    with pytest.raises(DataError) as err:
        Tokenize(tok, "chat", 512, True, fields, QWEN3).many(Rows([row], "f.jsonl", [7]))
    assert str(err.value) == said


def test_a_template_that_refuses_a_conversation_is_named_by_its_line(tok):
    strict = "{% for m in messages %}{% if m.role == 'user' and loop.index0 % 2 %}" \
             "{{ raise_exception('roles must alternate') }}{% endif %}{{ m.content }}{% endfor %}"
    rows = Rows([{"messages": TWO_TURNS[1:3]}, {"messages": TWO_TURNS[1:2] * 2}], "f.jsonl", [1, 2])
    with pytest.raises(DataError, match=r"^f\.jsonl:2: parameters\.dataset_name: the chat template refused this "
                                        r"conversation: roles must alternate$"):
        Tokenize(tok, "chat", 512, True, None, strict).many(rows)


def test_the_template_comes_from_the_workload_or_the_tokenizer_and_a_missing_one_is_said(tmp_path, tok):
    inline = choose_template(tok, PLAIN, "m")
    assert inline.text == PLAIN and inline.note == "chat template: parameters.data.chat_template (inline)"
    path = tmp_path / "llama3.jinja"
    path.write_text(LLAMA3)
    assert choose_template(tok, str(path), "m").text == LLAMA3
    assert choose_template(tok, None, "m").text == QWEN3 and choose_template(tok, None, "m").note is None
    bare = choose_template(chat_tokenizer(None), None, "my-model")
    assert bare.text == FALLBACK_TEMPLATE
    assert bare.note == ("the tokenizer of my-model has no chat template and parameters.data.chat_template is not "
                         "set: conversations are rendered as 'role: text<eos>' lines; set data.chat_template to "
                         "the template the model is used with")
    with pytest.raises(SettingError, match=r"^parameters\.data\.chat_template: no file 'nowhere\.jinja' on this node"):
        choose_template(tok, "nowhere.jinja", "m")


def test_examples_cut_at_max_seq_len_keep_count_of_what_they_lost(tok):
    t = Tokenize(tok, "chat", 8, True, None, QWEN3)
    full = Tokenize(tok, "chat", 4096, True, None, QWEN3)({"messages": TWO_TURNS})
    cut = t({"messages": TWO_TURNS})
    assert len(cut.input_ids) == 8 and cut.lost == len(full.input_ids) - 8
    assert full.lost == 0
