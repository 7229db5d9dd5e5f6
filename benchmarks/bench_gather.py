"""Gathered checkpoints on hosts that share no disk: two sshd hosts, each a network namespace with its own
disk (its home bind-mounted from a folder of its own), as ``tests/runs/owner/test_split_checkpoints.py``.

1. Throughput: node 1's shards (``--size-mib`` in ``--files`` files) copied into node 0's checkpoint
   folder by the launcher's gather (through this machine's SSH connections, each file's SHA-256 checked
   at node 0 before it takes its name), against a plain ``scp`` of the same files from node 1 to node 0
   (run inside node 1's namespace with a key node 0 accepts, which fsdp-tui never needs). Median of
   ``--repeat``; the gather also against its own ceiling, ``ssh node1 cat FILES > /dev/null``.
2. Training blocked (unless ``--no-training``): the built-in trainer on both hosts, saving every
   ``--every`` steps, once with ``output_dir`` on a folder both hosts see (nothing gathered) and once
   with a relative ``output_dir`` (one folder per node, gathered after each save): the trainer's own
   "checkpoint blocked training for X s" lines, and what the gathers took beside them.

    .venv/bin/python benchmarks/bench_gather.py [--size-mib 256] [--files 4] [--repeat 3] [--no-training]

Needs root (namespaces, bind mounts), openssh-server and openssh-client. Prints the load average with
its figures: on a shared machine the numbers are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAME = "step-00000001"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def make_shards(disk0: Path, disk1: Path, home: Path, size_mib: int, files: int) -> tuple[str, str, dict[str, int]]:
    """Node 1's shards in a master folder on its disk (linked into the checkpoint before each try), node 0's
    ``.metadata`` and ``meta.json`` listing them; the two checkpoints folders as the nodes see them."""
    per = size_mib * 2**20 // files
    master = disk1 / "master"
    master.mkdir()
    sizes = {}
    for i in range(files):
        name = f"__{i + 1}_0.distcp"
        with open(master / name, "wb") as f:
            for _ in range(per // 2**20):
                f.write(os.urandom(2**20))
        sizes[name] = per
    folder = disk0 / "bench" / "checkpoints" / NAME
    folder.mkdir(parents=True)
    (folder / ".metadata").write_bytes(b"m" * 100)
    shards = {n: {"bytes": s, "node": 1} for n, s in sizes.items()}
    (folder / "meta.json").write_text(json.dumps({"step": 1, "shards": shards}))
    root = str(home / "bench" / "checkpoints")
    return root, root, sizes


def link_shards(disk1: Path, sizes: dict[str, int]) -> None:
    folder = disk1 / "bench" / "checkpoints" / NAME
    folder.mkdir(parents=True, exist_ok=True)
    for name in sizes:
        os.link(disk1 / "master" / name, folder / name)


def reset_node0(disk0: Path, sizes: dict[str, int]) -> None:
    for name in sizes:
        (disk0 / "bench" / "checkpoints" / NAME / name).unlink(missing_ok=True)


async def gather_once(client: Path, root: str, output_dir: str, direct_addr: str | None) -> float:
    from launcher.backends.registry import backend_for
    from launcher.runs.owner.ckpt_copy import Endpoint
    from launcher.runs.owner.gather import Gatherer
    from launcher.workload.ckpt_place import CheckpointPlace, Holder
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text
    from trainer.wire.ckpt_layout import CheckpointInfo

    text = (f"experiment_name: bench\ncompute: {{hosts: [node0, node1]}}\nmlflow: {{enabled: false}}\n"
            f"environment: {{python: {sys.executable}}}\ncommand: 'true'\nparameters: {{output_dir: {output_dir}}}\n")
    plan = build_plan(validate_text(text, "bench.yaml").workload, run_id="bench-gather")
    backend = backend_for(plan)
    place = CheckpointPlace("per_node", output_dir, (root, root), (True, False), Holder(0, root))
    with tempfile.TemporaryDirectory() as tmp:
        g = Gatherer(backend, place, Endpoint(backend.checkpoint_files(0), root), keep_last=None,
                     journal=Path(tmp) / "g.jsonl", direct_addr=direct_addr)
        try:
            await backend.checkpoints(output_dir, 0, root)  # both connections open before the clock starts
            await backend.checkpoints(output_dir, 1, root)
            start = time.perf_counter()
            ok = await g.gather(CheckpointInfo(1, f"{root}/{NAME}", False, 0, 0.0, saved=True))
            took = time.perf_counter() - start
            assert ok, (Path(tmp) / "g.jsonl").read_text()
        finally:
            await backend.close()
    return took


def ssh_opts(client: Path) -> list[str]:
    return ["-F", str(client / ".ssh" / "config"), "-o", f"UserKnownHostsFile={client / '.ssh' / 'known_hosts'}",
            "-o", "BatchMode=yes"]


def scp_once(client: Path, hosts, home: Path, sizes: dict[str, int]) -> float:
    """node 1 -> node 0 with scp, inside node 1's namespaces (it reads its own disk), the files at once."""
    src = [str(home / "bench" / "checkpoints" / NAME / n) for n in sizes]
    enter = ["nsenter", "-t", str(hosts[1].proc.pid), "-n", "-m"]
    argv = [*enter, "scp", "-q", "-i", str(client / ".ssh" / "id_ed25519"), "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={client / '.ssh' / 'known_hosts'}", *src,
            f"root@{hosts[0].addr}:{home / 'scp-in'}/"]
    subprocess.run([*enter, "mkdir", "-p", str(home / "scp-in")], check=True)
    subprocess.run(["ssh", *ssh_opts(client), "node0", f"mkdir -p {home / 'scp-in'}"], check=True)
    start = time.perf_counter()
    subprocess.run(argv, check=True)
    took = time.perf_counter() - start
    subprocess.run(["ssh", *ssh_opts(client), "node0", f"rm -rf {home / 'scp-in'}"], check=True)
    return took


def cat_once(client: Path, home: Path, sizes: dict[str, int]) -> float:
    """What one SSH connection carries from node 1 to here: ``ssh node1 cat FILES`` into nothing."""
    files = " ".join(str(home / "bench" / "checkpoints" / NAME / n) for n in sizes)
    start = time.perf_counter()
    subprocess.run(["ssh", *ssh_opts(client), "node1", f"cat {files}"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def throughput(args, tmp: Path) -> None:
    from tests.support.sshd import start_hosts, stop_hosts

    client, hosts = start_hosts(tmp, 2, netns=True, private_disks=True)
    os.environ["HOME"] = str(client)
    try:
        home = hosts[0].home
        root, _, sizes = make_shards(hosts[0].disk, hosts[1].disk, home, args.size_mib, args.files)
        total = sum(sizes.values()) / 2**20
        direct, relayed, scps, cats = [], [], [], []
        for _ in range(args.repeat):
            link_shards(hosts[1].disk, sizes)
            scps.append(scp_once(client, hosts, home, sizes))
            cats.append(cat_once(client, home, sizes))
            direct.append(asyncio.run(gather_once(client, root, "bench", hosts[0].addr)))  # it unlinks node 1's
            reset_node0(hosts[0].disk, sizes)
            link_shards(hosts[1].disk, sizes)
            relayed.append(asyncio.run(gather_once(client, root, "bench", None)))
            reset_node0(hosts[0].disk, sizes)
            print(f"  try: gather direct {total / direct[-1]:.0f} MiB/s, through here {total / relayed[-1]:.0f} "
                  f"MiB/s, scp {total / scps[-1]:.0f} MiB/s, ssh cat {total / cats[-1]:.0f} MiB/s ({load()})",
                  flush=True)
        d, r, s, c = (statistics.median(x) for x in (direct, relayed, scps, cats))
        print(f"{total:.0f} MiB in {args.files} files from node 1 to node 0, median of {args.repeat} ({load()}):")
        print(f"  gather, node to node (the default where node 1 dials node 0): {d:.2f} s, {total / d:.0f} MiB/s")
        print(f"  gather through this machine (the fallback):                 {r:.2f} s, {total / r:.0f} MiB/s")
        print(f"  scp node 1 -> node 0:                                       {s:.2f} s, {total / s:.0f} MiB/s")
        print(f"  ssh node1 cat > /dev/null:                                  {c:.2f} s, {total / c:.0f} MiB/s")
        print(f"  against scp: direct {s / d:.2f}x, through this machine {s / r:.2f}x")
    finally:
        stop_hosts(hosts)


BLOCKED = re.compile(r"checkpoint blocked training for ([0-9.]+) s")


def training(args, tmp: Path) -> None:
    from tests.support.sshd import start_hosts, stop_hosts

    client, hosts = start_hosts(tmp, 2, netns=True, private_disks=True)
    env = {**os.environ, "HOME": str(client), "FSDP_TUI_HOME": str(tmp / "data")}
    shared = tmp / "shared"  # outside the hosts' private homes: both see it
    shared.mkdir()
    try:
        for label, output_dir in (("one shared folder (nothing gathered)", str(shared / "$FSDP_TUI_RUN_ID")),
                                  ("one folder per node (gathered)", "checkpoints")):
            wl = tmp / "wl.yaml"
            wl.write_text(f"""experiment_name: bench-gather
compute: {{accelerator_type: CPU, procs_per_node: 1, num_accelerators: 2, hosts: [node0, node1]}}
environment: {{python: {sys.executable}}}
mlflow: {{enabled: false}}
env_variables: {{OMP_NUM_THREADS: 1, FSDP_TUI_ASSETS: /tmp/fsdp-tui-test-assets, GLOO_SOCKET_IFNAME: eth0}}
parameters:
  model_name: {args.model}
  dataset_name: builtin:tiny-alpaca
  output_dir: {output_dir}
  max_seq_len: 128
  per_device_batch_size: 4
  max_steps: {args.steps}
  model: {{from_scratch: true}}
  logging: {{eval_max_batches: 1}}
  checkpoint: {{every_steps: {args.every}, export_hf: false, keep_last: 2}}
""")
            start = time.perf_counter()
            out = subprocess.run([str(Path(sys.executable).with_name("fsdp-tui")), "run", str(wl), "--json"],
                                 capture_output=True, text=True, env=env, cwd=ROOT)
            wall = time.perf_counter() - start
            run_id = json.loads(out.stdout.splitlines()[0])["run_id"]
            assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
            log = (tmp / "data" / "runs" / run_id / "nodes" / "0.log").read_text()
            blocked = [float(x) for x in BLOCKED.findall(log)]
            journal = tmp / "data" / "runs" / run_id / "gathers.jsonl"
            gathers = [json.loads(x) for x in journal.read_text().splitlines()] if journal.exists() else []
            print(f"{label}: {len(blocked)} saves during training blocked it {statistics.mean(blocked):.2f} s "
                  f"each (max {max(blocked):.2f}); run {wall:.0f} s wall; {len(gathers)} gathers "
                  + (f"{sum(g['bytes'] for g in gathers) / 2**20:.0f} MiB in {sum(g['seconds'] for g in gathers):.1f} s"
                     if gathers else "") + f" ({load()})", flush=True)
    finally:
        stop_hosts(hosts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-training", action="store_true")
    parser.add_argument("--model", default="builtin:small-llama")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("scp") is None:
        raise SystemExit("needs openssh-client (scp)")
    print(f"start: {load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-gather-") as tmp:
        (Path(tmp) / "t").mkdir()
        throughput(args, Path(tmp) / "t")
    if not args.no_training:
        with tempfile.TemporaryDirectory(prefix="bench-gather-") as tmp:
            training(args, Path(tmp))
    print(f"end: {load()}")


if __name__ == "__main__":
    main()
