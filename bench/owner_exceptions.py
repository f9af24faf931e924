"""The owner exceptions a `workers-move` leaves (docs/workers.md#another-count-of-workers):
memory per exception in a worker, bytes per exception on disk, and what a lookup of
an id costs with a table of that size against an empty one.

    python -m bench owner_exceptions [--exceptions 1000000] [--quick]

The table is what a move from one process to N workers makes of random ids: about
(N - 1) / N of the queues' sender ids (and notifier ids) become exceptions. Memory is
what `tracemalloc` counts for the table as a worker loads it from the file; the
lookups are `Ownership.owner_of` of ids outside the table (the common path, every
command's) timed both ways in the same run, so their ratio is what the table costs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

from router.server.core.ownership import Ownership
from router.server.workers.owner_exceptions import (
    OWNER_EXCEPTIONS_FILE,
    read_owner_exceptions,
    write_owner_exceptions,
)

WORKERS = 4
LOOKUPS = 200_000


def measure(exceptions: int) -> dict[str, float]:
    table = {os.urandom(24): i % WORKERS for i in range(exceptions)}
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        write_owner_exceptions(directory, WORKERS, table)
        file_bytes = (directory / OWNER_EXCEPTIONS_FILE).stat().st_size
        del table
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        loaded = read_owner_exceptions(directory, WORKERS)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    ids = [os.urandom(24) for _ in range(LOOKUPS)]
    plain, moved = Ownership(WORKERS, 0), Ownership(WORKERS, 0, exceptions=loaded)
    timings = {}
    for name, ownership in (("plain", plain), ("moved", moved), ("plain again", plain)):
        owner_of = ownership.owner_of
        start = time.perf_counter()
        for entity_id in ids:
            owner_of(entity_id)
        timings[name] = time.perf_counter() - start
    return {
        "exceptions": len(loaded),
        "bytes_per_exception_in_memory": held / len(loaded),
        "bytes_per_exception_on_disk": file_bytes / len(loaded),
        "lookup_ratio_moved_to_plain": timings["moved"] / min(timings["plain"],
                                                              timings["plain again"]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench owner_exceptions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--exceptions", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="10,000 exceptions")
    args = parser.parse_args(argv)
    figures = measure(10_000 if args.quick else args.exceptions)
    print("| exceptions | bytes each in memory | bytes each on disk | "
          "owner_of, moved / plain |")
    print("|---:|---:|---:|---:|")
    print(f"| {figures['exceptions']:,} | {figures['bytes_per_exception_in_memory']:.0f} | "
          f"{figures['bytes_per_exception_on_disk']:.0f} | "
          f"{figures['lookup_ratio_moved_to_plain']:.2f} |")


if __name__ == "__main__":
    main()
