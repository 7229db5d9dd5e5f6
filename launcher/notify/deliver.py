"""Every configured sink, tried with retries and backoff; what happened to each, for the run's record.

A delivery names its sink without its secret (``webhook secret:team/slack``, ``webhook https://host``:
a webhook's path is its token, so a plain URL is shown by host only), and its error text is masked
with every secret value it used."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from launcher.notify import sinks
from launcher.notify.delivery import Delivery as Delivery
from launcher.notify.sinks import SinkError
from launcher.secrets import SecretStore, env_name, mask
from launcher.workload.notify import SECRET_PREFIX, Notify


def label(kind: str, target: str | None) -> str:
    if target is None:
        return kind
    if target.startswith(SECRET_PREFIX):
        return f"{kind} {target}"
    parts = urlsplit(target)
    return f"{kind} {parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"


class _Secrets:
    """``secret:scope/key`` to its value; what it resolved is kept to mask error texts."""

    def __init__(self, store: SecretStore) -> None:
        self.store, self.used = store, []

    def __call__(self, value: str) -> str:
        if not value.startswith(SECRET_PREFIX):
            return value
        ref = value[len(SECRET_PREFIX):]
        got = self.store.get(ref)
        if got is None:
            raise SinkError(f"no value for secret {ref}: printf %s VALUE | fsdp-tui secrets set {ref} "
                            f"(or set {env_name(ref)})", retry=False)
        self.used.append(got)
        return got.strip()


def plan_sends(notify: Notify, resolve: Callable[[str], str]) -> list[tuple[str, Callable]]:
    """``(label, send(summary))`` per configured sink; a secret is resolved only when its sink sends."""
    t = notify.timeout_s
    out: list[tuple[str, Callable]] = []
    for url in notify.webhooks:
        out.append((label("webhook", url), lambda s, u=url: sinks.send_webhook(s, resolve(u), t)))
    ntfy, e, command = notify.ntfy, notify.email, notify.command
    if ntfy:
        out.append((label("ntfy", ntfy), lambda s: sinks.send_ntfy(s, resolve(ntfy), t)))
    if e:
        out.append((f"email {', '.join(e.to)} via {e.host}:{e.port}",
                    lambda s: sinks.send_email(s, e, None if e.password is None else resolve(e.password), t)))
    if notify.desktop:
        out.append(("desktop", lambda s: sinks.send_desktop(s, t)))
    if command:
        out.append(("command", lambda s: sinks.send_command(s, command, t)))
    return out


def deliver(notify: Notify, summary: dict[str, Any], store: SecretStore,
            sleep: Callable[[float], None] = time.sleep) -> list[Delivery]:
    """Send ``summary`` to every sink; a failed send is tried again ``notify.retries`` times, waiting
    ``retry_backoff_s``, then twice that, and so on. Never raises."""
    secrets = _Secrets(store)
    done = []
    for name, send in plan_sends(notify, secrets):
        attempts, error = 0, ""
        while True:
            attempts += 1
            try:
                send(summary)
                error = ""
                break
            except SinkError as err:
                error, again = str(err), err.retry
            except Exception as err:  # noqa: BLE001 - a sink's bug is recorded like a failed send, never raised
                error, again = f"{type(err).__name__}: {err}", False
            if not again or attempts > notify.retries:
                break
            sleep(notify.retry_backoff_s * 2 ** (attempts - 1))
        done.append(Delivery(name, not error, attempts, mask(error, secrets.used), time.time(), summary["event"]))
    return done
