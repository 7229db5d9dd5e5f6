"""A GPU node's health, read where it runs: ``nvidia-smi -q`` counters, NVLink state and the kernel's Xid
lines, parsed on the node so that only the findings travel. Standard library only: shipped beside
``nettest.py`` in the interconnect self-test's code snapshot."""

from __future__ import annotations


def _command(argv: list[str]) -> str:
    """A command's output, or ``""`` where it cannot run or be read (no driver tools, no permission)."""
    import subprocess

    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def gpu_health() -> dict:
    """This node's GPU health counters and kernel Xid lines, parsed here (a node's text stays here)."""
    smi = _command(["nvidia-smi", "-q", "-d", "ECC,PAGE_RETIREMENT,ROW_REMAPPER"])
    links = _command(["nvidia-smi", "nvlink", "-s"])
    kernel = _command(["dmesg"])
    return {"gpus": parse_smi_health(smi), "nvlink": parse_nvlink(links), "xid": parse_xid(kernel)[-20:],
            "smi_readable": bool(smi), "kernel_log_readable": bool(kernel)}


def parse_smi_health(text: str) -> list[dict]:
    """Per GPU of ``nvidia-smi -q``: uncorrectable ECC errors (volatile, aggregate), pending page
    retirement, remapped rows (correctable, uncorrectable, pending, failure). ``None`` where not reported."""
    gpus: list[dict] = []
    path: list[tuple[int, str]] = []
    for line in text.splitlines():
        if line.startswith("GPU "):
            gpus.append({"bus_id": line[4:].strip(), "ecc_volatile_uncorrectable": None,
                         "ecc_aggregate_uncorrectable": None, "retired_pending": None, "remapped_correctable": None,
                         "remapped_uncorrectable": None, "remap_pending": None, "remap_failure": None})
            path = []
            continue
        if not gpus or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = (part.strip() for part in line.partition(":"))
        while path and path[-1][0] >= indent:
            path.pop()
        if not sep or not value:
            path.append((indent, key))
            continue
        sections = [name for _i, name in path]
        gpu = gpus[-1]
        number = int(value) if value.isdigit() else None
        if "ECC Errors" in sections and ("Uncorrectable" in key or key == "Double Bit ECC" or
                                         (key == "Total" and "Double Bit" in sections)):
            field = "ecc_volatile_uncorrectable" if "Volatile" in sections else "ecc_aggregate_uncorrectable"
            if number is not None:
                gpu[field] = (gpu[field] or 0) + number
        elif "Retired Pages" in sections and key == "Pending Page Blacklist" and value != "N/A":
            gpu["retired_pending"] = value == "Yes"
        elif "Remapped Rows" in sections and len(sections) == 1:
            field = {"Correctable Error": "remapped_correctable", "Uncorrectable Error": "remapped_uncorrectable",
                     "Pending": "remap_pending", "Remapping Failure Occurred": "remap_failure"}.get(key)
            if field and value != "N/A":
                gpu[field] = number if field.startswith("remapped") else value == "Yes"
    return gpus


def parse_nvlink(text: str) -> dict:
    """``nvidia-smi nvlink -s``: per GPU, how many links are up and how many are inactive."""
    out: dict[str, dict] = {}
    gpu = None
    for line in text.splitlines():
        if line.startswith("GPU "):
            gpu = line.split(" (UUID")[0]
            out[gpu] = {"up": 0, "inactive": 0}
        elif gpu is not None and line.strip().startswith("Link ") and ":" in line:
            state = line.split(":", 1)[1].strip()
            out[gpu]["inactive" if "inactive" in state.lower() else "up"] += 1
    return out


def parse_xid(text: str) -> list[str]:
    """Kernel log lines of NVIDIA Xid events (``NVRM: Xid (PCI:...): 79, ...``)."""
    return [line.strip()[:300] for line in text.splitlines() if "NVRM: Xid" in line]
