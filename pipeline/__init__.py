"""PySpark jobs over SMP router logs: operator statistics and store-log compaction.

Pure DataFrame -> DataFrame transforms live in `stats_transforms` and
`compact_transforms`; reading and writing in `stats_io`, `stats_job` and
`compact_job`; the command line in `cli` (`smp-pipeline`).
"""
