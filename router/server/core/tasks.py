"""Counting trio tasks: a connection's (`Connection.task_count`), or every task of
the run (the benchmarks report it)."""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

import trio

T = TypeVar("T")


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


@types.coroutine
def noting_waits(work: Awaitable[T], waits: Callable[[], object]) -> Generator[Any, Any, T]:
    """Await `work`, calling `waits()` each time it is about to wait for Trio (for
    whatever: a turn, a commit, a socket). Until its first wait it is `await work`
    itself; from then on it hands each of `work`'s yields to Trio and Trio's answer
    back, as `yield from` would (which cannot take over a coroutine already started)."""
    steps = work.__await__()
    try:
        request = steps.send(None)
        while True:
            waits()
            try:
                answer = yield request
            except BaseException as e:  # thrown in by Trio: it goes on into `work`
                request = steps.throw(e)
            else:
                request = steps.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
