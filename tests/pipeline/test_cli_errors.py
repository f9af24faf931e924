"""`smp-pipeline` refuses bad arguments and input with one line and exit code 2, and
a machine without Java or a master it cannot reach with one line and exit code 1,
all before Spark starts (no Spark session in this module)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import checks, cli
from pipeline.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """Exit code and stderr lines of one command-line run."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err.splitlines()


def one_line(lines: list[str]) -> str:
    assert len(lines) == 1, lines
    assert lines[0].startswith("smp-pipeline")
    return lines[0]


@pytest.fixture
def stats_log(tmp_path: Path) -> Path:
    path = tmp_path / "eu-1.csv"
    path.write_text("time,period\n")
    return path


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["synth", "--records", "-5", "--out", "x.log"], "--records: must be a whole number"),
        (["synth", "--records", "many", "--out", "x.log"], "not 'many'"),
        (["synth", "--out", "x.log"], "synth needs --records"),
        (["synth", "--stats", "--out", "logs"], "needs --days"),
        (["synth", "--stats", "--days", "0", "--out", "logs"], "--days: must be"),
        (["synth", "--records", "5", "--days", "3", "--out", "x"], "for synth --stats"),
        (["synth", "--records", "5", "--routers", "2", "--out", "x"], "for synth --stats"),
        (["synth", "--stats", "--days", "3", "--down", "5-2", "--out", "x"], "first <= last"),
        (["synth", "--stats", "--days", "3", "--first-day", "May", "--out", "x"], "'May'"),
        (["--master", "nowhere", "stats", "x", "--out", "o"], "not a Spark master URL"),
        (["--master", "spark://host", "stats", "x", "--out", "o"], "not a Spark master URL"),
        (["--master", "local[0]", "stats", "x", "--out", "o"], "not a Spark master URL"),
        (["--master", "spark://h:99999", "stats", "x", "--out", "o"], "not a Spark master"),
        (["--conf", "no-equals", "stats", "x", "--out", "o"], "key=value"),
        (["--log-level", "LOUD", "stats", "x", "--out", "o"], "--log-level"),
        (["compact", "q.log", "--out", "c.log", "--shards", "0"], "--shards: must be"),
        (["compact", "q.log", "--out", "c.log", "--partitions", "-1"], "--partitions"),
        (["stats", "x", "--out", "o", "--follow", "--every", "0"], "--every: must be"),
        (["stats", "x", "--out", "o", "--start", "yesterday"], "'yesterday'"),
        (["stats", "x"], "--out"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_code_2(argv, says, capsys):
    code, lines = run(argv, capsys)
    assert code == 2
    assert says in one_line(lines)


def test_a_missing_input_is_named(tmp_path, capsys):
    code, lines = run(["stats", str(tmp_path / "nope"), "--out", str(tmp_path / "o")], capsys)
    assert code == 2
    assert one_line(lines).endswith(f"no stats log at {tmp_path / 'nope'}")
    code, lines = run(["compact", str(tmp_path / "q.log"), "--out", "c.log"], capsys)
    assert code == 2
    assert one_line(lines).endswith(f"no store log at {tmp_path / 'q.log'}")


def test_a_directory_without_stats_logs_is_refused(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    code, lines = run(["stats", str(tmp_path / "logs"), "--out", str(tmp_path / "o")], capsys)
    assert code == 2
    assert "no stats logs (*.csv) in" in one_line(lines)


def test_an_output_in_a_missing_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "no" / "such" / "x.log"
    code, lines = run(["synth", "--records", "5", "--out", str(out)], capsys)
    assert code == 2
    assert f"{tmp_path / 'no' / 'such'} is not a directory" in one_line(lines)


def test_no_java_is_one_line_and_exit_code_1(stats_log, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, lines = run(["stats", str(stats_log), "--out", str(tmp_path / "o")], capsys)
    assert code == 1
    assert "Java not found: Spark needs Java 17 or later" in one_line(lines)


def test_a_java_home_without_java_is_named(stats_log, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    code, lines = run(["stats", str(stats_log), "--out", str(tmp_path / "o")], capsys)
    assert code == 1
    assert f"JAVA_HOME is {tmp_path}, but {tmp_path}/bin/java is not a program" in one_line(lines)


def _fake_java(home: Path, version_line: str) -> None:
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(
    ("line", "major"),
    [('openjdk version "11.0.2" 2019-01-15', 11), ('java version "1.8.0_392"', 8)],
)
def test_a_java_older_than_17_is_refused(line, major, stats_log, tmp_path, capsys, monkeypatch):
    _fake_java(tmp_path / "jdk", line)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    code, lines = run(["compact", str(stats_log), "--out", str(tmp_path / "c.log")], capsys)
    assert code == 1
    assert f"is Java {major}; Spark needs Java 17 or later" in one_line(lines)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_master_that_cannot_be_reached_is_one_line_and_exit_code_1(
    stats_log, tmp_path, capsys, monkeypatch
):
    _fake_java(tmp_path / "jdk", 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    master = f"spark://127.0.0.1:{_closed_port()}"
    code, lines = run(["--master", master, "stats", str(stats_log), "--out", "o"], capsys)
    assert code == 1
    assert f"cannot reach the Spark master {master}: 127.0.0.1:" in one_line(lines)


def test_one_live_master_of_several_is_enough():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        live = listening.getsockname()[1]
        checks.check_master_reachable(f"spark://127.0.0.1:{_closed_port()},127.0.0.1:{live}")
    checks.check_master_reachable("local[2]")  # nothing to reach
    checks.check_master_reachable("yarn")


@pytest.mark.parametrize(
    "master",
    [
        "local",
        "local[4]",
        "local[*]",
        "local[4,2]",
        "local-cluster[2,1,1024]",
        "spark://a:7077",
        "spark://a:7077,b:7077",
        "yarn",
        "k8s://https://k8s-api:6443",
        "k8s://k8s-api:6443",
    ],
)
def test_the_master_forms_spark_accepts_pass(master):
    assert checks.master_url(master) == master


def test_a_failure_inside_a_run_is_one_line(stats_log, tmp_path, capsys, monkeypatch):
    def fail(args):
        raise RuntimeError("the job failed\n\tat org.apache.spark.Something(Something.scala:1)")

    monkeypatch.setattr(cli, "_check_before_spark", lambda args, spark_submit: None)
    monkeypatch.setattr(cli, "_dispatch", fail)
    code, lines = run(["stats", str(stats_log), "--out", "o"], capsys)
    assert (code, one_line(lines)) == (1, "smp-pipeline: error: RuntimeError: the job failed")
    monkeypatch.setattr(cli, "_dispatch", lambda args: open(tmp_path / "none" / "f"))
    code, lines = run(["stats", str(stats_log), "--out", "o"], capsys)
    assert code == 2
    assert one_line(lines).endswith("none/f: No such file or directory")


def test_the_installed_command_prints_no_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "synth", "--records", "-5", "--out", "x.log"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parent.parent)},
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "smp-pipeline synth: error: argument --records: "
        "must be a whole number of at least 1, not -5"
    ]
    assert not (tmp_path / "x.log").exists()


# --- one rule for --out: its parent directory must exist (docs/pipeline.md) ---------------


@pytest.mark.parametrize(
    "argv",
    [
        ["synth", "--stats", "--days", "1", "--out", "{missing}"],
        ["synth", "--records", "5", "--out", "{missing}"],
        ["stats", "{log}", "--out", "{missing}"],
        ["compact", "{log}", "--out", "{missing}"],
    ],
)
def test_an_out_whose_parent_is_missing_is_refused_by_every_command(
    argv, stats_log, tmp_path, capsys
):
    missing = tmp_path / "no" / "such" / "out"
    argv = [a.format(missing=missing, log=stats_log) for a in argv]
    code, lines = run(argv, capsys)
    assert code == 2
    assert f"{missing.parent} is not a directory" in one_line(lines)
    assert not missing.parent.exists()


def test_an_out_directory_is_made_when_its_parent_exists(tmp_path, capsys):
    out = tmp_path / "new"
    code, _ = run(["synth", "--stats", "--days", "1", "--out", str(out)], capsys)
    assert code == 0 and (out / "router-1" / "stats.csv").is_file()


@pytest.mark.parametrize("command", [["stats", "{log}"], ["synth", "--stats", "--days", "1"]])
def test_an_out_directory_that_is_a_file_is_refused(command, stats_log, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("")
    argv = [a.format(log=stats_log) for a in command] + ["--out", str(taken)]
    code, lines = run(argv, capsys)
    assert code == 2 and "it is a file, not a directory" in one_line(lines)
