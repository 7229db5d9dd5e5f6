"""Secret values for ``secrets: {NAME: scope/key}``: from the environment, a 0600 file, or the keyring.

Values never appear in workload files, argv, logs, records or MLflow: the launcher hands them to the
node agent on stdin, and the agent masks them in what it writes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ENV_PREFIX = "FSDP_TUI_SECRET_"


class MissingSecrets(LookupError):
    """Some ``scope/key`` references have no value anywhere."""

    def __init__(self, refs: list[str]) -> None:
        self.refs = refs
        how = "; ".join(f"printf %s VALUE | fsdp-tui secrets set {r}" for r in refs)
        one = len(refs) == 1
        super().__init__(f"no value for {'secret' if one else 'secrets'} {', '.join(refs)}: set "
                         f"{'it' if one else 'them'} with {how} (or the variable {env_name(refs[0])})")


def env_name(ref: str) -> str:
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", ref).upper()


class SecretStore:
    def __init__(self, home: Path) -> None:
        self.dir = Path(home) / "secrets"

    def _file(self, ref: str) -> Path:
        scope, _, key = ref.partition("/")
        if not scope or not key or "/" in key or scope.startswith("."):
            raise ValueError(f"'{ref}' is not scope/key")
        return self.dir / scope / key

    def set(self, ref: str, value: str) -> None:
        path = self._file(ref)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.dir, 0o700)
        os.chmod(path.parent, 0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(value)

    def remove(self, ref: str) -> bool:
        path = self._file(ref)
        if path.exists():
            path.unlink()
            return True
        return False

    def list(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(f"{p.parent.name}/{p.name}" for p in self.dir.glob("*/*") if p.is_file())

    def get(self, ref: str) -> str | None:
        if env_name(ref) in os.environ:
            return os.environ[env_name(ref)]
        path = self._file(ref)
        if path.is_file():
            return path.read_text(encoding="utf-8")
        try:
            import keyring
        except ImportError:
            return None
        try:
            return keyring.get_password("fsdp-tui", ref)
        except Exception:  # noqa: BLE001 - a keyring without a backend is the same as no keyring
            return None

    def resolve(self, mapping: dict[str, str]) -> dict[str, str]:
        """Env name -> value for every secret of a workload; :class:`MissingSecrets` names all gaps."""
        values = {name: self.get(ref) for name, ref in mapping.items()}
        missing = [mapping[name] for name, value in values.items() if value is None]
        if missing:
            raise MissingSecrets(missing)
        return {k: v for k, v in values.items() if v is not None}


def mask(text: str, values: list[str]) -> str:
    for value in values:
        if value:
            text = text.replace(value, "******")
    return text
