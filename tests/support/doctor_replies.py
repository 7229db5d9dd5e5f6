"""For the doctor's tests: a node's probe reply as a healthy GPU node sends it (8 H100s, torch with CUDA, room
on the disk, node 0's address free), and the compute of a two-node GPU workload whose node 0 has that address."""

from __future__ import annotations

GOOD = {"hostname": "gpu01", "python": {"version": [3, 11, 7], "executable": "/opt/py/bin/python"},
        "packages": {"torch": {"version": "2.6.0+cu124", "import": "ok", "cuda": "12.4"}},
        "gpus": {"smi": "/usr/bin/nvidia-smi", "names": ["NVIDIA H100 80GB HBM3"] * 8},
        "disk": {"path": "/home/u/.fsdp-tui/runs", "existing": "/home/u", "free_bytes": 100 * 2**30,
                 "total_bytes": 500 * 2**30, "writable": True},
        "master": {"addrs": ["10.0.0.11"]},
        "interfaces": {"route": {"iface": "eth0", "local": "10.0.0.11"}, "names": ["lo", "eth0"]}}
GPU2 = "{accelerator_type: GPU_8xH100, num_accelerators: 16, hosts: [a, b], master_addr: 10.0.0.11}"
