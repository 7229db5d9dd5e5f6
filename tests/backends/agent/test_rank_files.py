"""The node agent's split of torchrun's tagged output: the log reads as the job wrote it, each rank's part
in its own file, two ranks' partial lines that share a line of output each in the right file."""

from __future__ import annotations

from launcher.backends.agent.ranklogs import RankFiles
from launcher.workload.plan import RANK_TAG_TEMPLATE


def tag(rank: int) -> bytes:
    return RANK_TAG_TEMPLATE.replace("${rank}", str(rank)).encode()


def test_tagged_lines_split_by_rank_and_the_log_untagged(tmp_path):
    files = RankFiles(str(tmp_path), RANK_TAG_TEMPLATE, b"=== attempt 2 ===\n")
    said = [files.split(line) for line in (
        b"torchrun's own line\n",
        tag(0) + b"hello from rank 0\n",
        tag(0) + b"partial 0" + tag(1) + b"hello from rank 1\n",  # rank 0's unfinished line, then rank 1's
        tag(1) + b"err 1\n",
        tag(0) + b" end\n",
        tag(12) + b"\x1b[31mred\x1b[0m\n",  # the job's own escapes pass as they were
    )]
    files.close()
    assert said == [b"torchrun's own line\n", b"hello from rank 0\n", b"partial 0hello from rank 1\n", b"err 1\n",
                    b" end\n", b"\x1b[31mred\x1b[0m\n"]
    assert (tmp_path / "rank-0.log").read_bytes() == b"=== attempt 2 ===\nhello from rank 0\npartial 0 end\n"
    assert (tmp_path / "rank-1.log").read_bytes() == b"=== attempt 2 ===\nhello from rank 1\nerr 1\n"
    assert (tmp_path / "rank-12.log").read_bytes().endswith(b"\x1b[31mred\x1b[0m\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0.log", "rank-1.log", "rank-12.log"]


def test_a_tag_the_job_forges_names_no_file_outside_the_run_directory(tmp_path):
    files = RankFiles(str(tmp_path), RANK_TAG_TEMPLATE)
    forged = b"\x1b_fsdp-tui rank=../../x\x1b\\line\n"
    assert files.split(forged) == forged  # not a rank: the line stays as it is, no file
    files.close()
    assert list(tmp_path.iterdir()) == []


def test_the_environment_a_node_gets_makes_no_rank_warn(tmp_path):
    """The flight recorder on by its current name only: a process group made with what every node gets
    prints no deprecation warning (the old name beside it made every rank print one)."""
    import os
    import socket
    import subprocess
    import sys

    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    plan = build_plan(validate_text("experiment_name: w\ncommand: x\n", "w.yaml").workload, run_id="r")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **plan.nodes[0].env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0",
           "WORLD_SIZE": "1", "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr-")}
    script = "import torch.distributed as d; d.init_process_group('gloo'); d.barrier(); d.destroy_process_group()"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "TORCH_FR_BUFFER_SIZE" in plan.nodes[0].env and "deprecated" not in done.stderr, done.stderr
