"""``python node-0/agent.zip slurm-task ATTEMPT``: the one task per node of a SLURM job.

``srun`` starts it in the run directory (on the filesystem the login and compute nodes share). It
completes the node contract from what SLURM says (``NODE_RANK`` from ``SLURM_NODEID``, ``MASTER_ADDR``
the first host of ``SLURM_JOB_NODELIST``), then supervises the job exactly as an SSH node's supervisor
does: output to ``node-<rank>/node.log`` with secrets masked, the state in ``node-<rank>/state.json``.
Secrets reach it through the job's environment (``sbatch`` exported them from the login node's agent),
never through the batch script, a file or a command line.

The launcher reaches only the shared files, so the task also answers through them: GPU samples
(``gpus.json``) and stack dumps asked for in ``stacks-request`` (``stacks.json``).

Near the time limit SLURM signals the batch shell, which leaves ``checkpoint-now.<attempt>`` here; the
task passes SIGUSR1 to the built-in trainer's workers, which save a checkpoint and stop, and records
``resubmit`` so the launcher submits the next job, which resumes from it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from . import flight, jobs, probes, processes, usage

GPU_FILE = "gpus.json"
USAGE_SAMPLE_FILE = "usage-sample.json"
"""What the job costs on the node (CPU use, RSS, processes), sampled with the GPUs' cadence."""
STACKS_REQUEST = "stacks-request"
STACKS_FILE = "stacks.json"
GPU_EVERY_S = 5.0
SIGNAL_POLL_S = 0.5
JOB_SPEC = "job-{attempt}.json"
CHECKPOINT_NOW = "checkpoint-now.{attempt}"


def node_list() -> list:
    """The job's hosts in order (``scontrol show hostnames``), falling back to this host alone."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or ""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=30, stdin=subprocess.DEVNULL)
        hosts = out.stdout.split() if out.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        hosts = []
    return hosts or [h for h in nodelist.split(",") if h] or [socket.gethostname()]


def node_spec(spec: dict, rank: int, master_addr: str, job_id: str) -> dict:
    """The job spec of node ``rank``: the node contract's variables and torchrun's flags filled in."""
    port = spec["env"].get("MASTER_PORT", "29500")
    if spec.get("port_from_job") and job_id.isdigit():
        port = str(20000 + int(job_id) % 20000)  # two jobs sharing a first node do not collide
    env = {**spec["env"], "NODE_RANK": str(rank), "MASTER_ADDR": master_addr, "MASTER_PORT": port}
    flags = {"--node_rank=": str(rank), "--master_addr=": master_addr, "--master_port=": port}
    argv = [next((f + v for f, v in flags.items() if a.startswith(f)), a) for a in spec["argv"]] \
        if spec.get("builtin_trainer") else list(spec["argv"])
    missing = [n for n in spec.get("secret_names", []) if n not in os.environ]
    if missing:
        raise ValueError(f"secrets {', '.join(missing)} did not reach the job's environment")
    secrets = {n: os.environ[n] for n in spec.get("secret_names", [])}
    # Every node works in node 0's directory, as a batch job's tasks share one working directory: a
    # relative output_dir is then one folder on the shared filesystem, where every rank's shards of a
    # checkpoint belong together.
    return {**spec, "env": env, "argv": argv, "secrets": secrets, "cwd": os.path.join(os.getcwd(), "node-0")}


def _workers(run_id: str, rank: int) -> list:
    """The trainer's worker processes on this node (they carry ``RANK``; torchrun does not)."""
    out = []
    for pid in processes.tagged_pids(run_id, rank):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if any(v.startswith(b"RANK=") for v in f.read().split(b"\0")):
                    out.append(pid)
        except OSError:
            continue
    return out


def _stop_workers(run_id: str, rank: int) -> bool:
    """SIGUSR1 to this node's workers that catch it; ``True`` once one did (the ranks agree at the next step
    boundary, so one is enough). A worker still starting (no handler yet: the signal would end it) or
    none yet (torchrun still starting them) is asked again at the next poll."""
    sent = False
    for pid in _workers(run_id, rank):
        if processes.catches(pid, signal.SIGUSR1):
            try:
                os.kill(pid, signal.SIGUSR1)
                sent = True
            except (ProcessLookupError, PermissionError):
                pass
    return sent


def _write_json(node_dir: str, name: str, data: dict) -> None:
    tmp = os.path.join(node_dir, f".{name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, os.path.join(node_dir, name))


def _answer_stacks(node_dir: str, spec: dict, rank: int, seen: list) -> None:
    """A stack dump asked for through ``stacks-request`` (the launcher cannot reach this node itself):
    py-spy (or the trainer's faulthandler) on this node's processes of the job, into ``stacks.json``."""
    try:
        with open(os.path.join(node_dir, STACKS_REQUEST), encoding="utf-8") as f:
            token = f.read().strip()
    except OSError:
        return
    if not token or token in seen:
        return
    seen.append(token)
    pids = processes.tagged_pids(spec["env"].get(processes.RUN_ID_ENV, ""), rank)
    asked = flight.ask(node_dir)
    stacks = probes.stacks(pids, spec.get("python") or "python3")
    _write_json(node_dir, STACKS_FILE, {"request": token, "stacks": stacks + flight.collect(node_dir, asked)})


def _watch(node_dir: str, run_dir: str, spec: dict, rank: int, done: threading.Event) -> None:
    """GPU samples to ``gpus.json`` (where ``nvidia-smi`` is), the job's CPU use and memory to
    ``usage-sample.json``, checkpoint requests to the workers, stack dumps on request."""
    flag = os.path.join(run_dir, CHECKPOINT_NOW.format(attempt=spec.get("flag_attempt", spec["attempt"])))
    has_gpus = bool(probes.gpu_samples())
    signalled, flagged, last_gpus, last_usage, seen = False, False, 0.0, 0.0, []
    run_id = spec["env"].get(processes.RUN_ID_ENV, "")
    while not done.wait(SIGNAL_POLL_S):
        _answer_stacks(node_dir, spec, rank, seen)
        if not signalled and os.path.exists(flag):
            if not spec.get("builtin_trainer"):
                signalled = True
            else:
                signalled = _stop_workers(run_id, rank)
                if not flagged:
                    flagged = True
                    jobs.write_state(node_dir, resubmit="time limit")
        if has_gpus and time.monotonic() - last_gpus > GPU_EVERY_S:
            last_gpus = time.monotonic()
            _write_json(node_dir, GPU_FILE, {"at": time.time(), "gpus": probes.gpu_samples()})
        if time.monotonic() - last_usage > GPU_EVERY_S:
            last_usage = time.monotonic()
            pids = processes.tagged_pids(run_id, rank) if run_id else []
            _write_json(node_dir, USAGE_SAMPLE_FILE, usage.usage(node_dir, pids))


def requeued_attempt(submitted: int, spec: dict, run_dir: str) -> tuple[int, dict]:
    """The attempt this run of the job is: SLURM counts its requeues in ``SLURM_RESTART_COUNT``, and each
    is an attempt of its own (the launcher counts them alike), marked in the node's log as such."""
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
    restarts = int(restarts) if restarts.isdigit() else 0
    if not restarts:
        return submitted, spec
    attempt = submitted + restarts
    try:  # the cut-short run's time-limit flag must not signal this run
        os.remove(os.path.join(run_dir, CHECKPOINT_NOW.format(attempt=submitted)))
    except OSError:
        pass
    return attempt, {**spec, "attempt": attempt,
                     "marker": f"{attempt} (SLURM requeued job {os.environ.get('SLURM_JOB_ID', '?')}, "
                               f"restart {restarts})"}


def task(submitted: int, agent_zip: str) -> int:
    run_dir = os.getcwd()
    rank = int(os.environ.get("SLURM_NODEID", "0"))
    job_id = os.environ.get("SLURM_JOB_ID", "")
    node_dir = os.path.join(run_dir, f"node-{rank}")
    os.makedirs(node_dir, exist_ok=True)
    with open(os.path.join(run_dir, "node-0", JOB_SPEC.format(attempt=submitted)), encoding="utf-8") as f:
        spec = json.load(f)
    attempt, spec = requeued_attempt(submitted, spec, run_dir)
    spec["flag_attempt"] = submitted
    jobs.write_state(node_dir, state="starting", attempt=attempt, exit_code=None, stopped=False, stopping=False,
                     error=None, resubmit=None, run_id=spec["env"].get(processes.RUN_ID_ENV), node_rank=str(rank),
                     host=socket.gethostname(), job_id=job_id)
    try:
        spec = node_spec(spec, rank, node_list()[0], job_id)
    except ValueError as err:
        jobs.write_state(node_dir, state="exited", exit_code=1, ended_at=time.time(), error=str(err))
        return 1

    def on_term(signum, frame):  # scancel or the time limit: the job's group ends, its output is kept
        jobs.write_state(node_dir, stopping=True)
        pgid = jobs.read_state(node_dir).get("pgid")
        if pgid:
            processes.signal_group(int(pgid), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # meant for the workers, never for this task
    done = threading.Event()
    threading.Thread(target=_watch, args=(node_dir, run_dir, spec, rank, done), daemon=True).start()
    try:
        jobs.supervise(node_dir, spec, [sys.executable, agent_zip])
    finally:
        done.set()
    code = jobs.read_state(node_dir).get("exit_code")
    return code if isinstance(code, int) and 0 <= code < 256 else 1
