"""Counting trio tasks: a connection's (`Connection.task_count`), or every task of
the run (the benchmarks report it)."""

from __future__ import annotations

import trio


def count_tasks(nursery: trio.Nursery) -> int:
    """The tasks running in `nursery` and, recursively, in their nurseries."""
    count = 0
    for task in nursery.child_tasks:
        count += 1
        for child in task.child_nurseries:
            count += count_tasks(child)
    return count


def run_task_count() -> int:
    """Every task in this trio run, the root task included."""
    root = trio.lowlevel.current_root_task()
    assert root is not None
    return 1 + sum(count_tasks(nursery) for nursery in root.child_nurseries)
