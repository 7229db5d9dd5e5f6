"""A packed row's logits equal each example's logits alone, for every family the trainer packs and every
attention implementation it may pick; the families it cannot pack exactly are refused.

Tiny random models of many transformers families are written with ``save_pretrained`` and loaded through the
trainer's own ``load_model``. Examples (21, 17 and 13 tokens) are longer than the sliding window (8) of the
families that have one, uniform (Mistral, Phi-3, Starcoder2, Mixtral, Doge) or per layer type (Gemma 2/3/3n,
OLMo 3, Cohere 2, GPT-OSS, EXAONE 4, Qwen2 with ``max_window_layers``), and are packed two rows of 40 with
padding.
The examples alone go through transformers' own masks (no mask passed: it builds causal and windowed masks
itself); packed rows through the trainer's masks (``train.forward_logits``). A family with a new attention quirk
belongs in ``PACKED`` (tests/support/trainer/packed_families.py) or ``REFUSED``: it then fails here, not for a user.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.support.trainer.packed_families import COMMON, PACKED, VOCAB, WINDOW
from trainer.data.rows import Example, collate, pack, pad_rows
from trainer.loop import train
from trainer.model import attention, packed_sdpa
from trainer.model.build import attention_support, carries_state, load_model
from trainer.model.source import ModelSource
from trainer.wire.config import SettingError, TrainerConfig
from trainer.wire.model_family import STATEFUL, packing_refusal, read_config

LENGTHS, ROW = (21, 17, 13), 40


def _chunked() -> dict:
    return {"head_dim": 8, "attention_chunk_size": WINDOW, "layer_types": ["chunked_attention", "full_attention"],
            "no_rope_layers": [1, 0], "num_local_experts": 2, "interleave_moe_layer_step": 2}


REFUSED = {  # model_type -> (config, words of the refusal)
    "mamba": ({"hidden_size": 32, "state_size": 4, "num_hidden_layers": 2, "vocab_size": VOCAB}, "carries a state"),
    "qwen3_next": ({"head_dim": 8, "layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": 2,
                    "linear_num_value_heads": 2, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
                    "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 16,
                    "shared_expert_intermediate_size": 16}, "carries a state"),
    "llama4_text": (_chunked(), "chunked_attention"),
    "falcon": ({"alibi": True, "new_decoder_architecture": False, "multi_query": True}, "ALiBi"),
    "bart": ({"d_model": 32, "decoder_layers": 2, "decoder_attention_heads": 4, "decoder_ffn_dim": 64,
              "encoder_layers": 1, "encoder_attention_heads": 4, "encoder_ffn_dim": 64, "is_encoder_decoder": False},
             "takes no position_ids"),
}


def _write(folder: Path, model_type: str, overrides: dict) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **{**COMMON, **overrides})
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for n in LENGTHS:
        ids = torch.randint(3, VOCAB, (n,), generator=gen).tolist()
        out.append(Example(ids, list(ids)))  # every token learned: packed rows take the trainer's masks
    return out


def _implementations(support) -> list[str]:
    """What the trainer may pick for this model on CPU: sdpa (auto, or by name), eager (by name), sdpa once per
    packed example (auto, rows of 256+: here on any row)."""
    return (["sdpa"] if support.sdpa else []) + ["eager"] + ([packed_sdpa.NAME] if support.sdpa and support.backend
                                                              else [])


def _hf_config(folder: Path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(folder)


def _params(folder: Path, **over) -> dict:
    return {"model_name": str(folder), "dataset_name": "d", "output_dir": "o", "max_seq_len": ROW, **over}


def _packed_and_alone(model, examples: list[Example], device: str = "cpu"):
    """Per example: its logits inside the packed rows, and alone."""
    rows = pack(examples, ROW, 0)
    assert len(rows) == 2 and max(len(r["lengths"]) for r in rows) == 2
    with torch.no_grad():
        packed = train.forward_logits(model, collate(rows, 0), device)
        for row, r in enumerate(rows):
            start = 0
            for length in r["lengths"].tolist():
                ids = r["input_ids"][start:start + length].tolist()
                alone = train.forward_logits(model, collate(pad_rows([Example(ids, ids)], 0), 0), device)
                yield packed[row, start:start + length], alone[0]
                start += length


@pytest.mark.parametrize("model_type", sorted(PACKED))
def test_packed_logits_equal_each_example_alone(tmp_path_factory, examples, model_type, monkeypatch):
    folder = _write(tmp_path_factory.mktemp(model_type), model_type, PACKED[model_type])
    config = read_config(str(folder))
    assert packing_refusal(config) is None, model_type
    support = attention_support(_hf_config(folder), ModelSource.resolve(str(folder)), TrainerConfig.model_validate(_params(folder)).model)
    assert not support.stateful and support.position_ids, model_type
    choice = attention.choose(TrainerConfig.model_validate(_params(folder, data={"packing": True})), config,
                              support, torch.device("cpu"))
    assert choice.packing
    monkeypatch.setattr(packed_sdpa, "MIN_ROW_LENGTH", 0)  # per example on these short rows too
    packed_sdpa.register()
    implementations = _implementations(support)
    model = load_model(ModelSource.resolve(str(folder)), TrainerConfig.model_validate(_params(folder)).model, seed=0,
                       attn=implementations[0]).eval()
    worst = {}
    for implementation in implementations:  # each layer reads the config's implementation at every forward
        model.config._attn_implementation = implementation
        worst[implementation] = max(float((p - a).abs().max()) for p, a in _packed_and_alone(model, examples))
    assert worst and all(err < 1e-5 for err in worst.values()), f"{model_type}: largest difference {worst}"


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_families_packing_cannot_keep_apart_are_refused(tmp_path_factory, model_type):
    overrides, words = REFUSED[model_type]
    folder = _write(tmp_path_factory.mktemp(model_type), model_type, overrides)
    config = read_config(str(folder))  # what validate reads
    reason = packing_refusal(config)
    assert reason is not None and words in reason, reason
    support = attention_support(_hf_config(folder), ModelSource.resolve(str(folder)), TrainerConfig.model_validate(_params(folder)).model)
    if model_type in ("mamba", "qwen3_next"):
        assert support.stateful  # transformers' own mark, which the trainer reads too
    if model_type == "bart":
        assert not support.position_ids  # the forward's signature, which the trainer reads too
    cpu = torch.device("cpu")
    with pytest.raises(SettingError, match=rf"parameters\.data\.packing: .*{re.escape(words)}"):
        attention.choose(TrainerConfig.model_validate(_params(folder, data={"packing": True})), config, support, cpu)
    auto = attention.choose(TrainerConfig.model_validate(_params(folder)), config, support, cpu)
    assert not auto.packing and any(n.startswith("packing: off (") and words in n for n in auto.notes), auto.notes


@pytest.mark.parametrize("model_type, dropped", [
    ("mamba", ("position_ids", "attention_mask")),  # no attention to mask: the packed rows as they are
    ("llama4_text", ()),
    ("bart", ("position_ids",)),  # with the examples' masks
])
def test_a_refused_family_packed_anyway_would_differ(tmp_path_factory, examples, model_type, dropped):
    """What the refusal prevents: a state carried from one example into the next, a chunk boundary the masks
    do not know about, positions that run on across examples."""
    folder = _write(tmp_path_factory.mktemp(model_type), model_type, REFUSED[model_type][0])
    model = _Without(load_model(ModelSource.resolve(str(folder)), TrainerConfig.model_validate(_params(folder)).model, seed=0,
                                attn="eager").eval(), dropped)
    worst = max(float((p - a).abs().max()) for p, a in _packed_and_alone(model, examples))
    assert worst > 1e-3, worst


class _Without(torch.nn.Module):
    """A model called without the arguments it does not take."""

    def __init__(self, model, dropped: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.config, self.dropped = model, model.config, dropped

    def forward(self, **kwargs):
        return self.model(**{k: v for k, v in kwargs.items() if k not in self.dropped})


def test_every_stateful_causal_lm_of_this_transformers_is_refused_before_a_run():
    """``validate`` reads config.json without transformers: its list must hold every family the installed
    transformers says carries a state (the trainer's :func:`carries_state`): up to 5.24 the models marked
    ``_is_stateful`` (read from the sources: no model module imported), from 5.25 the families whose default
    config has a layer type its cache keeps as a recurrent state (configuration modules only)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, model_type_to_module_name
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    models = Path(transformers.__file__).parent / "models"
    by_layer_types = (Path(transformers.__file__).parent / "cache_utils.py").read_text(
        encoding="utf-8").count("class LinearAttentionCacheLayerMixin") == 1
    stateful = set()
    for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        module = model_type_to_module_name(model_type)
        source = models / module / f"modeling_{module}.py"
        if source.is_file() and "_is_stateful = True" in source.read_text(encoding="utf-8"):
            stateful.add(model_type)
        elif by_layer_types and model_type in CONFIG_MAPPING:
            try:
                config = CONFIG_MAPPING[model_type]()
            except Exception:  # noqa: BLE001 - a config that needs arguments says nothing here
                continue
            if carries_state(object, config):
                stateful.add(model_type)
    assert {"mamba", "jamba", "qwen3_next"} <= stateful  # the scan finds what it looks for
    assert stateful <= STATEFUL, sorted(stateful - STATEFUL)
    for model_type in sorted(stateful):
        assert packing_refusal({"model_type": model_type}) is not None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("model_type", ["llama", "mistral", "gemma2", "gemma3_text", "olmo3", "gpt_oss", "qwen2"])
def test_flex_packed_logits_equal_each_example_alone(tmp_path_factory, examples, model_type):
    """Flex attention's ``BlockMask`` per layer type, on the GPU (torch has no flex backward on CPU and the
    trainer refuses flex there)."""
    folder = _write(tmp_path_factory.mktemp(model_type), model_type, PACKED[model_type])
    model = load_model(ModelSource.resolve(str(folder)), TrainerConfig.model_validate(_params(folder)).model, seed=0,
                       attn="flex_attention").eval().cuda()
    worst = max(float((p - a).abs().max()) for p, a in _packed_and_alone(model, examples, "cuda"))
    assert worst < 1e-3, worst  # flex on a GPU sums in another order than alone; a lost window is 0.05-0.3


def _workload(folder: Path, **over) -> str:
    import yaml

    params = {"model_name": str(folder), "dataset_name": "builtin:tiny-alpaca", "output_dir": "out", **over}
    return yaml.safe_dump({"experiment_name": "packed",
                           "compute": {"accelerator_type": "CPU", "procs_per_node": 2, "num_accelerators": 2},
                           "parameters": params}, sort_keys=False)


def test_validate_refuses_packing_a_stateful_model_at_its_line(tmp_path_factory):
    from launcher.workload.validate import validate_text

    folder = _write(tmp_path_factory.mktemp("mamba"), "mamba", REFUSED["mamba"][0])
    text = _workload(folder, data={"packing": True})
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.strip().startswith("packing:"))
    errors = validate_text(text, "w.yaml").errors
    assert [(p.line, p.path) for p in errors] == [(line, "parameters.data.packing")], errors
    assert "mamba carries a state along the sequence" in errors[0].message
    assert validate_text(_workload(folder), "w.yaml").ok  # left out: the trainer turns packing off and says so


def test_a_state_is_known_by_the_class_mark_or_by_a_layer_type_the_cache_keeps_as_a_state():
    """Both ways transformers has said it: ``_is_stateful`` on the class (up to 5.24), a recurrent layer type
    in the config (5.25 dropped the mark: Mamba's config has ``linear_attention`` layers); attention layers
    alone carry none, whatever the class."""
    from types import SimpleNamespace

    from transformers import LlamaConfig

    marked = type("Marked", (), {"_is_stateful": True})
    assert carries_state(marked, LlamaConfig())
    assert carries_state(object, SimpleNamespace(layer_types=["full_attention", "linear_attention"]))
    assert carries_state(object, SimpleNamespace(layer_types=["conv", "full_attention"]))
    assert not carries_state(object, SimpleNamespace(layer_types=["full_attention", "sliding_attention"]))
    assert not carries_state(object, LlamaConfig())
