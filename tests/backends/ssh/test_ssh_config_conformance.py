"""ssh_config as OpenSSH reads it: a table of real-world configs, each beside what ``ssh`` does with it, run
against real namespace sshds (tests/support/sshd.py ``start_world``, built once for the module). For each
config, fsdp-tui's connect function and OpenSSH's ``ssh`` (the same config, keys and known_hosts) run
``id -un; echo $SSH_CONNECTION`` where they land: the same user, sshd address and port, or both refuse
(fsdp-tui with one line, no traceback). Then the same table with no ``ssh`` on PATH (asyncssh's parser),
except the configs it cannot read, each with the message the user gets."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[3]


def ok(user: str, server: str, port: int, client: str | None = None) -> tuple:
    """``ssh`` connects: to ``server``:``port`` as ``user`` (coming from ``client``, for a jump's last hop)."""
    return ("ok", user, server, port, client)


def refused(*reasons: str) -> tuple:
    """``ssh`` refuses; fsdp-tui too, with a line containing each of ``reasons``."""
    return ("refused", *reasons)


A_T = "Host t\n  HostName {A}\n"
AGENT = {"SSH_AUTH_SOCK": "{agent}"}
BASH_RELAY = "bash -c 'exec 3<>/dev/tcp/%h/%p; cat <&3 & exec cat >&3'"

# (id, ~/.ssh/config, target, what ssh does, extras: files / copies / env / the workload's ssh section)
CASES: list[tuple[str, str, str, tuple, dict]] = [
    ("host_star_first", "Host *\n  Port 2222\n" + A_T + "  Port 22\n", "t", ok("root", "{A}", 2222), {}),
    ("host_star_last", A_T + "  Port 2222\nHost *\n  Port 22\n  User root\n", "t", ok("root", "{A}", 2222), {}),
    ("wildcard", "Host t?\n  HostName {B}\n", "tx", ok("root", "{B}", 22), {}),
    ("negation", "Host t* !tb\n  HostName {A}\nHost tb\n  HostName {B}\n", "tb", ok("root", "{B}", 22), {}),
    ("several_names_any_case", "Host x t y\n  HOSTNAME {B}\n  pOrT 2222\n  userknownhostsfile ~/.ssh/kh_extra\n",
     "t", ok("root", "{B}", 2222), {}),
    ("equals_syntax", "Host=t\n  HostName={A}\n  Port = 2222\n", "t", ok("root", "{A}", 2222), {}),
    ("include_relative", "Include conf.d/*.conf\n", "t", ok("root", "{B}", 2222),
     {"files": {".ssh/conf.d/t.conf": "Host t\n  HostName {B}\n  Port 2222\n  UserKnownHostsFile ~/.ssh/kh_extra\n"}}),
    ("match_host", A_T + "Match host {A}\n  Port 2222\n", "t", ok("root", "{A}", 2222), {}),
    ("match_originalhost", "Match originalhost t\n  HostName {B}\n", "t", ok("root", "{B}", 22), {}),
    ("match_user", A_T + "  User alice\n  IdentityFile ~/.ssh/alicekey\nMatch user alice\n  Port 2222\n", "t",
     ok("alice", "{A}", 2222), {}),
    ("match_exec_true", 'Match exec "true"\n  HostName {B}\n', "t", ok("root", "{B}", 22), {}),
    ("match_exec_false", A_T + 'Match exec "false"\n  Port 2222\n', "t", ok("root", "{A}", 22), {}),
    ("match_final", A_T + "Match final host {A}\n  Port 2222\n", "t", ok("root", "{A}", 2222), {}),
    ("tokens", A_T + "  IdentityFile %d/.ssh/keys/%r@%n\n  UserKnownHostsFile ~/.ssh/kh_%h\n", "t",
     ok("root", "{A}", 22), {"copies": {".ssh/keys/root@t": ".ssh/id_ed25519"},
                             "files": {".ssh/kh_{A}": "{known_a22}\n"}}),
    ("proxyjump_one_hop", "Host a\n  HostName {A}\nHost inner\n  HostName 127.0.0.1\n  Port 2022\n  ProxyJump a\n",
     "inner", ok("root", "127.0.0.1", 2022), {}),
    ("proxyjump_two_hops", "Host a\n  HostName {A}\nHost t\n  HostName {B}\n  ProxyJump a,root@127.0.0.1:2022\n",
     "t", ok("root", "{B}", 22, client="{A}"), {}),
    ("proxyjump_user_host_port", "Host inner\n  HostName 127.0.0.1\n  Port 2022\n  ProxyJump root@{A}:2222\n",
     "inner", ok("root", "127.0.0.1", 2022), {}),
    ("proxycommand", A_T + f"  Port 2222\n  ProxyCommand {BASH_RELAY}\n", "t", ok("root", "{A}", 2222), {}),
    ("agent", A_T + "  User alice\n  IdentityFile ~/.ssh/id_ed25519\n", "t", ok("alice", "{A}", 22), {"env": AGENT}),
    ("identities_only_keeps_agent_keys_out", A_T + "  User alice\n  IdentityFile ~/.ssh/id_ed25519\n"
     "  IdentitiesOnly yes\n", "t", refused("permission denied"), {"env": AGENT}),
    ("identity_agent_path", A_T + "  User alice\n  IdentityAgent ~/.ssh/agent.sock\n", "t", ok("alice", "{A}", 22), {}),
    ("certificate", "Host t\n  HostName {B}\n  Port 2200\n  IdentityFile ~/.ssh/certkey\n"
     "  CertificateFile ~/.ssh/certkey-cert.pub\n", "t", ok("root", "{B}", 2200), {}),
    ("algorithm_lists", A_T + "  Ciphers +aes128-cbc\n  KexAlgorithms ^curve25519-sha256\n"
     "  MACs hmac-sha2-256-etm@openssh.com,hmac-sha2-512\n", "t", ok("root", "{A}", 22), {}),
    ("control_master_ignored", A_T + "  ControlMaster auto\n  ControlPath ~/.ssh/cm-%C\n  ControlPersist no\n", "t",
     ok("root", "{A}", 22), {}),
    # What stopped or misrouted fsdp-tui before OpenSSH read the config for it:
    ("trailing_comment", "Host *\n  ServerAliveInterval 30 # keepalive\n" + A_T, "t", ok("root", "{A}", 22), {}),
    ("apostrophe_in_comment", "Host other\n  User bob # bob's\n" + A_T, "t", ok("root", "{A}", 22), {}),
    ("match_exec_with_equals", A_T + 'Match exec "test {A} = {A}"\n  Port 2222\n', "t", ok("root", "{A}", 2222), {}),
    ("port_service_name", A_T + "  Port ssh\n", "t", ok("root", "{A}", 22), {}),
    ("match_exec_with_token", A_T + 'Match exec "echo %n | grep -qx t"\n  Port 2222\n', "t",
     ok("root", "{A}", 2222), {}),
    ("missing_identity_file", A_T + "  IdentityFile ~/.ssh/id_missing\n  IdentityFile ~/.ssh/id_ed25519\n", "t",
     ok("root", "{A}", 22), {}),
    ("identity_agent_ssh_auth_sock", A_T + "  User alice\n  IdentityAgent SSH_AUTH_SOCK\n", "t",
     ok("alice", "{A}", 22), {"env": AGENT}),
    ("user_known_hosts_file", "Host t\n  HostName {B}\n  Port 2222\n  UserKnownHostsFile ~/.ssh/kh_extra\n", "t",
     ok("root", "{B}", 2222), {}),
    ("global_known_hosts_file", "Host t\n  HostName {B}\n  Port 2222\n  GlobalKnownHostsFile ~/.ssh/kh_extra\n", "t",
     ok("root", "{B}", 2222), {}),
    ("host_key_alias", "Host t\n  HostName {B}\n  Port 2222\n  HostKeyAlias bee\n", "t", ok("root", "{B}", 2222), {}),
    ("host_key_alias_changed", A_T + "  HostKeyAlias bee\n", "t", refused("HOST KEY CHANGED"), {}),
    ("match_user_from_the_workload", A_T + "  IdentityFile ~/.ssh/alicekey\nMatch user alice\n  Port 2222\n", "t",
     ok("alice", "{A}", 2222), {"ssh": {"user": "alice"}}),
    ("workload_port_wins", A_T + "  Port 22\n", "t", ok("root", "{A}", 2222), {"ssh": {"port": 2222}}),
    ("workload_jump", "Host a\n  HostName {A}\nHost inner\n  HostName 127.0.0.1\n  Port 2022\n", "inner",
     ok("root", "127.0.0.1", 2022), {"ssh": {"proxy_jump": "a"}}),
    ("trust_writes_the_first_user_file_under_the_alias", "Host t\n  HostName {B}\n  Port 2222\n  HostKeyAlias newbee\n"
     "  UserKnownHostsFile ~/.ssh/kh_scratch ~/.ssh/known_hosts\n", "t", ok("root", "{B}", 2222), {"action": "trust", "alone": True}),
    # Refusals, each with its one line:
    ("unknown_host_key", "Host t\n  HostName {B}\n  Port 2222\n", "t", refused("unknown host key"), {}),
    ("unknown_key_on_a_jump_hop", "Host inner\n  HostName 127.0.0.1\n  Port 2022\n  ProxyJump root@{B}:2222\n",
     "inner", refused("unknown host key SHA256:", "fsdp-tui trust root@{B}:2222"), {}),
    ("unknown_user", A_T + "  User ghost\n", "t", refused("permission denied"), {}),
    ("nothing_listening", A_T + "  Port 2999\n", "t", refused("cannot connect"), {}),
]

OURS_DIFFER = {
    "strict_host_key_checking_no": ("Host t\n  HostName {B}\n  Port 2222\n  StrictHostKeyChecking no\n"
                                    "  UserKnownHostsFile ~/.ssh/kh_scratch\n", "t", ok("root", "{B}", 2222),
                                    refused("unknown host key")),
}
"""Where fsdp-tui refuses on purpose what ``ssh`` does: host keys are always verified."""

WITHOUT_SSH = {
    "trailing_comment": "line 2: Extra data at end: # keepalive: move the comment onto a line of its own",
    "apostrophe_in_comment": "line 2: No closing quotation: move the comment",
    "match_exec_with_equals": "line 3: Invalid match condition",
    "port_service_name": "line 3: Invalid Port integer value: ssh",
    "match_exec_with_token": "line 3: Match exec with a % token",
}
"""Configs asyncssh's parser cannot read as ``ssh`` does (no ``ssh`` installed): the start of the one line
the user gets after the file name; every one ends saying that installing openssh-client fixes it."""


def _fill(value, names: dict[str, str]):
    if isinstance(value, str):
        for k, v in names.items():
            value = value.replace("{" + k + "}", v)
        return value
    if isinstance(value, dict):
        return {_fill(k, names): _fill(v, names) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_fill(v, names) for v in value)
    return value


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from tests.support.sshd import start_world

    if subprocess.run(["which", "ssh"], capture_output=True).returncode != 0:
        pytest.skip("OpenSSH's client (the reference) is not installed")
    try:
        built = start_world(tmp_path_factory.mktemp("sshworld"))
    except RuntimeError as err:
        pytest.skip(str(err))
    yield built
    built.stop()


def _run_table(world, cases: list[dict], *, reference: bool, path: str | None = None) -> dict:
    """The runner in a mount namespace of its own where the client home is the passwd home, as a user's is."""
    home = pwd.getpwuid(os.getuid()).pw_dir
    env = {**os.environ, "HOME": home, "PATH": path or os.environ["PATH"]}
    env.pop("SSH_AUTH_SOCK", None)
    real = world.client.parent / "real-home"
    real.mkdir(exist_ok=True)
    # The client home over the passwd home, with every other entry of the real one (the Python that runs
    # the runner may live there) bound back in: ~/.ssh alone is the client's. Nothing leaves this namespace.
    script = f"""set -e
mount --bind "{home}" "{real}"
mount --bind "{world.client}" "{home}"
for e in "{real}"/* "{real}"/.[!.]* "{real}"/..?*; do
  [ -e "$e" ] || continue
  n=$(basename "$e"); [ "$n" = .ssh ] && continue
  if [ -d "$e" ]; then mkdir -p "{home}/$n"; else touch "{home}/$n"; fi
  mount --bind "$e" "{home}/$n"
done
exec "{sys.executable}" -m tests.support.ssh_table_runner"""
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], cwd=ROOT, env=env,
                          input=json.dumps({"cases": cases, "files": world.files, "reference": reference}),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _names(world) -> dict[str, str]:
    return {"A": world.a, "B": world.b, "known_a22": world.known["a22"]}


def _request(world, table) -> list[dict]:
    return [{"id": cid, "config": config, "target": target, **extra} for cid, config, target, _, extra in
            _fill(table, _names(world))]


def _landed(result: dict) -> tuple:
    out = result.get("out", [])
    return (out[0], out[3], int(out[4]), out[1]) if len(out) == 5 else ("?", out)


def _judge(case_id: str, expected: tuple, result: dict) -> str | None:
    """Why ``result`` is not ``expected`` (None when it is)."""
    if "traceback" in result:
        return f"{case_id}: traceback: {result['traceback'][-800:]}"
    if expected[0] == "ok":
        if not result["ok"]:
            return f"{case_id}: refused: {result.get('message')}"
        user, server, port, client = _landed(result)
        want = expected[1:4] if expected[4] is None else (*expected[1:4], expected[4])
        got = (user, server, port) if expected[4] is None else (user, server, port, client)
        return None if got == tuple(want) else f"{case_id}: reached {got}, expected {want}"
    if result["ok"]:
        return f"{case_id}: connected ({_landed(result)}) where a refusal was expected"
    message = result.get("message", "")
    if any(r.lower() not in message.lower() for r in expected[1:]) or "\n" in message or "Traceback" in message:
        return f"{case_id}: refused with {message!r}, expected one line with {expected[1:]!r}"
    return None


def test_every_config_reaches_what_ssh_reaches_and_refusals_are_one_line(world):
    assert len(CASES) + len(OURS_DIFFER) >= 31
    differ = [(cid, config, target, ours, {"alone": True}) for cid, (config, target, _, ours) in OURS_DIFFER.items()]
    table = CASES + differ
    results = _run_table(world, _request(world, table), reference=True)
    expected_ssh = {cid: exp for cid, _, _, exp, _ in CASES} | {cid: v[2] for cid, v in OURS_DIFFER.items()}
    problems = []
    for cid, _, _, expected, _ in _fill(table, _names(world)):
        reference = _judge(cid, _fill(expected_ssh[cid], _names(world)), results[cid]["ssh"])
        if reference and expected_ssh[cid][0] == "ok":
            problems.append(f"the table is wrong about ssh: {reference}")
        elif not reference and expected_ssh[cid][0] == "refused" and results[cid]["ssh"]["ok"]:
            problems.append(f"the table is wrong about ssh: {cid} connected")
        problem = _judge(cid, expected, results[cid]["ours"])
        if problem:
            problems.append(problem)
    written = results["trust_writes_the_first_user_file_under_the_alias"]["ours"]["kh_scratch"]
    if not written.startswith("newbee ssh-ed25519 "):
        problems.append(f"trust wrote {written!r} to the first UserKnownHostsFile")
    assert not problems, "\n".join(problems)


def test_without_ssh_on_path_asyncssh_reads_the_same_table_except_the_listed(world, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for entry in Path(folder).iterdir() if Path(folder).is_dir() else ():
            if entry.name != "ssh" and not (bin_dir / entry.name).exists():
                (bin_dir / entry.name).symlink_to(entry)
    results = _run_table(world, _request(world, CASES), reference=False, path=str(bin_dir))
    problems = []
    for cid, _, _, expected, _ in _fill(CASES, _names(world)):
        result = results[cid]["ours"]
        if cid in WITHOUT_SSH:
            message = result.get("message", "")
            if result["ok"] or WITHOUT_SSH[cid] not in message or "openssh-client" not in message or "\n" in message:
                problems.append(f"{cid}: expected the one-line refusal {WITHOUT_SSH[cid]!r}, got {result}")
            continue
        problem = _judge(cid, expected, result)
        if problem:
            problems.append(problem)
    assert not problems, "\n".join(problems)
