"""The configuration file's `[STORE_LOG] store` key against the data directory's store kind.

A data directory holds one store kind (its STORE_KIND file). When the file
names another kind, `serve` and `config check` refuse with the file, the line
and the key, so the operator knows which line to change; `migrate-store`
rewrites that line once the data has moved, so the next `serve` starts
instead of being refused (and kept down by systemd's RestartPreventExitStatus=2).
A file without the key needs nothing: `serve` then uses the kind in the
data directory.

The reference router's `store_queues = database` and `store_messages = database`
name the postgres store too; once the data has moved to another kind,
`migrate-store` comments those lines out (they would name a kind the directory
no longer holds), saying so.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from store import MIGRATE_COMMAND
from store.durability import atomic_write

from .config_file import ConfigFileError

SECTION, KEY = "STORE_LOG", "store"
_SECTION_LINE = re.compile(r"^\s*\[([^\]]+)\]")
_STORE_LINE = re.compile(r"^(store\s*[=:]\s*)(.*?)(\s*)$", re.IGNORECASE)
# The reference router's keys, whose `database` is the postgres store (config_file.py).
DATABASE_KEYS = ("store_queues", "store_messages")
_DATABASE_LINE = re.compile(r"^\s*(store_queues|store_messages)\s*[=:]\s*(.*?)\s*$",
                            re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class StoreKey:
    path: Path
    line: int  # 1-based
    value: str


def find_store_key(path: Path) -> StoreKey | None:
    """The `store` line of the file's [STORE_LOG] section, if the key is set there."""
    for number, line in _section_lines(path):
        if match := _STORE_LINE.match(line):
            return StoreKey(path, number, match[2])
    return None


def find_database_keys(path: Path) -> list[tuple[str, StoreKey]]:
    """The [STORE_LOG] store_queues and store_messages lines: (key, where and value)."""
    found = []
    for number, line in _section_lines(path):
        if match := _DATABASE_LINE.match(line):
            found.append((match[1].lower(), StoreKey(path, number, match[2])))
    return found


def _section_lines(path: Path) -> list[tuple[int, str]]:
    """The lines (1-based number, text) of the file's [STORE_LOG] section."""
    section, lines = "", []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if header := _SECTION_LINE.match(line):
            section = header[1].strip()
        elif section == SECTION:
            lines.append((number, line))
    return lines


def check_store_key(path: Path | None, data_dir: Path | None, found: str | None) -> None:
    """Refuse a file whose store key names another kind than the data directory holds."""
    if path is None or data_dir is None or found is None:
        return
    if found != "postgres":
        for name, database_key in find_database_keys(path):
            command = MIGRATE_COMMAND.format(data_dir=data_dir, kind="postgres")
            raise ConfigFileError(
                f"{path}:{database_key.line}: [{SECTION}] {name}: {database_key.value} (the "
                f"postgres store), but the data directory {data_dir} holds a {found} store; "
                f"comment the line out, or move the data with: {command}"
            )
    key = find_store_key(path)
    if key is None or key.value == found:
        return
    command = MIGRATE_COMMAND.format(data_dir=data_dir, kind=key.value)
    raise ConfigFileError(
        f"{path}:{key.line}: [{SECTION}] {KEY}: {key.value}, but the data directory "
        f"{data_dir} holds a {found} store; set `{KEY}: {found}` there (or remove the line), "
        f"or move the data with: {command}"
    )


def set_store_keys(path: Path, kind: str) -> list[str]:
    """After the data moved to `kind`: the file's store key says `kind`, and the reference
    router's store_queues/store_messages, which name the postgres store, are commented
    out when `kind` is another; returns what was done, a line each."""
    done = [set_store_key(path, kind)]
    if kind == "postgres":
        return done
    keys = find_database_keys(path)
    if not keys:
        return done
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for name, key in keys:
        lines[key.line - 1] = "# " + lines[key.line - 1]
        done.append(
            f"{path}:{key.line}: [{SECTION}] {name} = {key.value} commented out: the data "
            f"directory holds a {kind} store now"
        )
    _rewrite(path, lines)
    return done


def set_store_key(path: Path, kind: str) -> str:
    """Make the file's store key say `kind` (if the file sets it), keeping every other byte;
    returns one line telling the operator what was done."""
    key = find_store_key(path)
    if key is None:
        return f"{path}: no {KEY} key; serve uses the {kind} store in the data directory"
    where = f"{path}:{key.line}: [{SECTION}] {KEY}"
    if key.value == kind:
        return f"{where} already says {kind}"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    text = lines[key.line - 1]
    ending = text[len(text.rstrip("\r\n")):]
    match = _STORE_LINE.match(text.rstrip("\r\n"))
    assert match is not None  # find_store_key matched this line
    lines[key.line - 1] = f"{match[1]}{kind}{ending}"
    _rewrite(path, lines)
    return f"{where} changed from {key.value} to {kind}"


def _rewrite(path: Path, lines: list[str]) -> None:
    # The file may hold passwords: the new one keeps the old one's permissions.
    atomic_write(path, ["".join(lines).encode("utf-8")],
                 mode=os.stat(path).st_mode & 0o777)
