"""Command-line choice of store, data directory, fsync, expiration and stats log."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from router.server.cli.main import build_parser, main
from router.server.cli.migrate import ProgressBar
from router.server.cli.settings import (
    DEFAULT_STORE,
    config_from_args,
    default_data_dir,
    store_and_data_dir,
)
from store import KIND_FILE


def config(*flags: str):
    return config_from_args(build_parser().parse_args(["serve", *flags]))


def test_the_default_data_directory_follows_xdg_data_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir() == tmp_path / "smp-router"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_data_dir() == tmp_path / "home" / ".local" / "share" / "smp-router"


def test_without_flags_serve_keeps_data_in_a_durable_store_in_the_default_directory():
    c = config()
    assert (c.store, c.data_dir) == (DEFAULT_STORE, default_data_dir())
    assert DEFAULT_STORE != "memory"
    assert c.stats_log == default_data_dir() / "stats.csv"


def test_without_store_a_data_directory_keeps_the_kind_it_holds(tmp_path):
    (tmp_path / KIND_FILE).write_text("sqlite\n")
    assert store_and_data_dir(None, tmp_path) == ("sqlite", tmp_path)
    assert store_and_data_dir(None, tmp_path / "fresh") == (DEFAULT_STORE, tmp_path / "fresh")


def test_memory_without_a_data_directory_keeps_nothing():
    c = config("--store", "memory")
    assert (c.store, c.data_dir, c.stats_log) == ("memory", None, None)


def test_a_durable_store_without_a_data_directory_uses_the_default_one():
    assert store_and_data_dir("sqlite", None) == ("sqlite", default_data_dir())


def test_store_flags_reach_the_configuration(tmp_path):
    c = config(
        "--store", "journal", "--data-dir", str(tmp_path), "--fsync", "always",
        "--message-ttl", "600", "--expire-interval", "30", "--expire-on-send",
        "--stats-log", str(tmp_path / "s.csv"), "--stats-interval", "900", "--skip-corrupt",
    )
    assert (c.store, c.data_dir, c.fsync) == ("journal", tmp_path, "always")
    assert (c.message_ttl, c.expire_interval, c.expire_on_send) == (600, 30, True)
    assert (c.stats_log, c.stats_interval) == (tmp_path / "s.csv", 900)
    assert c.store_options == {"skip_corrupt": True}


def test_the_defaults_are_the_reference_routers():
    c = config("--store", "memory")
    assert (c.fsync, c.message_ttl, c.expire_interval, c.expire_on_send) == (
        "batch", 21 * 86400, 7200, False
    )
    assert c.stats_interval == 3600


def test_no_stats_log_turns_it_off(tmp_path):
    assert config("--data-dir", str(tmp_path), "--no-stats-log").stats_log is None


def test_an_unknown_fsync_policy_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--store", "memory", "--fsync", "sometimes"])
    assert exit_info.value.code == 2 and "error" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags", [["--stats-interval", "7"], ["--expire-interval", "0"], ["--message-ttl", "-1"]]
)
def test_a_bad_expiration_or_stats_setting_exits_2_naming_it(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--store", "memory", *flags])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith(f"smp-router serve: error: argument {flags[0]}: must be")


def test_the_progress_bar_prints_a_few_lines_per_phase_when_not_on_a_terminal():
    out = io.StringIO()
    bar = ProgressBar(out)
    for done in range(0, 1001, 10):
        bar.update("queues", done, 1000)
    bar.update("messages", 0, 0)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("  queues [") and lines[0].endswith("0/1000")
    assert lines[-2].endswith("1000/1000") and "#" * ProgressBar.WIDTH in lines[-2]
    assert lines[-1].startswith("messages [") and len(lines) == 12


def test_a_path_is_a_path():
    assert isinstance(config("--store", "memory", "--stats-log", "x.csv").stats_log, Path)
