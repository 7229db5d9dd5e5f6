"""The families the trainer packs, each as a tiny random config (``COMMON`` with what differs in ``PACKED``): the
packing test's models (tests/trainer/model/test_packing_families.py) and the chunked loss's (every family a
packed row's logits are checked for must also give the same loss and gradients chunked)."""

from __future__ import annotations

VOCAB, WINDOW = 128, 8
COMMON = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128, "pad_token_id": 0,
          "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False}
ALTERNATING = {"sliding_window": WINDOW, "layer_types": ["sliding_attention", "full_attention"]}
MOE = {"num_local_experts": 4, "num_experts_per_tok": 2}
GPT2_SHAPE = {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128}

PACKED = {  # model_type -> what differs from COMMON
    "llama": {},
    "mistral": {"sliding_window": WINDOW},
    "qwen2": {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},  # full, then windowed
    "qwen3": {"head_dim": 8},
    "gemma": {"head_dim": 8},
    "gemma2": {"head_dim": 8, **ALTERNATING},  # no sdpa (logit softcapping): eager only
    "gemma3_text": {"head_dim": 8, **ALTERNATING},
    "phi3": {"sliding_window": WINDOW},
    "olmo2": {},
    "olmo3": ALTERNATING,
    "cohere2": ALTERNATING,
    "exaone4": ALTERNATING,
    "starcoder2": {"sliding_window": WINDOW},
    "mixtral": {"sliding_window": WINDOW, **MOE},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "head_dim": 8},
    "gpt_oss": {"head_dim": 8, **ALTERNATING, **MOE},  # attention sinks, no sdpa
    "granite": {},
    "cohere": {},
    "stablelm": {},
    "phi": {},
    "gpt_neox": {},
    "falcon": {"new_decoder_architecture": True, "num_kv_heads": 2},  # rotary (ALiBi Falcon: REFUSED)
    "gpt2": GPT2_SHAPE,  # learned absolute positions from position_ids
    "gpt_bigcode": GPT2_SHAPE,
    "gptj": {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4, "n_positions": 128},
    "opt": {"ffn_dim": 64, "word_embed_proj_dim": 32},
    "deepseek_v3": {"num_key_value_heads": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,  # latent attention
                    "moe_intermediate_size": 16, "kv_lora_rank": 8, "q_lora_rank": 8, "qk_rope_head_dim": 4,
                    "qk_nope_head_dim": 4, "v_head_dim": 8, "first_k_dense_replace": 1, "n_group": 1,
                    "topk_group": 1},
    "doge": {"sliding_window": WINDOW},  # builds its own (dynamic) mask inside each layer
    "jetmoe": {"num_local_experts": 4, "num_experts_per_tok": 2, "kv_channels": 8},  # views attention's output
    "gemma3n_text": {"head_dim": 8, **ALTERNATING, "num_kv_shared_layers": 0, "intermediate_size": [64, 64],
                     "laurel_rank": 4, "altup_num_inputs": 2, "activation_sparsity_pattern": [0.0, 0.0],
                     "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": VOCAB},
}
