"""`smp-pipeline compact`: replay store logs with Spark and write the compacted log(s).

Reading keeps log order without a sort: every line gets the sequence number
(file, split start, row id), and rows of one split are read in order in one
task. Damaged input is treated as the router treats it at start: a torn last
line of a file (no LF, or a last line that fails its checksum) is dropped with
a warning; any other unreadable line stops the job, because the router would
refuse to start on that log too.

Output: one file, `--out`, or with `--shards N` a directory of `shard-<i>.log`,
each sorted by line. Files are written by Spark and then moved into place with
the Hadoop FileSystem API, so `--out` may be any path Spark can write.
"""

from __future__ import annotations

import hashlib
import logging
import time
import zlib

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .compact_transforms import BAD_SHARD, fold_queues, output_lines, parse_store_lines

log = logging.getLogger(__name__)
TAIL_BYTES = 1 << 20  # far more than one store log line (a link's two parts: < 180 KB)


class CorruptLogError(ValueError):
    """An input log has an unreadable line that is not its torn last line."""


def shard_of_id(recipient_id: bytes, shards: int) -> int:
    """The shard `--shards` puts a queue in (same rule as the Spark column)."""
    return int(hashlib.sha256(recipient_id).hexdigest()[:8], 16) % shards


def read_store_logs(spark: SparkSession, paths: list[str]) -> DataFrame:
    """(file_no, block, row, value) for every line of every log, in the order given."""
    frames = []
    for file_no, path in enumerate(paths):
        frames.append(
            spark.read.text(path).select(
                F.lit(file_no).alias("file_no"),
                F.col("_metadata.file_block_start").alias("block"),
                F.monotonically_increasing_id().alias("row"),
                "value",
            )
        )
    raw = frames[0]
    for frame in frames[1:]:
        raw = raw.unionByName(frame)
    return raw


class _Files:
    """The Hadoop FileSystem of a path, through the JVM Spark already runs."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs_path(self, path: str):
        p = self._jvm.org.apache.hadoop.fs.Path(path)
        fs = p.getFileSystem(self._conf)
        if fs.getUri().getScheme() == "file":
            # the raw local file system: no `.name.crc` files next to a router's log
            fs = self._jvm.org.apache.hadoop.fs.RawLocalFileSystem()
            fs.initialize(self._jvm.java.net.URI.create("file:///"), self._conf)
        return fs, p

    def tail(self, path: str) -> bytes:
        fs, p = self._fs_path(path)
        size = fs.getFileStatus(p).getLen()
        start = max(0, size - TAIL_BYTES)
        stream = fs.open(p)
        try:
            stream.seek(start)
            # one call: a byte[] comes back to Python as bytes
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream, size - start))
        finally:
            stream.close()

    def move_single_part(self, directory: str, target: str) -> None:
        """Move the one data file Spark wrote in `directory` to `target`."""
        fs, d = self._fs_path(directory)
        listing = fs.listStatus(d) if fs.exists(d) else []  # no directory: an empty shard
        parts = [s.getPath() for s in listing if s.getPath().getName().startswith("part-")]
        _, t = self._fs_path(target)
        if fs.exists(t):
            fs.delete(t, False)
        if not parts:  # nothing to write: an empty log
            fs.create(t, True).close()
            return
        if len(parts) != 1:
            raise RuntimeError(f"expected one output file in {directory}, found {len(parts)}")
        fs.rename(parts[0], t)

    def exists(self, path: str) -> bool:
        fs, p = self._fs_path(path)
        return bool(fs.exists(p))

    def mkdirs(self, path: str) -> None:
        fs, p = self._fs_path(path)
        fs.mkdirs(p)

    def delete(self, path: str) -> None:
        fs, p = self._fs_path(path)
        fs.delete(p, True)


def _torn_tail(tail: bytes) -> tuple[str, str]:
    """(fragment after the last LF, last complete line) of a file's tail."""
    complete, _, fragment = tail.rpartition(b"\n")
    last = complete.rsplit(b"\n", 1)[-1]
    return fragment.decode("ascii", "replace"), last.decode("ascii", "replace")


def _valid_checksum(line: str) -> bool:
    return len(line) > 9 and line[8] == " " and line[:8] == f"{zlib.crc32(line[9:].encode()):08x}"


def _drop_whole_fragments(raw: DataFrame, files: _Files, paths: list[str]) -> DataFrame:
    """The router drops bytes after the last LF even when they pass the checksum;
    such a fragment would be read by Spark as a line, so it is removed here."""
    for file_no, path in enumerate(paths):
        fragment, _ = _torn_tail(files.tail(path))
        if not fragment or not _valid_checksum(fragment):
            continue  # a broken fragment is a bad line and handled as one
        log.warning("compact: %s ends without LF; dropping its last line", path)
        same = raw.where((F.col("file_no") == file_no) & (F.col("value") == fragment))
        last = same.agg(F.max(F.struct("block", "row")).alias("seq")).first()["seq"]
        raw = raw.where(
            ~(
                (F.col("file_no") == file_no)
                & (F.col("block") == last["block"])
                & (F.col("row") == last["row"])
            )
        )
    return raw


def _check_bad_lines(bad: list[tuple[int, int, str]], files: _Files, paths: list[str]) -> None:
    """Allow one unreadable line per file if it is that file's torn last line."""
    for file_no, count, last_value in bad:
        path = paths[file_no]
        fragment, last = _torn_tail(files.tail(path))
        if count == 1 and last_value == (fragment or last):
            log.warning("compact: %s: dropping a torn last line", path)
            continue
        raise CorruptLogError(
            f"{path}: {count} unreadable line(s) that are not a torn last line; "
            "the router would refuse this log too"
        )


def run_compact(
    spark: SparkSession, inputs: list[str], out: str, *, shards: int = 1, partitions: int = 0
) -> int:
    """Compact `inputs` (replayed in order) into `out`; returns the number of queues
    (services, in every shard, are not counted)."""
    started = time.monotonic()
    files = _Files(spark)
    staging = f"{out}.parts"
    files.delete(staging)
    log.info("compact: reading %d store log(s)", len(inputs))
    raw = _drop_whole_fragments(read_store_logs(spark, inputs), files, inputs)
    parsed = parse_store_lines(raw)
    if partitions:
        parsed = parsed.repartition(partitions, "key")
    lines = output_lines(fold_queues(parsed), shards)
    log.info("compact: replaying records per queue and writing %d shard(s)", shards)
    (
        lines.repartition(shards + 1, "shard")
        .sortWithinPartitions("shard", "line")
        .write.partitionBy("shard")
        .text(staging)
    )
    try:
        _check_bad_lines(_read_bad(spark, files, staging), files, inputs)
        written = spark.read.text(staging).where(F.col("shard") >= 0)
        queues = written.where(F.col("value").substr(10, 7) == "create ").count()
        _move_shards(files, staging, out, shards)
    finally:
        files.delete(staging)
    log.info("compact: %d queue(s) in %.1f s", queues, time.monotonic() - started)
    return queues


def _read_bad(spark: SparkSession, files: _Files, staging: str) -> list[tuple[int, int, str]]:
    directory = f"{staging}/shard={BAD_SHARD}"
    if not files.exists(directory):
        return []
    rows = spark.read.text(directory).collect()
    parts = [row.value.split("\t", 2) for row in rows]
    return [(int(file_no), int(count), last) for file_no, count, last in parts]


def _move_shards(files: _Files, staging: str, out: str, shards: int) -> None:
    if shards == 1:
        files.move_single_part(f"{staging}/shard=0", out)
        return
    files.mkdirs(out)
    for shard in range(shards):
        files.move_single_part(f"{staging}/shard={shard}", f"{out}/shard-{shard}.log")
