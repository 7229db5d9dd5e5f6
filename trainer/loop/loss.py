"""The loss without the logits: the cross-entropy of the learned positions computed a chunk at a time inside the
model's forward, so that a micro-batch's full logits and their gradient never exist.

Hooks on the model's output layer (``get_output_embeddings()``: the module tree, parameter names and checkpoints
stay as they are) do it while :func:`chunked` is in force. The layer's pre-hook keeps the hidden states and lets
the layer itself run on one position only (the *probe*); its forward hook takes the learned positions' hidden
states and runs the layer and the cross-entropy over them a chunk at a time through
:class:`_ChunkedCrossEntropy`, which takes each chunk's gradients as it goes (the three matrix products a
position that the full logits take: nothing is computed twice) and keeps only the gradients of the hidden
states and of the layer's weights until the backward. Everything happens inside the model's forward, where
FSDP holds the output layer's weights gathered (the root unit stays gathered after the forward:
``trainer.parallel``), and the layer's own ``forward`` runs each chunk, so tied embeddings, a bias, a LoRA
adapter or a trained copy (``modules_to_save``) of the layer are what they always are.

What a family does to its logits after the output layer (a scale, Gemma's soft-capping) is applied to each
chunk as :class:`trainer.wire.cross_entropy.LogitMap` says. The probe's logits, as the model returns them, are
checked against that map at the first step (one wait for the device); a model that does something else, or
runs its output layer other than once on ``[batch, seq, hidden]`` states, keeps the full logits from then on,
said once. The model's output (the probe's logits) joins the backward with a zero gradient
(:func:`backward`), so FSDP's hooks on it run as they always do.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from trainer.wire.config import SettingError
from trainer.wire.cross_entropy import LogitMap, chunk_rows, chunks, logit_map

_HOOKED = "_fsdp_tui_chunked_loss"
_SETTING = "_fsdp_tui_cross_entropy"
_CHECKED = "_fsdp_tui_logit_map_checked"
_OFF = "_fsdp_tui_chunked_loss_off"
_active: list[_Chunks] = []


@dataclass(frozen=True)
class LossChoice:
    """How this run's loss meets the vocabulary (``model.cross_entropy``) and the line that says so."""

    setting: str
    """``auto``, ``chunked``, ``full`` or ``fused``."""
    vocab: int
    """The model's vocabulary (its config's ``vocab_size``)."""
    rows: int
    """Positions a chunk (:func:`trainer.wire.cross_entropy.chunk_rows`)."""
    mapping: LogitMap
    note: str
    cuda: bool = False
    """Chunks sized for a GPU (:data:`trainer.wire.cross_entropy.CUDA_CHUNK_BYTES`)."""


def choose(setting: str, config: dict, batch: int, seq: int, cuda: bool) -> LossChoice:
    """The choice for ``model.cross_entropy`` on a model of this config (``to_dict()``), with micro-batches of
    ``batch`` rows of ``seq`` tokens; ``fused`` without CUDA or Liger Kernel is refused in one line."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    vocab = int(text.get("vocab_size") or config.get("vocab_size") or 1)
    mapping, rows, most = logit_map(config), chunk_rows(vocab, cuda), batch * seq
    if setting == "fused":
        import importlib.util

        if not cuda or importlib.util.find_spec("liger_kernel") is None:
            raise SettingError("parameters.model.cross_entropy: fused needs CUDA and Liger Kernel on every node "
                               f"({'pip install liger-kernel' if cuda else 'this node has no GPU'}); "
                               "chunked takes as little memory in pure PyTorch")
    whole = _size(4 * most * vocab)
    chunk = f"{rows} positions a chunk, {_size(4 * rows * vocab)} of fp32 logits"
    if setting == "fused":
        note = f"cross-entropy: fused (Liger Kernel, model.cross_entropy: fused; the full logits would be {whole})"
    elif chunks(setting, most, vocab, cuda):
        why = "model.cross_entropy: chunked" if setting == "chunked" else "auto"
        note = (f"cross-entropy: chunked ({why}: a micro-batch's fp32 logits would be up to {whole}, {batch} x {seq} "
                f"positions x {vocab:,} vocabulary; {chunk}; model.cross_entropy: full computes them whole)")
    elif setting == "auto":
        note = f"cross-entropy: full logits (auto: a micro-batch's are at most {whole}, one chunk's worth)"
    else:
        note = f"cross-entropy: full logits (model.cross_entropy: full; up to {whole} a micro-batch)"
    if mapping != LogitMap() and setting != "full":
        note += f"; logits {mapping.words()}, as the model does"
    return LossChoice(setting, vocab, rows, mapping, note, cuda)


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def keep(model: nn.Module, choice: LossChoice) -> None:
    """Train ``model`` with this choice (the loop reads it at each micro-step). ``fused`` needs a plain
    ``nn.Linear`` output layer (refused otherwise, in one line)."""
    head = _head(model)
    if choice.setting == "fused" and not isinstance(head, nn.Linear):
        raise SettingError("parameters.model.cross_entropy: fused runs Liger Kernel on a plain output layer, and "
                           f"this model's is a {type(head).__name__} (LoRA on it?); use chunked")
    scaled = choice.mapping.multiply is not None or choice.mapping.divide is not None
    if choice.setting == "fused" and scaled and getattr(head, "bias", None) is not None:
        raise SettingError("parameters.model.cross_entropy: fused cannot scale the logits of an output layer with a "
                           "bias; use chunked")
    setattr(model, _SETTING, choice)


def uses_chunks(model: nn.Module, positions: int) -> bool:
    """Whether a micro-batch of ``positions`` learned positions takes the chunked loss on this model (never
    for a model that was not given a choice, or whose logits the chunks cannot reproduce)."""
    choice = getattr(model, _SETTING, None)
    if choice is None or _head(model) is None or getattr(_head(model), _OFF, False):
        return False
    return chunks(choice.setting, positions, choice.vocab, choice.cuda)


def _head(model: nn.Module) -> nn.Module | None:
    return model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None


@dataclass
class _Chunks:
    """One forward's chunked loss: what goes in, and what the hooks leave."""

    keep: torch.Tensor
    targets: torch.Tensor
    choice: LossChoice
    predictions: bool
    calls: int = 0
    hidden: torch.Tensor | None = None
    probe: torch.Tensor | None = None
    total: torch.Tensor | None = None
    argmax: list[torch.Tensor] = field(default_factory=list)


class Chunked:
    """What :func:`chunked` gives: after the forward, the summed loss (``total``) and, without gradients when
    asked, each position's most likely token (``predictions``); :meth:`matches` says whether the model's
    output is the probe's logits as the chunks computed them."""

    def __init__(self, state: _Chunks, head: nn.Module) -> None:
        self._state, self._head = state, head

    @property
    def total(self) -> torch.Tensor:
        assert self._state.total is not None
        return self._state.total

    @property
    def predictions(self) -> torch.Tensor:
        return torch.cat(self._state.argmax) if self._state.argmax else self._state.targets.new_empty(0)

    def matches(self, returned: torch.Tensor | None) -> bool:
        """Whether the forward went through the output layer once and ``returned`` (the model's logits) is the
        probe's logits under the map; checked at the first step only. When not, the model keeps the full
        logits from now on, said once."""
        state, head = self._state, self._head
        if state.calls == 1 and state.total is not None and getattr(head, _CHECKED, False):
            return True
        why = None
        if state.calls != 1 or state.total is None:
            why = f"its output layer ran {state.calls} times in one forward"
        elif returned is None or state.probe is None or returned.shape != state.probe.shape:
            why = "it reshapes or cuts its logits after the output layer"
        else:
            ours = _apply(state.choice.mapping, state.probe).float()
            theirs = returned.detach().float()
            tolerance = 1e-5 if state.probe.dtype == torch.float32 else 2e-2
            if not torch.allclose(ours, theirs, rtol=tolerance, atol=tolerance * float(theirs.abs().max().clamp(min=1))):
                why = f"its logits are not its output layer's {state.choice.mapping.words()}"
        if why is None:
            setattr(head, _CHECKED, True)
            return True
        setattr(head, _OFF, True)
        if not dist.is_initialized() or dist.get_rank() == 0:
            print(f"cross-entropy: full logits from now on ({type(head).__name__} output: {why})", flush=True)
        return False


@contextlib.contextmanager
def chunked(model: nn.Module, keep: torch.Tensor, targets: torch.Tensor, predictions: bool = False):
    """While inside, a forward of ``model`` computes the summed cross-entropy of the flat positions ``keep``
    (indices into ``[batch * seq]``, :func:`trainer.model.learned_logits.learned_positions`) against
    ``targets`` a chunk at a time, and returns the probe's logits (``[1, 1, vocab]``) as its logits. Yields a
    :class:`Chunked`."""
    head = _head(model)
    assert head is not None
    if not getattr(head, _HOOKED, False):
        head.register_forward_pre_hook(_take_hidden)
        head.register_forward_hook(_loss_in_forward)
        setattr(head, _HOOKED, True)
    state = _Chunks(keep, targets, getattr(model, _SETTING), predictions)
    _active.append(state)
    try:
        yield Chunked(state, head)
    finally:
        _active.pop()
        state.hidden = None


def backward(objective: torch.Tensor, returned: torch.Tensor | None) -> None:
    """``objective.backward()``, with the model's returned logits (the probe) as a second root whose gradient is
    zero: FSDP runs its backward hooks from the model's outputs."""
    if returned is None or not returned.requires_grad:
        objective.backward()
        return
    torch.autograd.backward([objective, returned], [None, torch.zeros_like(returned)])


def _take_hidden(module: nn.Module, args: tuple):
    if not _active or not args or args[0].dim() != 3:
        return None
    state = _active[-1]
    state.calls += 1
    if state.calls > 1:  # a second call (another head): it runs as it is, and the check sends the model back
        return None
    state.hidden = args[0]
    return (args[0][:1, :1], *args[1:])


def _loss_in_forward(module: nn.Module, args: tuple, output):
    if not _active or _active[-1].hidden is None or not isinstance(output, torch.Tensor):
        return None
    state = _active[-1]
    hidden, state.hidden = state.hidden, None
    flat = hidden.reshape(-1, hidden.shape[-1]).index_select(0, state.keep.to(hidden.device))
    targets = state.targets.to(hidden.device)
    state.probe = output.detach()
    if not torch.is_grad_enabled():
        state.total = _without_grad(module, state.choice, flat, targets, state.argmax if state.predictions else None)
        return None
    params = [p for p in module.parameters() if p.requires_grad]
    if state.choice.setting == "fused":
        state.total = _fused(module, state.choice.mapping, flat, targets)
    else:
        state.total = _ChunkedCrossEntropy.apply(flat, targets, (module, state.choice), *params)
    if not state.total.requires_grad:
        return None
    return _Link.apply(state.probe, state.total)


def _apply(mapping: LogitMap, logits: torch.Tensor) -> torch.Tensor:
    """The family's own operations on its logits, in its order (in the logits' dtype, as the model does)."""
    if mapping.multiply is not None:
        logits = logits * mapping.multiply
    if mapping.divide is not None:
        logits = logits / mapping.divide
    if mapping.softcap is not None:
        logits = torch.tanh(logits / mapping.softcap) * mapping.softcap
    return logits


def _chunk_loss(head: nn.Module, mapping: LogitMap, x: torch.Tensor, targets: torch.Tensor,
                argmax: list[torch.Tensor] | None = None) -> torch.Tensor:
    logits = _apply(mapping, head.forward(x))
    if argmax is not None:
        argmax.append(logits.argmax(-1))
    return nn.functional.cross_entropy(logits.float(), targets, reduction="sum")


def _without_grad(head: nn.Module, choice: LossChoice, flat: torch.Tensor, targets: torch.Tensor,
                  argmax: list[torch.Tensor] | None) -> torch.Tensor:
    total = flat.new_zeros((), dtype=torch.float32)
    for start in range(0, flat.shape[0], choice.rows):
        end = start + choice.rows
        total += _chunk_loss(head, choice.mapping, flat[start:end], targets[start:end], argmax)
    return total


class _ChunkedCrossEntropy(torch.autograd.Function):
    """The summed cross-entropy of ``hidden``'s positions through the output layer, a chunk at a time. Forward
    takes each chunk's gradients (hidden states and the layer's trainable weights, accumulated in fp32) and
    drops its logits; backward scales them by the loss's gradient."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, targets: torch.Tensor, plan: tuple, *params: torch.Tensor):
        head, choice = plan
        want_hidden = ctx.needs_input_grad[0]
        wanted = [i for i, need in enumerate(ctx.needs_input_grad[3:]) if need]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        sums: list[torch.Tensor | None] = [None] * len(params)
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, hidden.shape[0], choice.rows):
            end = start + choice.rows
            x = hidden[start:end].detach().requires_grad_(want_hidden)
            with torch.enable_grad():
                loss = _chunk_loss(head, choice.mapping, x, targets[start:end])
            inputs = ([x] if want_hidden else []) + [params[i] for i in wanted]
            if inputs:
                grads = list(torch.autograd.grad(loss, inputs))
                if want_hidden:
                    grad_hidden[start:end] = grads.pop(0)
                for i, g in zip(wanted, grads, strict=True):
                    sums[i] = g.float() if sums[i] is None else sums[i].add_(g)
            total += loss.detach()
        ctx.grad_hidden, ctx.sums, ctx.dtypes = grad_hidden, sums, [p.dtype for p in params]
        return total

    @staticmethod
    def backward(ctx, grad_total: torch.Tensor):
        grad_hidden, sums, dtypes = ctx.grad_hidden, ctx.sums, ctx.dtypes
        ctx.grad_hidden = ctx.sums = None
        scale = grad_total.float()
        out_hidden = grad_hidden.mul_(scale.to(grad_hidden.dtype)) if grad_hidden is not None else None
        out_params = [None if s is None else s.mul_(scale).to(dtype) for s, dtype in zip(sums, dtypes, strict=True)]
        return (out_hidden, None, None, *out_params)


class _Link(torch.autograd.Function):
    """The probe's logits, joined to the loss's graph so that the model's output takes part in the backward
    (FSDP's hooks on it run); no gradient flows through it."""

    @staticmethod
    def forward(ctx, probe: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        return probe.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, None


def _fused(head: nn.Module, mapping: LogitMap, flat: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Liger Kernel's fused linear cross-entropy (CUDA): a scale goes into the hidden states (``(s x) W^T`` is
    ``s (x W^T)`` for a layer without bias), soft-capping into the kernel."""
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

    if mapping.multiply is not None:
        flat = flat * mapping.multiply
    if mapping.divide is not None:
        flat = flat / mapping.divide
    out = LigerFusedLinearCrossEntropyLoss(reduction="sum", softcap=mapping.softcap)(head.weight, flat, targets,
                                                                                    head.bias)
    return out if isinstance(out, torch.Tensor) else out[0]  # versions that also return the z-loss
