"""Notifications and usage as pure policy: the config's shape, the merge of settings and workload, the
summary and its payloads, retries with backoff (a real failing command, a fake clock), GPU-hours."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from launcher.notify.deliver import deliver, label
from launcher.notify.summary import CheckpointFact, RunFacts, body, build_summary, webhook_payload
from launcher.runs.core.usage import attempt_spans, run_usage
from launcher.runs.core.user_settings import Prices, SettingsError, UserSettings, effective_notify
from launcher.secrets import SecretStore
from launcher.workload.notify import Notify


@pytest.mark.parametrize(("data", "error"), [
    ({"webhooks": ["https://hooks.slack.com/services/T/B/X"]}, None),
    ({"webhooks": ["secret:team/slack"]}, None),
    ({"webhooks": ["hooks.slack.com/services/x"]}, "http(s)://"),
    ({"webhooks": ["secret:nokey"]}, "secret:scope/key"),
    ({"ntfy": "ftp://ntfy.sh/x"}, "http(s)://"),
    ({"email": {"host": "smtp", "to": ["a@b.c"], "password": "hunter2"}}, "secret:scope/key"),
    ({"email": {"host": "smtp", "to": []}}, "at least 1"),
    ({"on": ["finished"]}, "succeeded"),
    ({"webhook": ["https://x"]}, "Extra inputs"),
])
def test_notify_config_shapes(data, error):
    if error is None:
        assert Notify.model_validate(data).sinks == 1
    else:
        with pytest.raises(ValidationError, match=error.replace("(", r"\(").replace(")", r"\)")):
            Notify.model_validate(data)


@pytest.mark.parametrize(("settings", "workload", "expect"), [
    (None, None, None),
    ({"ntfy": "https://ntfy.sh/t"}, None, {"ntfy": "https://ntfy.sh/t", "on": 5}),  # the default states, "recovered" among them
    ({"ntfy": "https://ntfy.sh/t"}, {"on": ["failed"]}, {"ntfy": "https://ntfy.sh/t", "on": 1}),
    ({"ntfy": "https://ntfy.sh/t"}, {"ntfy": "https://ntfy.sh/other"}, {"ntfy": "https://ntfy.sh/other", "on": 5}),
    (None, {"on": ["failed"]}, None),  # states but no sink: nothing to send
])
def test_workload_keys_win_over_the_settings_key_by_key(settings, workload, expect):
    # as the run's owner sees it: the plan recorded and read back, every key set
    w = Notify.model_validate(Notify.model_validate(workload).model_dump()) if workload is not None else None
    got = effective_notify(w, UserSettings(notify=settings))
    if expect is None:
        assert got is None
    else:
        assert got.ntfy == expect["ntfy"] and len(got.on) == expect["on"]


def test_a_misshapen_credential_is_never_echoed(tmp_path):
    from launcher.workload.validate import validate_text

    text = ("experiment_name: x\ncommand: 'true'\nnotify:\n  webhooks: [hooks.slack.com/T0KEN]\n"
            "  email: {host: h, to: [a@b.c], password: hunter2}\n")
    problems = [p.format() for p in validate_text(text, "w.yaml").problems]
    assert len(problems) == 2 and "notify.webhooks" in problems[0] and "notify.email.password" in problems[1]
    assert not any("T0KEN" in p or "hunter2" in p for p in problems), problems


def test_bad_settings_name_the_file_and_key():
    with pytest.raises(SettingsError, match=r"settings.json: notify.ntfy: .*http"):
        effective_notify(None, UserSettings(notify={"ntfy": "nope"}))


FAILED = RunFacts(run_id="r1", experiment="sft", event="failed", detail="node 1 rank 3: oom", attempt=2,
                  duration_s=3725, step=40, max_steps=100, last_loss=1.5, best_eval_loss=1.75,
                  usage={"kind": "gpu", "hours": 16.0, "cost": 40.0, "currency": "USD"},
                  checkpoint=CheckpointFact("step-00000030", 30, 600),
                  triage={"node_rank": 1, "rank": 3, "exit_code": 1, "signature": "oom", "line_no": 17,
                          "excerpt": "torch.OutOfMemoryError: CUDA out of memory", "summary": "x", "other": 1})


def test_summary_has_what_the_user_acts_on():
    s = build_summary(FAILED)
    assert json.loads(json.dumps(s)) == s
    assert s["triage"] == {"node_rank": 1, "rank": 3, "exit_code": 1, "signature": "oom", "line_no": 17,
                           "excerpt": "torch.OutOfMemoryError: CUDA out of memory", "summary": "x"}
    text = body(s)
    for needed in ("failed after 1h02m (attempt 2)", "root cause: node 1 rank 3: oom (exit code 1)",
                   "first error (log line 17): torch.OutOfMemoryError", "step 40/100  loss 1.5000  best eval 1.7500",
                   "GPU-hours 16.00 (~40.00 USD)", "last safe step 30: checkpoint step-00000030, written 10m00s ago",
                   "open it: fsdp-tui show r1"):
        assert needed in text, (needed, text)
    assert s["title"] == "fsdp-tui: sft FAILED (r1)"


@pytest.mark.parametrize(("url", "keys"), [
    ("https://hooks.slack.com/services/T/B/X", {"text"}),
    ("https://discord.com/api/webhooks/1/abc", {"content", "username"}),
    ("https://example.org/hook", {"text", "content", "fsdp_tui"}),
])
def test_webhook_payloads_suit_their_receiver(url, keys):
    payload = webhook_payload(build_summary(FAILED), url)
    assert set(payload) == keys
    assert "FAILED" in (payload.get("text") or payload["content"])


@pytest.mark.parametrize(("target", "shown"), [
    ("https://hooks.slack.com/services/T/B/TOKEN", "webhook https://hooks.slack.com"),
    ("http://127.0.0.1:8080/topic?auth=TOKEN", "webhook http://127.0.0.1:8080"),
    ("secret:team/slack", "webhook secret:team/slack"),
])
def test_a_sink_is_named_without_its_token(target, shown):
    assert label("webhook", target) == shown


def test_a_failing_sink_is_retried_with_doubling_waits_and_recorded(tmp_path):
    waits = []
    notify = Notify(command="echo refused >&2; exit 3", retries=3, retry_backoff_s=0.5)
    [d] = deliver(notify, build_summary(FAILED), SecretStore(tmp_path), sleep=waits.append)
    assert (d.sink, d.ok, d.attempts, d.error) == ("command", False, 4, "it exited with code 3: refused")
    assert waits == [0.5, 1.0, 2.0]


def test_a_missing_secret_is_not_retried_and_says_how_to_set_it(tmp_path, monkeypatch):
    monkeypatch.delenv("FSDP_TUI_SECRET_TEAM_HOOK", raising=False)
    waits = []
    [d] = deliver(Notify(webhooks=["secret:team/hook"]), build_summary(FAILED), SecretStore(tmp_path),
                  sleep=waits.append)
    assert not d.ok and d.attempts == 1 and waits == []
    assert "fsdp-tui secrets set team/hook" in d.error and d.sink == "webhook secret:team/hook"


@pytest.mark.parametrize(("transitions", "ended", "spans"), [
    # pending and preflight do not hold the nodes; running to the end does
    ([(0, "pending", 1, ""), (5, "running", 1, ""), (65, "succeeded", 1, "")], 65, [60]),
    # a retry: attempt 1 ran 10 s, attempt 2 from its own running to the end
    ([(0, "pending", 1, ""), (2, "running", 1, ""), (12, "retrying", 2, ""), (20, "running", 2, ""),
      (50, "failed", 2, "")], 50, [10, 30]),
    # never ran
    ([(0, "pending", 1, ""), (1, "failed", 1, "")], 1, [0]),
    # still running: up to now (100)
    ([(0, "running", 1, "")], None, [100]),
])
def test_attempt_spans(transitions, ended, spans):
    assert attempt_spans(transitions, ended, now=100) == spans


@pytest.mark.parametrize(("prices", "hosts", "cost"), [
    (None, ["a", "b"], None),
    (Prices(gpu_hour=2.0), ["a", "b"], 2 * 8 * 1.5 * 2.0),
    (Prices(gpu_hour=2.0, by_accelerator={"H100": 3.0}), ["a", "b"], 2 * 8 * 1.5 * 3.0),
    (Prices(by_host={"a": 1.0, "b": 3.0}), ["a", "b"], 8 * 1.5 * 1.0 + 8 * 1.5 * 3.0),
    (Prices(by_host={"a": 1.0}), ["a", "b"], None),  # a node without a price: no total
])
def test_gpu_hours_are_nodes_times_gpus_times_wall_time(prices, hosts, cost):
    u = run_usage(kind="gpu", procs_per_node=8, hosts=hosts, num_nodes=2, gpu_model="H100",
                  spans_s=[3600, 1800], prices=prices)
    assert u.hours == pytest.approx(2 * 8 * 1.5) and u.per_attempt == pytest.approx((16, 8))
    assert (u.cost is None) == (cost is None) and (cost is None or u.cost == pytest.approx(cost))


def test_a_finished_gpu_runs_hours_from_its_record(tmp_path):
    """GPU-hours of a stored 2-node x 8-GPU run (no GPU here: the counts are the record's, not measured)."""
    import time as clock

    from launcher.events import RunState
    from launcher.runs.core.layout import read_plan, save_plan
    from launcher.runs.core.store import RunStore
    from launcher.runs.core.usage import usage_of_record
    from launcher.workload.model import Workload
    from launcher.workload.plan import build_plan

    w = Workload.model_validate({"experiment_name": "gpu", "compute": {
        "accelerator_type": "GPU_8xH100", "num_accelerators": 16, "hosts": ["n1", "n2"]}})
    plan = build_plan(w, run_id="r-gpu")
    store = RunStore(tmp_path)
    directory = store.create_run(plan, None, "")
    save_plan(directory, plan)
    for state in (RunState.PREFLIGHT, RunState.RUNNING, RunState.SUCCEEDED):
        store.set_state("r-gpu", state, 1)
        clock.sleep(0.05)
    record = store.get_run("r-gpu")
    u = usage_of_record(record, read_plan(directory), Prices(by_accelerator={"H100": 2.0}), clock.time())
    wall = record.summary.ended_at - record.summary.started_at
    assert u.kind == "gpu" and u.hours == pytest.approx(2 * 8 * wall / 3600) and u.hours > 0
    assert u.cost == pytest.approx(u.hours * 2.0)


def test_notify_test_sends_a_sample_to_each_sink_and_says_what_happened(tmp_path):
    from tests.support.cli import cli, write_workload

    home = tmp_path / "home"
    home.mkdir()
    nothing = cli(home, "notify", "test")
    assert nothing.returncode == 2 and "no sink configured" in nothing.stderr
    got = tmp_path / "got.json"
    (home / "settings.json").write_text(json.dumps({"theme": "x", "notify": {"command": f"cat > {got}"}}))
    wl = write_workload(tmp_path, "experiment_name: t\ncommand: 'true'\n"
                                  "notify: {command: 'exit 4', retries: 1, retry_backoff_s: 0}\n")
    sent = cli(home, "notify", "test")
    assert sent.returncode == 0 and sent.stdout == "command: sent\n"
    assert json.loads(got.read_text())["event"] == "test"
    failed = cli(home, "notify", "test", wl)  # the workload's command wins over the settings'
    assert failed.returncode == 1 and failed.stdout == "command: FAILED after 2 tries: it exited with code 4\n"


@pytest.mark.parametrize(("log", "lead", "says"), [
    ("step=1\n", 120, ""),
    ("checkpoint blocked training for 12.50 s\ncheckpoint blocked training for 30.01 s\n", 120,
     "checkpoints took up to 30s; the time-limit signal comes 120s before the limit (compute.slurm.signal_lead_s)"),
    ("checkpoint blocked training for 100.00 s\n", 120, "too close, raise it above 125s"),
])
def test_the_lead_time_against_the_measured_checkpoint_time(log, lead, says):
    from launcher.runs.core.safe_step import checkpoint_seconds, lead_time_note

    note = lead_time_note(checkpoint_seconds(log), lead)
    assert (says in note) if says else note == ""


def test_the_last_safe_step_is_the_runs_own_newest_complete_checkpoint():
    from launcher.backends.base import CheckpointListing
    from launcher.runs.core.checkpoints import RunCheckpoints
    from launcher.runs.core.safe_step import NONE_YET, own_safe
    from trainer.wire.ckpt_layout import CheckpointInfo
    from trainer.wire.ckpt_owner import Lineage

    ckpts = (CheckpointInfo(10, "/o/step-00000010", True, 1, 100.0, run_id="r"),
             CheckpointInfo(20, "/o/step-00000020", True, 1, 200.0, run_id="r"),
             CheckpointInfo(30, "/o/step-00000030", False, 1, 300.0, run_id="r"),
             CheckpointInfo(40, "/o/step-00000040", True, 1, 400.0, run_id="other"))
    safe = own_safe(RunCheckpoints("r", CheckpointListing(0, "node 0", "/o", ckpts), Lineage("r")), now=260.0)
    assert (safe.found.step, safe.found.name, safe.age_s(260.0)) == (20, "step-00000020", 60.0)
    assert safe.text(260.0) == "step 20 (step-00000020, written 1m00s ago)"
    assert safe.text(320.0) == "step 20 (step-00000020, written 2m00s ago)"  # the age counts on when shown
    alone = RunCheckpoints("r", CheckpointListing(0, "node 0", "/o", ckpts[2:]), Lineage("r"))
    assert own_safe(alone, now=0).text() == NONE_YET


def test_the_owner_sends_only_the_events_asked_for_and_records_each_delivery(tmp_path, monkeypatch):
    from launcher.events import RunState
    from launcher.runs.core.layout import save_plan
    from launcher.runs.core.notifying import notify_run, notify_wanted, read_deliveries
    from launcher.runs.core.store import RunStore
    from launcher.workload.model import Workload
    from launcher.workload.plan import build_plan

    monkeypatch.setenv("FSDP_TUI_HOME", str(tmp_path))
    plan = build_plan(Workload.model_validate({"experiment_name": "st", "command": "true"}), run_id="r-st")
    store = RunStore(tmp_path)
    save_plan(store.create_run(plan, None, ""), plan)
    store.set_state("r-st", RunState.RUNNING, 1, "stalled at step 5: no step for 20 min")
    got = tmp_path / "got.json"
    notify = Notify(on=["stalled"], command=f"cat > {got}")
    assert not notify_wanted(notify, "succeeded") and notify_run(tmp_path, "r-st", notify, "succeeded") == []
    assert not got.exists()
    [d] = notify_run(tmp_path, "r-st", notify, "stalled")
    summary = json.loads(got.read_text())
    assert d.ok and summary["event"] == "stalled" and summary["detail"].startswith("stalled at step 5")
    assert summary["title"] == "fsdp-tui: st is STALLED (r-st)" and summary["usage"]["kind"] == "cpu"
    assert read_deliveries(store.home / "runs" / "r-st") == [d]
    (tmp_path / "settings.json").write_text('{"notify": {"ntfy": "nope"}}')  # a bad setting is recorded, not raised
    [bad] = notify_run(tmp_path, "r-st", None, "failed")
    assert not bad.ok and "settings.json: notify.ntfy" in bad.error and "nothing was sent" in bad.error


def test_desktop_needs_notify_send_and_gets_title_and_body(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))  # no notify-send here
    [missing] = deliver(Notify(desktop=True), build_summary(FAILED), SecretStore(tmp_path), sleep=lambda s: None)
    assert not missing.ok and missing.attempts == 1 and "notify-send is not installed" in missing.error
    args = tmp_path / "args"
    (bin_dir / "notify-send").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {args}\n")
    (bin_dir / "notify-send").chmod(0o755)
    [sent] = deliver(Notify(desktop=True), build_summary(FAILED), SecretStore(tmp_path))
    said = args.read_text()
    assert sent.ok and "--urgency=critical" in said and "fsdp-tui: sft FAILED (r1)" in said and "root cause" in said


@pytest.mark.parametrize(("status", "attempts"), [(404, 1), (503, 3), (429, 3)])
def test_a_receiver_that_refuses_for_good_is_not_retried(tmp_path, status, attempts):
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Answer(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        [d] = deliver(Notify(webhooks=[f"http://127.0.0.1:{server.server_port}/x"], retries=2),
                      build_summary(FAILED), SecretStore(tmp_path), sleep=lambda s: None)
    finally:
        server.shutdown()
    assert not d.ok and d.attempts == attempts and d.error.startswith(f"the receiver answered HTTP {status}")
