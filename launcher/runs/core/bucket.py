"""A run's checkpoints in a bucket (``output_dir: s3://...``), listed and deleted from this machine with
fsspec, with the run's own credentials: its ``secrets`` (from this machine's secret store) and
``env_variables`` (``AWS_ENDPOINT_URL`` and the like), as the nodes had them. fsspec and the bucket's
filesystem package (``s3fs``, ``gcsfs``, ``adlfs``) come with the ``buckets`` extra."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from launcher.secrets import MissingSecrets, SecretStore
from launcher.workload.plan import RunPlan
from trainer.wire import ckpt_digest
from trainer.wire.ckpt_layout import BAD_MARK, META, CheckpointInfo, list_in_bucket

_ENV_LOCK = threading.Lock()


class BucketError(RuntimeError):
    """The bucket could not be read here; the message says why and what to install or set."""


def bucket_env(home: Path, plan: RunPlan) -> dict[str, str]:
    """The variables the nodes read the bucket with: ``env_variables`` and the resolved ``secrets``."""
    env = {k: str(v) for k, v in plan.workload.env_variables.items()}
    try:
        env.update(SecretStore(home).resolve(plan.workload.secrets))
    except MissingSecrets as err:
        raise BucketError(str(err)) from None
    return env


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` in this process's environment for the duration (botocore and friends read it there)."""
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _fs(url: str):
    try:
        import fsspec
    except ImportError:
        raise BucketError("listing a bucket here needs fsspec: pip install 'fsdp-tui[buckets]'") from None
    try:
        fs, bare = fsspec.core.url_to_fs(url, skip_instance_cache=True)
    except (ImportError, ValueError) as err:
        raise BucketError(f"{url}: {err} (pip install 'fsdp-tui[buckets]' brings s3fs)") from None
    return fs, bare


def list_bucket(root: str, env: dict[str, str]) -> list[CheckpointInfo]:
    """Every checkpoint under ``root`` (``<output_dir>/checkpoints``), by the one rule. Blocking."""
    with _environment(env):
        fs, bare = _fs(root)
        try:
            return list_in_bucket(fs, bare, root)
        except (OSError, PermissionError) as err:
            raise BucketError(f"{root}: {err}") from None


def remove_from_bucket(path: str, env: dict[str, str]) -> None:
    """A checkpoint folder of the bucket removed. Blocking."""
    with _environment(env):
        fs, bare = _fs(path)
        try:
            fs.rm(bare, recursive=True)
        except (OSError, PermissionError) as err:
            raise BucketError(f"{path}: {err}") from None


def verify_in_bucket(path: str, env: dict[str, str]) -> tuple[ckpt_digest.Differs, ...]:
    """A checkpoint's objects read back and hashed against the trainer's digests; what differs is marked
    beside them (it is not whole from then on). Blocking: it reads every byte."""
    with _environment(env):
        fs, bare = _fs(path)
        try:
            meta = fs.cat_file(f"{bare}/{META}").decode("utf-8")
            differs = ckpt_digest.verify_with(meta, lambda name: fs.open(f"{bare}/{name}", "rb"))
            if differs:
                try:
                    before = fs.cat_file(f"{bare}/{BAD_MARK}").decode("utf-8")
                except (FileNotFoundError, OSError, UnicodeDecodeError):
                    before = None
                fs.pipe_file(f"{bare}/{BAD_MARK}", ckpt_digest.mark_text(differs, before).encode("utf-8"))
        except (OSError, PermissionError, UnicodeDecodeError) as err:
            raise BucketError(f"{path}: {err}") from None
    return differs
