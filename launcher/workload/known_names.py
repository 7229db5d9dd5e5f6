"""Hub names the docs and the shipped samples use for ``parameters.model_name`` and ``dataset_name``,
each with a line on what it is: what the editor offers beside the built-in names and local files
(``tests/foundation/test_editor_core.py`` keeps this list and the docs in step)."""

from __future__ import annotations

HUB_MODELS: dict[str, str] = {
    "meta-llama/Llama-3.2-1B": "Llama 3.2 1B (gated: accept its license on the hub, set HF_TOKEN)",
    "meta-llama/Llama-3.1-8B": "Llama 3.1 8B (gated)",
    "meta-llama/Llama-3.3-70B-Instruct": "Llama 3.3 70B Instruct (gated; 2 nodes x 8 GPUs and more)",
    "Qwen/Qwen2.5-7B-Instruct": "Qwen2.5 7B Instruct (chat template)",
    "bigscience/bloom-560m": "BLOOM 560M (the KAUST FSDP guide's model)",
}
HUB_DATASETS: dict[str, str] = {
    "tatsu-lab/alpaca": "alpaca format, 52k instructions",
    "yahma/alpaca-cleaned": "alpaca format, cleaned",
    "rajpurkar/squad": "squad format: SQuAD v1.1 questions (data.format: squad)",
}
