"""PySpark jobs over SMP router logs: operator statistics and store-log compaction.

Pure DataFrame -> DataFrame transforms live in `stats_transforms`,
`store_transforms` and `compact_transforms`; reading and writing in `stats_io`,
`stats_job`, `store_job` (a postgres store through Spark's JDBC source, its
database named by `store_source`) and `compact_job`; incremental positions in
`follow`; the command line in `cli` (`smp-pipeline`, docs/pipeline.md).

The names below are imported on first use, so `import pipeline` does not load
PySpark until a job needs it.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "build_session": "session",
    "run_stats": "stats_job",
    "run_increment": "stats_job",
    "follow_logs": "stats_job",
    "StatsOutput": "stats_job",
    "run_store": "store_job",
    "parse_store_database": "store_source",
    "run_compact": "compact_job",
    "shard_of_id": "compact_job",
    "CorruptLogError": "compact_job",
    "write_synthetic_log": "synth",
    "synthetic_lines": "synth",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
