"""The INI configuration file: init writes it, config check prints it, serve reads it,
flags override it, and a bad one is one line naming file, line and key (exit 2)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from worker_count import one_process

from router.client import open_client
from router.server.cli.main import build_parser, main
from router.server.cli.settings import config_from_args
from router.server.settings.config_file import (
    CONFIG_FILE_NAME,
    DEFAULTS,
    INFORMATION_KEYS,
    KEYS,
    parse_config_text,
    template,
)

SMP_ROUTER = Path(sys.executable).with_name("smp-router")
ADDRESS = re.compile(r"listening at (smp://\S+@(\S+):(\d+))")

# A valid value, other than the default, for every key (section, name) -> (text, setting).
NON_DEFAULT = {
    ("STORE_LOG", "store"): ("journal", "journal"),
    ("STORE_LOG", "data_dir"): ("/srv/smp", Path("/srv/smp")),
    ("STORE_LOG", "fsync"): ("always", "always"),
    ("STORE_LOG", "skip_corrupt"): ("on", True),
    ("STORE_LOG", "queue_cache"): ("5000", 5000),
    ("STORE_LOG", "quota"): ("7", 7),
    ("STORE_LOG", "expire_messages_days"): ("2", 2 * 86400.0),
    ("STORE_LOG", "expire_interval"): ("60", 60.0),
    ("STORE_LOG", "expire_on_send"): ("yes", True),
    ("STORE_LOG", "log_stats"): ("off", False),
    ("STORE_LOG", "stats_log"): ("/srv/stats.csv", Path("/srv/stats.csv")),
    ("STORE_LOG", "stats_interval"): ("600", 600),
    ("STORE_LOG", "after_failed_save"): ("on", True),
    ("STORE_LOG", "store_queues"): ("database", "postgres"),
    ("STORE_LOG", "store_messages"): ("database", "postgres"),
    ("STORE_LOG", "db_connection"): ("postgresql://smp:pw@db.example/smp",
                                     "postgresql://smp:pw@db.example/smp"),
    ("STORE_LOG", "db_schema"): ("relay_one", "relay_one"),
    ("STORE_LOG", "db_pool_size"): ("4", 4),
    ("STORE_LOG", "db_deleted_ttl"): ("2", 2 * 86400.0),
    ("STORE_LOG", "db_store_log"): ("off", False),
    ("AUTH", "new_queues"): ("off", False),
    ("AUTH", "create_password"): ("s3cret#1", "s3cret#1"),
    ("AUTH", "control_port_admin_password"): ("adm", "adm"),
    ("AUTH", "control_port_user_password"): ("usr", "usr"),
    ("TRANSPORT", "host"): ("0.0.0.0", "0.0.0.0"),
    ("TRANSPORT", "port"): ("5223", 5223),
    ("TRANSPORT", "public_host"): ("smp.example.org", "smp.example.org"),
    ("TRANSPORT", "delivery"): ("per-queue-task", "per-queue-task"),
    ("TRANSPORT", "send_queue_size"): ("8", 8),
    ("TRANSPORT", "stalled_writer_timeout"): ("5", 5.0),
    ("TRANSPORT", "end_batch_interval"): ("0.5", 0.5),
    ("TRANSPORT", "handshake_timeout"): ("9", 9.0),
    ("TRANSPORT", "control_port"): ("5225", 5225),
    ("TRANSPORT", "metrics_port"): ("9100", 9100),
    ("TRANSPORT", "metrics_host"): ("::1", "::1"),
    ("TRANSPORT", "tls_cert"): ("/etc/smp/cert.pem", Path("/etc/smp/cert.pem")),
    ("TRANSPORT", "tls_key"): ("/etc/smp/key.pem", Path("/etc/smp/key.pem")),
    ("TRANSPORT", "drain_period"): ("90", 90.0),
    ("TRANSPORT", "workers"): ("4", 4),
    ("TRANSPORT", "upgrade_timeout"): ("3", 3.0),
    ("TRANSPORT", "max_pending"): ("11", 11),
    ("TRANSPORT", "max_pending_per_address"): ("12", 12),
    ("TRANSPORT", "max_connections"): ("13", 13),
    ("TRANSPORT", "max_connections_per_address"): ("18", 18),
    ("TRANSPORT", "max_message_frames"): ("14", 14),
    ("TRANSPORT", "message_timeout"): ("15", 15.0),
    ("TRANSPORT", "keepalive_interval"): ("16", 16.0),
    ("TRANSPORT", "keepalive_timeout"): ("17", 17.0),
    ("LIMITS", "new_queues_per_second"): ("off", None),
    ("LIMITS", "new_queues_burst"): ("5", 5),
    ("LIMITS", "new_queues_per_second_per_address"): ("2.5", 2.5),
    ("LIMITS", "new_queues_burst_per_address"): ("6", 6),
    ("LIMITS", "new_queues_per_second_total"): ("off", None),
    ("LIMITS", "new_queues_burst_total"): ("7", 7),
    ("LIMITS", "control_login_delay"): ("0.25", 0.25),
    ("LIMITS", "control_lockout_after"): ("3", 3),
    ("LIMITS", "control_max_sessions"): ("4", 4),
    ("LIMITS", "metrics_max_connections"): ("5", 5),
    ("LIMITS", "memory_store_max_bytes"): ("512M", 512 << 20),
    ("PROXY", "enable"): ("off", False),
    ("PROXY", "password"): ("relay#pass", "relay#pass"),
    ("PROXY", "max_connections"): ("21", 21),
    ("PROXY", "connect_timeout"): ("2.5", 2.5),
    ("PROXY", "answer_timeout"): ("3.5", 3.5),
    ("PROXY", "idle_timeout"): ("45", 45.0),
    ("PROXY", "error_hold"): ("0", 0.0),
    ("PROXY", "client_concurrency"): ("4", 4),
    ("PROXY", "connects_per_address"): ("3", 3),
    ("PROXY", "max_connections_per_address"): ("7", 7),
    ("PROXY", "allow_destinations"): ("10.0.0.0/8, fd00::/8,192.168.1.7",
                                      ("10.0.0.0/8", "fd00::/8", "192.168.1.7")),
    ("PROXY", "own_server_domains"): ("Example.net, smp.example.org",
                                      ("example.net", "smp.example.org")),
    ("INACTIVE_CLIENTS", "disconnect"): ("on", True),
    ("INACTIVE_CLIENTS", "ttl"): ("60", 60.0),
    ("LOG", "level"): ("debug", "debug"),
    ("LOG", "file"): ("/var/log/smp.log", Path("/var/log/smp.log")),
    **{("INFORMATION", name): (f"the {name}", f"the {name}") for name in INFORMATION_KEYS},
}


def smp_router(*args: str) -> list[str]:
    if SMP_ROUTER.exists():
        return [str(SMP_ROUTER), *one_process(args)]
    return [sys.executable, "-m", "router.server", *one_process(args)]


def test_the_table_of_non_default_values_covers_every_key():
    assert set(NON_DEFAULT) == {(k.section, k.name) for k in KEYS}


@pytest.mark.parametrize("key", KEYS, ids=lambda k: f"{k.section}.{k.name}")
@pytest.mark.parametrize("delimiter", [" = ", ": "])
def test_every_key_sets_its_setting_with_either_delimiter(key, delimiter):
    text, expected = NON_DEFAULT[(key.section, key.name)]
    assert expected != key.default
    settings = parse_config_text(f"[{key.section}]\n{key.name}{delimiter}{text}\n", "f.ini")
    assert settings == {key.setting: expected}


def test_every_key_reaches_the_router_configuration(tmp_path):
    lines = []
    for section in dict.fromkeys(s for s, _ in NON_DEFAULT):
        lines.append(f"[{section}]")
        lines += [f"{name}: {text}" for (s, name), (text, _) in NON_DEFAULT.items()
                  if s == section and name not in ("store", "stats_log", "log_stats",
                                                   "store_queues", "store_messages")]
    path = tmp_path / "all.ini"
    path.write_text("\n".join(lines) + "\n")
    config = config_from_args(build_parser().parse_args(
        ["serve", "--config", str(path), "--store", "memory"]
    ))
    assert (config.host, config.port, config.public_host) == ("0.0.0.0", 5223, "smp.example.org")
    assert config.data_dir == Path("/srv/smp") and config.fsync == "always"
    assert config.store_options == {"skip_corrupt": True, "after_failed_save": True}
    assert (config.quota, config.message_ttl, config.expire_interval) == (7, 172800.0, 60.0)
    assert config.expire_on_send and config.stats_interval == 600
    assert not config.allow_new_queues and config.password == b"s3cret#1"
    assert (config.control_admin_password, config.control_user_password) == ("adm", "usr")
    assert (config.delivery, config.send_queue_size) == ("per-queue-task", 8)
    assert (config.stalled_writer_timeout, config.end_batch_interval) == (5.0, 0.5)
    assert config.handshake_timeout == 9.0
    assert (config.control_port, config.metrics_port, config.metrics_host) == (5225, 9100, "::1")
    assert (config.new_queue_rate, config.new_queue_burst) == (None, 5)
    assert (config.new_queue_address_rate, config.new_queue_address_burst) == (2.5, 6)
    assert (config.new_queue_total_rate, config.new_queue_total_burst) == (None, 7)
    assert (config.control_login_delay, config.control_lockout_after) == (0.25, 3)
    assert (config.control_max_sessions, config.metrics_max_connections) == (4, 5)
    assert config.memory_store_max_bytes == 512 << 20
    assert config.idle_timeout == 60.0
    assert (config.tls_cert, config.tls_key) == (Path("/etc/smp/cert.pem"),
                                                 Path("/etc/smp/key.pem"))
    assert (config.upgrade_timeout, config.max_pending, config.max_pending_per_address,
            config.max_connections, config.max_message_frames, config.message_timeout,
            config.keepalive_interval, config.keepalive_timeout) == (
        3.0, 11, 12, 13, 14, 15.0, 16.0, 17.0)
    assert dict(config.information) == {n: f"the {n}" for n in INFORMATION_KEYS}
    assert not config.allow_proxy and config.proxy_password == b"relay#pass"
    assert (config.proxy_max_connections, config.proxy_connect_timeout,
            config.proxy_answer_timeout, config.proxy_idle_timeout, config.proxy_error_hold,
            config.proxy_client_concurrency) == (21, 2.5, 3.5, 45.0, 0.0, 4)
    assert config.proxy_own_domains == ("example.net", "smp.example.org")
    assert (config.proxy_connects_per_address, config.proxy_max_connections_per_address,
            config.proxy_allow_destinations) == (3, 7, ("10.0.0.0/8", "fd00::/8",
                                                        "192.168.1.7"))


def test_serve_proxies_by_default_and_no_proxy_turns_it_off(tmp_path):
    args = ["serve", "--data-dir", str(tmp_path), "--store", "memory"]
    assert config_from_args(build_parser().parse_args(args)).allow_proxy
    assert not config_from_args(build_parser().parse_args([*args, "--no-proxy"])).allow_proxy
    config = config_from_args(build_parser().parse_args(
        [*args, "--proxy-connect-timeout", "3", "--proxy-max-connections", "2"]))
    assert (config.proxy_connect_timeout, config.proxy_max_connections) == (3.0, 2)
    with pytest.raises(SystemExit):
        build_parser().parse_args([*args, "--proxy-max-connections", "0"])


def test_proxy_destinations_are_refused_by_default_and_an_allow_list_names_networks(
    tmp_path, capsys,
):
    args = ["serve", "--data-dir", str(tmp_path), "--store", "memory"]
    assert config_from_args(build_parser().parse_args(args)).proxy_allow_destinations == ()
    config = config_from_args(build_parser().parse_args(
        [*args, "--proxy-allow-destinations", "127.0.0.0/8, fd00::/8"]))
    assert config.proxy_allow_destinations == ("127.0.0.0/8", "fd00::/8")
    with pytest.raises(SystemExit) as bad:
        build_parser().parse_args([*args, "--proxy-allow-destinations", "10.0.0.0/8,intranet"])
    assert bad.value.code == 2 and "'intranet' is not an IP network" in capsys.readouterr().err


def test_a_flag_overrides_the_file_and_the_file_overrides_the_default(tmp_path):
    path = tmp_path / "r.ini"
    path.write_text("[TRANSPORT]\nport = 6000\nhost = 127.0.0.2\n[STORE_LOG]\nquota: 9\n")
    args = ["serve", "--config", str(path), "--store", "memory"]
    config = config_from_args(build_parser().parse_args([*args, "--port", "7000"]))
    assert (config.port, config.host, config.quota) == (7000, "127.0.0.2", 9)
    assert config.send_queue_size == DEFAULTS["send_queue_size"]
    stats_off = config_from_args(build_parser().parse_args([*args, "--no-stats-log"]))
    assert stats_off.stats_log is None


def test_the_idle_timeout_flag_overrides_the_inactive_clients_section(tmp_path):
    path = tmp_path / "r.ini"
    path.write_text("[INACTIVE_CLIENTS]\ndisconnect = on\nttl = 300\n")
    args = ["serve", "--config", str(path), "--store", "memory"]
    assert config_from_args(build_parser().parse_args(args)).idle_timeout == 300.0
    flagged = build_parser().parse_args([*args, "--idle-timeout", "20"])
    assert config_from_args(flagged).idle_timeout == 20.0
    path.write_text("[INACTIVE_CLIENTS]\ndisconnect = off\nttl = 300\n")
    assert config_from_args(build_parser().parse_args(args)).idle_timeout is None


def test_without_a_file_serve_applies_the_operator_limits_by_default():
    config = config_from_args(build_parser().parse_args(["serve", "--store", "memory"]))
    assert (config.new_queue_rate, config.new_queue_burst) == (10.0, 100)
    assert config.memory_store_max_bytes == 1 << 30


def test_relative_paths_in_the_file_are_relative_to_the_file(tmp_path):
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "r.ini"
    path.write_text("[STORE_LOG]\ndata_dir = ../data\nstats_log = stats/s.csv\n")
    config = config_from_args(build_parser().parse_args(["serve", "--config", str(path)]))
    assert config.data_dir == tmp_path / "etc" / ".." / "data"
    assert config.stats_log == tmp_path / "etc" / "stats" / "s.csv"


def test_the_template_init_writes_parses_to_the_defaults():
    settings = parse_config_text(template(), "t.ini")
    assert settings and all(DEFAULTS[name] == value for name, value in settings.items())


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("[AUTH]\nnew_queues = maybe\n", 2, ["[AUTH] new_queues", "on or off"]),
        ("[TRANSPORT]\nport = 5224\nprot = 5225\n", 3, ["[TRANSPORT] prot", "unknown key"]),
        ("[STORAGE]\nx = 1\n", 2, ["[STORAGE] x", "unknown section"]),
        ("[TRANSPORT]\nport = 1\nport = 2\n", 3, ["[TRANSPORT] port", "set twice"]),
        ("port = 1\n", 1, ["before any [SECTION]"]),
        ("[TRANSPORT]\nport\n", 2, ["not a `key = value` line"]),
        ("[TRANSPORT]\n\nport = high\n", 3, ["[TRANSPORT] port", "'high'"]),
        ("[LIMITS]\nmemory_store_max_bytes = lots\n", 2, ["memory_store_max_bytes", "512M"]),
        ("[STORE_LOG]\nstore = mongo\n", 2, ["[STORE_LOG] store", "memory, journal, sqlite"]),
        ("[STORE_LOG]\nstore = postgres\ndb_store_log = on\n", 3,
         ["[STORE_LOG] db_store_log", "on is not supported", "pg_dump", "database export"]),
    ],
)
def test_a_bad_file_is_one_line_naming_file_line_and_key_and_exit_2(
    tmp_path, capsys, text, line, words
):
    path = tmp_path / "bad.ini"
    path.write_text(text)
    assert main(["config", "check", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and captured.out == ""
    assert err[0].startswith(f"smp-router: error: {path}:{line}: ")
    assert all(w in err[0] for w in words), err[0]


@pytest.mark.parametrize(
    "text, words",
    [
        ("[TRANSPORT]\nport = 70000\n", "r.ini:2: [TRANSPORT] port: must be a port number"),
        ("[TRANSPORT]\ncontrol_port = 5225\n", "needs an admin or a user password"),
        ("[AUTH]\ncreate_password = a@b\n", "password must be printable"),
    ],
)
def test_a_value_the_router_cannot_run_with_is_exit_2(tmp_path, capsys, text, words):
    path = tmp_path / "r.ini"
    path.write_text(text)
    assert main(["config", "check", "--config", str(path), ]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_config_check_finds_a_tls_certificate_serve_could_not_use(tmp_path, capsys):
    path = tmp_path / "r.ini"
    path.write_text(f"[TRANSPORT]\ntls_cert = {tmp_path / 'no-cert.pem'}\n"
                    f"tls_key = {tmp_path / 'no-key.pem'}\n")
    assert main(["config", "check", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    missing = tmp_path / "no-cert.pem"
    assert err == [f"smp-router: error: cannot read the TLS certificate {missing}: "
                   "No such file or directory"]


def test_a_missing_or_unreadable_config_file_is_named(tmp_path, capsys):
    missing = tmp_path / "nope.ini"
    assert main(["serve", "--config", str(missing)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"smp-router: error: {missing}: no such configuration file"
    )
    assert main(["config", "check", "--config", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_config_check_hides_passwords_and_shows_the_effective_values(tmp_path, capsys):
    path = tmp_path / "r.ini"
    path.write_text("[AUTH]\ncreate_password = topsecret\n[TRANSPORT]\nport: 6001\n")
    assert main(["config", "check", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "topsecret" not in out and "create_password: (set)" in out
    assert "\nport: 6001\n" in out and "\nhost: 127.0.0.1\n" in out
    assert out.startswith(f"# configuration file: {path}\n")


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert re.fullmatch(r"smp-router \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


def test_init_keeps_an_existing_configuration(tmp_path, capsys):
    (tmp_path / CONFIG_FILE_NAME).write_text("[TRANSPORT]\nport = 1234\n")
    assert main(["init", "--data-dir", str(tmp_path)]) == 0
    assert "configuration kept" in capsys.readouterr().out
    assert (tmp_path / CONFIG_FILE_NAME).read_text() == "[TRANSPORT]\nport = 1234\n"


async def test_round_trip_init_edit_check_serve(tmp_path):
    """What an operator does: init, edit the file, check it, serve from it."""
    data = tmp_path / "data"
    subprocess.run(smp_router("init", "--data-dir", str(data)), check=True, timeout=30,
                   capture_output=True)
    path = data / CONFIG_FILE_NAME
    assert (path.stat().st_mode & 0o777) == 0o600  # it may hold passwords
    text = path.read_text()
    text = text.replace("port: 5224", "port = 0").replace("# public_host:", "public_host: smp.test")
    text = text.replace("# create_password:", "create_password: pw1").replace(
        "# store:", "store: memory")
    path.write_text(text)
    check = subprocess.run(smp_router("config", "check", "--data-dir", str(data)),
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    assert "public_host: smp.test" in check.stdout and "create_password: (set)" in check.stdout
    process = await trio.lowlevel.open_process(
        smp_router("serve", "--data-dir", str(data), "--log-level", "error"),
        stdout=subprocess.PIPE,
    )
    try:
        with trio.fail_after(30):
            line = (await _read_line(process.stdout)).decode()
            match = ADDRESS.search(line)
            assert match is not None and match[2] == "smp.test", line
            local = match[1].replace("smp.test", "127.0.0.1")
            async with open_client(local) as client:
                with pytest.raises(Exception, match="AUTH"):
                    await client.create_queue()  # the file's password is required
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            assert await process.wait() == 0


async def test_the_log_goes_to_the_log_file(tmp_path):
    log_file = tmp_path / "router.log"
    process = await trio.lowlevel.open_process(
        smp_router("serve", "--port", "0", "--store", "memory", "--log-file", str(log_file)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        with trio.fail_after(30):
            assert b"listening" in await _read_line(process.stdout)
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            assert await process.wait() == 0
    text = log_file.read_text()
    assert "router listening at smp://" in text and " and ws://127.0.0.1:" in text
    assert "stopping on SIGTERM" in text
    assert await process.stderr.receive_some(1000) == b""


async def test_a_wildcard_host_never_prints_a_wildcard_address(tmp_path):
    process = await trio.lowlevel.open_process(
        smp_router("serve", "--host", "0.0.0.0", "--port", "0", "--store", "memory",
                   "--log-level", "error"),
        stdout=subprocess.PIPE,
    )
    try:
        with trio.fail_after(30):
            line = (await _read_line(process.stdout)).decode()
        match = ADDRESS.search(line)
        assert match is not None and match[2] not in ("0.0.0.0", "", "::"), line
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()


async def _read_line(stream) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        data += chunk
    return data
