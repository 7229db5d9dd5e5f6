"""The doctor's SSH report for one node: what fsdp-tui resolved from the config (host, port, user, keys
tried, jump chain, known-hosts file, keepalives) beside what ``ssh -G`` says for the bare name, with every
difference flagged, so "it works with ssh but not here" is answered before a launch."""

from __future__ import annotations

from launcher.backends.base import SchedulerCheck as Check
from launcher.backends.ssh.config import ResolvedHost, SshConfigError, resolve
from launcher.backends.ssh.connect import effective_timeouts
from launcher.backends.ssh.hostkeys import user_files
from launcher.workload.hosts import HostTarget
from launcher.workload.machines import Ssh
from launcher.workload.plan import RunPlan

IGNORED_STRICT = ("no", "off", "accept-new")


def ssh_config_check(plan: RunPlan, host: HostTarget, display: str) -> Check:
    """One check: the resolution, its source, and what differs from plain ``ssh NAME``. Blocking (it runs
    ``ssh -G``): call it from a thread."""
    ssh = plan.workload.ssh
    name = host.hostname
    try:
        r = resolve(host, ssh)
    except SshConfigError as err:
        return Check("ssh config", "error", str(err), f"fix the config until `ssh -G {name}` reads it without error")
    timeout, interval, count = effective_timeouts(r, ssh)
    keys = [ssh.identity_file] if ssh.identity_file else list(r.identity_files)
    parts = [f"{r.user}@{r.hostname}:{r.port} (read by {r.source})",
             f"keys: {', '.join(keys) or 'none'}{' (IdentitiesOnly)' if r.identities_only else ''}"
             + (f", agent {r.identity_agent}" if r.identity_agent else ""),
             f"jump: {' -> '.join(r.jump_hops)}" if r.jump_hops else "no jump host",
             f"known hosts: {user_files(r, ssh)[0]}" + (f" as {r.host_key_alias}" if r.host_key_alias else ""),
             f"keepalive {interval:g}s x{count}, connect timeout {timeout:g}s"]
    flags = _differences(host, r, ssh)
    if r.missing_identity_files and not ssh.identity_file:
        parts.append(f"skipped (missing): {', '.join(r.missing_identity_files)}")
    if r.strict_host_key_checking.lower() in IGNORED_STRICT:
        flags.append(f"StrictHostKeyChecking {r.strict_host_key_checking} is ignored on purpose: host keys are always "
                     f"verified (fsdp-tui trust {display} adds one after showing it)")
    if r.source == "asyncssh":
        flags.append("no `ssh` client here: asyncssh's parser read the config; install openssh-client so that "
                     "OpenSSH reads it")
    if not flags:
        return Check("ssh config", "ok", "; ".join(parts) + "; the same as ssh -G")
    return Check("ssh config", "warning", "; ".join(parts) + "; differs from ssh: " + "; ".join(flags),
                 "set the workload's ssh: values only where the config's must be overridden")


def _differences(host: HostTarget, r: ResolvedHost, ssh: Ssh) -> list[str]:
    """Where the workload's ``ssh:`` made fsdp-tui go elsewhere than ``ssh NAME`` alone would."""
    if r.source != "ssh -G" or not (ssh.user or ssh.port or ssh.proxy_jump):
        return []
    try:
        plain = resolve(host, Ssh())
    except SshConfigError as err:
        return [f"ssh -G {host.hostname} fails: {err}"]
    found = []
    for label, key, ours, theirs in (("user", "ssh.user", r.user, plain.user), ("port", "ssh.port", r.port, plain.port),
                                     ("jump", "ssh.proxy_jump", r.proxy_jump, plain.proxy_jump),
                                     ("host", "ssh.user/ssh.port (Match)", r.hostname, plain.hostname)):
        if ours != theirs:
            found.append(f"{label} {ours} (the workload's {key}) where ssh -G {host.hostname} says {theirs}")
    return found
