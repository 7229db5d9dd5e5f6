"""Build the model without weights, shard it, then fill each rank's shards.

No rank ever holds the whole model on its device. Parameters are created on the meta device (buffers,
which are small and often computed in ``__init__``, stay real), the caller wraps and shards the
skeleton, and :func:`fill` materialises only this rank's shards:

- from ``*.safetensors`` files, each rank reads just the rows of its own shards with plain file reads
  into the shard's memory (no mmap, no full tensor, no host copy of the model);
- otherwise (``from_scratch``, ``.bin`` weights, names that do not match), rank 0 builds or loads the
  full model on the host and broadcasts it into the shards, one tensor at a time.
"""

from __future__ import annotations

import contextlib
import json
import math
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}
_WRAPPERS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Every parameter registered inside goes to the meta device; buffers stay where they are made.
    Parameters are first created uninitialised (pages never touched), so this costs no memory."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and param.device.type != "meta":
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def clean_name(name: str) -> str:
    for wrapper in _WRAPPERS:
        name = name.replace(wrapper, "")
    return name


def materialize(model: nn.Module, device: torch.device) -> None:
    """Allocate the (sharded) parameters on ``device`` and keep the buffers' values and the ties
    between parameters (``to_empty`` makes a new tensor per module: a tied output layer would come
    back untied; FSDP keeps its own ties)."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers() if b.device.type != "meta"}
    owners: dict[int, list[tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                owners.setdefault(id(param), []).append((module, name))
    model.to_empty(device=device)
    for group in owners.values():
        first = group[0][0]._parameters[group[0][1]]
        if len(group) > 1 and type(first) is nn.Parameter:
            for module, name in group[1:]:
                module._parameters[name] = first
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name in buffers:
                b.copy_(buffers[name])


def move_buffers(model: nn.Module, device: torch.device) -> None:
    """Put every buffer (rotary ``inv_freq``, ...) on ``device``, a buffer shared by modules still shared.

    With CPU offload the parameters live on the host, but the buffers belong on the GPU that computes
    with them, where FSDP2's ``CPUOffloadPolicy`` leaves them: :func:`materialize` puts them on the
    host with the parameters (torch's full-state broadcast refuses a model on two devices), so they
    move once the weights are in, instead of being copied to the GPU at every forward."""
    placed: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for name, buf in module._buffers.items():
            if buf is not None and buf.device != device:
                if id(buf) not in placed:
                    placed[id(buf)] = buf.to(device)
                module._buffers[name] = placed[id(buf)]


class SafetensorsIndex:
    """Where each tensor of a folder's ``*.safetensors`` files lies: file, dtype, shape, byte range."""

    def __init__(self, folder: Path) -> None:
        self.entries: dict[str, tuple[Path, torch.dtype, list[int], int]] = {}
        for path in sorted(folder.glob("*.safetensors")):
            with open(path, "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(size))
            for key, info in header.items():
                if key != "__metadata__":
                    self.entries[key] = (path, _DTYPES[info["dtype"]], info["shape"], 8 + size + info["data_offsets"][0])

    def find(self, name: str, prefix: str) -> str | None:
        candidates = [name]
        if prefix and name.startswith(prefix + "."):
            candidates.append(name[len(prefix) + 1:])
        elif prefix:
            candidates.append(f"{prefix}.{name}")
        return next((c for c in candidates if c in self.entries), None)

    def read_rows(self, key: str, first_row: int, out: torch.Tensor) -> None:
        """Rows ``first_row:first_row+len(out)`` of tensor ``key`` into ``out`` (any device/dtype)."""
        path, dtype, shape, start = self.entries[key]
        if list(out.shape[1:]) != list(shape[1:]) or (out.dim() == 0) != (len(shape) == 0):
            raise ValueError(f"{key}: the checkpoint's shape {shape} does not fit {list(out.shape)}")
        if out.numel() == 0:
            return
        row_bytes = math.prod(shape[1:]) * dtype.itemsize
        direct = out.device.type == "cpu" and out.dtype == dtype and out.is_contiguous()
        target = out if direct else torch.empty(out.shape, dtype=dtype)
        with open(path, "rb", buffering=0) as f:
            f.seek(start + first_row * row_bytes)
            view = memoryview(target.view(-1).view(torch.uint8).numpy())
            while view.nbytes:
                n = f.readinto(view)
                if not n:
                    raise ValueError(f"{path}: file ends inside tensor {key}")
                view = view[n:]
        if not direct:
            out.copy_(target)


def fill_from_safetensors(model: nn.Module, folder: Path,
                          names: Callable[[str], str | None] = clean_name) -> bool:
    """Read this rank's rows of every parameter and persistent buffer; ``False`` (nothing read) when
    the folder has no safetensors or a parameter is missing from them. ``names`` gives the weights'
    name of a parameter (``None``: not in the weights, e.g. a LoRA adapter, filled by the caller)."""
    index = SafetensorsIndex(folder)
    prefix = getattr(model, "base_model_prefix", "")
    params = [(names(n), p) for n, p in model.named_parameters()]
    params = [(name, p) for name, p in params if name is not None]
    keys = {name: index.find(name, prefix) for name, _ in params}
    if not index.entries or None in keys.values():
        return False
    with torch.no_grad():
        for name, param in params:
            local, first_row = local_part(param)
            index.read_rows(keys[name], first_row, local)
        for name, buf in model.named_buffers():
            weights_name = names(name)
            key = index.find(weights_name, prefix) if weights_name is not None else None
            if key is not None:
                index.read_rows(key, 0, buf)
    return True


def local_part(param: torch.Tensor) -> tuple[torch.Tensor, int]:
    """This rank's piece of a parameter and its first global row (FSDP shards along dim 0)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if not isinstance(param, DTensor):
        return param.data, 0
    _, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    return param.to_local(), (offset[0] if offset else 0)


def fill_by_broadcast(model: nn.Module, full_state: dict[str, torch.Tensor] | None) -> None:
    """Rank 0 passes the full state (host tensors); every rank receives its shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, full_state if dist.get_rank() == 0 else {},
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
