"""Stored positions of `stats --follow`, the synthetic generator and the command line
(no Spark session needed here)."""

from __future__ import annotations

import os

import pytest

from pipeline import follow
from pipeline.cli import build_parser, main
from pipeline.session import parse_conf
from pipeline.synth import synthetic_lines
from store.journal.storelog import compact_records, decode_record

LINE = "2024-05-01T10:00:00Z,PT1H,0,0,0,1,1,1,0,0,0,0,1,1,1\n"
HEADER = "time,period,queues_created\n"


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("beginning", "beginning"),
        ("latest", "latest"),
        ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z"),
        ("2024-05-01T12:00:00+02:00", "2024-05-01T10:00:00Z"),
        ("2024-05-01", "2024-05-01T00:00:00Z"),
    ],
)
def test_start_points_are_read_as_utc(text, start):
    assert follow.parse_start(text) == start


def test_a_start_point_that_is_no_time_is_refused():
    with pytest.raises(ValueError):
        follow.parse_start("yesterday")


@pytest.mark.parametrize(
    ("day", "needed"),
    [
        ("2024-05-15", "2024-05-01"),  # Wednesday: its month began earlier than its week
        ("2024-05-01", "2024-04-29"),  # its ISO week began in April
        ("2024-04-29", "2024-04-01"),
    ],
)
def test_a_run_rereads_from_the_start_of_the_week_or_month_it_touches(day, needed):
    assert follow.first_day_needed(day) == needed


def test_only_complete_lines_are_read_and_the_header_is_skipped(tmp_path):
    log = tmp_path / "eu-1.csv"
    log.write_text(HEADER + LINE + LINE[:10])
    position = follow.first_position(log, "eu-1", "beginning")
    lines, moved = follow.read_appended(log, position)
    assert lines == ["eu-1," + LINE.rstrip("\n")]
    assert moved.offset == len(HEADER + LINE)
    with open(log, "a") as f:
        f.write(LINE[10:])
    lines, moved = follow.read_appended(log, moved)
    assert lines == ["eu-1," + LINE.rstrip("\n")]
    assert follow.read_appended(log, moved)[0] == []


def test_a_replaced_log_is_read_again_from_its_start(tmp_path):
    log = tmp_path / "eu-1.csv"
    log.write_text(HEADER + LINE + LINE)
    _, position = follow.read_appended(log, follow.first_position(log, "eu-1", "beginning"))
    replacement = tmp_path / "new.csv"
    replacement.write_text(HEADER + LINE)
    os.replace(replacement, log)
    lines, _ = follow.read_appended(log, position)
    assert len(lines) == 1


def test_start_latest_begins_after_the_last_complete_line(tmp_path):
    log = tmp_path / "eu-1.csv"
    log.write_text(HEADER + LINE + LINE[:5])
    position = follow.first_position(log, "eu-1", "latest")
    assert position.offset == len(HEADER + LINE)


def test_a_checkpoint_survives_its_file(tmp_path):
    checkpoint = follow.Checkpoint(
        next_batch=3,
        logs={"/x/eu-1.csv": follow.LogPosition("eu-1", 120, 7, "2024-05-01T00:00:00Z")},
        batches={0: ("2024-04-29", "2024-05-01"), 2: ("2024-05-02", "2024-05-02")},
    )
    follow.commit_checkpoint(tmp_path, checkpoint)
    assert follow.load_checkpoint(tmp_path) == checkpoint
    assert follow.batches_since(checkpoint, "2024-05-02") == [2]


def test_synthetic_lines_are_store_log_lines_the_router_reads():
    lines = list(synthetic_lines(3000, seed=5))
    kinds = {line.split(" ")[1] for line in lines}
    assert kinds == {
        "add_service",
        "create",
        "secure",
        "add_notifier",
        "delete_notifier",
        "set_service",
        "suspend",
        "delete",
    }
    assert all(decode_record(line.rstrip("\n").split(" ", 1)[1]) for line in lines)
    assert compact_records(lines)  # every checksum holds, or this raises


def test_the_same_seed_gives_the_same_log():
    assert list(synthetic_lines(500, seed=9)) == list(synthetic_lines(500, seed=9))
    assert list(synthetic_lines(500, seed=9)) != list(synthetic_lines(500, seed=10))


def test_synth_writes_a_log_from_the_command_line(tmp_path):
    out = tmp_path / "s.log"
    assert main(["synth", "--records", "200", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 200


def test_the_master_defaults_to_local_and_defers_to_spark_submit():
    assert build_parser().parse_args(["stats", "x", "--out", "o"]).master == "local[*]"
    assert build_parser(spark_submit=True).parse_args(["stats", "x", "--out", "o"]).master is None
    args = build_parser().parse_args(["--master", "yarn", "compact", "q.log", "--out", "c.log"])
    assert (args.master, args.shards) == ("yarn", 1)


def test_spark_options_are_key_value_pairs():
    assert parse_conf(["spark.driver.memory=4g", "a.b=x=y"]) == {
        "spark.driver.memory": "4g",
        "a.b": "x=y",
    }
    with pytest.raises(ValueError):
        parse_conf(["no-equals-sign"])
