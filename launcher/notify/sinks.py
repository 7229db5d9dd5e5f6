"""One way each to send a summary: webhook, ntfy, email, desktop, a command. Blocking calls (the owner
runs them in a thread); each raises :class:`SinkError` with a message free of secrets and of URLs."""

from __future__ import annotations

import json
import shutil
import smtplib
import ssl
import subprocess
import urllib.error
import urllib.request
from email.message import EmailMessage
from typing import Any

from launcher.notify.summary import body, ntfy_headers, webhook_payload
from launcher.paths import user_umask
from launcher.workload.notify import Email


class SinkError(RuntimeError):
    """A send that did not arrive; ``retry`` is False when trying again cannot help."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


def _post(url: str, data: bytes, headers: dict[str, str], timeout: float) -> None:
    request = urllib.request.Request(url, data=data, headers={"User-Agent": "fsdp-tui", **headers}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read(1 << 16)
    except urllib.error.HTTPError as err:
        # 4xx but 408/429 means the receiver refuses this request: the same one will be refused again.
        raise SinkError(f"the receiver answered HTTP {err.code} {err.reason}",
                        retry=err.code >= 500 or err.code in (408, 429)) from None
    except urllib.error.URLError as err:
        raise SinkError(f"cannot reach it: {err.reason}") from None
    except (OSError, ValueError) as err:
        raise SinkError(f"cannot reach it: {err}") from None


def send_webhook(summary: dict[str, Any], url: str, timeout: float) -> None:
    data = json.dumps(webhook_payload(summary, url)).encode()
    _post(url, data, {"Content-Type": "application/json"}, timeout)


def send_ntfy(summary: dict[str, Any], url: str, timeout: float) -> None:
    _post(url, body(summary).encode(), {**ntfy_headers(summary), "Content-Type": "text/plain; charset=utf-8"},
          timeout)


def send_email(summary: dict[str, Any], email: Email, password: str | None, timeout: float) -> None:
    message = EmailMessage()
    message["Subject"] = summary["title"]
    message["From"] = email.sender
    message["To"] = ", ".join(email.to)
    message.set_content(body(summary) + "\n")
    try:
        if email.security == "tls":
            client = smtplib.SMTP_SSL(email.host, email.port, timeout=timeout, context=ssl.create_default_context())
        else:
            client = smtplib.SMTP(email.host, email.port, timeout=timeout)
        with client:
            if email.security == "starttls":
                client.starttls(context=ssl.create_default_context())
            if email.user:
                client.login(email.user, password or "")
            client.send_message(message)
    except smtplib.SMTPAuthenticationError as err:
        raise SinkError(f"the SMTP server refused the login of {email.user}: {err.smtp_code}", retry=False) from None
    except smtplib.SMTPNotSupportedError as err:
        raise SinkError(f"the SMTP server cannot do it ({err}): set notify.email.security", retry=False) from None
    except (smtplib.SMTPException, OSError) as err:
        raise SinkError(f"SMTP {email.host}:{email.port}: {type(err).__name__}: {err}") from None


def send_desktop(summary: dict[str, Any], timeout: float) -> None:
    tool = shutil.which("notify-send")
    if tool is None:
        raise SinkError("no desktop notifier here (notify-send is not installed)", retry=False)
    urgency = "critical" if summary["event"] in ("failed", "timed_out", "stalled", "idle") else "normal"
    _run([tool, "--app-name=fsdp-tui", f"--urgency={urgency}", summary["title"], body(summary)], None, timeout)


def send_command(summary: dict[str, Any], command: str, timeout: float) -> None:
    _run(["/bin/sh", "-c", command], json.dumps(summary).encode(), timeout)


def _run(argv: list[str], stdin: bytes | None, timeout: float) -> None:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, umask=user_umask(),
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SinkError(f"it ran longer than {timeout:g}s and was stopped") from None
    except OSError as err:
        raise SinkError(f"cannot start it: {err}", retry=False) from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise SinkError(f"it exited with code {done.returncode}" + (f": {said[-1][:200]}" if said else ""))
