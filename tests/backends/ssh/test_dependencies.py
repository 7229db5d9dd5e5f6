"""``environment.dependencies``: pip-installed into a venv on each node, cached by their hash.

No network: the packages come from a wheel the test builds, through ``PIP_NO_INDEX``/``PIP_FIND_LINKS``
in ``env_variables`` (just as a user points pip at a private index)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.cli import cli, events, write_workload

pytestmark = pytest.mark.slow


def make_wheel(folder: Path, version: str) -> None:
    """A pure-Python wheel of ``fsdptui_canary`` whose VALUE is its version."""
    dist = f"fsdptui_canary-{version}"
    files = {
        "fsdptui_canary/__init__.py": f"VALUE = {version!r}\n",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: fsdptui-canary\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{dist}.dist-info/RECORD"])
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)


def workload(tmp_path: Path, wheels: Path, requirement: str, *, with_torch: bool = False) -> Path:
    """A job that prints the canary's VALUE and its venv; ``with_torch`` imports the node's torch in it too
    (a few seconds of CPU, so only where a test asks whether the node's packages stay visible)."""
    imports = "fsdptui_canary, torch" if with_torch else "fsdptui_canary"
    return write_workload(tmp_path, f"""experiment_name: deps
mlflow: {{enabled: false}}
environment:
  dependencies: ['{requirement}']
env_variables:
  PIP_NO_INDEX: '1'
  PIP_FIND_LINKS: '{wheels}'
command: |
  python -c "import sys, {imports}; print('VALUE', fsdptui_canary.VALUE, 'PREFIX', sys.prefix)"
""")


def run_log(home: Path, wl: Path) -> tuple[dict, list[str]]:
    out = cli(home, "run", wl, "--json")
    evs = events(out.stdout)
    log = (home / "runs" / evs[0]["run_id"] / "nodes" / "0.log").read_text().splitlines()
    assert out.returncode == 0, "\n".join(log[-40:]) + out.stderr[-2000:]
    return evs[-1], log


def test_dependencies_go_into_a_venv_built_once_and_reused(home, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "1.0")
    make_wheel(wheels, "2.0")

    end, log = run_log(home, workload(tmp_path, wheels, "fsdptui-canary==1.0", with_torch=True))
    assert end["state"] == "succeeded"
    [value] = [line.split() for line in log if line.startswith("VALUE ")]
    venvs = home / "venvs"
    [venv] = [p for p in venvs.iterdir() if p.is_dir()]
    assert value[1] == "1.0" and Path(value[3]) == venv  # torch imported too: the node's packages stay
    assert any(line.startswith("fsdp-tui: building environment") for line in log)
    assert any("Successfully installed fsdptui-canary-1.0" in line for line in log)

    _, again = run_log(home, workload(tmp_path, wheels, "fsdptui-canary==1.0"))
    assert f"fsdp-tui: environment {venv.name} is ready ({venv})" in again
    assert not any("building environment" in line or "Successfully installed" in line for line in again)
    assert [line.split()[1] for line in again if line.startswith("VALUE ")] == ["1.0"]

    _, other = run_log(home, workload(tmp_path, wheels, "fsdptui-canary==2.0"))
    assert [line.split()[1] for line in other if line.startswith("VALUE ")] == ["2.0"]
    assert len([p for p in venvs.iterdir() if p.is_dir()]) == 2


def test_a_failed_install_fails_the_run_with_pips_reason_and_caches_nothing(home, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = cli(home, "run", workload(tmp_path, wheels, "fsdptui-canary==9.9"), "--json")
    assert out.returncode == 1
    end = events(out.stdout)[-1]
    triage = end["triage"]
    assert end["state"] == "failed" and triage["node_rank"] == 0 and triage["exit_code"] != 0
    assert triage["signature"] == "dependencies" and "the job did not start" in triage["excerpt"]
    log = (home / "runs" / end["run_id"] / "nodes" / "0.log").read_text()
    assert "No matching distribution found for fsdptui-canary==9.9" in log
    assert "pip install for environment.dependencies failed" in log and "the job did not start" in log
    assert "VALUE" not in log
    assert [p for p in (home / "venvs").iterdir() if p.is_dir()] == []


def test_nodes_sharing_a_home_build_the_venv_once_over_ssh(home, tmp_path, hosts):
    """Two SSH nodes whose ``ssh.remote_root`` is the same folder, as on an NFS home: one builds, one waits."""
    from tests.support.ssh_runs import ssh_cli

    client, _ = hosts
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "1.0")
    remote = tmp_path / "remote"
    wl = write_workload(tmp_path, f"""experiment_name: ssh-deps
mlflow: {{enabled: false}}
compute: {{hosts: [node0, node1]}}
ssh: {{remote_root: {remote}}}
environment: {{python: {sys.executable}, dependencies: [fsdptui-canary==1.0]}}
env_variables: {{PIP_NO_INDEX: '1', PIP_FIND_LINKS: '{wheels}'}}
command: python -c "import sys, fsdptui_canary; print('VALUE', fsdptui_canary.VALUE, 'PREFIX', sys.prefix)"
""")
    out = ssh_cli(home, client, "run", wl, "--json")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    run_id = events(out.stdout)[0]["run_id"]
    logs = [(home / "runs" / run_id / "nodes" / f"{rank}.log").read_text() for rank in (0, 1)]
    [venv] = [p for p in (remote / "venvs").iterdir() if p.is_dir()]
    assert [log.count("Successfully installed fsdptui-canary-1.0") for log in logs].count(1) == 1
    assert sum(f"environment {venv.name} is ready" in log for log in logs) == 1
    for log in logs:
        assert f"VALUE 1.0 PREFIX {venv}" in log
    assert (remote / "runs" / run_id / "node-1" / "node.log").exists()
