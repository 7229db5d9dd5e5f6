"""What the model says as it learns: answers to a few prompts at a cadence, kept with the run.

Under FSDP every rank holds a shard of each weight, so every rank must run every forward of a
generation: rank 0 alone would wait forever in the first all-gather. Each answer is therefore a plain
token-by-token loop that every rank runs on the same prompt, the whole sequence forward each time (no
cache: nothing per model family to get wrong, and samples are a few short answers); rank 0 picks each
next token and broadcasts it, so every rank stops at the same token. Rank 0 appends the step's answers
to the samples file beside the metrics (:mod:`trainer.wire.samples`) and prints one line per answer.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from trainer.data.rows import IGNORE, Tokenize, leading_ids
from trainer.parallel import Dist
from trainer.wire.config import SamplesConfig, SettingError
from trainer.wire.protocol import METRICS_FILE_ENV
from trainer.wire.samples import Sample, SampleSet, samples_path


@dataclass(frozen=True)
class Prompt:
    shown: str
    """The prompt as the samples show it: the user's text, or an eval row's prompt decoded."""
    ids: list[int]
    """What the model is given: the prompt rendered as the dataset's format renders one."""
    reference: str | None = None
    """The data's own answer (eval rows)."""


def render(text: str, tok, fmt: str, max_seq_len: int, chat_template: str | None = None) -> list[int]:
    """``text`` as the model sees a prompt of this format: the run's chat template (``chat_template``,
    the one its data is rendered with) on the user's turn with the assistant's turn opened, the alpaca
    template, or the text itself; after the special tokens the tokenizer puts before a text, as the
    exported tokenizer gives them (``AutoTokenizer`` + ``generate`` on the export answers the same)."""
    if fmt == "chat" and chat_template:
        rendered = tok.apply_chat_template([{"role": "user", "content": text}], chat_template=chat_template,
                                           tokenize=False, add_generation_prompt=True)
        return tok(rendered, add_special_tokens=False)["input_ids"]
    if fmt == "alpaca":
        example = Tokenize(tok, fmt, max_seq_len, mask_prompt=True)({"instruction": text, "output": ""})
        return example.input_ids[:_first_learned(example.labels)]
    return leading_ids(tok) + tok(text, add_special_tokens=False)["input_ids"]


def _first_learned(labels: list[int]) -> int:
    return next((i for i, label in enumerate(labels) if label != IGNORE), len(labels))


def prompts_of(cfg: SamplesConfig, tok, fmt: str, eval_rows: list[dict[str, torch.Tensor]],
               max_seq_len: int, chat_template: str | None = None) -> list[Prompt]:
    """The configured prompts, then the prompts of the first ``eval_rows`` evaluation rows (split
    where the data's answer starts: the first learned token)."""
    out = [Prompt(text, render(text, tok, fmt, max_seq_len, chat_template)) for text in cfg.prompts]
    if cfg.eval_rows:
        rows = [r for r in eval_rows if 0 < _first_learned(r["labels"].tolist()) < len(r["labels"])]
        if not rows:
            raise SettingError("parameters.logging.samples.eval_rows: this run has no evaluation rows with a "
                               "prompt (set data.eval_fraction or data.eval_split, and keep data.mask_prompt "
                               "on), or give logging.samples.prompts instead")
        for row in rows[: cfg.eval_rows]:
            ids = row["input_ids"].tolist()
            cut = _first_learned(row["labels"].tolist())
            out.append(Prompt(tok.decode(ids[:cut], skip_special_tokens=True), ids[:cut],
                              tok.decode(ids[cut:], skip_special_tokens=True)))
    return out


class Sampler:
    """Generates every prompt's answer at the steps asked for; rank 0 records them."""

    def __init__(self, cfg: SamplesConfig, tok, prompts: list[Prompt], d: Dist, seed: int, max_seq_len: int,
                 eos_ids: set[int]) -> None:
        self.cfg, self.tok, self.prompts, self.d, self.seed = cfg, tok, prompts, d, seed
        self.max_prompt = max(1, max_seq_len - cfg.max_new_tokens)
        self.eos = eos_ids
        metrics = os.environ.get(METRICS_FILE_ENV)
        self.path = samples_path(metrics) if metrics and d.is_main else None
        """Where rank 0 appends the answers (none when not launched by fsdp-tui: the log lines only)."""

    def due(self, step: int, total: int) -> bool:
        """Before training, every ``every_steps``, and at the last step."""
        every = self.cfg.every_steps
        return step == 0 or step == total or bool(every and step % every == 0)

    def run(self, model: nn.Module, step: int) -> float:
        """Answer every prompt at ``step`` (collective: every rank calls it); returns the seconds taken."""
        from trainer.loop.train import _eager

        start = time.perf_counter()
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        model.eval()
        try:
            with torch.no_grad(), _eager():
                answers = [self._answer(model, p.ids[-self.max_prompt:], generator) for p in self.prompts]
        finally:
            model.train()
        if self.d.is_main:
            found = SampleSet(step, tuple(Sample(p.shown, a, p.reference) for p, a in zip(self.prompts, answers,
                                                                                         strict=True)), time.time())
            self._keep(found)
        return time.perf_counter() - start

    def _answer(self, model: nn.Module, ids: list[int], generator: torch.Generator) -> str:
        device = self.d.device
        new: list[int] = []
        for _ in range(self.cfg.max_new_tokens):
            logits = model(input_ids=torch.tensor([ids + new], device=device)).logits[0, -1].float().cpu()
            if self.cfg.greedy:
                choice = logits.argmax().reshape(1)
            else:
                probs = torch.softmax(logits / self.cfg.temperature, dim=-1)
                choice = torch.multinomial(probs, 1, generator=generator)
            dist.broadcast(choice, src=0)  # rank 0's token for everyone: all ranks stop together
            token = int(choice.item())
            if token in self.eos:
                break
            new.append(token)
        return self.tok.decode(new, skip_special_tokens=True)

    def _keep(self, found: SampleSet) -> None:
        for i, s in enumerate(found.samples, 1):
            print(f"sample step={found.step} {i}/{len(found.samples)}: {_line(s.prompt, 60)} -> {_line(s.answer, 120)}",
                  flush=True)
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(found.to_json() + "\n")


def eos_ids(tok, config) -> set[int]:
    """The tokens that end an answer: the tokenizer's end of sequence and the model's own."""
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    extra = getattr(config, "eos_token_id", None)
    ids |= set(extra if isinstance(extra, (list, tuple)) else [extra] if extra is not None else [])
    return ids


def _line(text: str, width: int) -> str:
    flat = text.replace("\n", "\\n")
    return "'" + (flat if len(flat) <= width else flat[: width - 1] + "…") + "'"


def build(cfg, tok, data, d: Dist, hf_config) -> Sampler | None:
    """The run's sampler, or ``None`` without ``logging.samples``."""
    if cfg.logging.samples is None:
        return None
    template = data.template if data.fmt == "chat" else None
    prompts = prompts_of(cfg.logging.samples, tok, data.fmt, data.eval_rows, cfg.max_seq_len, template)
    return Sampler(cfg.logging.samples, tok, prompts, d, cfg.seed, cfg.max_seq_len, eos_ids(tok, hf_config))
