"""The agent as it travels (:mod:`launcher.backends.bundle`): compressed (it follows the boot command on
stdin to every node for every command), the same build from the same sources in any process, and a zip
Python imports the agent from."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile

from launcher.backends.bundle import PACKAGE, agent_zip

_BUILD = "from launcher.backends.bundle import agent_zip; print(agent_zip()[1])"


def test_the_zip_is_deflated_and_its_build_is_its_sources(tmp_path):
    data, build = agent_zip()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
    assert infos and all(i.compress_type == zipfile.ZIP_DEFLATED for i in infos)
    assert len(data) < 0.5 * sum(i.file_size for i in infos)
    again = subprocess.run([sys.executable, "-c", _BUILD], capture_output=True, text=True, check=True)
    assert again.stdout.strip() == build  # another process, the same sources: the same build

    path = tmp_path / f"agent-{build}.zip"
    path.write_bytes(data)
    imported = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(path)!r}); "
                               f"import {PACKAGE}.serve as s; print(s.__file__)"], capture_output=True, text=True)
    assert imported.returncode == 0 and imported.stdout.startswith(str(path)), imported.stderr
