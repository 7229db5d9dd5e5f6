"""How many FLOPs a training step does, by convention: the figure MFU divides by the device's peak.
Standard library only: the trainer counts with it, the launcher and the docs name the convention.

Per token of an example of ``n`` tokens, for a model of ``N`` non-embedding parameters (the output layer
counted, tied or not) of which ``T`` train, ``L`` layers and attention width ``H`` (heads x head dim):

- the weights' matmuls: forward ``2N``, the gradient of the activations ``2N`` (backward needs it through
  every layer, frozen or not) and the gradient of the weights ``2T`` (only where a weight trains). A full
  fine-tune (``T = N``) is the usual ``6N``; a LoRA run with a frozen base does ``(2 + T/N)/3`` of it
  (NeMo Automodel's scaling), about 4N for small adapters;
- attention's score and value matmuls: ``12 L H n`` (forward 4, backward 8; no causal discount), as
  torchtitan counts them; packed examples attend only within themselves, so ``n`` is the example's own
  length.

Not counted: a recomputation under activation checkpointing (model FLOPs, not the hardware's), norms,
activations' element-wise work, the softmax, the optimiser's update.
"""

from __future__ import annotations

from collections.abc import Iterable

MFU_CONVENTION = ("model FLOPs (forward 2N + activation gradients 2N + weight gradients 2T per token, N "
                  "non-embedding parameters, T of them trained; attention 12 x layers x width x example length; "
                  "recomputation not counted) over the device's dense bf16 peak")
"""How MFU is counted, in one line: said at a run's start, as its MLflow run's tag ``fsdp_tui.mfu_convention``
and in the docs."""


def dense_flops_per_token(non_embedding: int, trainable_non_embedding: int | None = None) -> float:
    """The weights' matmul FLOPs of one trained token: ``4N + 2T`` (``6N`` when every weight trains)."""
    trained = non_embedding if trainable_non_embedding is None else trainable_non_embedding
    return 4.0 * non_embedding + 2.0 * trained


def train_flops(non_embedding: int, trainable_non_embedding: int | None, num_layers: int, attention_width: int,
                example_lengths: Iterable[int]) -> float:
    """FLOPs of forward and backward over examples of these lengths (the module's convention)."""
    lengths = [int(n) for n in example_lengths]
    return dense_flops_per_token(non_embedding, trainable_non_embedding) * sum(lengths) + \
        12.0 * num_layers * attention_width * sum(n * n for n in lengths)
