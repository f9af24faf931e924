"""The configuration file's `[STORE_LOG] store` key against the data directory's store kind.

A data directory holds one store kind (its STORE_KIND file). When the file
names another kind, `serve` and `config check` refuse with the file, the line
and the key, so the operator knows which line to change; `migrate-store`
rewrites that line once the data has moved, so the next `serve` starts
instead of being refused (and kept down by systemd's RestartPreventExitStatus=2).
A file without the key needs nothing: `serve` then uses the kind in the
data directory.
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


@dataclass(frozen=True, slots=True)
class StoreKey:
    path: Path
    line: int  # 1-based
    value: str


def find_store_key(path: Path) -> StoreKey | None:
    """The `store` line of the file's [STORE_LOG] section, if the key is set there."""
    section = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if header := _SECTION_LINE.match(line):
            section = header[1].strip()
        elif section == SECTION and (match := _STORE_LINE.match(line)):
            return StoreKey(path, number, match[2])
    return None


def check_store_key(path: Path | None, data_dir: Path | None, found: str | None) -> None:
    """Refuse a file whose store key names another kind than the data directory holds."""
    if path is None or data_dir is None or found is None:
        return
    key = find_store_key(path)
    if key is None or key.value == found:
        return
    command = MIGRATE_COMMAND.format(data_dir=data_dir, kind=key.value)
    raise ConfigFileError(
        f"{path}:{key.line}: [{SECTION}] {KEY}: {key.value}, but the data directory "
        f"{data_dir} holds a {found} store; set `{KEY}: {found}` there (or remove the line), "
        f"or move the data with: {command}"
    )


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
    # The file may hold passwords: the new one keeps the old one's permissions.
    atomic_write(path, ["".join(lines).encode("utf-8")],
                 mode=os.stat(path).st_mode & 0o777)
    return f"{where} changed from {key.value} to {kind}"
