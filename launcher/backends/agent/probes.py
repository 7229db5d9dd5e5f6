"""Facts a node reports on request: GPU samples, every rank's stack, and a short script run under a given
interpreter (the doctor's probe)."""

from __future__ import annotations

import os
import shutil
import subprocess

from trainer.wire.ckpt_layout import ascii_int

GPU_QUERY = "index,name,memory.used,memory.total,utilization.gpu,power.draw,power.limit"


def _watts(text: str) -> float | None:
    """A power figure, or ``None`` for what ``nvidia-smi`` prints when it has none (``[N/A]``)."""
    try:
        return float(text)
    except ValueError:
        return None


def gpu_samples() -> list:
    """One dict per GPU from ``nvidia-smi`` (index, name, memory used/total MiB, utilisation %, power draw
    and limit W where it says); [] without it."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []
    samples = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) not in (5, 7):  # 5: an nvidia-smi that ignored the power fields
            continue
        try:
            sample = {"index": int(parts[0]), "name": parts[1], "memory_used_mib": float(parts[2]),
                      "memory_total_mib": float(parts[3]),
                      "utilization_pct": float(parts[4]) if parts[4][:1].isdigit() else 0.0}
        except ValueError:
            continue
        if len(parts) == 7:
            sample.update(power_w=_watts(parts[5]), power_limit_w=_watts(parts[6]))
        samples.append(sample)
    return samples


def run_script(python: str, script: str, timeout_s: float) -> dict:
    """Run ``script`` on ``python``'s stdin; its exit status (``None`` on timeout), stdout and stderr."""
    try:
        done = subprocess.run([python, "-"], input=script, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as err:
        return {"exit_status": 127, "stdout": "", "stderr": f"{python}: {err.strerror or err}"}
    except PermissionError as err:
        return {"exit_status": 126, "stdout": "", "stderr": f"{python}: {err.strerror or err}"}
    except OSError as err:
        return {"exit_status": 126, "stdout": "", "stderr": f"{python}: {err.strerror or err}"}
    except subprocess.TimeoutExpired:
        return {"exit_status": None, "stdout": "", "stderr": f"the probe did not finish within {timeout_s:.0f}s"}
    return {"exit_status": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


SIGUSR2 = 12
PY_SPY_TIMEOUT_S = 20.0


def _environ(pid: int) -> dict:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    except OSError:
        return {}
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _is_python(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
    except OSError:
        return False


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for ``signum`` (else the signal would kill it)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    except (OSError, ValueError):
        return False
    return False


def stacks(pids: list, python: str) -> list:
    """Where each Python process of the job is: ``py-spy dump`` when py-spy is on the node (on PATH or
    beside the job's interpreter), else SIGUSR2 to processes that registered a faulthandler for it (the
    built-in trainer does: the dump goes to the node's log). Never a signal to a process without a
    handler: it would die of it."""
    beside = os.path.join(os.path.dirname(os.path.abspath(os.path.expanduser(python))), "py-spy")
    py_spy = shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)
    out = []
    for pid in sorted(p for p in pids if _is_python(p)):
        env = _environ(pid)
        rank = ascii_int(env.get("RANK", ""))
        if py_spy:
            try:
                done = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                                      timeout=PY_SPY_TIMEOUT_S, stdin=subprocess.DEVNULL)
                text = done.stdout if done.returncode == 0 else f"py-spy failed: {done.stderr.strip()[-500:]}"
                out.append({"pid": pid, "rank": rank, "how": "py-spy", "text": text})
                continue
            except (OSError, subprocess.TimeoutExpired) as err:
                out.append({"pid": pid, "rank": rank, "how": "none", "text": f"py-spy did not answer: {err}"})
                continue
        if _catches(pid, SIGUSR2):
            try:
                os.kill(pid, SIGUSR2)
                out.append({"pid": pid, "rank": rank, "how": "faulthandler",
                            "text": "every thread's stack was written to the node's log"})
                continue
            except OSError as err:
                out.append({"pid": pid, "rank": rank, "how": "none", "text": f"cannot signal it: {err}"})
                continue
        out.append({"pid": pid, "rank": rank, "how": "none",
                    "text": "no py-spy on this node and no stack-dump handler in the process: "
                            "pip install py-spy (beside environment.python) to see where it is"})
    return out
