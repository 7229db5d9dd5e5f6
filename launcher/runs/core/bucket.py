"""A run's checkpoints in a bucket (``output_dir: s3://...``), listed and deleted from this machine with
fsspec, with the run's own credentials: its ``secrets`` (from this machine's secret store) and
``env_variables`` (``AWS_ENDPOINT_URL`` and the like), as the nodes had them. fsspec and the bucket's
filesystem package (``s3fs``, ``gcsfs``, ``adlfs``) come with the ``buckets`` extra."""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from launcher.secrets import MissingSecrets, SecretStore
from launcher.workload.plan import RunPlan
from trainer.wire import ckpt_digest
from trainer.wire.ckpt_layout import BAD_MARK, META, CheckpointInfo, list_in_bucket
from trainer.wire.ckpt_paths import expand_path, url_scheme
from trainer.wire.protocol import RUN_ID_ENV

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


CONNECT_TIMEOUT_S = 5
"""How long this machine waits for a bucket's endpoint to take a connection (S3: botocore's default is 60 s,
tried 5 times: a dead endpoint took minutes to say so)."""
ATTEMPTS = 2
_STORAGE_LIBRARIES = ("botocore", "aiobotocore", "boto3", "s3fs", "gcsfs", "adlfs", "azure", "google", "aiohttp",
                      "fsspec", "requests", "urllib3")
"""Where a bucket's failures come from: a bucket that cannot be reached or refuses raises their errors,
which are the bucket's answer, said in one line (any other error is a bug, and stays one)."""


def _fs(url: str):
    try:
        import fsspec
    except ImportError:
        raise BucketError("reaching a bucket from here needs fsspec: pip install 'fsdp-tui[buckets]'") from None
    options = {}
    if url.startswith(("s3://", "s3a://")):
        options["config_kwargs"] = {"connect_timeout": CONNECT_TIMEOUT_S,
                                    "retries": {"max_attempts": ATTEMPTS, "mode": "standard"}}
    try:
        fs, bare = fsspec.core.url_to_fs(url, skip_instance_cache=True, **options)
    except (ImportError, ValueError) as err:
        raise BucketError(f"{url}: {err} (pip install 'fsdp-tui[buckets]' brings s3fs)") from None
    return fs, bare


def storage_words(err: BaseException) -> str | None:
    """What a bucket's failure says, on one line (the endpoint that does not answer, the key it does not
    know), or ``None`` when ``err`` is not a bucket's answer."""
    library = type(err).__module__.split(".")[0]
    if not isinstance(err, OSError) and library not in _STORAGE_LIBRARIES:
        return None
    text = " ".join(str(err).split()) or type(err).__name__
    if library in ("botocore", "aiobotocore") and "connect" in type(err).__name__.lower():
        return f"the bucket's endpoint does not answer ({text})"
    return text


@contextlib.contextmanager
def _answers(url: str) -> Iterator[None]:
    """A bucket's failure inside, raised as :class:`BucketError` naming ``url`` (one line)."""
    try:
        yield
    except BucketError:
        raise
    except Exception as err:  # noqa: BLE001 - only a storage library's answer is turned into words
        words = storage_words(err)
        if words is None:
            raise
        raise BucketError(f"{url}: {words}") from None


def list_bucket(root: str, env: dict[str, str]) -> list[CheckpointInfo]:
    """Every checkpoint under ``root`` (``<output_dir>/checkpoints``), by the one rule. Blocking."""
    with _environment(env), _answers(root):
        fs, bare = _fs(root)
        return list_in_bucket(fs, bare, root)


def remove_from_bucket(path: str, env: dict[str, str]) -> None:
    """A checkpoint folder of the bucket removed. Blocking."""
    with _environment(env), _answers(path):
        fs, bare = _fs(path)
        try:
            fs.rm(bare, recursive=True)
        except (OSError, PermissionError) as err:
            raise BucketError(f"{path}: {err}") from None


def verify_in_bucket(path: str, env: dict[str, str]) -> tuple[ckpt_digest.Differs, ...]:
    """A checkpoint's objects read back and hashed against the trainer's digests; what differs is marked
    beside them (it is not whole from then on). Blocking: it reads every byte."""
    with _environment(env), _answers(path):
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


WRITE_CHECK = ".fsdp-tui-write-check-{token}"
"""The small object the check writes (and removes) where the run's checkpoints will go."""
_CREDENTIALS = {"s3": ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
                       "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
                "gs": ("GOOGLE_APPLICATION_CREDENTIALS",), "gcs": ("GOOGLE_APPLICATION_CREDENTIALS",),
                "az": ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN",
                       "AZURE_CLIENT_SECRET"),
                "abfs": ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN",
                         "AZURE_CLIENT_SECRET")}
"""The variables that carry a bucket's credentials, by URL scheme: a workload that sets none of them leaves
each node to its own (an instance role), which this machine cannot stand in for."""


@dataclass(frozen=True)
class WriteCheck:
    """Whether the run's credentials can write where its checkpoints go (``why``: empty when they can)."""

    url: str
    why: str = ""
    own_credentials: bool = True
    """The workload names the bucket's credentials (``env_variables`` or ``secrets``); false: the check
    used this machine's, which the nodes may not have."""

    @property
    def ok(self) -> bool:
        return not self.why


def check_root(output_dir: str, run_id: str | None) -> str:
    """Where the check writes: ``output_dir`` as the run's job will see it (``$FSDP_TUI_RUN_ID`` is the run's
    id when known); a part that is still a variable, and what follows it, left off."""
    path = expand_path(output_dir, {RUN_ID_ENV: run_id} if run_id else {})
    head, sep, _tail = path.partition("$")
    return head.rsplit("/", 1)[0] if sep else path.rstrip("/")


def write_check(home: Path, plan: RunPlan, *, launching: bool = True) -> WriteCheck | None:
    """A small object written where the run's checkpoints go, and removed, with the run's credentials (its
    ``env_variables`` and ``secrets``, as the nodes get them); ``None``: its ``output_dir`` is no bucket.
    ``launching``: the plan's run id is the run's (the doctor's plan has none of its own). Blocking; a dead
    endpoint answers within seconds (:data:`CONNECT_TIMEOUT_S`)."""
    output_dir = plan.workload.parameters.get("output_dir")
    if not isinstance(output_dir, str) or url_scheme(output_dir) is None:
        return None
    root = check_root(output_dir, plan.run_id if launching else None)
    try:
        env = bucket_env(home, plan)
    except BucketError as err:
        return WriteCheck(root, str(err))
    own = any(env.get(name) for name in _CREDENTIALS.get(url_scheme(root) or "", ()))
    target = f"{root}/{WRITE_CHECK.format(token=secrets.token_hex(4))}"
    try:
        with _environment(env), _answers(root):
            fs, bare = _fs(target)
            fs.pipe_file(bare, b"fsdp-tui: can this run's job write here?\n")
            fs.rm_file(bare)
    except BucketError as err:
        return WriteCheck(root, f"cannot write there with {'the run' if own else 'this machine'}'s credentials: "
                                f"{str(err).removeprefix(root + ': ')}", own)
    return WriteCheck(root, "", own)
