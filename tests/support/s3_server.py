"""A real S3-API server for tests: ``moto_server`` (moto's server mode) on a free loopback port, with one
bucket and, with ``auth``, credentials enforced as S3 enforces them: an IAM user whose access key may
write the bucket, and any other key refused ("The AWS Access Key Id you provided does not exist")."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

KEY, SECRET = "fsdp-tui-test-key", "fsdp-tui-test-secret-value"
"""The credentials a test hands out for the :func:`s3_server` fixture's server (it checks none)."""
BOOT_ACTIONS = 4
"""Requests moto lets through unauthenticated before it checks every key: the user, its key, its policy
and the bucket made by :func:`moto_s3`."""


@dataclass(frozen=True)
class S3Server:
    url: str
    key: str
    secret: str
    proc: subprocess.Popen

    def stop(self) -> None:
        """The endpoint gone (a dead endpoint for the commands that come after)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def moto_s3(log: Path, bucket: str = "ckpts", auth: bool = True) -> Iterator[S3Server]:
    server = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    if not os.path.exists(server):
        pytest.skip("moto[server] is not installed (pip install '.[test]')")
    env = {**os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": str(BOOT_ACTIONS)} if auth else {})}
    # The port held (bound, never listening, as node 0's rendezvous claim holds one) until moto listens: the
    # system hands it to no other program meanwhile, and moto's own bind (SO_REUSEADDR) goes beside it.
    hold = socket.socket()
    hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    hold.bind(("127.0.0.1", 0))
    port = hold.getsockname()[1]
    with open(log, "w") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                hold.close()
                pytest.fail(f"moto_server did not start: {log.read_text()[-1000:]}")
            time.sleep(0.1)
    hold.close()
    import boto3

    boot = {"endpoint_url": url, "aws_access_key_id": "boot", "aws_secret_access_key": "boot",
            "region_name": "us-east-1"}
    iam = boto3.client("iam", **boot)
    iam.create_user(UserName="job")
    key = iam.create_access_key(UserName="job")["AccessKey"]
    iam.put_user_policy(UserName="job", PolicyName="s3", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    boto3.client("s3", **boot).create_bucket(Bucket=bucket)
    server_ = S3Server(url, key["AccessKeyId"], key["SecretAccessKey"], proc)
    try:
        yield server_
    finally:
        server_.stop()


@pytest.fixture
def s3_server(tmp_path) -> Iterator[str]:
    """``moto_server`` on a free loopback port with the bucket ``ckpts``, credentials not checked; its URL."""
    with moto_s3(tmp_path / "moto.log", auth=False) as server:
        yield server.url
