#!/usr/bin/env bash
# The Python packages the GPU machine's image lacks for benchmarks/gpu_proof.py, as wheels for its
# Python 3.12 on manylinux x86-64, into .whl/ (in .gitignore; the device call carries it):
#   benchmarks/gpu_wheels.sh [DEST] [PYTHON_VERSION]
# The image has torch, transformers, peft, pytest, pyyaml, rich, psutil; it lacks pydantic, asyncssh,
# platformdirs and textual (the CLI and the launcher), which come with their needs, and accelerate
# (Hugging Face Trainer, bench_vs_peers.py --gpu). gpu_proof.py installs only those the node does not
# have. bitsandbytes (43 MB, QLoRA) only once the trainer has QLoRA.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.whl}
pyver=${2:-3.12}
mkdir -p "$dest"
rm -f "$dest"/*.whl  # one version of each: an older download left here would be carried too
plat=(--only-binary=:all: --python-version "$pyver" --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
python3 -m pip download -q --disable-pip-version-check "${plat[@]}" -d "$dest" \
  'pydantic>=2.7,<3' 'asyncssh>=2.24,<3' 'textual>=8.2,<9' platformdirs
# Hugging Face Trainer's own need, for bench_vs_peers.py --gpu (the image has its needs: torch, numpy,
# psutil, pyyaml, huggingface_hub, safetensors). TRL is not carried: it needs datasets and pyarrow.
python3 -m pip download -q --disable-pip-version-check --no-deps "${plat[@]}" -d "$dest" 'accelerate>=1.15,<2'
if grep -q 'quantize' trainer/wire/config.py; then
  python3 -m pip download -q --disable-pip-version-check --no-deps "${plat[@]}" -d "$dest" 'bitsandbytes>=0.45'
fi
ls "$dest"
du -sh "$dest"
