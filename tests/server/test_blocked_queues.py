"""Queues blocked from the control port, kept in the data directory
(`router/server/core/blocked.py`)."""

from __future__ import annotations

from pathlib import Path

from router.server.core.blocked import BlockedQueues


def test_a_block_outlives_a_restart_and_an_unblock_too(tmp_path: Path) -> None:
    blocked = BlockedQueues(tmp_path)
    blocked.add(b"a" * 24, "spam")
    blocked.add_many({b"b" * 24: "content", b"c" * 24: "spam"})
    assert blocked.remove(b"c" * 24) and not blocked.remove(b"c" * 24)
    assert BlockedQueues(tmp_path).reasons == {b"a" * 24: "spam", b"b" * 24: "content"}


def test_the_workers_of_a_shared_directory_each_keep_their_blocks(tmp_path: Path) -> None:
    """On a shared store (PostgreSQL) every worker keeps the one data directory: each
    blocks the queues it owns, and the file keeps every worker's blocks and unblocks,
    not only the last writer's."""
    worker_0, worker_1 = BlockedQueues(tmp_path), BlockedQueues(tmp_path)
    worker_0.add(b"0" * 24, "spam")
    worker_1.add(b"1" * 24, "content")
    worker_0.add(b"2" * 24, "spam")
    worker_1.remove(b"1" * 24)
    worker_1.add_many({b"3" * 24: "spam"})
    assert BlockedQueues(tmp_path).reasons == {b"0" * 24: "spam", b"2" * 24: "spam",
                                               b"3" * 24: "spam"}
