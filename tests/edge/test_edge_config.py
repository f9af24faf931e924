"""The listener's settings: command-line flags and their checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.server.cli.main import build_parser, main
from router.server.cli.settings import config_from_args
from router.server.settings.config import (
    DEFAULT_MEMORY_STORE_MAX_BYTES,
    DEFAULT_NEW_QUEUE_ADDRESS_RATE,
    DEFAULT_NEW_QUEUE_RATE,
    DEFAULT_NEW_QUEUE_TOTAL_RATE,
    ConfigError,
    RouterConfig,
)
from router.server.settings.edge_limits import CONFIGURABLE_BOUNDS
from router.server.settings.workers import auto_workers, usable_cores


def config_of(*flags: str) -> RouterConfig:
    return config_from_args(build_parser().parse_args(["serve", "--store", "memory", *flags]))


def test_listener_flags_reach_the_config():
    config = config_of(
        "--upgrade-timeout", "5", "--max-pending", "100", "--max-pending-per-address", "4",
        "--max-connections", "1000", "--max-message-frames", "8", "--message-timeout", "3",
        "--keepalive-interval", "20", "--keepalive-timeout", "10", "--idle-timeout", "600",
        "--tls-cert", "c.pem", "--tls-key", "k.pem",
    )
    assert (config.upgrade_timeout, config.max_pending, config.max_pending_per_address) == (
        5.0, 100, 4)
    assert (config.max_connections, config.max_message_frames, config.message_timeout) == (
        1000, 8, 3.0)
    assert (config.keepalive_interval, config.keepalive_timeout, config.idle_timeout) == (
        20.0, 10.0, 600.0)
    assert (config.tls_cert, config.tls_key) == (Path("c.pem"), Path("k.pem"))


def test_without_flags_the_defaults_hold():
    # `serve` adds the operator limits RouterConfig leaves off (limits.py).
    assert config_of() == RouterConfig(
        store="memory", new_queue_rate=DEFAULT_NEW_QUEUE_RATE,
        new_queue_address_rate=DEFAULT_NEW_QUEUE_ADDRESS_RATE,
        new_queue_total_rate=DEFAULT_NEW_QUEUE_TOTAL_RATE,
        memory_store_max_bytes=DEFAULT_MEMORY_STORE_MAX_BYTES, allow_proxy=True,
        # `auto`: resolved on the machine at hand (settings/workers.py)
        workers=auto_workers(usable_cores()), workers_auto=True,
    )
    assert RouterConfig().idle_timeout is None


@pytest.mark.parametrize("field, value", [
    ("upgrade_timeout", 0), ("message_timeout", -1.0), ("keepalive_interval", float("inf")),
    ("keepalive_timeout", 0), ("idle_timeout", 0), ("max_pending", 0),
    ("max_pending_per_address", 0), ("max_connections", -5), ("max_message_frames", 1.5),
])
def test_bad_listener_settings_are_refused(field: str, value: object):
    with pytest.raises(ConfigError):
        RouterConfig(**{field: value})  # type: ignore[arg-type]


def test_a_bad_flag_is_one_line_and_exit_code_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--store", "memory", "--port", "0", "--max-pending", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --max-pending: must be a whole number" in err


def test_a_missing_certificate_is_one_line_and_exit_code_2(tmp_path: Path, capsys):
    code = main(["serve", "--workers", "1", "--store", "memory", "--port", "0",
                 "--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(tmp_path / "k.pem")])
    assert code == 2
    assert "TLS certificate" in capsys.readouterr().err


@pytest.mark.parametrize("bound", CONFIGURABLE_BOUNDS, ids=lambda bound: bound.name)
def test_each_row_of_the_bounds_table_is_a_flag_a_file_key_a_field_and_a_limit(bound, tmp_path):
    """One row in EDGE_BOUNDS is all a new bound needs besides the code keeping to it."""
    assert getattr(RouterConfig(), bound.name) == bound.default
    assert getattr(RouterConfig().edge_limits(), bound.name) == bound.default
    value = bound.kind(bound.default * 2)
    flag = f"--{bound.name.replace('_', '-')}"
    from_flag = config_of(flag, str(value))
    assert getattr(from_flag, bound.name) == value
    assert getattr(from_flag.edge_limits(), bound.name) == value
    ini = tmp_path / "smp-router.ini"
    ini.write_text(f"[TRANSPORT]\n{bound.name}: {value}\n")
    from_file = config_of("--config", str(ini))
    assert getattr(from_file, bound.name) == value
    with pytest.raises(ConfigError):
        RouterConfig(**{bound.name: 0})
