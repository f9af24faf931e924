"""postgres_writes: three ways to write a block's 100 SENDs into PostgreSQL, side by side.

    python -m bench postgres_writes [--blocks N] [--quick] [--out DIR]

The postgres message store's write is one call of the database function
`write_message` (store/postgres/schema.py). A block of SENDs can reach it:

- one by one: a statement per SEND, each its own transaction and round trip
  (what the router did before a block's run of SENDs was written together);
- pipeline: the block's statements in one transaction, sent at once in psycopg's
  pipeline mode (one round trip, a statement per SEND), parameters in binary;
- arrays, text: one statement over arrays, the parameters in text (a bytea[] literal);
- arrays: the same in binary (`store.postgres.schema.WRITES`, what the store does:
  one round trip, one statement).

Each writes `--blocks` blocks of `BLOCK` messages of `BODY` bytes into `BLOCK`
queues (a fresh schema each) on a private PostgreSQL (bench/postgres_server.py),
with the router's `--fsync batch` commit (synchronous). Figures: blocks per second
and milliseconds per block, median of the runs, the ways interleaved.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from store.postgres.database import PostgresDatabase
from store.postgres.schema import WRITES

from .harness import log, md_table, median, write_results
from .postgres_server import PostgresServer

BLOCK = 100
BODY = 16000
BLOCKS, QUICK_BLOCKS = 200, 20
REPEATS = 3
ONE = "SELECT write_message(%s, %s, %s, %s, %s, %s)"  # as the store's write_message
ONE_BINARY = ONE.replace("%s", "%b")
WRITES_TEXT = WRITES.replace("%b", "%s")
QUOTA = 1_000_000


def _block(queues: list[bytes]) -> list[tuple[bytes, bytes, int, bytes, bytes]]:
    now = int(time.time())
    return [(rid, os.urandom(24), now, b"F", os.urandom(BODY)) for rid in queues]


def one_by_one(conn: psycopg.Connection, block: list[tuple]) -> list[str]:
    return [conn.execute(ONE, (*row, QUOTA)).fetchone()[0] for row in block]


def pipeline(conn: psycopg.Connection, block: list[tuple]) -> list[str]:
    with conn.pipeline(), conn.transaction():
        cursors = [conn.execute(ONE_BINARY, (*row, QUOTA)) for row in block]
    return [cursor.fetchone()[0] for cursor in cursors]


def _arrays(query: str) -> Callable[[psycopg.Connection, list[tuple]], list[str]]:
    def write(conn: psycopg.Connection, block: list[tuple]) -> list[str]:
        columns = list(zip(*block, strict=True))
        return [row[0] for row in conn.execute(query, (QUOTA, *map(list, columns))).fetchall()]

    return write


WAYS = {"one by one": one_by_one, "pipeline": pipeline, "arrays, text": _arrays(WRITES_TEXT),
        "arrays": _arrays(WRITES)}


def _schema(url: str, name: str) -> None:
    """A fresh schema with the store's tables and functions (the store's own migration)."""
    import trio

    async def create() -> None:
        db = PostgresDatabase(url, schema=name, pool_size=1)
        await db.open()
        await db.close()

    trio.run(create)


def measure(url: str, way: str, blocks: int, schema: str) -> float:
    """Seconds per block."""
    _schema(url, schema)
    queues = [os.urandom(24) for _ in range(BLOCK)]
    write = WAYS[way]
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as conn:
        prepared = [_block(queues) for _ in range(blocks)]
        t0 = time.perf_counter()
        for block in prepared:
            results = write(conn, block)
            assert len(results) == BLOCK and "quota-exceeded" not in results, results[:3]
        seconds = (time.perf_counter() - t0) / blocks
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return seconds


def run(blocks: int, repeats: int, out: Path | None, *, quick: bool = False) -> list[dict]:
    server = PostgresServer()
    server.start()
    try:
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        for r in range(repeats):
            for way in WAYS:
                log(f"postgres_writes: {way}, {blocks} blocks of {BLOCK} (run {r + 1}/{repeats})")
                times[way].append(measure(server.url, way, blocks, f"w{r}_{way[:3]}"))
    finally:
        server.stop()
    base = median(times["one by one"])
    rows = [{"way": way, "ms_per_block": median(t) * 1e3, "blocks_per_s": 1 / median(t),
             "vs_one_by_one": base / median(t)} for way, t in times.items()]
    text = (f"{blocks} blocks of {BLOCK} SENDs ({BODY:,}-byte bodies), median of {repeats}; "
            f"load average {os.getloadavg()[0]:.1f}\n\n" + md_table(
                ["way", "ms per block", "blocks/s", "vs one by one"],
                [(r["way"], r["ms_per_block"], r["blocks_per_s"], f"{r['vs_one_by_one']:.2f}x")
                 for r in rows]))
    # A quick run writes beside the committed figures, never over them.
    write_results("postgres-writes-quick" if quick else "postgres-writes",
                  {"blocks": blocks, "repeats": repeats, "rows": rows}, text, out)
    print(text)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench postgres_writes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int)
    parser.add_argument("--quick", action="store_true", help="a few blocks, one run")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results;"
                        " --quick writes postgres-writes-quick.*)")
    args = parser.parse_args(argv)
    run(args.blocks or (QUICK_BLOCKS if args.quick else BLOCKS), 1 if args.quick else REPEATS,
        args.out, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
