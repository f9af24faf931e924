"""`smp-router database import|export`: the reference router's names for moving a
stopped router's store into PostgreSQL and back (docs/stores.md#postgresql).

They are `migrate-store` under those names, one code path: `import` is
`migrate-store --to postgres` from whichever kind the data directory holds
(queues, links and messages go in by binary COPY), `export` is `migrate-store`
from postgres to `--to KIND`, the journal kind by default (its store log is
the reference's export target). The reference's `--table queues|messages`
splits a store this router keeps whole (one kind holds both), so only `all`
is taken.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import trio

from store import STORE_KINDS, read_store_kind

from ..settings.config import ConfigError
from ..settings.config_file import LOG_LEVELS
from .migrate import database_settings, migrate
from .settings import COUNT

EXPORT_KINDS = tuple(kind for kind in STORE_KINDS if kind != "postgres")
DEFAULT_EXPORT_KIND = "journal"  # the store log, what the reference exports to


def add_database_flags(parser: argparse.ArgumentParser) -> None:
    """The postgres store's settings as flags, under this router's names and the
    reference's (`--database`, `--schema`, `--pool-size`)."""
    parser.add_argument("--db-connection", "--database", metavar="URL", dest="db_connection",
                        help="postgres store: the database, a postgresql:// URL (default: "
                        "smp-router.ini's db_connection)")
    parser.add_argument("--db-schema", "--schema", metavar="NAME", dest="db_schema",
                        help="postgres store: its schema (default: smp-router.ini's "
                        "db_schema, else smp_server)")
    parser.add_argument("--db-pool-size", "--pool-size", metavar="N", type=COUNT,
                        dest="db_pool_size",
                        help="postgres store: connections to the database at most (default: "
                        "smp-router.ini's db_pool_size, else 10)")


def add_database_command(commands: argparse._SubParsersAction) -> None:
    database = commands.add_parser(
        "database", help="move a stopped router's store into PostgreSQL and back "
        "(the reference router's names for migrate-store)",
    )
    actions = database.add_subparsers(dest="database_command", metavar="ACTION", required=True)
    imports = actions.add_parser(
        "import", help="copy the data directory's store into an empty PostgreSQL schema "
        "(migrate-store --to postgres)",
    )
    exports = actions.add_parser(
        "export", help="copy the PostgreSQL schema back into the data directory "
        f"(migrate-store --to {DEFAULT_EXPORT_KIND} by default)",
    )
    exports.add_argument("--to", choices=EXPORT_KINDS, default=DEFAULT_EXPORT_KIND,
                         dest="to_kind", help=f"the store kind to export to (default "
                         f"{DEFAULT_EXPORT_KIND}: the store log and message files)")
    for parser in (imports, exports):
        parser.add_argument("--data-dir", type=Path, required=True,
                            help="the stopped router's data directory")
        parser.add_argument("--table", default="all", metavar="TABLE",
                            help="the reference's choice of tables: only all (the default) "
                            "is taken, one store kind keeps queues and messages together")
        add_database_flags(parser)
        parser.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                            help="log level while it runs (default info)")


def run_database_command(args: argparse.Namespace) -> None:
    """Run `database import|export` (the data directory locked by the caller)."""
    if args.table != "all":
        raise ConfigError(
            f"--table {args.table}: only all is taken here (one store kind keeps queues and "
            "messages together; the reference's queues and messages tables move as one)"
        )
    data_dir: Path = args.data_dir
    found = read_store_kind(data_dir)
    if args.database_command == "import":
        if found == "postgres":
            raise ConfigError(
                f"{data_dir} holds a postgres store already: nothing to import "
                f"(export it with: smp-router database export --data-dir {data_dir})"
            )
        to_kind = "postgres"
    else:
        if found is not None and found != "postgres":
            raise ConfigError(
                f"{data_dir} holds a {found} store, not postgres: nothing to export "
                f"(import it with: smp-router database import --data-dir {data_dir})"
            )
        to_kind = args.to_kind
    database = database_settings(data_dir, {
        "db_connection": args.db_connection, "db_schema": args.db_schema,
        "db_pool_size": args.db_pool_size,
    })
    trio.run(migrate, data_dir, to_kind, database)
