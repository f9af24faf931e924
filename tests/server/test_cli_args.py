"""The command line's flags map onto RouterConfig; bad ones are one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.server.cli.main import build_parser, main
from router.server.cli.settings import config_from_args


def test_every_serve_flag_reaches_the_configuration():
    args = build_parser().parse_args([
        "serve", "--host", "0.0.0.0", "--port", "0", "--store", "memory", "--quota", "5",
        "--delivery", "per-queue-task", "--password", "pw", "--data-dir", "/tmp/d",
        "--send-queue-size", "8", "--stalled-writer-timeout", "2.5", "--end-batch-interval", "1",
    ])
    config = config_from_args(args)
    assert (config.host, config.port, config.quota, config.delivery) == (
        "0.0.0.0", 0, 5, "per-queue-task"
    )
    assert config.password == b"pw" and config.data_dir == Path("/tmp/d")
    assert (config.send_queue_size, config.stalled_writer_timeout, config.end_batch_interval) == (
        8, 2.5, 1.0
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--port", "abc"],
        ["serve", "--delivery", "threads"],
        ["serve", "--quota", "0"],
        ["serve", "--queue-cache", "0"],
        ["serve", "--port", "70000"],
        ["serve", "--password", "a b"],
        ["serve", "--message-ttl", "0"],
        ["serve", "--stalled-writer-timeout", "0"],
        ["serve", "--no-such-flag"],
        [],
    ],
)
def test_a_bad_flag_exits_2_with_one_line_on_stderr(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--store", "memory", "--tls-cert", "cert.pem"],
    ],
)
def test_a_bad_configuration_exits_2_with_one_line_on_stderr(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("smp-router: error:")


def test_init_creates_an_identity_and_prints_its_fingerprint(tmp_path, capsys):
    assert main(["init", "--data-dir", str(tmp_path)]) == 0
    identity_line, config_line, address_line, next_line = (
        capsys.readouterr().out.strip().splitlines())
    assert str(tmp_path) in identity_line and identity_line.endswith("=")
    assert config_line == f"configuration written: {tmp_path / 'smp-router.ini'}"
    assert address_line.startswith(f"address: smp://{identity_line.rsplit(' ', 1)[1]}@")
    assert next_line == f"next: smp-router serve --data-dir {tmp_path}"


@pytest.mark.parametrize(("store", "options"), [
    ("sqlite", {"cache_size": 100}), ("journal", {}), ("memory", {}),
])
def test_the_queue_cache_flag_sizes_the_sqlite_stores_record_cache(store, options):
    args = build_parser().parse_args([
        "serve", "--store", store, "--data-dir", "/tmp/d", "--queue-cache", "100"])
    assert config_from_args(args).store_options == options
    default = build_parser().parse_args(["serve", "--store", store, "--data-dir", "/tmp/d"])
    assert config_from_args(default).store_options == {}
