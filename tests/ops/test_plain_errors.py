"""Every command-line and configuration-file error in plain words, through the real
command line: one stderr line, exit 2, the INI's errors with FILE:LINE, the TLS files'
errors with their path, and nothing of Python's own wording."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trustme
from worker_count import one_process

SMP_ROUTER = Path(sys.executable).with_name("smp-router")
PYTHON_WORDING = ("_positive_int", "invalid literal", "int()", "float()", "Errno",
                  "Traceback", "invalid int value", "invalid float value")


def run(*args: str) -> str:
    """The one stderr line of a command that must fail with exit code 2."""
    command = [str(SMP_ROUTER)] if SMP_ROUTER.exists() else [sys.executable, "-m", "router.server"]
    result = subprocess.run([*command, *one_process(args)], capture_output=True, text=True,
                            timeout=30)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and result.stdout == "", result
    assert not any(words in lines[0] for words in PYTHON_WORDING), lines[0]
    return lines[0]


@pytest.mark.parametrize("flag, value, reason", [
    ("--quota", "0", "must be a whole number, at least 1, not '0'"),
    ("--quota", "many", "must be a whole number, not 'many'"),
    ("--port", "abc", "must be a port number, 0 to 65535, not 'abc'"),
    ("--port", "99999", "must be a port number, 0 to 65535, not '99999'"),
    ("--metrics-port", "-1", "must be a port number, 0 to 65535, not '-1'"),
    ("--max-pending", "1.5", "must be a whole number, not '1.5'"),
    ("--message-ttl", "soon", "must be a number, not 'soon'"),
    ("--keepalive-timeout", "0", "must be a positive number, not '0'"),
    ("--stats-interval", "7", "must be a number of seconds that divides a day (86400), not '7'"),
])
def test_a_bad_flag_value_is_named_in_plain_words(flag, value, reason):
    line = run("serve", "--store", "memory", flag, value)
    assert line == f"smp-router serve: error: argument {flag}: {reason}"


@pytest.mark.parametrize("section, key, value, reason", [
    ("TRANSPORT", "port", "abc", "must be a port number, 0 to 65535, not 'abc'"),
    ("TRANSPORT", "port", "99999", "must be a port number, 0 to 65535, not '99999'"),
    ("TRANSPORT", "control_port", "70000", "must be a port number, 0 to 65535, not '70000'"),
    ("STORE_LOG", "quota", "0", "must be a whole number, at least 1, not '0'"),
    ("STORE_LOG", "expire_messages_days", "-1", "must be a positive number, not '-1'"),
    ("STORE_LOG", "stats_interval", "7",
     "must be a number of seconds that divides a day (86400), not '7'"),
    ("STORE_LOG", "fsync", "sometimes", "must be one of never, batch, always, not 'sometimes'"),
    ("TRANSPORT", "max_connections", "lots", "must be a whole number, not 'lots'"),
    ("AUTH", "create_password", "a@b", "password must be printable, without space, '@', ':' "
     "or '/'"),
])
def test_a_bad_file_value_is_named_with_file_line_and_key(tmp_path, section, key, value, reason):
    path = tmp_path / "r.ini"
    path.write_text(f"# a comment\n[{section}]\n{key} = {value}\n")
    for command in (["config", "check"], ["serve"]):
        line = run(*command, "--config", str(path))
        assert line == f"smp-router: error: {path}:3: [{section}] {key}: {reason}"


@pytest.mark.parametrize("content, reason", [
    (b"# comment\n[TRANSPORT]\nport\n", ":3: not a `key = value` line: 'port'"),
    (b"port = 1\n", ":1: a setting before any [SECTION] header: 'port = 1'"),
    (b"[AUTH]\ncreate_password = caf\xe9\n", ":2: not UTF-8 text (byte 0xe9)"),
    (b"[AUTH]\nnew_queues = maybe\n", ":2: [AUTH] new_queues: must be on or off, not 'maybe'"),
    (b"[LIMITS]\nmemory_store_max_bytes = lots\n",
     ":2: [LIMITS] memory_store_max_bytes: must be a size such as 512M or 1G, or off, "
     "not 'lots'"),
    (b"[NOPE]\nx = 1\n", ":2: [NOPE] x: unknown section"),
])
def test_a_file_that_is_not_a_configuration_is_named_with_its_line(tmp_path, content, reason):
    path = tmp_path / "r.ini"
    path.write_bytes(content)
    assert run("config", "check", "--config", str(path)).startswith(
        f"smp-router: error: {path}{reason}")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    other = ca.issue_cert("127.0.0.2")
    files = {"cert": directory / "cert.pem", "key": directory / "key.pem",
             "other_key": directory / "other-key.pem", "text": directory / "notes.txt"}
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    cert.private_key_pem.write_to_path(str(files["key"]))
    other.private_key_pem.write_to_path(str(files["other_key"]))
    files["text"].write_text("not a certificate\n")
    return files


def test_tls_file_errors_name_the_file(tmp_path, tls_files):
    cert, key = tls_files["cert"], tls_files["key"]
    missing = tmp_path / "missing.pem"
    cases = {
        (missing, key): f"cannot read the TLS certificate {missing}: No such file or directory",
        (cert, missing): f"cannot read the TLS key {missing}: No such file or directory",
        (tls_files["text"], key):
            f"the TLS certificate {tls_files['text']} is not a PEM certificate file",
        (cert, tls_files["text"]): f"the TLS key {tls_files['text']} is not a PEM key file",
        (cert, tls_files["other_key"]):
            f"the TLS key {tls_files['other_key']} is not the key of the certificate {cert}",
        (cert, tmp_path): f"cannot read the TLS key {tmp_path}: Is a directory",
    }
    for (cert_file, key_file), reason in cases.items():
        line = run("serve", "--store", "memory", "--port", "0", "--tls-cert", str(cert_file),
                   "--tls-key", str(key_file))
        assert line == f"smp-router: error: {reason}"
