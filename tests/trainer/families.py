"""Tiny random models of several families, saved as plain Hugging Face folders (``save_pretrained``) with
the built-in tokenizer: the trainer loads them exactly as it loads a user's model."""

from __future__ import annotations

from pathlib import Path


def family_config(kind: str, vocab_size: int):
    import transformers

    attn = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": vocab_size}
    moe = {"num_key_value_heads": 2, "num_experts_per_tok": 2, "tie_word_embeddings": False}
    return {
        "qwen2": lambda: transformers.Qwen2Config(**attn, intermediate_size=64, num_key_value_heads=2,
                                                  tie_word_embeddings=True),
        "mistral": lambda: transformers.MistralConfig(**attn, intermediate_size=64, num_key_value_heads=2,
                                                      sliding_window=16),
        "phi3": lambda: transformers.Phi3Config(**attn, intermediate_size=64, num_key_value_heads=2, pad_token_id=0),
        "gpt_neox": lambda: transformers.GPTNeoXConfig(**attn, intermediate_size=64),
        "gpt2": lambda: transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=vocab_size, n_positions=256),
        "llama": lambda: transformers.LlamaConfig(**attn, intermediate_size=64, num_key_value_heads=2),
        # tied embeddings, logits scaled by 0.0625 (Command R7B's), a sliding-window and a full layer
        "cohere2": lambda: transformers.Cohere2Config(**attn, intermediate_size=64, num_key_value_heads=2,
                                                      sliding_window=16, logit_scale=0.0625, tie_word_embeddings=True,
                                                      layer_types=["sliding_attention", "full_attention"]),
        # mixtures of experts (fused expert weights: 3-D parameters, no layer of their own)
        "qwen3_moe": lambda: transformers.Qwen3MoeConfig(**attn, **moe, intermediate_size=64, num_experts=4,
                                                         moe_intermediate_size=16),
        "mixtral": lambda: transformers.MixtralConfig(**attn, **moe, intermediate_size=32, num_local_experts=4),
        "gpt_oss": lambda: transformers.GptOssConfig(**attn, **moe, intermediate_size=32, num_local_experts=4,
                                                     sliding_window=8, head_dim=8,
                                                     layer_types=["sliding_attention", "full_attention"]),
        "deepseek_v3": lambda: transformers.DeepseekV3Config(
            **attn, **moe, intermediate_size=64, moe_intermediate_size=16, n_routed_experts=4, n_shared_experts=1,
            kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, n_group=1,
            topk_group=1, first_k_dense_replace=1),
    }[kind]()


def save_family(kind: str, folder: Path, tokenizer_dir: Path, seed: int = 0) -> Path:
    """A random ``kind`` model and the tokenizer of ``tokenizer_dir``, saved in ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = family_config(kind, len(tok))
    config.bos_token_id, config.eos_token_id = tok.bos_token_id, tok.eos_token_id
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
