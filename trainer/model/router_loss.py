"""A mixture-of-experts model's router (load-balancing) loss, added as the model's authors train it.

transformers' MoE models (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, GPT-OSS, PhiMoE...) compute the Switch
Transformer load-balancing loss from every layer's router logits when asked (``output_router_logits``),
return it as ``aux_loss``, and add ``router_aux_loss_coef`` times it to the loss they return. The
trainer computes the language-model loss from the logits itself, so it takes ``aux_loss`` from the
model's output and adds it to the gradient in the same proportion.

The model's forward hands its ``attention_mask`` to both its layers and its load-balancing loss, which
reads it as a per-token padding mask; packed rows need a mask the layers read (one example apart from
the next, each layer type's window) and the loss cannot. So a forward that asks for the router loss
passes the layers exactly what any other forward passes (the packed rows' masks, or sdpa once per
example), and :func:`counting` hands the family's own ``load_balancing_loss_func``, as the model's forward
calls it, a 2-D mask of the rows' real tokens instead: the loss counts every token of every example and
no padding, packed or not. No family relies on transformers finding the examples from ``position_ids``
(GPT-OSS's forward never passes them to its masks: its packed rows mixed their examples).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

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


def choose(config, setting: bool | None, computes: bool = True) -> tuple[float | None, str | None]:
    """The coefficient to train with (``None``: no router loss) for ``setting`` (``model.router_aux_loss``;
    ``None`` follows the config), and one line saying so (``None`` for a model without a router).
    ``computes``: the model's forward computes the loss (:func:`computes_loss`; DeepSeek-V3 and others
    balance their experts without one). The config is left as it is, so an export keeps the model's own
    setting."""
    if not has_router(config) or not computes:
        if setting:
            why = ("this model has no mixture-of-experts router (its config has no output_router_logits)"
                   if not has_router(config) else
                   f"{getattr(config, 'model_type', 'this model')}'s forward computes no router load-balancing loss "
                   "(its experts are balanced without one)")
            raise SettingError(f"parameters.model.router_aux_loss: {why}; remove the key")
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


def real_tokens(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The 2-D mask of the rows' real tokens (padding comes after them): each row holds the examples that
    start there (position id 0), whose lengths ``lengths`` lists in row order."""
    rows, width = batch["input_ids"].shape
    starts = (batch["position_ids"] == 0).sum(-1).tolist()
    per_row = torch.stack([part.sum() for part in batch["lengths"].split(starts)]) if rows else torch.zeros(0)
    return torch.arange(width).unsqueeze(0) < per_row.unsqueeze(1)


@contextlib.contextmanager
def counting(model: nn.Module, tokens: torch.Tensor) -> Iterator[None]:
    """Inside, the model's load-balancing loss counts the tokens ``tokens`` marks (a 2-D mask, on the
    model's device), whatever ``attention_mask`` its layers were given. ``NoRouterLoss`` when the model's
    forward computes no such loss."""
    namespace, original = _loss_function(model)
    if namespace is None:
        raise NoRouterLoss(f"{type(model).__name__}'s forward computes no load-balancing loss")
    signature = inspect.signature(original)

    def counted(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.arguments["attention_mask"] = tokens
        return original(*bound.args, **bound.kwargs)

    namespace[_LOSS] = counted
    try:
        yield
    finally:
        namespace[_LOSS] = original


class NoRouterLoss(SettingError):
    """The model's forward computes no load-balancing loss."""


_LOSS = "load_balancing_loss_func"


def _loss_function(model: nn.Module) -> tuple[dict | None, object]:
    """The namespace whose ``load_balancing_loss_func`` the model's causal-LM forward calls, and that
    function (``(None, None)`` when none does: the model has no router loss, or reads its mask otherwise)."""
    for module in model.modules():
        forward = inspect.unwrap(type(module).forward)
        namespace = getattr(forward, "__globals__", {})
        function = namespace.get(_LOSS)
        if function is not None and _LOSS in forward.__code__.co_names:
            if "attention_mask" in inspect.signature(function).parameters:
                return namespace, function
            return None, None
    return None, None


def computes_loss(model_class: type) -> bool:
    """Whether a causal-LM class's forward computes a load-balancing loss it can be told the tokens of."""
    forward = inspect.unwrap(model_class.forward)
    function = getattr(forward, "__globals__", {}).get(_LOSS)
    return (function is not None and _LOSS in forward.__code__.co_names
            and "attention_mask" in inspect.signature(function).parameters)
