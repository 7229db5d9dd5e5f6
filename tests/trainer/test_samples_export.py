"""A sample is what the export says: its prompt is tokenized as the exported tokenizer tokenizes the
prompt's text (the BOS a Llama-style tokenizer adds, none where a tokenizer adds none), so ``AutoTokenizer`` +
``generate`` (greedy) on the exported folder answers what the sample answered. One process (gloo, one rank),
the built-in tiny model and tokenizer, and a GPT-2-style tokenizer that declares a BOS it never adds."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist

from trainer.data.chat import choose_template
from trainer.loop.samples import Prompt, Sampler, render
from trainer.parallel import Dist
from trainer.wire.config import SamplesConfig

PROMPT = "Add the two numbers."
NEW = 10


@pytest.fixture
def one_rank():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield Dist(0, 1, 0, 1, torch.device("cpu"))
    dist.destroy_process_group()


def _gpt2_style(folder, tmp_path):
    """The built-in tokenizer and model, the tokenizer declaring a BOS it does not add (as GPT-2's)."""
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    tok = AutoTokenizer.from_pretrained(folder)
    bare = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    bare.post_processor = None
    plain = PreTrainedTokenizerFast(tokenizer_object=bare, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    plain.chat_template = tok.chat_template
    out = tmp_path / "gpt2-style"
    AutoModelForCausalLM.from_pretrained(folder).save_pretrained(out)
    plain.save_pretrained(out)
    return out


@pytest.mark.parametrize("tokenizer", ["llama-style", "gpt2-style"])
@pytest.mark.parametrize("fmt", ["alpaca", "text", "chat"])
def test_a_greedy_sample_is_what_the_exported_folder_generates(tmp_path, tiny_model_dir, one_rank, fmt, tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.wire import formats

    source = tiny_model_dir if tokenizer == "llama-style" else _gpt2_style(tiny_model_dir, tmp_path)
    tok = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source).eval()
    template = choose_template(tok, None, "m").text if fmt == "chat" else None
    ids = render(PROMPT, tok, fmt, 128, template)
    sampler = Sampler(SamplesConfig(prompts=[PROMPT], max_new_tokens=NEW), tok, [Prompt(PROMPT, ids)], one_rank,
                      seed=0, max_seq_len=128, eos_ids={tok.eos_token_id})
    answer = sampler._answer(model, ids, torch.Generator())

    export = tmp_path / "export"  # what the trainer's export writes: the model and its tokenizer, saved
    model.save_pretrained(export)
    tok.save_pretrained(export)
    user_tok = AutoTokenizer.from_pretrained(export)
    user_model = AutoModelForCausalLM.from_pretrained(export).eval()
    if fmt == "chat":
        given = user_tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                             return_tensors="pt", return_dict=True)["input_ids"]
    else:
        text = formats.prompt_answer("alpaca", {"instruction": PROMPT, "output": ""}, ValueError)[0] \
            if fmt == "alpaca" else PROMPT
        given = user_tok(text, return_tensors="pt")["input_ids"]
    assert given[0].tolist() == ids  # the sample's prompt is the export's, token for token
    with torch.no_grad():
        out = user_model.generate(given, max_new_tokens=NEW, do_sample=False, eos_token_id=user_tok.eos_token_id,
                                  pad_token_id=user_tok.pad_token_id)
    assert user_tok.decode(out[0, given.shape[1]:], skip_special_tokens=True) == answer
