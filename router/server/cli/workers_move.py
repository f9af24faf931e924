"""`smp-router workers-move`: a stopped router's queues moved to another count of
workers (docs/workers.md#another-count-of-workers), with a progress bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from store import SnapshotError
from store.interfaces import StoreError
from store.journal.storelog import StoreLogError
from store.postgres.opener import DatabaseUnavailable, SchemaLocked, SchemaTooNew

from ..settings.config import ConfigError, StartupError
from ..settings.config_file import LOG_LEVELS
from ..workers.move import found_workers, move_workers
from .database import add_database_flags
from .migrate import ProgressBar, database_settings


def add_workers_move_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    move = commands.add_parser(
        "workers-move", help="move a data directory's queues to another count of workers")
    move.add_argument("--data-dir", type=Path, required=True,
                      help="the stopped router's data directory")
    move.add_argument("--workers", type=int, required=True,
                      help="the count of workers it is to be served by")
    add_database_flags(move)  # where the postgres store is, if it is one
    move.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                      help="log level while it runs (default info)")


async def workers_move(args: argparse.Namespace) -> None:
    """Stop the router first: the data directory's lock is held while the queues move."""
    data_dir: Path = args.data_dir
    if not data_dir.is_dir():
        raise ConfigError(f"data directory {data_dir} does not exist")
    before = found_workers(data_dir)
    database = database_settings(data_dir, {
        "db_connection": args.db_connection, "db_schema": args.db_schema,
        "db_pool_size": args.db_pool_size,
    })
    bar = ProgressBar(sys.stderr)
    try:
        moved = await move_workers(data_dir, args.workers, progress=bar.update,
                                   settings=database)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    except (DatabaseUnavailable, SchemaLocked, SchemaTooNew) as e:
        raise ConfigError(f"cannot open the postgres store: {e}") from e
    except (SnapshotError, StoreLogError, StoreError) as e:
        raise StartupError(f"cannot read the stores of {data_dir}: {e}") from e
    finally:
        bar.close()
    if moved.backup is None:
        print(f"{data_dir}: already kept for {args.workers} workers, nothing moved", flush=True)
        return
    print(f"{data_dir}: {moved.queues} queues and {moved.messages} messages moved from "
          f"{before} to {args.workers} workers (counts checked); {moved.exceptions} ids "
          "kept in OWNER_EXCEPTIONS", flush=True)
    print(f"the old shares are kept in {moved.backup} (delete it when no longer needed)",
          flush=True)
