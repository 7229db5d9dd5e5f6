"""``notify:``: who is told when a run ends (or stalls), and how. Field shapes only; sending lives in
:mod:`launcher.notify`.

The same shape is a user setting (``notify`` in ``settings.json``), the default for every run; what a
workload writes wins key by key. Any URL or password may be written ``secret:scope/key``: a Slack or
Discord webhook URL is a credential, and records keep only the reference.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from trainer.wire.yaml_words import WordsAsWritten

NotifyOn = Literal["succeeded", "failed", "stalled", "timed_out", "cancelled", "idle", "recovered"]
SECRET_PREFIX = "secret:"
_SECRET = re.compile(r"^secret:[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def _url_or_secret(value: str) -> str:
    if value.startswith(SECRET_PREFIX):
        if not _SECRET.match(value):
            raise ValueError("a secret reference is secret:scope/key")
        return value
    if not value.startswith(("http://", "https://")):
        raise ValueError("write an http(s):// URL, or secret:scope/key for a URL that is a credential")
    return value


class _Model(WordsAsWritten):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Email(_Model):
    """An email over SMTP for each notification."""

    host: str = Field(min_length=1)
    """SMTP server."""
    port: int = Field(default=587, ge=1, le=65535)
    """SMTP port (587: submission with STARTTLS; 465: TLS from the start; 25: plain)."""
    security: Literal["starttls", "tls", "none"] = "starttls"
    """``starttls`` (upgrade after connecting), ``tls`` (port 465 style) or ``none`` (a relay you trust)."""
    user: str | None = None
    """Login name; none: send without logging in."""
    password: str | None = None
    """Login password: write ``secret:scope/key`` (a plain password here is refused)."""
    sender: str = Field(default="fsdp-tui@localhost", min_length=3)
    """The From address."""
    to: list[str] = Field(min_length=1)
    """Recipients."""

    @field_validator("password")
    @classmethod
    def _secret_only(cls, value: str | None) -> str | None:
        if value is not None and not _SECRET.match(value):
            raise ValueError("write the password as secret:scope/key (fsdp-tui secrets set scope/key)")
        return value


class Notify(_Model):
    """Tell someone when the run ends, stalls or sits idle: webhooks (Slack, Discord or any JSON
    receiver), ntfy, email, a desktop notification, or a command of yours. The run's owner sends them,
    so they arrive with the app closed; a sink that fails is retried, recorded and shown, and never
    changes the run."""

    on: list[NotifyOn] = Field(default_factory=lambda: ["succeeded", "failed", "stalled", "timed_out", "recovered"])
    """The states that send a notification (``recovered``: a failed node was replaced and the run resumed)."""
    webhooks: list[str] = Field(default_factory=list)
    """URLs that get a JSON POST (Slack and Discord incoming webhooks understand it as is)."""
    ntfy: str | None = None
    """An ntfy topic URL (``https://ntfy.sh/my-topic``): the summary is POSTed as the message."""
    email: Email | None = None
    desktop: bool = False
    """A desktop notification (``notify-send``) on the machine that owns the run, where one exists."""
    command: str | None = None
    """Shell text run on this machine with the summary as JSON on stdin."""
    retries: int = Field(default=3, ge=0, le=10)
    """Tries after a failed send, each after a longer wait."""
    retry_backoff_s: float = Field(default=2.0, ge=0, le=600)
    """The first wait before a retry; each next wait doubles."""
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    """How long one send may take."""

    @field_validator("webhooks")
    @classmethod
    def _webhooks(cls, value: list[str]) -> list[str]:
        return [_url_or_secret(v) for v in value]

    @field_validator("ntfy")
    @classmethod
    def _ntfy(cls, value: str | None) -> str | None:
        return None if value is None else _url_or_secret(value)

    @property
    def sinks(self) -> int:
        """How many sinks are configured (none: nothing is sent)."""
        return (len(self.webhooks) + (self.ntfy is not None) + (self.email is not None) + self.desktop
                + (self.command is not None))
