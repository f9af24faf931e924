"""`smp-router migrate-store`: copy a stopped router's queues and messages into
another kind of store, with a progress bar.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from store import migrate_store, read_store_kind
from store.postgres.database import DEFAULT_SCHEMA, redacted
from store.postgres.opener import (
    DEFAULT_CONNECTION,
    DatabaseUnavailable,
    SchemaLocked,
    SchemaTooNew,
)

from ..settings.config import (
    ConfigError,
)
from ..settings.config_file import CONFIG_FILE_NAME, read_config_file
from ..settings.store_key import set_store_keys

DATABASE_SETTINGS = ("db_connection", "db_schema", "db_pool_size")


def database_settings(data_dir: Path, flags: dict[str, object]) -> dict[str, object]:
    """The postgres store's settings: the data directory's smp-router.ini [STORE_LOG]
    db_* keys, replaced by the flags given."""
    settings: dict[str, object] = {}
    config_file = data_dir / CONFIG_FILE_NAME
    if config_file.is_file():
        from_file = read_config_file(config_file)
        settings.update({k: v for k, v in from_file.items() if k in DATABASE_SETTINGS})
    settings.update({k: v for k, v in flags.items() if v is not None})
    return settings


async def migrate(
    data_dir: Path, to_kind: str, database: dict[str, object] | None = None
) -> None:
    """Stop the router first: the data directory must not be in use while it is copied.

    `database`: the postgres store's settings, for whichever side is postgres."""
    bar = ProgressBar(sys.stderr)
    database = database or {}
    from_kind = read_store_kind(data_dir)
    try:
        migrated = await migrate_store(
            data_dir, to_kind, progress=bar.update,
            source_settings=database if from_kind == "postgres" else None,
            **(database if to_kind == "postgres" else {}),
        )
    except ValueError as e:
        raise ConfigError(str(e)) from e
    except (DatabaseUnavailable, SchemaLocked, SchemaTooNew) as e:
        raise ConfigError(f"cannot open the postgres store: {e}") from e
    finally:
        bar.close()
    queues, messages = migrated
    print(f"{data_dir}: {queues} queues and {messages} messages now in a {to_kind} store "
          "(counts checked)", flush=True)
    for backup in migrated.backups:
        if from_kind == "postgres" and backup.name.startswith("postgres-store."):
            # the directory holds only the note of where: the data is the schema's
            schema = database.get("db_schema") or DEFAULT_SCHEMA
            url = redacted(str(database.get("db_connection") or DEFAULT_CONNECTION))
            print(f"the old store is kept in schema {schema} of {url}, named in {backup} "
                  f"(drop it with DROP SCHEMA {schema} CASCADE when no longer needed)",
                  flush=True)
            continue
        print(f"the old store is kept in {backup} (delete it when no longer needed)", flush=True)
    config_file = data_dir / CONFIG_FILE_NAME
    if config_file.is_file():
        for line in set_store_keys(config_file, to_kind):
            print(line, flush=True)


class ProgressBar:
    """One line per phase on a stream, redrawn in place on a terminal, else printed at
    every tenth of the way (so a log file gets a few lines, not thousands)."""

    WIDTH = 30

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._phase: str | None = None
        self._shown = -1

    def update(self, phase: str, done: int, total: int) -> None:
        if phase != self._phase:
            self.close()
            self._phase, self._shown = phase, -1
        tenth = 10 if total == 0 else done * 10 // total
        if not self._tty and tenth == self._shown:
            return
        self._shown = tenth
        filled = self.WIDTH if total == 0 else done * self.WIDTH // total
        line = f"{phase:>8} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total}"
        self._stream.write(("\r" + line) if self._tty else line + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._tty and self._phase is not None:
            self._stream.write("\n")
            self._stream.flush()
        self._phase = None
