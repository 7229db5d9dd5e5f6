"""Logits only where a token is learned: the output layer runs on the positions whose next token has a
label, not on prompts, padding or the last position of a row.

The output layer and the cross-entropy over the vocabulary are most of a small model's step, and a
large share of a big one's on a 128k vocabulary; prompt-masked SFT data learns on about half its
tokens. A forward pre-hook on the model's output embeddings (``get_output_embeddings()``, so the
module tree, parameter names and checkpoints stay as they are) picks the learned rows of the hidden
states, ``[batch, seq, hidden] -> [learned, hidden]``, while :func:`logits_at` runs the forward; the model
returns ``[learned, vocab]`` logits. Gradients are unchanged: the positions left out contribute
nothing to the loss. A model whose forward does not pass through its output layer exactly once with
``[batch, seq, hidden]`` states, or that indexes the logits as ``[batch, seq, vocab]`` afterwards,
gets its full logits computed and indexed from then on (correct, not faster).
"""

from __future__ import annotations

import torch
from torch import nn

_HOOKED = "_fsdp_tui_learned_logits"
_OFF = "_fsdp_tui_learned_logits_off"  # set on a model whose output layer the selection cannot go through
_active: list[dict] = []  # the selection in force: {"keep": flat indices, "calls": how many times applied}


def install(model: nn.Module) -> bool:
    """Hook the model's output layer; False for a model without one (full logits are then indexed)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        return False
    if not getattr(head, _HOOKED, False):
        head.register_forward_pre_hook(_pick_rows)
        setattr(head, _HOOKED, True)
    return True


def learned_positions(labels: torch.Tensor) -> torch.Tensor:
    """Flat indices into ``[batch * seq]`` of the positions whose logit predicts a learned label.
    ``labels`` is ``[batch, seq - 1]``, already shifted (``labels[:, t]`` is predicted at ``t``)."""
    learned = nn.functional.pad(labels != -100, (0, 1))  # the last position predicts nothing
    return learned.reshape(-1).nonzero().squeeze(1)


def logits_at(model: nn.Module, keep: torch.Tensor, forward) -> torch.Tensor:
    """``forward()`` (the model's forward, returning logits) with the output layer computed only at
    ``keep``: ``[len(keep), vocab]`` logits, in the order of ``keep``."""
    state = {"keep": keep, "calls": 0, "head": None}
    _active.append(state)
    try:
        logits = forward()
    except IndexError:  # the model indexes its logits as [batch, seq, vocab] after the output layer
        if state["calls"] == 0:
            raise
        logits = None
    finally:
        _active.pop()
    if logits is not None and state["calls"] == 1 and logits.dim() == 2 and logits.shape[0] == keep.numel():
        return logits
    if state["calls"] != 0:  # ran more than once, or its output was reshaped: full logits from now on
        setattr(state["head"], _OFF, True)
        logits = forward()
    return logits.reshape(-1, logits.shape[-1]).index_select(0, keep)


def _pick_rows(module: nn.Module, args: tuple):
    if not _active or not args or args[0].dim() != 3 or getattr(module, _OFF, False):
        return None
    state = _active[-1]
    state["calls"] += 1
    state["head"] = module
    hidden = args[0]
    return (hidden.reshape(-1, hidden.shape[-1]).index_select(0, state["keep"].to(hidden.device)), *args[1:])
