"""Why a run failed: first failing node and rank, exit code, first error signature. Pure functions; the report
they make (:class:`~launcher.events.triage.TriageReport`) lives with the event that carries it."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from launcher.events.triage import TriageReport
from launcher.runs.core.display import sanitize_line
from launcher.words import node_at

# Checked in order; the first signature found in a node's log names the failure.
SIGNATURES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("dependencies", re.compile(r"^fsdp-tui: .* for environment\.dependencies failed")),
    ("cannot_start", re.compile(r"^fsdp-tui agent: cannot start ")),
    ("no_space", re.compile(r"[Nn]o space left on device|ENOSPC|Disk quota exceeded")),
    # The trainer's own stop on a NaN or infinite loss (``training.on_nan``): every rank says it. A step it
    # skipped or trained on is said in other words, and is no failure.
    ("nonfinite_loss", re.compile(r"^(?:\[rank\d+\]:\s*)?(?:loss|the largest weight|the gradients' norm) is (?:NaN|-?inf) at step \d+ "
                                  r"on rank \d+.*: training stopped")),
    ("oom", re.compile(r"CUDA out of memory|OutOfMemoryError|torch\.OutOfMemoryError|Cannot allocate memory")),
    ("nccl_timeout", re.compile(r"Watchdog caught collective operation timeout|NCCL.*[Tt]imeout|ProcessGroupNCCL.*timed out")),
    ("rendezvous_timeout", re.compile(r"RendezvousTimeoutError|The client socket has timed out|"
                                      r"RendezvousConnectionError|Timed out waiting for .* rendezvous")),
    # The trainer's refusals name the key (``FILE: parameters.KEY: what to do``) and carry no traceback;
    # before Python errors, or torchrun's ``ChildFailedError:`` after them would name the failure. A
    # problem in the data itself names the file and its line (``FILE:LINE: parameters.dataset_name: ...``, a
    # mixture's source ``parameters.datasets[1].path``).
    ("data", re.compile(r"^(?:\[rank\d+\]:\s*)?(?:\S+: )?parameters\.(?:dataset_name|datasets\[\d+\]\.path): "
                        r"(?:\S+ )*\S")),
    ("settings", re.compile(r"^(?:\[rank\d+\]:\s*)?(?:\S+: )?parameters\.[A-Za-z_][\w.]*: (?:\S+ )+\S")),
    ("python_error", re.compile(r"^(?:\[rank\d+\]:\s*)?(\w+(?:\.\w+)*(?:Error|Exception)): (.*)$")),
    ("killed", re.compile(r"Signal (9|15) \(SIG(?:KILL|TERM)\)|exitcode\s*:\s*-(9|15)|\bKilled\b")),
)
_RANK = re.compile(r"^\[rank(\d+)\]:")
_CHILD_FAILED = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")


@dataclass(frozen=True)
class Signature:
    kind: str
    line: str


# Every signature needs one of these words: a cheap test that lets ordinary lines skip the regexes.
_KEYWORDS = (" is NaN at step", "inf at step", "cannot start", "parameters.", "environment.dependencies", "space", "ENOSPC", "quota", "Error", "Exception", "memory", "imeout", "imed out", "Killed", "Signal", "exitcode")


def might_signal(text: str) -> bool:
    """False when no line of ``text`` can carry a failure signature (checks a whole batch at once)."""
    return any(word in text for word in _KEYWORDS)


def classify_line(line: str) -> Signature | None:
    """The failure signature a log line shows, if any (the app highlights these)."""
    if not might_signal(line):
        return None
    for kind, pattern in SIGNATURES:
        if pattern.search(line):
            return Signature(kind, line.strip())
    return None


def triage_run(logs: dict[int, str], exit_codes: dict[int, int | None], first: int | None = None) -> TriageReport:
    """Blame the first node that failed on its own (non-zero exit, not stopped by us), else any error.
    ``first``: the failed node whose rank died first, when the caller knows it (it is asked first)."""
    failed = [n for n, code in sorted(exit_codes.items()) if code not in (0, None)]
    if first in failed:
        failed = [first, *(n for n in failed if n != first)]
    order = failed + [n for n in sorted(logs) if n not in failed]
    for node in order:
        text = logs.get(node, "")
        root = _root_cause_rank(text)
        found = _first_signature(text, prefer_rank=root)
        if found is not None or node in failed:
            kind, line_no, line = found or (None, None, "")
            rank = root if root is not None else _rank_of(text, line)
            if found is None and (signal_name := _signal_of(exit_codes.get(node))):
                kind, line = "killed", f"the job was killed by {signal_name} (not by fsdp-tui)"
            # The excerpt is job output shown wherever the triage is: made safe like every shown line.
            excerpt = sanitize_line(line).strip()[:300]
            if kind == "nonfinite_loss":  # the rank the trainer names, whichever rank printed it
                said = _RANK.sub("", excerpt).strip()
                named = re.search(r" on rank (\d+)", said)
                return TriageReport(node, int(named.group(1)) if named else rank, exit_codes.get(node), kind,
                                    line_no, said, said=said)
            return TriageReport(node, rank, exit_codes.get(node), kind, line_no, excerpt)
    return TriageReport(None, None, None, None, None, "")


_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+)", re.DOTALL)


def _root_cause_rank(text: str) -> int | None:
    """The rank torchrun names as the root cause (its other failures are listed before it)."""
    found = list(_ROOT_CAUSE.finditer(text[-200_000:]))
    return int(found[-1].group(1)) if found else None


def _first_signature(text: str, prefer_rank: int | None = None) -> tuple[str, int, str] | None:
    """The most telling error line; one printed by ``prefer_rank`` (torchrun's root cause) first."""
    best: tuple[int, str, int, str] | None = None  # (priority, kind, line_no, line)
    kinds = [k for k, _ in SIGNATURES]
    for no, line in enumerate(text.splitlines(), start=1):
        sig = classify_line(line)
        if sig is None:
            continue
        other_rank = prefer_rank is not None and (m := _RANK.match(line.strip())) and int(m.group(1)) != prefer_rank
        priority = kinds.index(sig.kind) + (len(kinds) if other_rank else 0)
        if best is None or priority < best[0]:
            best = (priority, sig.kind, no, line)
            if priority == 0:
                break
    return None if best is None else (best[1], best[2], best[3])


def _rank_of(text: str, line: str) -> int | None:
    match = _RANK.match(line.strip())
    if match:
        return int(match.group(1))
    summary = _CHILD_FAILED.search(text)
    return int(summary.group(1)) if summary else None


def _signal_of(code: int | None) -> str | None:
    """``SIGKILL`` for a process killed by signal 9 (exit code -9, or 137 through a shell), and so on."""
    import signal

    if code is None or code == 0:
        return None
    number = -code if code < 0 else code - 128 if 128 < code < 160 else None
    try:
        return signal.Signals(number).name if number else None
    except ValueError:
        return f"signal {number}"


def reason_signature(why: str) -> str:
    """The signature of a failure the launcher saw itself (not in a log): its words, or ``launch``."""
    for kind in ("no_space",):
        if dict(SIGNATURES)[kind].search(why):
            return kind
    return "launch"


def said_report(why: str, signature: str, node_rank: int | None = None) -> TriageReport:
    """The triage of an end the launcher saw itself, in its own words (a stall, a failed launch, a time
    limit, idle GPUs): no rank or line to point at."""
    return TriageReport(node_rank=node_rank, signature=signature, excerpt=why, said=why)


def stalled_report(why: str) -> TriageReport:
    """The triage of a run stopped because its steps stalled (no rank or line to point at)."""
    return said_report(why, "stalled")


def node_error_report(from_logs: TriageReport, rank: int, host: str, error: str,
                      exit_code: int | None) -> TriageReport:
    """The triage when a node's agent saw the cause itself (its disk, not the job)."""
    return replace(from_logs, said=f"{node_at(rank, host)}: {error}", node_rank=rank,
                   signature=reason_signature(error), excerpt=error, exit_code=exit_code)


def gone_words(status, reconnected: bool) -> str:
    """Why a node's job is gone (its ``NodeStatus``; ``reconnected``: its connection dropped and came back
    during the attempt)."""
    if status.error:
        return f"lost: {status.error}"
    if reconnected:
        return ("lost: its job is gone since its connection came back (the node restarted, or its "
                "processes were killed)")
    if status.state == "absent":
        return "lost: no job is recorded there any more (its run directory is gone)"
    return "lost: the process recording its job on the node died"


def died_first(exit_codes: dict[int, int | None], failed_at: dict[int, float]) -> int | None:
    """Of the nodes that exited with an error, the one whose rank died first: one killed by a signal
    fsdp-tui did not send (a SIGTERM is more likely its stop of a survivor), else the one whose job ended
    first; ``None`` with fewer than two (nothing to choose)."""
    failed = [r for r, code in exit_codes.items() if code not in (0, None)]
    if len(failed) < 2:
        return None

    def order(rank: int) -> tuple[bool, float, int]:
        code = exit_codes[rank]
        signalled = code is not None and (code < 0 or code > 128) and code not in (-15, 143)
        return (not signalled, failed_at.get(rank, float("inf")), rank)
    return min(failed, key=order)


def gpu_lost_report(from_logs: TriageReport, rank: int, host: str, words: str) -> TriageReport:
    """The triage when a node's GPU vanished (it fell off the bus): that node is the root cause, what the
    logs blamed its consequence."""
    return TriageReport(node_rank=rank, signature="gpu_lost", excerpt=words, said=f"{node_at(rank, host)}: {words}",
                        consequence=from_logs.summary if from_logs.node_rank != rank else "")


def gone_report(from_logs: TriageReport, rank: int, host: str, words: str) -> TriageReport:
    """The triage when a node was found without its job: that node is the root cause, and what the logs
    blamed (a survivor's "Connection reset by peer") is kept as its consequence."""
    return TriageReport(node_rank=rank, signature="lost", excerpt=words, said=f"{node_at(rank, host)}: {words}",
                        consequence=from_logs.summary if from_logs.node_rank != rank else "")


def lost_first(report: TriageReport, lost: dict[int, str], hosts: dict[int, str]) -> TriageReport:
    """The triage of a failed attempt once its gathers are done: a node the gathers found lost (``lost``:
    rank -> the gather's words) is the root cause, named first, and what the logs blamed (a survivor's
    connection reset) its consequence; a triage that names a lost node already (found without its job)
    stays."""
    if not lost or report.signature == "lost":  # a lost node is named first already
        return report
    rank = min(lost)
    return gone_report(report, rank, hosts.get(rank, "?"), lost[rank])


def scheduler_report(from_logs: TriageReport, cause, host: str, exit_code: int | None) -> TriageReport:
    """The triage when the scheduler saw a node die (``cause``: a
    :class:`~launcher.backends.base.SchedulerCause`). The node's own log line stays the excerpt when it
    is the same node and tells more; else the scheduler's node is the root cause and what the logs blamed
    is kept as its consequence."""
    where = node_at(cause.rank, host) if cause.rank is not None else host
    if from_logs.node_rank == cause.rank and from_logs.signature not in (None, "launch"):
        return replace(from_logs, scheduler=cause.words)
    return TriageReport(node_rank=cause.rank, exit_code=exit_code, signature=cause.signature, excerpt=cause.words,
                        said=f"{where}: {cause.words}", scheduler=cause.words,
                        consequence=from_logs.summary if from_logs.node_rank != cause.rank else "")
