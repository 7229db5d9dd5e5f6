"""A mixture-of-experts model's router (load-balancing) loss, added as the model's authors train it.

transformers' MoE models (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, GPT-OSS, PhiMoE...) compute the Switch
Transformer load-balancing loss from every layer's router logits when asked (``output_router_logits``),
return it as ``aux_loss``, and add ``router_aux_loss_coef`` times it to the loss they return. The
trainer computes the language-model loss from the logits itself, so it takes ``aux_loss`` from the
model's output and adds it to the gradient in the same proportion.

The model counts the tokens its ``attention_mask`` marks as real, reading it as a per-token padding
mask: a 4-D mask of packed rows cannot be read so. A forward that asks for the router loss therefore
passes no 4-D mask: a batch of one example per row passes its padding mask (the router loss skips the
padding, as with any padded batch), a packed batch passes ``position_ids`` alone and transformers builds
each layer's mask from them (``masking_utils``' packed-sequence detection: every example apart, sliding
windows per layer type), counting every position of the rows, the few padding ones at their ends too.
That detection reads the positions on the device (one synchronisation a forward on a GPU), and with flex
attention transformers builds its own ``BlockMask`` (``create_block_mask``): neither was timed on a GPU.
With sdpa once per example (CPU) the rows are split as always, whatever their length.
"""

from __future__ import annotations

import torch
from torch import nn

from trainer.wire.config import SettingError

_CHOSEN = "_fsdp_tui_router_loss"
"""The model's attribute holding the coefficient this run adds (``None``: off), where :func:`choose` decided
(on the module, not its config: a config attribute would be written into an export's config.json)."""


def _text(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def has_router(config) -> bool:
    """Whether the model's forward takes ``output_router_logits`` (its config names it)."""
    return hasattr(_text(config), "output_router_logits")


def _own(config) -> float | None:
    """The coefficient the config asks for (``None``: it does not)."""
    text = _text(config)
    coef = float(getattr(text, "router_aux_loss_coef", 0.0) or 0.0)
    return coef if text.output_router_logits and coef > 0 else None


def choose(config, setting: bool | None) -> tuple[float | None, str | None]:
    """The coefficient to train with (``None``: no router loss) for ``setting`` (``model.router_aux_loss``;
    ``None`` follows the config), and one line saying so (``None`` for a model without a router). The
    config is left as it is, so an export keeps the model's own setting."""
    if not has_router(config):
        if setting:
            raise SettingError("parameters.model.router_aux_loss: this model has no mixture-of-experts router "
                               "(its config has no output_router_logits); remove the key")
        return None, None
    coef = float(getattr(_text(config), "router_aux_loss_coef", 0.0) or 0.0)
    if setting and coef <= 0:
        raise SettingError("parameters.model.router_aux_loss: the model's router_aux_loss_coef is "
                           f"{coef}, so its router loss would add nothing; set it in the model's config.json "
                           "or leave model.router_aux_loss unset")
    if setting is None:
        chosen = _own(config)
        if chosen is not None:
            return chosen, (f"router aux loss: on ({coef:g} x the load-balancing loss, as the model's config "
                            "asks for it), logged as router_aux_loss")
        return None, ("router aux loss: off (the model's config asks for it: output_router_logits is false; "
                      "model.router_aux_loss: true adds it)")
    if setting:
        return coef, (f"router aux loss: on ({coef:g} x the load-balancing loss, as model.router_aux_loss), "
                      "logged as router_aux_loss")
    return None, "router aux loss: off (model.router_aux_loss: false)"


def keep(model: nn.Module, coefficient: float | None) -> None:
    """Train ``model`` with this router-loss coefficient (``None``: without), whatever its config says."""
    setattr(model, _CHOSEN, coefficient)


def coefficient(model: nn.Module) -> float | None:
    """How much of the router loss goes into the loss (``None``: none): as :func:`keep` set it, else
    as the model's config asks."""
    if hasattr(model, _CHOSEN):
        return getattr(model, _CHOSEN)
    return _own(model.config) if has_router(model.config) else None


def padding_mask(batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """The 2-D mask of real tokens when every row holds one example (``lengths`` has one entry a row),
    else ``None`` (packed rows: the model finds the examples from ``position_ids``)."""
    lengths = batch.get("lengths")
    rows, width = batch["input_ids"].shape
    if lengths is None or lengths.numel() != rows:
        return None
    return torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
