"""Each rank's memory before it is used: the fit prediction (:mod:`trainer.wire.fit`, the launcher's rule)
for the model this run built, the rank's memory it must fit in, and the peak each rank measures.

The model's sizes come from its config, with the parameter counts of the model's base as built (exact for
any family): which of its parameters are the base's is the adaptation's to say
(:meth:`trainer.lora.adaptation.FullFineTune.base_parameters`), and whether the built model can be counted
at all (a base stored otherwise than as its parameters is counted from its config). On a GPU the measured
peak is the tensors' (``torch.cuda.max_memory_allocated``); on CPU the process's resident peak
(``VmHWM``), compared with the process's memory before the model plus the predicted peak.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from trainer.loop.metrics import status_bytes
from trainer.parallel import Dist, rank_budget
from trainer.wire import fit_advice
from trainer.wire.config import TrainerConfig
from trainer.wire.fit import GIB, Prediction, Setup, Sharding
from trainer.wire.fit_record import FitSummary
from trainer.wire.model_size import ModelSize, size_of, with_counts


def process_bytes() -> int:
    """This process's resident memory now (0 where ``/proc`` does not say)."""
    try:
        return status_bytes("VmRSS")
    except OSError:
        return 0


BaseParameters = Callable[[nn.Module], "list[nn.Parameter] | None"]
"""The parameters of a module that are the base model's (``None``: the built model does not count them)."""


def model_size(config, net: nn.Module, base_parameters: BaseParameters) -> ModelSize | None:
    """The sizes of ``net`` (built on any device, the meta one too) from its Hugging Face ``config``, with the
    counts of its parameters that ``base_parameters`` says are the base's; the config's counts where it says
    none (``None`` for a model the rule cannot size)."""
    from trainer.model.build import decoder_blocks

    size = size_of(config.to_dict())
    if size is None or base_parameters(net) is None:
        return size

    def base(module: nn.Module) -> dict[int, int]:
        return {id(p): p.numel() for p in base_parameters(module) or ()}

    everything = base(net)
    blocks = [base(b) for b in decoder_blocks(net)]
    embed = net.get_input_embeddings().weight
    head = net.get_output_embeddings()
    output = {} if head is None else {k: v for k, v in base(head).items() if k != id(embed)}
    in_blocks = sum(sum(b.values()) for b in blocks)
    rest = sum(everything.values()) - in_blocks - embed.numel() - sum(output.values())
    return with_counts(size, embedding=embed.numel(), output=sum(output.values()), blocks=in_blocks,
                       block=max((sum(b.values()) for b in blocks), default=0), rest=max(0, rest))


def setup(cfg: TrainerConfig, d: Dist, sharding: Sharding, attention, vocab: int) -> Setup:
    """The prediction's settings for this run (``attention``: the run's
    :class:`trainer.model.attention.AttentionChoice`; ``vocab``: the model's)."""
    return fit_advice.setup_for(cfg, world=d.world, nodes=d.num_nodes, device="cuda" if d.device.type == "cuda" else "cpu",
                                sharding=sharding, packing=attention.packing, per_example=attention.per_example,
                                attention=attention.implementation, vocab=vocab)


def budget(d: Dist) -> fit_advice.Budget:
    """A rank's memory: its GPU's, else the node's RAM over the node's ranks."""
    return rank_budget(d)


def summary(prediction: Prediction, room: fit_advice.Budget, before: int) -> FitSummary:
    """The ``fit`` record of ``prediction`` (``before``: a CPU rank's memory before its model)."""
    cpu = prediction.setup.device == "cpu"
    need = fit_advice.need_bytes(prediction, before if cpu else None)
    expected = prediction.peak + (before if cpu else 0)
    return FitSummary(expected_gib=round(expected / GIB, 4), need_gib=round(need / GIB, 4),
                      device=prediction.setup.device, sharding=prediction.setup.sharding, world=prediction.setup.world,
                      memory_gib=round(room.bytes / GIB, 2), parts=prediction.parts_gib())
