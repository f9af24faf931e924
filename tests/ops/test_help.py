"""`--help`: every option of every command has a line of help, and `serve`'s flags come
from the settings table, grouped by the configuration file's sections."""

from __future__ import annotations

import argparse
import re
import subprocess

from ops_helpers import smp_router

from router.server.cli.main import build_parser
from router.server.cli.settings import TOPICS
from router.server.settings.config_file import KEYS


def subparsers(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from subparsers(sub, f"{prefix}{name} ")


def test_every_option_of_every_command_has_help():
    missing = [
        (command, action.option_strings[0])
        for command, parser in subparsers(build_parser())
        for action in parser._actions
        if action.option_strings and not (action.help and action.help.strip())
    ]
    assert missing == []


def test_every_key_with_a_flag_is_a_serve_flag_in_its_sections_group():
    serve = dict(subparsers(build_parser()))["serve"]
    groups = {group.title: {a.dest: a for a in group._group_actions}
              for group in serve._action_groups}
    for key in KEYS:
        if key.flag_name is None:
            continue
        action = groups[TOPICS[key.section]].get(key.setting)
        assert action is not None and key.flag_name in action.option_strings, key
        assert f"[{key.section}] {key.name}" in action.help, action.help


def test_serve_help_through_the_command_line_is_grouped_by_topic():
    result = subprocess.run(smp_router("serve", "--help"), capture_output=True, text=True,
                            timeout=30, check=True)
    titles = [line[:-1] for line in result.stdout.splitlines() if line.endswith("):")]
    assert titles == list(TOPICS.values())
    for flag in ("--quota", "--delivery", "--log-level", "--drain-period", "--idle-timeout",
                 "--new-queues-per-second", "--tls-cert"):
        assert f"  {flag} " in result.stdout, flag


def _serve_help_of(flag: str) -> str:
    serve = dict(subparsers(build_parser()))["serve"]
    action = next(a for a in serve._actions if flag in a.option_strings)
    return " ".join(action.help.split())


def test_serve_help_shows_plain_numbers_and_sizes_as_the_file_writes_them():
    serve = dict(subparsers(build_parser()))["serve"]
    helps = [a.help for a in serve._actions if a.help]
    assert [h for h in helps if re.search(r"\d[eE][+-]?\d", h)] == []
    ttl = _serve_help_of("--message-ttl")
    assert "default 1814400 = 21 days;" in ttl and "expire_messages_days, in days" in ttl
    size = _serve_help_of("--memory-store-max-bytes")
    assert "default 1G;" in size and "1073741824" not in size


def test_sizes_and_days_read_back_as_written():
    from router.server.settings.config_file import display, size_text

    key = next(k for k in KEYS if k.name == "memory_store_max_bytes")
    for text, shown in (("512M", "512M"), ("1G", "1G"), ("1500", "1500"), ("2048", "2K")):
        parsed = key.parse(text)
        assert display(key, parsed) == shown == size_text(parsed)
    ttl = next(k for k in KEYS if k.name == "expire_messages_days")
    assert display(ttl, 1.5 * 86400) == "1.5"
