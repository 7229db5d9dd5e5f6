"""A model folder for the proof's LoRA and fit steps: a Llama of the given shape with random weights, written with
``save_pretrained`` (safetensors, bf16) and the built-in tokenizer beside it, as a pretrained model from
the hub would be on a node (nothing downloaded), and a text data set of rows that fill ``seq`` tokens.

    python benchmarks/gpu_proof_model.py FOLDER 1b|tiny|wide|tiny-wide
"""

from __future__ import annotations

import json
import random
import string
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_gpu import LLAMA_32_1B, TINY  # noqa: E402

SHAPES = {"1b": (LLAMA_32_1B, 2048, 64), "tiny": ({**TINY, "vocab_size": 512}, 128, 16),
          "wide": ({"vocab_size": 32000, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 4,
                    "num_attention_heads": 24, "num_key_value_heads": 8, "tie_word_embeddings": False}, 2048, 64),
          "tiny-wide": ({"vocab_size": 4000, "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": False}, 128, 16)}
"""Shape, tokens a row, rows. The tiny ones' vocabularies are larger than their tokenizer's, as the 1B's is;
``wide`` (few large blocks, an untied output layer) is the fit step's second shape beside the 1B's."""


def main() -> None:
    folder, shape = Path(sys.argv[1]), sys.argv[2]
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from trainer.assets import resolve_model

    config, seq, rows = SHAPES[shape]
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(LlamaConfig(**config, max_position_embeddings=seq))
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(resolve_model("builtin:tiny-llama")).save_pretrained(folder)
    # The built-in tokenizer takes about one token a character: rows just short of ``seq`` tokens.
    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(500)]
    with open(folder / "data.jsonl", "w") as f:
        for _ in range(rows):
            text = ""
            while len(text) < seq * 0.85:
                text += rng.choice(words) + " "
            f.write(json.dumps({"text": text.strip()}) + "\n")
    print(f"{folder}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {rows} rows", flush=True)


if __name__ == "__main__":
    main()
