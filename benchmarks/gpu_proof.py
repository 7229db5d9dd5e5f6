"""The proof on a real GPU, in one command that fits the few minutes a GPU machine is lent for.

    python3 benchmarks/gpu_proof.py [--quick] [--only 2,3] [--budget S] [--wheels .whl] [--commit SHA]
    python3 benchmarks/gpu_proof.py --dry-run          # the same steps, tiny, on CPU (gloo)

On a machine with one CUDA GPU and the node's own torch it first installs only what the node lacks (the
wheels in ``--wheels`` whose distribution is not installed, else the registries; the project's
``fsdp-tui`` command beside the interpreter), then runs, in order, each step with its own time limit:

1. ``gpu_tests``: every ``gpu``-marked test (NCCL, bf16, the async checkpoint stager, the gauges);
2. ``mfu``: a Llama-3.2-1B shape, seq 2048, bf16, compile, whole rows and packed rows
   (``benchmarks/bench_gpu.py``);
3. ``checkpoint``: time training is blocked by an async save vs a sync one, staging included
   (``benchmarks/bench_checkpoint.py``);
4. ``nettest``: ``fsdp-tui nettest`` on this one node (NCCL, the burn-in's GEMM TFLOP/s, health);
5. ``lora``: full, LoRA and QLoRA training of a 1B shape through the trainer's own entry
   (``torchrun -m trainer``): peak memory and tokens/s;
6. ``peers``: ``benchmarks/bench_vs_peers.py --gpu``, the trainer against Hugging Face ``Trainer``;
7. ``fit``: the memory prediction against ``torch.cuda.max_memory_allocated``, two shapes and two
   shardings (``benchmarks/gpu_proof_fit.py``).
8. ``loss``: the chunked loss against the full logits at vocabulary 128k, sequence 4k (peak memory,
   tokens/s; ``benchmarks/bench_loss.py``), Liger Kernel's fused kernel beside them where installed.

A step that cannot run says why (``skipped``) from what it checked, never from a figure of its own.
``--quick`` runs steps 1-3 with fewer timed steps. The whole run keeps to ``--budget`` seconds (540, 9
minutes; 290 with ``--quick``): each step's limit is cut to what is left, and a step with too little left
is skipped as out of time.

Each step's JSON is written the moment the step starts (``running``) and again when it ends, to
``benchmarks/results/gpu/`` and to ``$OUT`` when set (``NN-name.json``, plus ``00-setup.json`` and
``proof.log``: ten files), so a run cut short still returns what it had. Every file names the card,
torch, CUDA, NCCL and the driver. Without CUDA (or with ``--dry-run``, which hides the GPU) every step runs
in a tiny form on CPU, marked ``"device": "cpu", "dry_run": true``, into ``benchmarks/out/gpu-proof-dry-run/``:
that is how CI keeps this script from rotting. How to run it on the device machine: BENCHMARKS.md's
"Proof on a GPU".
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_proof_steps import STEPS, Outcome, Skip  # noqa: E402

BUDGET_S = {"full": 540, "quick": 290, "dry": 900}
"""The whole run, setup included: under the device's 10-minute command limit, with room to hand back."""
MIN_STEP_S = 20
"""A step with less than this left of the budget is skipped as out of time."""
NEEDS = {"pydantic": "pydantic", "yaml": "pyyaml", "transformers": "transformers", "pytest": "pytest"}
"""What the steps import beyond torch (module: distribution): the CLI's nettest, the trainer, the tests.
Neither Textual nor asyncssh: the app is not started, and nettest on this machine opens no SSH."""
LOG_TAIL = 200_000
"""Characters of each command's output kept in proof.log."""


@dataclass
class Call:
    """One command's end: exit code (None when it was stopped at its limit) and its output."""

    argv: list[str]
    rc: int | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.rc is None


@dataclass
class Proof:
    """What every step shares: the mode, the interpreter, the environment its commands get, where the
    JSON goes, and the clock."""

    mode: str  # "full" | "quick" | "dry"
    python: str
    env: dict[str, str]
    outs: list[Path]
    tmp: Path
    deadline: float
    info: dict = field(default_factory=dict)
    step_deadline: float = 0.0
    commands: list[str] = field(default_factory=list)

    @property
    def dry(self) -> bool:
        return self.mode == "dry"

    def left(self) -> float:
        return min(self.deadline, self.step_deadline or self.deadline) - time.monotonic()

    def call(self, argv: list[str], limit: float | None = None, env: dict | None = None,
             cwd: Path | None = None) -> Call:
        """Run ``argv`` in a process group of its own, stopped (the whole group: torchrun's workers too)
        at ``limit`` or at the step's end, whichever comes first. Its output goes to files, not pipes: what
        it printed is kept however it ended, even if a process it started detached holds on."""
        timeout = max(1.0, min(limit or 1e9, self.left()))
        self.commands.append(" ".join(argv))
        number = len(list(self.tmp.glob("cmd-*.out")))
        paths = (self.tmp / f"cmd-{number}.out", self.tmp / f"cmd-{number}.err")
        started = time.monotonic()
        with open(paths[0], "w") as out, open(paths[1], "w") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True,
                                    env={**self.env, **(env or {})}, cwd=cwd or ROOT, start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _stop_group(proc)
                rc = None
            except BaseException:  # interrupted (SIGINT, SIGTERM): no torchrun left behind on the GPU
                _stop_group(proc)
                raise
        stdout, stderr = (p.read_text(errors="replace") for p in paths)
        done = Call(argv, rc, stdout, stderr, time.monotonic() - started)
        self.log(f"$ {' '.join(argv)}\n[exit {rc if rc is not None else 'stopped at its limit'}, "
                 f"{done.seconds:.1f} s]\n{_tail(stdout)}{_tail(stderr)}\n")
        return done

    def log(self, text: str) -> None:
        for out in self.outs:
            with open(out / "proof.log", "a", encoding="utf-8") as f:
                f.write(text)

    def write(self, name: str, data: dict) -> None:
        for out in self.outs:
            tmp = out / f".{name}.tmp"
            tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
            tmp.replace(out / name)


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the command's process group, up to 10 s for it to end, then SIGKILL to what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _tail(text: str) -> str:
    return text if len(text) <= LOG_TAIL else f"[... {len(text) - LOG_TAIL} characters cut ...]\n{text[-LOG_TAIL:]}"


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def setup(proof: Proof, wheels: Path | None, site: Path) -> dict:
    """Install what the node lacks: the carried wheels whose distribution is missing (``--no-deps``: the
    wheels are the whole set), then from the registries what is still missing, then ``fsdp-tui``."""
    report: dict = {"installed": [], "present": {}, "errors": []}
    carried = {_dist(w.name.split("-")[0]): w for w in sorted(wheels.glob("*.whl"))} if wheels and wheels.is_dir() else {}
    lacking = [w for d, w in carried.items() if not installed(d)]
    lacking += [carried[d] for d in _too_old(lacking, carried)]  # the node's is older than a new one needs
    for dist in carried:
        if carried[dist] not in lacking:
            report["present"][dist] = installed(dist)
    pip = [proof.python, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--no-cache-dir",
           "--disable-pip-version-check", "--target", str(site)]
    if lacking:
        call = proof.call([*pip, "--no-index", *map(str, lacking)], limit=120)
        if call.rc == 0:
            report["installed"] += [w.name for w in lacking]
        else:
            report["errors"].append(f"carried wheels: {(call.stderr or call.stdout)[-800:]}")
    probe = proof.call([proof.python, "-c", "import importlib.util, json, sys; print(json.dumps("
                        "[m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]))", *NEEDS], limit=60)
    missing = [NEEDS[m] for m in json.loads(probe.stdout or "[]")] if probe.rc == 0 else list(NEEDS.values())
    if missing:  # not carried: from the registries with their needs, where this machine reaches them
        call = proof.call([proof.python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target",
                           str(site), *missing], limit=180)
        report["installed" if call.rc == 0 else "errors"].append(
            f"from the registries: {', '.join(missing)}" + ("" if call.rc == 0 else f": {call.stderr[-800:]}"))
    report["fsdp_tui"] = _install_cli(proof)
    return report


def _too_old(wheels: list[Path], carried: dict[str, Path]) -> list[str]:
    """The carried distributions that the node has, but older than one of ``wheels`` requires (a
    pydantic wheel needing a newer typing-extensions than the image's): installed too, they come first
    on ``PYTHONPATH``."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # no way to read the needs: the wheels of missing packages only
        return []
    old = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            lines = z.read(meta).decode("utf-8", "replace").splitlines()
        for line in lines:
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.split(":", 1)[1].strip())
            dist, have = _dist(req.name), installed(_dist(req.name))
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if have and dist in carried and dist not in old and not req.specifier.contains(have, prereleases=True):
                old.append(dist)
    return old


def _install_cli(proof: Proof) -> str:
    """``fsdp-tui`` beside the interpreter (the tests and the nettest step run it from there): the
    project installed editable without its dependencies, else a launcher script of two lines."""
    script = Path(proof.python).with_name("fsdp-tui")
    if script.exists():
        return f"present: {script}"
    call = proof.call([proof.python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                       "--disable-pip-version-check", "-e", str(ROOT)], limit=120)
    if call.rc == 0 and script.exists():
        return f"installed editable: {script}"
    script.write_text(f"#!{proof.python}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                      "from tui.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return f"launcher script written (pip -e failed): {script}"


PROBE = r"""
import importlib.metadata as m, json, os, platform, socket, sys
info = {"python": platform.python_version(), "executable": sys.executable, "host": socket.gethostname(),
        "cpus": os.cpu_count(), "load_average": os.getloadavg()[0]}
import torch
info.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info.update(card=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(), capability=f"{p.major}.{p.minor}",
                gpu_memory_gib=round(p.total_memory / 2**30, 1))
    for key, read in (("cudnn", lambda: torch.backends.cudnn.version()), ("nccl", lambda: torch.cuda.nccl.version())):
        try:  # a version that cannot be read is said so; the card is what decides the mode
            v = read()
            info[key] = ".".join(map(str, v)) if isinstance(v, tuple) else v
        except Exception as err:
            info[key] = f"unreadable: {err}"
for dist in ("transformers", "peft", "bitsandbytes", "triton", "liger-kernel", "pydantic", "textual", "asyncssh"):
    try:
        info[dist] = m.version(dist)
    except m.PackageNotFoundError:
        info[dist] = None
print(json.dumps(info))
"""


def probe_env(proof: Proof, commit: str | None) -> dict:
    """Card, driver, torch, CUDA, NCCL and library versions, read once, put in every JSON."""
    call = proof.call([proof.python, "-c", PROBE], limit=120)
    info = json.loads(call.stdout.strip().splitlines()[-1]) if call.rc == 0 and call.stdout.strip() else {
        "probe_error": (call.stderr or call.stdout)[-800:]}
    if shutil.which("nvidia-smi") and not proof.dry:
        smi = proof.call(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit",
                          "--format=csv,noheader"], limit=30)
        info["nvidia_smi"] = smi.stdout.strip() if smi.rc == 0 else f"failed: {smi.stderr.strip()[-300:]}"
    if commit is None and (ROOT / ".git").exists():
        git = proof.call(["git", "-C", str(ROOT), "rev-parse", "HEAD"], limit=10)
        commit = git.stdout.strip() if git.rc == 0 else None
    info["commit"] = commit
    info["card"] = info.get("card") or "cpu"
    return info


def _record(proof: Proof, index: int, name: str, **fields) -> dict:
    return {"proof": "fsdp-tui gpu proof", "step": index, "name": name, "device": "cpu" if proof.dry else "cuda",
            "dry_run": proof.dry, "mode": proof.mode, "card": proof.info.get("card", "unknown"), "env": proof.info,
            **fields}


def run_step(proof: Proof, index: int, step, selected: bool) -> dict | None:
    """One step under its limit (cut to what is left of the budget); its JSON written at start and end."""
    if not selected:
        return None
    limit = min(step.limit_s[proof.mode], proof.deadline - time.monotonic())
    name = f"{index:02d}-{step.name.replace('_', '-')}.json"
    base = {"title": step.title, "limit_s": round(limit)}
    if limit < MIN_STEP_S:
        record = _record(proof, index, step.name, status="skipped", reason="out of time: the run's budget is spent",
                         **base)
        proof.write(name, record)
        return record
    proof.write(name, _record(proof, index, step.name, status="running", started=time.time(), **base))
    proof.log(f"\n==== step {index}: {step.name} (limit {limit:.0f} s) ====\n")
    proof.step_deadline, proof.commands = time.monotonic() + limit, []
    started = time.monotonic()
    try:
        outcome = step.run(proof)
    except Skip as why:
        outcome = Outcome("skipped", reason=str(why))
    except Exception as err:  # a fault of the proof itself: recorded, and the next step still runs
        import traceback

        outcome = Outcome("error", reason=f"{type(err).__name__}: {err}", result={"traceback": traceback.format_exc()})
    proof.step_deadline = 0.0
    record = _record(proof, index, step.name, status=outcome.status, reason=outcome.reason,
                     summary=outcome.summary, seconds=round(time.monotonic() - started, 1), commands=proof.commands,
                     result=outcome.result, **base)
    proof.write(name, record)
    return record


def chosen(index: int, name: str, only: str, mode: str) -> bool:
    """Whether step ``index`` runs: named (by number or name) in ``--only`` or no ``--only``; ``--quick``
    runs steps 1-3 alone."""
    wanted = {w.strip() for w in only.split(",") if w.strip()}
    return (not wanted or str(index) in wanted or name in wanted) and (mode != "quick" or index <= 3)


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="steps 1-3 only, fewer timed steps (under 5 minutes)")
    p.add_argument("--dry-run", action="store_true", help="hide the GPU: every step tiny, on CPU")
    p.add_argument("--only", default="", help="comma-separated step numbers or names (default: all)")
    p.add_argument("--budget", type=float, default=None, help="seconds for the whole run (default: by mode)")
    p.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="carried wheels (default: .whl)")
    p.add_argument("--results", type=Path, default=None, help="where the JSON goes besides $OUT")
    p.add_argument("--commit", default=None, help="the commit measured (default: git's HEAD, where there is one)")
    args = p.parse_args(argv)
    start = time.monotonic()
    signal.signal(signal.SIGTERM, _interrupted)

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    if args.dry_run:
        env["CUDA_VISIBLE_DEVICES"] = ""
    tmp = Path(tempfile.mkdtemp(prefix="gpu-proof-"))
    site = tmp / "site"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(site), env.get("PYTHONPATH")]))
    env.update(FSDP_TUI_HOME=str(tmp / "home"), FSDP_TUI_ASSETS=str(tmp / "assets"))
    proof = Proof("dry" if args.dry_run else "quick" if args.quick else "full", sys.executable, env, [], tmp, 0.0)
    outs = [args.results] if args.results else []
    # The mode needs the probe, the probe needs the setup, the setup writes its JSON: results go to a
    # scratch folder until the mode (and so the default folder) is known.
    proof.outs = [tmp / "early"]
    proof.outs[0].mkdir()
    proof.deadline = start + (args.budget or BUDGET_S[proof.mode])
    report = setup(proof, args.wheels, site)
    sys.path.insert(1, str(site))  # the steps' own few imports (yaml) may come from there too
    proof.info = probe_env(proof, args.commit)
    if not proof.info.get("cuda_available"):
        proof.mode = "dry"
    proof.deadline = start + (args.budget or BUDGET_S[proof.mode])
    if not outs:
        outs = [ROOT / ("benchmarks/out/gpu-proof-dry-run" if proof.dry else "benchmarks/results/gpu")]
    if os.environ.get("OUT"):
        outs.append(Path(os.environ["OUT"]))
    for out in outs:
        out.mkdir(parents=True, exist_ok=True)
        if not args.only:  # a whole run's files only: a step it did not run leaves none
            for old in (*out.glob("[0-9][0-9]-*.json"), out / "proof.log"):
                old.unlink(missing_ok=True)
        with open(out / "proof.log", "a", encoding="utf-8") as f:
            f.write((tmp / "early" / "proof.log").read_text(encoding="utf-8"))
    proof.outs = outs
    proof.write("00-setup.json", _record(proof, 0, "setup", status="passed" if not report["errors"] else "failed",
                                         seconds=round(time.monotonic() - start, 1), result=report))
    rows = []
    for index, step in enumerate(STEPS, 1):
        record = run_step(proof, index, step, chosen(index, step.name, args.only, proof.mode))
        if record is not None:
            line = f"{index} {step.name:<10} {record['status']:<8} {record.get('seconds', 0):>6.1f} s  " + (
                record.get("summary") or record.get("reason") or "")
            print(line[:300], flush=True)
            rows.append(record)
    print(f"card: {proof.info.get('card')} | torch {proof.info.get('torch')} | CUDA {proof.info.get('cuda')} | "
          f"{'dry run (CPU)' if proof.dry else proof.mode} | {time.monotonic() - start:.0f} s | JSON in "
          f"{', '.join(map(str, proof.outs))}", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(r["status"] in ("passed", "skipped") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
