"""CPU offload moves the parameters to the host and leaves the buffers (rotary ``inv_freq``) on the GPU,
as FSDP2's ``CPUOffloadPolicy`` does. Without a GPU, the meta device stands in for it: the placement
code moves each tensor to the device it is given, whichever that is."""

import json
import subprocess
import sys

import pytest
import torch
from torch import nn

from tests.support.trainer.run import ROOT, free_port, trainer_env
from trainer.model import build as model
from trainer.model import loading
from trainer.model.source import ModelSource
from trainer.wire.config import ModelConfig

META = torch.device("meta")


def test_the_model_is_built_with_its_weights_on_one_device_and_its_buffers_on_another(tiny_model_dir):
    mcfg, source = ModelConfig(), ModelSource.resolve(str(tiny_model_dir))
    config = model.hf_config(source, mcfg)
    net = model.build_model(source, mcfg, config, "sdpa", 0, torch.device("cpu"), lambda m: m,
                            buffer_device=META)
    buffers = dict(net.named_buffers(remove_duplicate=False))
    assert any(name.endswith("inv_freq") for name in buffers)
    assert all(b.device == META for b in buffers.values()), {n: b.device for n, b in buffers.items()}
    ref = model.load_model(source, mcfg, 0).state_dict()
    for name, param in net.named_parameters():  # the weights are in, on the host
        assert param.device.type == "cpu" and torch.equal(param, ref[name]), name


def test_a_buffer_shared_by_two_modules_moves_once_and_stays_shared():
    shared = torch.arange(4.0)
    a, b = nn.Module(), nn.Module()
    a.register_buffer("table", shared, persistent=False)
    b.register_buffer("table", shared, persistent=False)
    root = nn.Sequential(a, b, nn.Linear(2, 2))
    loading.move_buffers(root, META)
    assert a.table.device == META and a.table is b.table
    assert root[2].weight.device.type == "cpu"


_ON_GPU = """
import json, torch
from trainer import parallel
from trainer.model import build as model
from trainer.model.source import ModelSource
from trainer.wire.config import FsdpConfig, ModelConfig
d = parallel.init_distributed()
cfg, mcfg, source = FsdpConfig(sharding="full_shard", cpu_offload=True), ModelConfig(), ModelSource.resolve({model_dir!r})
config = model.hf_config(source, mcfg)
net = model.build_model(source, mcfg, config, "sdpa", 0, parallel.param_device(cfg, d),
                        lambda m: parallel.shard_model(m, cfg, d), buffer_device=d.device)
ids = torch.randint(0, config.vocab_size, (2, 32), device=d.device)
net(input_ids=ids, labels=ids).loss.backward()
print(json.dumps({{"buffers": sorted({{str(b.device) for b in net.buffers()}}),
                  "params": sorted({{str(p.to_local().device) for p in net.parameters()}}),
                  "grads": sorted({{str(p.grad.to_local().device) for p in net.parameters()}})}}))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_offloaded_weights_are_on_the_host_and_buffers_on_the_gpu(tmp_path, tiny_model_dir):
    env = {**trainer_env(tmp_path), "MASTER_PORT": str(free_port())}
    out = subprocess.run([sys.executable, "-c", _ON_GPU.format(model_dir=str(tiny_model_dir))], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"buffers": ["cuda:0"], "params": ["cpu"], "grads": ["cpu"]}, got
