"""The doctor's probe reply (what ``probe.py`` prints on a node), decoded once where it enters: every part
typed, a part of the wrong shape read as that part's error, text printable. The judge reads these types
and never the node's JSON, so a node that sends nonsense gets a check that says so, never a traceback."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher.untrusted import printable
from trainer.wire.json_value import JsonValue

NOT_SENT = "the node's probe did not report it"


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str:
    return printable(value) if isinstance(value, str) else ""


def _maybe_text(value: object) -> str | None:
    return printable(value) if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _flag(value: object, default: bool = True) -> bool:
    return value if isinstance(value, bool) else default


def _texts(value: object) -> tuple[str, ...]:
    return tuple(printable(v) for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _error(data: dict[str, Any]) -> str:
    """A part's own error (the probe catches each part's failure and reports it as ``error``)."""
    return _text(data.get("error")) or ("an error it did not name" if "error" in data else "")


@dataclass(frozen=True)
class PythonFacts:
    version: tuple[int, ...] | None = None
    executable: str = ""
    error: str = ""


@dataclass(frozen=True)
class PackageFacts:
    version: str | None = None
    """``None``: not installed for the probed interpreter."""
    imported: str | None = None
    """``ok``, ``skipped`` (versions only), the import's error in one line, or ``None``: not tried."""
    cuda: str | None = None
    """torch's CUDA version; ``None`` for a CPU-only build."""
    error: str = ""


@dataclass(frozen=True)
class GpuFacts:
    smi: str | None = None
    """Where ``nvidia-smi`` is; ``None``: not on the node."""
    names: tuple[str, ...] = ()
    error: str = ""
    memory_mib: tuple[int, ...] = ()
    """Each GPU's memory as its driver reports it (MiB), in the order of ``names``."""


@dataclass(frozen=True)
class RamFacts:
    total_bytes: int | None = None
    available_bytes: int | None = None
    error: str = ""


@dataclass(frozen=True)
class DiskFacts:
    path: str = ""
    existing: str = ""
    """The nearest folder of ``path`` that exists (what is measured)."""
    free_bytes: int = 0
    writable: bool = True
    error: str = ""


@dataclass(frozen=True)
class OutputDirFacts:
    path: str = ""
    existing: str = ""
    writable: bool = True
    is_dir: bool = True
    error: str = ""


@dataclass(frozen=True)
class BindError:
    where: str
    """``addr``: MASTER_ADDR itself; ``any``: every interface (what torchrun's store binds)."""
    errno: str
    message: str


@dataclass(frozen=True)
class MasterFacts:
    addrs: tuple[str, ...] = ()
    resolve_error: str = ""
    bind_error: BindError | None = None
    error: str = ""


@dataclass(frozen=True)
class RouteFacts:
    iface: str = ""
    local: str = ""
    error: str = ""


@dataclass(frozen=True)
class InterfaceFacts:
    names: tuple[str, ...] = ()
    route: RouteFacts = field(default_factory=RouteFacts)
    error: str = ""


@dataclass(frozen=True)
class DataFacts:
    """One data file the workload names, as the node found it."""

    path: str
    kind: str = ""
    """``file``, ``folder`` or ``missing``."""
    size: int | None = None
    readable: bool = True
    columns: tuple[str, ...] | None = None
    """``None``: not read (a parquet file without pyarrow on the node, a row longer than the part read)."""
    row: Mapping[str, JsonValue] | None = None
    """Its first row (small ones only), for the format's rules."""
    problem: str = ""
    error: str = ""


@dataclass(frozen=True)
class ProbeReply:
    """What one node's probe found, typed."""

    hostname: str | None
    python: PythonFacts
    packages: Mapping[str, PackageFacts]
    """By distribution name."""
    packages_error: str
    """Why the packages could not be inspected at all."""
    gpus: GpuFacts
    ram: RamFacts
    disk: DiskFacts
    output_dir: OutputDirFacts | None
    """``None``: the workload has no ``output_dir``."""
    master: MasterFacts
    containers: Mapping[str, str | None]
    """``docker``/``podman`` -> where it is on the node, ``None`` where it is not."""
    interfaces: InterfaceFacts
    raw: Mapping[str, JsonValue]
    data: tuple[DataFacts, ...] = ()
    """The data files the workload names on this node, in the order they were asked for."""
    data_error: str = ""
    """The reply as it came (printable), for ``doctor --json``."""

    @classmethod
    def from_wire(cls, data: object) -> ProbeReply | None:
        """A node's probe reply; ``None`` for what is no reply at all."""
        if not isinstance(data, dict):
            return None
        python, packages = _dict(data.get("python")), _dict(data.get("packages"))
        version = python.get("version")
        return cls(
            hostname=_maybe_text(data.get("hostname")) or None,
            python=PythonFacts(tuple(version) if isinstance(version, list) and version
                               and all(_int(v) is not None for v in version) else None,
                               _text(python.get("executable")), _error(python)),
            packages={_text(dist): _package(info) for dist, info in packages.items() if dist != "error"},
            packages_error=_error(packages),
            gpus=_gpus(_dict(data.get("gpus"))),
            ram=_ram(_dict(data.get("ram"))),
            disk=_disk(_dict(data.get("disk"))),
            output_dir=None if data.get("output_dir") is None else _output_dir(_dict(data.get("output_dir"))),
            master=_master(_dict(data.get("master"))),
            containers={_text(k): _maybe_text(v) for k, v in _dict(data.get("containers")).items()},
            interfaces=_interfaces(_dict(data.get("interfaces"))),
            raw=data,
            data=tuple(_data_file(_dict(d)) for d in data["data"]) if isinstance(data.get("data"), list) else (),
            data_error=_error(_dict(data.get("data"))),
        )


def _package(info: object) -> PackageFacts:
    info = _dict(info)
    return PackageFacts(_maybe_text(info.get("version")), _maybe_text(info.get("import")),
                        _maybe_text(info.get("cuda")) or None, _error(info))


def _gpus(data: dict[str, Any]) -> GpuFacts:
    sizes = data.get("memory_mib")
    memory = tuple(v for v in sizes if _int(v) is not None and v > 0) if isinstance(sizes, list) else ()
    return GpuFacts(_maybe_text(data.get("smi")), _texts(data.get("names")), _error(data), memory)


def _ram(data: dict[str, Any]) -> RamFacts:
    total, available = _int(data.get("total_bytes")), _int(data.get("available_bytes"))
    return RamFacts(total if total and total > 0 else None, available if available and available >= 0 else None,
                    _error(data) or ("" if total else NOT_SENT))


def _disk(data: dict[str, Any]) -> DiskFacts:
    free, path, existing = _int(data.get("free_bytes")), _text(data.get("path")), _text(data.get("existing"))
    error = _error(data) or ("" if free is not None and path and existing else NOT_SENT)
    return DiskFacts(path, existing, free or 0, _flag(data.get("writable")), error)


def _output_dir(data: dict[str, Any]) -> OutputDirFacts:
    path, existing = _text(data.get("path")), _text(data.get("existing"))
    error = _error(data) or ("" if path and existing else NOT_SENT)
    return OutputDirFacts(path, existing, _flag(data.get("writable")), _flag(data.get("is_dir")), error)


def _master(data: dict[str, Any]) -> MasterFacts:
    bind = data.get("bind_error")
    bind_error = None
    if isinstance(bind, dict):
        bind_error = BindError(_text(bind.get("where")), _text(bind.get("errno")), _text(bind.get("message")))
    return MasterFacts(_texts(data.get("addrs")), _text(data.get("resolve_error")), bind_error, _error(data))


def _interfaces(data: dict[str, Any]) -> InterfaceFacts:
    route = _dict(data.get("route"))
    return InterfaceFacts(_texts(data.get("names")),
                          RouteFacts(_text(route.get("iface")), _text(route.get("local")), _error(route)),
                          _error(data))


def _data_file(data: dict[str, Any]) -> DataFacts:
    columns = data.get("columns")
    row = data.get("row")
    return DataFacts(_text(data.get("path")), _text(data.get("kind")), _int(data.get("size")),
                     _flag(data.get("readable")), _texts(columns) if isinstance(columns, list) else None,
                     _clean_row(row) if isinstance(row, dict) else None, _text(data.get("problem")), _error(data))


def _clean_row(row: dict[str, Any]) -> dict[str, JsonValue]:
    """A row as the node sent it, its keys and text printable (the format's rules read it as data)."""
    def clean(value: object) -> JsonValue:
        if isinstance(value, str):
            return printable(value, newlines=True)
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {printable(str(k)): clean(v) for k, v in value.items()}
        return value if isinstance(value, (int, float, bool)) or value is None else printable(str(value))

    return {printable(str(k)): clean(v) for k, v in row.items()}
