"""Where the test suite's CPU goes, by kind of process: ranks, torchrun agents, run owners, node agents,
commands, pytest workers.

A hook in the venv (a ``.pth`` line, removed at the end) has every Python process that starts from it,
on this machine's namespaced hosts and SLURM nodes too, note at its exit its own CPU (user + system), its
command and whether it imported torch. ``.ci/run`` then runs as CI runs it (the arguments are passed on),
while the machine's whole CPU is read from ``/proc/stat`` before and after: what no Python process noted is
the rest (sshd, SLURM's daemons, ``ip``/``tc``, pyright, and Python processes ended by a signal). As root
with ``accton`` (Debian's ``acct``), the kernel's process accounting runs beside it and names the rest: every
process's CPU by command, and how much of the Python processes' never reached their exit handlers.

    python3 benchmarks/bench_suite_cpu.py [.ci/run's arguments]    # a fresh clone will do: .ci/run installs
    python3 benchmarks/bench_suite_cpu.py --notes NOTES [CPU_S]     # a run's notes read again
    python3 benchmarks/bench_suite_cpu.py --rank-start              # a rank's start alone, three times

Run nothing else from a checkout meanwhile: ``.ci/run``'s check for left-over processes stops another
suite's as its own.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOOK = '''import atexit, os, sys
def _note():
    import json, resource
    use = resource.getrusage(resource.RUSAGE_SELF)
    line = json.dumps({{"argv": list(getattr(sys, "orig_argv", sys.argv))[:4], "cpu": use.ru_utime + use.ru_stime,
                       "torch": "torch" in sys.modules,
                       "mlflow": "mlflow" in sys.modules,
                       "rank": "LOCAL_RANK" in os.environ,
                       "test": os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]}})
    fd = os.open({log!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.write(fd, (line + "\\n").encode())
    os.close(fd)
atexit.register(_note)
'''


def kind(note: dict) -> str:
    """The kind of process a note is from, by its command (and a rank by torchrun's variables)."""
    head, *rest = note["argv"] or [""]
    while rest and rest[0] in ("-u", "-B", "-I", "-E", "-s", "-S", "-O"):  # the interpreter's own flags
        rest.pop(0)
    argv = [head, *rest, "", "", ""]
    if note["rank"]:
        return "rank (and its data workers)"
    if argv[1] == "-m" and argv[2] == "torch.distributed.run" or argv[1].endswith("torchrun"):
        return "torchrun agent"
    if argv[1] == "-m" and argv[2].startswith("launcher.runs.owner."):
        if argv[2] in ("launcher.runs.owner.warm", "launcher.runs.owner.supervisor"):
            mlflow = note.get("mlflow")  # absent from older notes
            said = "" if mlflow is None else ", logging to MLflow" if mlflow else ", no MLflow"
            return f"run owner{said}"
        return f"owner's helper ({argv[2].rsplit('.', 1)[1]})"
    if argv[1] == "-c" and "fsdp_tui_agent" in argv[2] or "agent.zip" in argv[1]:
        return "node agent"
    if argv[1].endswith("/fsdp-tui"):
        return "fsdp-tui command"
    if argv[1] == "-c" and "execnet" in argv[2] or argv[1] == "-c" and "exec(eval(" in argv[2]:
        return "pytest worker"
    if argv[1] == "-" or argv[1] == "-c":
        return "python - / -c (probes, node scripts)"
    return "other (tests' own scripts, pytest's main, tools)"


def machine_cpu_s() -> float:
    """Every core's busy time since boot (``/proc/stat``: user, nice, system, irq, softirq), seconds."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


RANK_START = """import sys, time
start = time.process_time()
import trainer.job
job = time.process_time()
from transformers import AutoConfig, AutoModelForCausalLM
library = time.process_time()
AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", hidden_size=32, intermediate_size=64,
    num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, vocab_size=128))
model = time.process_time()
print(f"{job - start:.2f} {library - job:.2f} {model - library:.2f}")
"""


def rank_start(times: int = 3) -> None:
    """What a rank's start costs before it trains, in a fresh process each time: the trainer's imports
    (torch, FSDP, its own parts), transformers', and a tiny Llama built from its config (the model's classes)."""
    python = ROOT / ".venv" / "bin" / "python"
    print("CPU s: trainer.job, transformers, a tiny model's classes and build")
    for _ in range(times):
        out = subprocess.run([python, "-c", RANK_START], cwd=ROOT, capture_output=True, text=True, check=True)
        print("  " + out.stdout.strip().splitlines()[-1])


def main(args: list[str]) -> int:
    if args == ["--rank-start"]:
        rank_start()
        return 0
    if args[:1] == ["--notes"] and len(args) in (2, 3):  # a run's notes read again: FILE [its machine CPU s]
        summary(Path(args[1]), float(args[2]) if len(args) == 3 else None)
        return 0
    python = ROOT / ".venv" / "bin" / "python"
    if not python.exists():  # as .ci/run makes it, which then installs into it (the install is noted too)
        subprocess.run([sys.executable, "-m", "venv", str(ROOT / ".venv")], check=True)
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    log = Path(tempfile.mkdtemp(prefix="suite-cpu-")) / "notes.jsonl"
    module, pth = site / "_fsdp_tui_cpu_note.py", site / "_fsdp_tui_cpu_note.pth"
    module.write_text(HOOK.format(log=str(log)))
    pth.write_text("import _fsdp_tui_cpu_note\n")
    accounting = log.with_name("pacct")
    accounting.touch()
    accounted = subprocess.run(["accton", str(accounting)], capture_output=True).returncode == 0 \
        if shutil.which("accton") else False
    try:
        cpu0, wall0 = machine_cpu_s(), time.monotonic()
        code = subprocess.run(["bash", ".ci/run", *args], cwd=ROOT).returncode
        cpu, wall = machine_cpu_s() - cpu0, time.monotonic() - wall0
    finally:
        pth.unlink(missing_ok=True)
        module.unlink(missing_ok=True)
        if accounted:
            subprocess.run(["accton", "off"], capture_output=True)
    print(f"\n.ci/run exit {code}: {wall / 60:.1f} min of wall, {cpu:,.0f} s of CPU on {os.cpu_count()} cores "
          f"({cpu / wall / (os.cpu_count() or 1):.0%} busy); the notes: {log}")
    summary(log, cpu)
    if accounted:
        by_command(accounting, log)
    return code


def summary(log: Path, cpu: float | None) -> None:
    """The notes in ``log`` by kind of process, each kind's share of the machine's ``cpu`` seconds (of the
    notes' own total when ``None``: a notes file read again, ``--notes FILE``)."""
    notes = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    by: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])
    for note in notes:
        row = by[kind(note)]
        row[0] += 1
        row[1] += note["cpu"]
        row[2] += note["torch"]
    noted = sum(row[1] for row in by.values())
    whole = cpu or noted
    print(f"{len(notes):,} Python processes noted {noted:,.0f} s of CPU")
    print(f"{'CPU s':>8} {'share':>6} {'procs':>6} {'torch':>6} {'s each':>7}  kind")
    for name, (count, seconds, torch) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{seconds:8,.0f} {seconds / whole:6.1%} {count:6,} {torch:6,} {seconds / count:7.2f}  {name}")
    files: dict[str, float] = defaultdict(float)
    for note in notes:
        if note.get("test"):  # started by a test (a process of a namespaced host or a SLURM node is not)
            files[note["test"]] += note["cpu"]
    if files:
        print(f"{'CPU s':>8}  the test files whose processes used the most (pytest's own work not counted)")
        for name, seconds in sorted(files.items(), key=lambda kv: -kv[1])[:12]:
            print(f"{seconds:8,.0f}  {name}")
    if cpu:
        rest = cpu - noted
        print(f"{rest:8,.0f} {rest / cpu:6.1%} {'':6} {'':6} {'':7}  the rest: not Python, or ended by a signal")


# What the kernel's process accounting names a process by: the command of its last thread to end, so a
# Python process may be named by one of torch's, gloo's or jemalloc's threads.
PYTHON_NAMES = ("python", "fsdp-tui", "torchrun", "lint-imports", "pip", "moto_server", "pt_", "gloo_",
                "jemalloc_bg_thd", "ctrl-c")
PACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")  # struct acct_v3 (linux/acct.h): 64 bytes a process


def _comp_t(value: int) -> int:
    """A ``comp_t``: 13 bits of mantissa, 3 of base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def by_command(accounting: Path, log: Path) -> None:
    """Every process the kernel accounted during the run (BSD process accounting, ``accton``; namespaced
    hosts and SLURM nodes share this kernel), by command: what no Python process noted at its exit."""
    data = accounting.read_bytes()
    rows: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for at in range(0, len(data) - PACCT_V3.size + 1, PACCT_V3.size):
        fields = PACCT_V3.unpack_from(data, at)
        name = fields[-1].split(b"\0", 1)[0].decode(errors="replace")
        rows[name][0] += 1
        rows[name][1] += (_comp_t(fields[10]) + _comp_t(fields[11])) / os.sysconf("SC_CLK_TCK")
    python = sum(r[1] for n, r in rows.items() if n.startswith(PYTHON_NAMES))
    noted = sum(json.loads(line)["cpu"] for line in log.read_text().splitlines()) if log.exists() else 0.0
    whole = sum(r[1] for r in rows.values())
    print(f"\nprocess accounting: {sum(int(r[0]) for r in rows.values()):,} processes, {whole:,.0f} s of CPU; "
          f"Python {python:,.0f} s, of which {python - noted:,.0f} s in processes that never ran their exit "
          "handlers (ended by a signal or os._exit: ranks stopped by torchrun, a daemon's fork, a killed worker)")
    print(f"{'CPU s':>8} {'procs':>6}  command (not Python)")
    for name, (count, seconds) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        if not name.startswith(PYTHON_NAMES) and seconds >= 0.5:
            print(f"{seconds:8,.1f} {int(count):6,}  {name}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
