"""`workers = auto`, the default count of workers (docs/workers.md#the-default): the
usable cores from 3 on, capped, else 1; a data directory that holds queues keeps its
count. Nothing here depends on the cores of the machine the tests run on."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from router.server.cli import main as cli_main
from router.server.cli.main import build_parser, main
from router.server.cli.settings import config_from_args
from router.server.settings import workers
from router.server.settings.workers import (
    MAX_AUTO_WORKERS,
    auto_reason,
    auto_workers,
    cgroup_cpu_quota,
    usable_cores,
)
from router.server.workers.layout import WORKERS_FILE, with_auto_workers
from store.factory import KIND_FILE


def config(*flags: str):
    return config_from_args(build_parser().parse_args(["serve", "--store", "memory", *flags]))


@pytest.mark.parametrize(("cores", "expected"), [(1, 1), (2, 1), (3, 3), (8, 8), (16, 16),
                                                 (64, MAX_AUTO_WORKERS)])
def test_auto_is_the_usable_cores_from_three_capped(cores, expected):
    assert auto_workers(cores) == expected
    assert auto_reason(cores).startswith(f"{expected} worker")


@pytest.mark.parametrize(("text", "expected"), [("max 100000\n", None), ("150000 100000\n", 2),
                                                ("50000 100000\n", 1), ("garbage", None)])
def test_a_cgroup_quota_in_whole_cores(tmp_path, text, expected):
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text(text)
    assert cgroup_cpu_quota(cpu_max) == expected
    assert cgroup_cpu_quota(tmp_path / "absent") is None


def test_usable_cores_are_the_affinity_within_the_quota(monkeypatch, tmp_path):
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: set(range(12)))
    monkeypatch.setattr(workers, "CGROUP_CPU_MAX", tmp_path / "cpu.max")
    assert usable_cores() == 12
    (tmp_path / "cpu.max").write_text("400000 100000\n")
    monkeypatch.setattr(workers, "cgroup_cpu_quota",
                        lambda path=tmp_path / "cpu.max": cgroup_cpu_quota(path))
    assert usable_cores() == 4


def test_auto_is_the_default_and_a_count_still_works(monkeypatch, tmp_path):
    monkeypatch.setattr("router.server.cli.settings.usable_cores", lambda: 6)
    default = config()
    assert (default.workers, default.workers_auto) == (6, True)
    assert (config("--workers", "auto").workers, config("--workers", "3").workers) == (6, 3)
    assert not config("--workers", "3").workers_auto
    ini = tmp_path / "r.ini"
    ini.write_text("[TRANSPORT]\nworkers = 2\n")
    assert config("--config", str(ini)).workers == 2
    ini.write_text("[TRANSPORT]\nworkers = AUTO\n")
    assert config("--config", str(ini)).workers == 6
    monkeypatch.setattr("router.server.cli.settings.usable_cores", lambda: 2)
    assert config().workers == 1


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_count_is_one_line_and_exit_code_2(value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--store", "memory", f"--workers={value}"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        f"must be auto or a whole number, at least 1, not {value!r}")
    ini = tmp_path / "r.ini"
    ini.write_text(f"[TRANSPORT]\nworkers = {value}\n")
    assert main(["serve", "--store", "memory", "--config", str(ini)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must be auto or a whole number" in err[0], err


def test_auto_on_a_data_directory_keeps_its_count(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr("router.server.cli.settings.usable_cores", lambda: 8)
    monkeypatch.setattr(cli_main, "usable_cores", lambda: 8)
    fresh, one, two = (tmp_path / name for name in ("fresh", "one", "two"))
    one.mkdir()
    (one / KIND_FILE).write_text("journal\n")  # a relay that ran as one process
    two.mkdir()
    (two / WORKERS_FILE).write_text("2\n")
    found = {}
    for directory in (fresh, one, two):
        resolved, kept = with_auto_workers(config("--data-dir", str(directory)))
        found[directory.name] = (resolved.workers, kept)
    assert found == {"fresh": (8, None), "one": (1, 1), "two": (2, 2)}
    # An explicit count is the operator's: the directory's is checked against it (refused).
    assert with_auto_workers(config("--data-dir", str(one), "--workers", "3"))[0].workers == 3
    with caplog.at_level(logging.INFO, logger="smp-router"):
        cli_main._resolved_workers(config("--data-dir", str(one)))
        cli_main._resolved_workers(config("--data-dir", str(fresh)))
    assert f"workers = auto: 1, the count data directory {one} was made for" in caplog.text
    assert "workers = auto: 8 workers: one per usable core" in caplog.text


def test_every_router_the_tests_and_benches_start_has_a_count_of_workers():
    """A file that starts processes with `serve` names the count (`--workers`, or
    `one_process`): `auto` would make them the machine's cores (docs/testing.md)."""
    root = Path(__file__).resolve().parents[2]
    spawns = re.compile(r"open_process|Popen|run_process|subprocess\.run")
    serves = re.compile(r"""["']serve["']""")
    starts_no_router = {
        "tests/ops/test_help.py": "`serve --help` only",
        "tests/ops/test_deploy.py": "parses the deployment's command line",
        "bench/hotpath.py": "its own `serve` runs serve_router in the process",
    }
    missing = []
    for path in [*root.glob("tests/**/*.py"), *root.glob("bench/*.py")]:
        if str(path.relative_to(root)) in starts_no_router:
            continue
        text = path.read_text()
        if spawns.search(text) and serves.search(text) and not (
                "one_process" in text or '"--workers"' in text):
            missing.append(str(path.relative_to(root)))
    assert missing == [], missing
