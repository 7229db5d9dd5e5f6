"""The SSH config policies, purely: tokens, the agent's special values, precedence between the workload's
``ssh:`` and the config, known-hosts names (``HostKeyAlias``, ports), asyncssh's options from one resolution,
and asyncssh's refusals as one line. The real sshds are in test_ssh_config_conformance.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.backends.ssh.config import ResolvedHost, SshConfigError, Tokens, agent_socket
from launcher.backends.ssh.connect import CIPHERS, connect_options, effective_timeouts, parse_jump
from launcher.backends.ssh.fallback import _one_line, _refuse_unexpanded_exec
from launcher.workload.machines import Ssh


def _host(**changes) -> ResolvedHost:
    base = dict(name="t", hostname="10.0.0.5", port=22, user="root")
    return ResolvedHost(**{**base, **changes})


@pytest.mark.parametrize("text, expected", [
    ("~/.ssh/id_%r@%n", "{home}/.ssh/id_bob@t"),
    ("%d/keys/%h_%p", "{home}/keys/10.0.0.5_2222"),
    ("%%h", "%h"),
    ("${FSDP_TEST_VAR}/x", "val/x"),
    ("/abs/%k", "/abs/bee"),
    ("~user/x", "~user/x"),  # another user's ~ is not ours to expand
])
def test_tokens_expand_as_openssh_with_home_from_the_environment(text, expected, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FSDP_TEST_VAR", "val")
    tokens = Tokens("t", "10.0.0.5", 2222, "bob", "bee")
    assert tokens.expand(text) == expected.format(home=tmp_path)


@pytest.mark.parametrize("value, env, expected", [
    ("SSH_AUTH_SOCK", {"SSH_AUTH_SOCK": "/run/agent"}, "/run/agent"),
    ("SSH_AUTH_SOCK", {}, None),
    ("none", {"SSH_AUTH_SOCK": "/run/agent"}, None),
    (None, {"SSH_AUTH_SOCK": "/run/agent"}, "/run/agent"),
    ("$MY_AGENT", {"MY_AGENT": "/tmp/a"}, "/tmp/a"),
    ("~/.ssh/agent.sock", {}, "{home}/.ssh/agent.sock"),
])
def test_identity_agent_values(value, env, expected, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("SSH_AUTH_SOCK", "MY_AGENT"):
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    got = agent_socket(value, Tokens("t", "h", 22, "root"))
    assert got == (expected.format(home=tmp_path) if expected else None)


@pytest.mark.parametrize("workload, config, expected", [
    ({}, {}, (10.0, 5.0, 3)),  # neither: the workload's defaults
    ({}, {"connect_timeout_s": 7.0, "server_alive_interval_s": 30.0, "server_alive_count_max": 4}, (7.0, 30.0, 4)),
    ({"connect_timeout_s": 3.0}, {"connect_timeout_s": 7.0}, (3.0, 5.0, 3)),  # set in the workload: it wins
    ({"keepalive_interval_s": 2.0}, {"server_alive_interval_s": 30.0, "server_alive_count_max": 4}, (10.0, 2.0, 4)),
    ({"keepalive_count_max": 9}, {"server_alive_interval_s": 30.0, "server_alive_count_max": 4}, (10.0, 30.0, 9)),
    ({"keepalive_interval_s": 5.0}, {"server_alive_interval_s": 30.0}, (10.0, 5.0, 3)),  # set to the default: still set
])
def test_the_workload_wins_only_where_it_sets_a_value(workload, config, expected):
    assert effective_timeouts(_host(**config), Ssh(**workload)) == expected


@pytest.mark.parametrize("changes, key_name", [
    ({}, "10.0.0.5"),
    ({"port": 2222}, "[10.0.0.5]:2222"),
    ({"port": 2222, "host_key_alias": "bee"}, "bee"),  # OpenSSH files an alias without its port
])
def test_known_hosts_name(changes, key_name):
    assert _host(**changes).key_name == key_name


def test_a_port_entry_never_stands_in_for_another_port_and_the_alias_is_looked_up(tmp_path):
    """asyncssh's own lookup falls back to the port-less entry; OpenSSH does not (another sshd on that
    machine would pass for this one)."""
    from launcher.backends.ssh.hostkeys import trusted

    keys = {}
    for name in ("plain", "alias"):
        import asyncssh

        keys[name] = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().strip()
    known = tmp_path / "known_hosts"
    known.write_text(f"10.0.0.5 {keys['plain']}\nbee {keys['alias']}\n")
    ssh = Ssh(known_hosts=str(known))
    assert len(trusted(_host(), ssh)[0]) == 1
    assert trusted(_host(port=2222), ssh)[0] == []
    found = trusted(_host(port=2222, host_key_alias="bee"), ssh)[0]
    assert [k.export_public_key("openssh").decode().strip() for k in found] == [keys["alias"]]


def test_options_come_from_the_resolution_alone(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("x")
    (tmp_path / "id_ed25519.pub").write_text("x")
    resolved = _host(port=2222, user="bob", identity_files=(str(key),), identities_only=True,
                     identity_agent="/run/agent", proxy_command="nc 10.0.0.5 2222", host_key_alias="bee")
    options = connect_options(resolved, Ssh(known_hosts=str(tmp_path / "none")))
    assert options["config"] == [] and options["port"] == 2222 and options["username"] == "bob"
    assert options["client_keys"] == [str(key)] and options["ignore_encrypted"] is True
    assert options["agent_identities"] == [str(key) + ".pub"] and options["agent_path"] == "/run/agent"
    assert options["proxy_command"] == "nc 10.0.0.5 2222"
    assert options["encryption_algs"] == ",".join(CIPHERS)
    jumped = connect_options(resolved.__class__(**{**resolved.__dict__, "proxy_jump": "a"}), Ssh())
    assert "proxy_command" not in jumped


@pytest.mark.parametrize("ciphers, expected", [
    (("aes256-ctr", "no-such-cipher"), "aes256-ctr"),  # what asyncssh lacks is left out
    (("+aes128-cbc",), "+aes128-cbc"),  # asyncssh applies +/-/^ to its own defaults
])
def test_the_configs_algorithms_win(ciphers, expected):
    assert connect_options(_host(ciphers=ciphers), Ssh())["encryption_algs"] == expected


def test_algorithms_asyncssh_lacks_entirely_are_a_one_line_refusal():
    with pytest.raises(SshConfigError, match="none of the config's Ciphers"):
        connect_options(_host(ciphers=("no-such-cipher",)), Ssh())


@pytest.mark.parametrize("spec, expected", [
    ("bastion", ("bastion", None, None)),
    ("alice@bastion:2022", ("bastion", "alice", 2022)),
    ("ssh://alice@bastion:2022", ("bastion", "alice", 2022)),
])
def test_jump_hops(spec, expected):
    hop = parse_jump(spec)
    assert (hop.hostname, hop.user, hop.port) == expected


@pytest.mark.parametrize("message, words", [
    ("/h/.ssh/config line 3: Invalid Port integer value: ssh", ["/h/.ssh/config line 3:", "write the number"]),
    ("/h/.ssh/config line 7: No closing quotation", ["line 7:", "comment onto a line of its own"]),
    ("/h/.ssh/config line 4: Extra data at end: # x", ["line 4:", "comment onto a line of its own"]),
    ("/h/.ssh/config line 5: Invalid match condition  a", ["line 5:", "put the command in a script"]),
    ("/h/.ssh/config line 2: Unknown thing", ["line 2:", "remove or reword"]),
])
def test_asyncssh_refusals_are_one_line_naming_file_line_and_fix(message, words):
    line = _one_line(message)
    assert "\n" not in line and "openssh-client" in line and all(w in line for w in words)


def test_match_exec_with_a_token_is_refused_by_the_fallback_even_in_an_include(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    ssh_dir = tmp_path / ".ssh"
    (ssh_dir / "conf.d").mkdir(parents=True)
    config = ssh_dir / "config"
    config.write_text('Match exec "true"\n  Port 2\nInclude conf.d/*.conf\n')
    _refuse_unexpanded_exec(config)
    (ssh_dir / "conf.d" / "x.conf").write_text('Host a\n  User b\nMatch host *.corp !exec "nc -z %h %p"\n')
    with pytest.raises(SshConfigError, match=r"x\.conf line 3: Match exec with a % token"):
        _refuse_unexpanded_exec(config)


def test_ssh_g_errors_are_one_line_naming_the_line(tmp_path, monkeypatch):
    from launcher.backends.ssh.config import resolve, ssh_binary
    from launcher.workload.hosts import parse_host

    if ssh_binary() is None:
        pytest.skip("no ssh client")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host t\n  HostName x\n  NoSuchOption yes\n")
    with pytest.raises(SshConfigError) as err:
        resolve(parse_host("t"), Ssh())
    assert "line 3" in str(err.value) and "\n" not in str(err.value) and "ssh -G t" in str(err.value)
    assert Path(tmp_path / ".ssh" / "config").read_text()  # untouched


def test_a_broken_known_hosts_file_is_one_line_naming_it(tmp_path):
    from launcher.backends.ssh.hostkeys import trusted

    known = tmp_path / "known_hosts"
    known.write_text("@bogus-marker host ssh-ed25519 AAAA\n")
    with pytest.raises(SshConfigError, match=f"{known}: .*fix or remove that entry"):
        trusted(_host(), Ssh(known_hosts=str(known)))


def test_an_edit_to_an_included_file_is_read_at_once(tmp_path, monkeypatch):
    from launcher.backends.ssh.config import resolve, ssh_binary
    from launcher.workload.hosts import parse_host

    if ssh_binary() is None:
        pytest.skip("no ssh client")
    monkeypatch.setenv("HOME", str(tmp_path))
    included = tmp_path / ".ssh" / "conf.d" / "t.conf"
    included.parent.mkdir(parents=True)
    (tmp_path / ".ssh" / "config").write_text(f"Include {included.parent}/*.conf\n")
    included.write_text("Host t\n  Port 2201\n")
    assert resolve(parse_host("t"), Ssh()).port == 2201
    included.write_text("Host t\n  Port 22022\n")  # another size too: a coarse clock may give the same mtime
    assert resolve(parse_host("t"), Ssh()).port == 22022


@pytest.mark.parametrize("workload, config, status, words", [
    ({}, {}, "ok", ["root@10.0.0.5:22 (read by ssh -G)", "no jump host", "the same as ssh -G"]),
    ({"user": "alice"}, {"user": "alice"}, "warning", ["user alice (the workload's ssh.user) where ssh -G t says root"]),
    ({"proxy_jump": "bastion"}, {"proxy_jump": "bastion"}, "warning", ["jump: bastion", "the workload's ssh.proxy_jump"]),
    ({}, {"strict_host_key_checking": "no"}, "warning", ["StrictHostKeyChecking no is ignored on purpose"]),
    ({}, {"source": "asyncssh"}, "warning", ["install openssh-client"]),
    ({}, {"missing_identity_files": ("/h/.ssh/id_rsa",), "server_alive_interval_s": 30.0, "server_alive_count_max": 2},
     "ok", ["skipped (missing): /h/.ssh/id_rsa", "keepalive 30s x2"]),
])
def test_the_doctors_ssh_row_flags_what_differs_from_ssh(workload, config, status, words, monkeypatch):
    from types import SimpleNamespace

    from launcher.backends.ssh import report
    from launcher.workload.hosts import parse_host

    def fake_resolve(host, ssh, hop=False):
        # ssh -G with the workload's -l/-J gives `config`; the bare name gives the plain answer
        return _host(**config) if ssh.user or ssh.proxy_jump or not workload else _host()

    monkeypatch.setattr(report, "resolve", fake_resolve)
    host = parse_host("t")
    plan = SimpleNamespace(workload=SimpleNamespace(ssh=Ssh(**workload)))
    check = report.ssh_config_check(plan, host, "t")
    assert check.status == status and all(w in check.detail for w in words), check.detail


def test_a_saved_plan_read_back_keeps_unset_what_the_workload_left_unset():
    again = Ssh.model_validate(Ssh(keepalive_count_max=4, user="bob").model_dump(mode="json"))
    assert {"keepalive_count_max", "user"} <= again.model_fields_set
    assert not {"keepalive_interval_s", "connect_timeout_s"} & again.model_fields_set
    assert again.keepalive_interval_s == 5.0
    assert effective_timeouts(_host(server_alive_interval_s=30.0, server_alive_count_max=2), again) == (10.0, 30.0, 4)


async def test_every_jump_hop_gets_the_targets_keepalives_and_known_hosts(monkeypatch, tmp_path):
    """``ProxyJump a,bob@b:2022``: a with its own config (its ProxyCommand), b through a with its config's
    own jump ignored (as ``ssh -J``), the target through b; every hop with the workload's keepalive and
    known_hosts file; the hops closed with the target."""
    import asyncio

    import asyncssh

    from launcher.backends.ssh import connect as c
    from launcher.workload.hosts import parse_host

    resolutions = {"t": _host(hostname="10.0.0.9", proxy_jump="a,bob@b:2022"),
                   "a": _host(name="a", hostname="10.0.0.1", proxy_command="nc 10.0.0.1 22"),
                   "b": _host(name="b", hostname="10.0.0.2", port=2022, user="bob", proxy_jump="elsewhere")}
    monkeypatch.setattr(c, "resolve", lambda host, ssh, hop=False: resolutions[host.hostname])
    known = tmp_path / "known_hosts"
    known.write_text("".join(f"{name} {asyncssh.generate_private_key('ssh-ed25519').export_public_key().decode()}"
                             for name in ("10.0.0.1", "[10.0.0.2]:2022", "10.0.0.9")))

    class Conn:
        def __init__(self, host: str) -> None:
            self.host, self.closed = host, asyncio.Event()

        def close(self) -> None:
            self.closed.set()

        async def wait_closed(self) -> None:
            await self.closed.wait()

    calls, opened = [], []

    async def fake_connect(host, tunnel=(), **options):
        calls.append((host, tunnel.host if tunnel else None, options))
        opened.append(Conn(host))
        return opened[-1]

    monkeypatch.setattr(asyncssh, "connect", fake_connect)
    conn = await c.connect(parse_host("t"), Ssh(keepalive_interval_s=7, known_hosts=str(known)))
    assert [(host, via) for host, via, _ in calls] == [("10.0.0.1", None), ("10.0.0.2", "10.0.0.1"),
                                                       ("10.0.0.9", "10.0.0.2")]
    assert all(o["keepalive_interval"] == 7 and len(o["known_hosts"][0]) == 1 for _, _, o in calls)
    assert calls[0][2]["proxy_command"] == "nc 10.0.0.1 22" and "proxy_command" not in calls[1][2]
    assert calls[1][2]["username"] == "bob" and calls[1][2]["port"] == 2022
    conn.close()
    await asyncio.wait_for(asyncio.gather(*(o.closed.wait() for o in opened)), 5)
