"""A GPU node's health report as its node script sends it (``nvidia-smi -q`` counters, NVLink state, Xid lines
from the kernel log), decoded once where it enters: untrusted, so a value of the wrong type reads as not
reported; text is cleaned where it is said (:mod:`launcher.nettest.burnin`). ``to_dict`` writes the report
back as it came (the kept test's file, ``nettest --json``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's counters (``None``: not reported)."""

    bus_id: str
    ecc_volatile_uncorrectable: int | None = None
    ecc_aggregate_uncorrectable: int | None = None
    retired_pending: bool | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None

    @classmethod
    def from_wire(cls, data: object) -> GpuHealth | None:
        if not isinstance(data, dict):
            return None
        values: dict[str, Any] = {"bus_id": str(data.get("bus_id", ""))}
        for f in fields(cls)[1:]:
            decode = _flag if f.type == "bool | None" else _count
            values[f.name] = decode(data.get(f.name))
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LinkState:
    """One GPU's NVLink links: how many are up, how many inactive."""

    up: int = 0
    inactive: int = 0

    @classmethod
    def from_wire(cls, data: object) -> LinkState | None:
        if not isinstance(data, dict):
            return None
        return cls(_count(data.get("up")) or 0, _count(data.get("inactive")) or 0)


@dataclass(frozen=True)
class NodeHealth:
    """One GPU node's health report; a part the node did not send is ``None`` (a report that could not be
    read is ``NodeHealth(smi_readable=False)``)."""

    gpus: tuple[GpuHealth, ...] | None = None
    nvlink: Mapping[str, LinkState] | None = None
    """By GPU, as ``nvidia-smi nvlink -s`` names it."""
    xid: tuple[str, ...] | None = None
    """Xid lines of the kernel log, newest last."""
    smi_readable: bool | None = None
    kernel_log_readable: bool | None = None

    @classmethod
    def from_wire(cls, data: object) -> NodeHealth | None:
        """The report a node sent (``None``: not a report at all)."""
        if not isinstance(data, dict):
            return None
        gpus, links, xid = data.get("gpus"), data.get("nvlink"), data.get("xid")
        return cls(
            tuple(g for g in map(GpuHealth.from_wire, gpus) if g is not None) if isinstance(gpus, list) else None,
            {str(k): s for k, v in links.items() if (s := LinkState.from_wire(v)) is not None}
            if isinstance(links, dict) else None,
            tuple(str(x) for x in xid) if isinstance(xid, list) else None,
            _flag(data.get("smi_readable")), _flag(data.get("kernel_log_readable")))

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON, each part the node sent."""
        out: dict[str, Any] = {}
        if self.gpus is not None:
            out["gpus"] = [g.to_dict() for g in self.gpus]
        if self.nvlink is not None:
            out["nvlink"] = {k: asdict(v) for k, v in self.nvlink.items()}
        if self.xid is not None:
            out["xid"] = list(self.xid)
        for key in ("smi_readable", "kernel_log_readable"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def health_by_node(data: object) -> dict[int, NodeHealth]:
    """A kept test's ``health`` (node rank as text -> report): each report decoded; others left out."""
    from trainer.wire.ckpt_layout import ascii_int

    if not isinstance(data, dict):
        return {}
    return {n: h for k, v in data.items()
            if (n := ascii_int(str(k))) is not None and (h := NodeHealth.from_wire(v)) is not None}
