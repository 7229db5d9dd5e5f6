"""Tiny, locally made assets: a Llama-shaped model and a tokenizer, plus a small shipped dataset.

Nothing here downloads. ``builtin:tiny-llama`` names a normal Hugging Face model folder built once
(tokenizer trained with ``tokenizers`` on the shipped data, weights from a fixed seed) and
``builtin:tiny-alpaca`` a JSONL file in alpaca format. Both then go through exactly the loading code a
real model or dataset uses (``from_pretrained``, ``load_dataset``).

    python -m trainer.assets build [DIR]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from trainer.wire import builtin_assets

BUILTIN = builtin_assets.PREFIX
ASSET_VERSION = "v2"
"""v2: the tokenizer puts ``<s>`` before a text itself, as Llama's does (v1 declared it and never added it)."""
DATA_DIR = Path(__file__).parent / "data"
DATASETS = {"tiny-alpaca": DATA_DIR / "tiny_alpaca.jsonl"}
MODELS = {"tiny-llama": (64, 192), "small-llama": (512, 1536)}
"""Built-in Llama-shaped models: (hidden size, MLP size); 4 blocks each. ``small-llama`` (~13M
parameters, ~200 MB of weights, gradients and Adam state) is large enough for sharding to show in each
rank's memory on CPU above the noise of activations, small enough for a CPU sweep of a few minutes."""
_DONE = ".fsdp-tui-complete"
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|>\n' + m['content'] + eos_token + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def cache_dir() -> Path:
    """``$FSDP_TUI_ASSETS``, else ``$FSDP_TUI_HOME/assets``, else ``~/.cache/fsdp-tui/assets``."""
    if os.environ.get("FSDP_TUI_ASSETS"):
        return Path(os.environ["FSDP_TUI_ASSETS"]).expanduser()
    if os.environ.get("FSDP_TUI_HOME"):
        return Path(os.environ["FSDP_TUI_HOME"]).expanduser() / "assets"
    return Path.home() / ".cache" / "fsdp-tui" / "assets"


def is_builtin(name: str) -> bool:
    return name.startswith(BUILTIN)


def resolve_dataset(name: str) -> str:
    """A ``builtin:`` dataset name -> its shipped file; anything else unchanged."""
    if not is_builtin(name):
        return name
    key = name[len(BUILTIN):]
    if key not in DATASETS:
        raise ValueError(f"unknown built-in dataset '{name}' (known: {', '.join(BUILTIN + k for k in DATASETS)})")
    return str(DATASETS[key])


def resolve_model(name: str, root: Path | None = None) -> str:
    """A ``builtin:`` model name -> a local Hugging Face folder (built on first use); else unchanged."""
    if not is_builtin(name):
        return name
    key = name[len(BUILTIN):]
    if key not in MODELS:
        raise ValueError(f"unknown built-in model '{name}' (known: {', '.join(BUILTIN + k for k in MODELS)})")
    target = (root or cache_dir()) / f"{key}-{ASSET_VERSION}"
    if not (target / _DONE).exists():
        build_tiny_llama(target, MODELS[key])
    return str(target)


def build_tiny_llama(target: Path, size: tuple[int, int] = MODELS["tiny-llama"]) -> Path:
    """Build the model folder once: under a file lock (ranks start together), in a temp folder that
    is renamed into place with a completion marker written last."""
    import fcntl

    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / _DONE).exists():
            return target
        shutil.rmtree(target, ignore_errors=True)  # a build that died half-way
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            tokenizer = _train_tokenizer()
            tokenizer.save_pretrained(tmp)
            _init_model(len(tokenizer), tokenizer, *size).save_pretrained(tmp, safe_serialization=True)
            (tmp / _DONE).write_text(ASSET_VERSION)
            tmp.chmod(0o755)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _corpus() -> list[str]:
    texts = []
    with open(DATASETS["tiny-alpaca"], encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            texts.append(f"### Instruction:\n{row['instruction']}\n\n### Input:\n{row['input']}\n\n"
                         f"### Response:\n{row['output']}")
    texts += ["Context: Question: Answer: <|user|> <|assistant|> <|system|>", "0123456789 +-=.,?!"]
    return texts


def _train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 512
    return fast


def _init_model(vocab_size: int, tokenizer, hidden: int = 64, intermediate: int = 192):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, rope_theta=10000.0,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "build":
        print("usage: python -m trainer.assets build [DIR]", file=sys.stderr)
        return 2
    root = Path(argv[1]) if len(argv) > 1 else None
    print(f"model   builtin:tiny-llama  -> {resolve_model('builtin:tiny-llama', root)}")
    print(f"dataset builtin:tiny-alpaca -> {resolve_dataset('builtin:tiny-alpaca')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
