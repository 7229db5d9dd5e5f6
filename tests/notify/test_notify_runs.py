"""Notifications with real parts: two tiny local runs (one fails, one succeeds) launched headless, the
app never opened; a loopback HTTP server receives the webhook and ntfy POSTs, an aiosmtpd server the
emails, a command the summary as JSON; a refused sink is retried and recorded while the run succeeds;
the secret webhook URL is in no record or log."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.cli import cli, events, write_workload

pytestmark = pytest.mark.slow
TOKEN = "T0KEN-d41d8cd98f00b204e980"


class _Receiver(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.got.append((self.path, dict(self.headers), data))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(check, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def test_runs_notify_every_sink_with_the_app_closed(home, tmp_path):
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    http = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    http.got = []
    threading.Thread(target=http.serve_forever, daemon=True).start()
    mails = []

    class Keep(Message):
        def handle_message(self, message):
            mails.append(message)

    smtp = Controller(Keep(), hostname="127.0.0.1", port=_free_port())
    smtp.start()
    out_dir = tmp_path / "cmd"
    out_dir.mkdir()
    refusing = _free_port()  # nothing listens there
    base = f"http://127.0.0.1:{http.server_port}"
    (home / "settings.json").write_text(json.dumps({"notify": {
        "webhooks": ["secret:team/hook", f"http://127.0.0.1:{refusing}/down"],
        "ntfy": f"{base}/my-topic",
        "email": {"host": "127.0.0.1", "port": smtp.port, "security": "none", "to": ["me@example.org"]},
        "command": f"cat > {out_dir}/$(date +%s%N).json",
        "retries": 2, "retry_backoff_s": 0.1, "timeout_s": 20}}))
    secret_env = {"FSDP_TUI_SECRET_TEAM_HOOK": f"{base}/hook/{TOKEN}"}
    try:
        fails = write_workload(tmp_path, "experiment_name: notify-fails\nmlflow: {enabled: false}\ncommand: |\n  echo step=1 loss=2.5\n"
                                         "  python -c \"raise ValueError('bad batch')\"\n")
        out = cli(home, "run", fails, "--json", **secret_env)
        assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
        failed_id = events(out.stdout)[-1]["run_id"]
        (tmp_path / "ok").mkdir()
        ckpts = tmp_path / "out" / "checkpoints"
        ok = write_workload(tmp_path / "ok", f"""experiment_name: notify-ok
mlflow: {{enabled: false}}
notify: {{on: [succeeded]}}
parameters: {{output_dir: {tmp_path / 'out'}}}
command: |
  mkdir -p {ckpts}/step-00000002 {ckpts}/step-00000003
  printf '{{"step": 2, "run_id": "%s"}}' "$FSDP_TUI_RUN_ID" > {ckpts}/step-00000002/meta.json
  touch {ckpts}/step-00000002/.metadata
  echo step=3/3 loss=0.5
""")  # step 3 is incomplete: step 2 is the last safe one
        out2 = cli(home, "run", ok, "--json", **secret_env)
        assert out2.returncode == 0, out2.stdout[-2000:] + out2.stderr[-2000:]
        ok_id = events(out2.stdout)[-1]["run_id"]

        def recorded(run_id):
            path = home / "runs" / run_id / "notifications.jsonl"
            lines = path.read_text().splitlines() if path.exists() else []
            return [json.loads(x) for x in lines] if len(lines) >= 5 else None

        sent = {run_id: {d["sink"]: d for d in _wait_for(lambda r=run_id: recorded(r))}
                for run_id in (failed_id, ok_id)}
        _wait_for(lambda: len(mails) >= 2)
    finally:
        smtp.stop()
        http.shutdown()

    for run_id, event in ((failed_id, "failed"), (ok_id, "succeeded")):
        d = sent[run_id]
        assert all(x["event"] == event for x in d.values())
        assert d["webhook secret:team/hook"]["ok"] and d["ntfy " + base]["ok"] and d["command"]["ok"]
        assert d[f"email me@example.org via 127.0.0.1:{smtp.port}"]["ok"]
        down = d[f"webhook http://127.0.0.1:{refusing}"]
        assert not down["ok"] and down["attempts"] == 3 and "cannot reach it" in down["error"]
    listing = {r["run_id"]: r for r in json.loads(cli(home, "runs", "--json").stdout)}
    assert listing[ok_id]["state"] == "succeeded"  # the refused sink changed nothing
    ok_run = listing[ok_id]  # CPU-hours: 1 node x 1 process x its wall time
    assert ok_run["usage"]["hours"] == pytest.approx((ok_run["ended_at"] - ok_run["started_at"]) / 3600)

    hooks = {json.loads(body)["fsdp_tui"]["run_id"]: json.loads(body)["fsdp_tui"]
             for path, _, body in http.got if path == f"/hook/{TOKEN}"}
    assert set(hooks) == {failed_id, ok_id}
    triage = hooks[failed_id]["triage"]
    assert triage["node_rank"] == 0 and triage["signature"] == "python_error" and triage["line_no"]
    assert "ValueError: bad batch" in triage["excerpt"] and hooks[failed_id]["open"] == f"fsdp-tui show {failed_id}"
    assert hooks[ok_id]["event"] == "succeeded"
    assert hooks[ok_id]["usage"]["kind"] == "cpu" and hooks[ok_id]["usage"]["hours"] > 0
    assert hooks[ok_id]["checkpoint"]["step"] == 2 and hooks[ok_id]["checkpoint"]["name"] == "step-00000002"
    assert hooks[failed_id]["checkpoint"] is None
    ntfy = {headers["Title"]: body.decode() for path, headers, body in http.got if path == "/my-topic"}
    assert any("FAILED" in t for t in ntfy) and any("succeeded" in t for t in ntfy)
    assert any("root cause: node 0" in b for b in ntfy.values())
    assert {m["Subject"] for m in mails} == {h["title"] for h in hooks.values()}
    from_command = [json.loads(p.read_text()) for p in out_dir.glob("*.json")]
    assert sorted(s["event"] for s in from_command) == ["failed", "succeeded"]

    shown = cli(home, "show", failed_id)
    assert f"webhook http://127.0.0.1:{refusing}: FAILED after 3 tries" in shown.stdout, shown.stdout
    recorded = json.loads((home / "runs" / ok_id / "safe-step.json").read_text())
    assert recorded["step"] == 2 and not (home / "runs" / failed_id / "safe-step.json").exists()
    shown_ok = cli(home, "show", ok_id).stdout  # from the owner's record: no node is asked
    assert "  safe      step 2 (step-00000002, written " in shown_ok and "CPU-hours" in shown_ok, shown_ok
    leaks = [p for p in home.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert leaks == [] and TOKEN not in out.stdout + out.stderr + out2.stdout + shown.stdout
