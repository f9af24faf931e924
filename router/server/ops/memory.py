"""Where the running router's memory is: by component, by type, by allocator.

Theory of operation: the census walks the objects reachable from each part of
the router (the queue table, stored messages, subscriptions, connections and
the I/O buffers their connections hold) and adds up `sys.getsizeof` of each,
each object counted once, in the first part that reaches it (`COMPONENTS`
order). The walk stops at what the parts share: the router's own objects,
modules, classes, functions and code, loggers, trio's run loop, and trio tasks
and nurseries that are not a connection's own (so that one connection's walk
does not go up into the listener and from there into everything). It needs no
tracemalloc; where tracemalloc runs, its total is the check on the walk
(bench/memory_profile.py, tests/bench).

The cost is bounded: at most `max_objects` objects are walked (the result
says if the walk stopped there), `CHUNK` at a time with a trio checkpoint in
between so that clients are served meanwhile, one census at a time; the walk
holds a reference and an id per object until it ends (about 60 bytes each).
The control port's `memory` command and the metrics' `smp_router_memory_*`
gauges show the latest census, taking a new one when it is older than they
accept.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import re
import sys
import tempfile
import time
import tracemalloc
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

COMPONENTS = ("queue_table", "messages", "subscriptions", "connections", "buffers")
BUFFER_MIN = 1024  # bytes-like objects at least this long, held by a connection: I/O buffers
CHUNK = 5000  # objects walked between two checkpoints
MAX_OBJECTS = 2_000_000  # a census walks at most this many objects
TOP_TYPES = 12

_SHARED_TYPES = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                 types.CodeType, types.WrapperDescriptorType, types.MethodDescriptorType,
                 types.GetSetDescriptorType, types.MemberDescriptorType,
                 logging.Logger, logging.Manager, logging.Handler)
_BYTES_LIKE = (bytes, bytearray, memoryview)
_TASK_TYPES = (trio.lowlevel.Task, trio.Nursery)

# An instance of a plain class keeps its attributes in a values array of its own
# (and, on 3.11, two pointers before the object), which `sys.getsizeof` leaves out
# on 3.11 and 3.12: its size is estimated from the number of attribute values.
_MANAGED_DICT = 1 << 4 if sys.version_info[:2] in ((3, 11), (3, 12)) else 0
_PRE_HEADER = 16 if sys.version_info[:2] == (3, 11) else 0


class MemoryParts(Protocol):
    """What the census reads of the router."""

    queues: object
    messages: object
    subscriptions: object
    connections: Mapping[int, Any]


@dataclass
class Part:
    bytes: int = 0
    objects: int = 0
    types: dict[str, list[int]] = field(default_factory=dict)  # name -> [objects, bytes]

    def add(self, name: str, size: int) -> None:
        self.bytes += size
        self.objects += 1
        counted = self.types.get(name)
        if counted is None:
            self.types[name] = [1, size]
        else:
            counted[0] += 1
            counted[1] += size

    def top_types(self, limit: int) -> list[tuple[str, int, int]]:
        ranked = sorted(self.types.items(), key=lambda kv: -kv[1][1])
        return [(name, n, size) for name, (n, size) in (ranked[:limit] if limit else ranked)]


@dataclass
class Census:
    """One census: the parts, what it walked, and the process figures beside it."""

    parts: dict[str, Part]
    objects_walked: int
    complete: bool  # False: stopped at max_objects, the figures are lower bounds
    seconds: float  # wall time, checkpoints included
    taken_at: float  # time.monotonic()
    rss: int | None
    traced: int | None  # tracemalloc's current total, if it runs
    allocator: dict[str, int | None]

    @property
    def total(self) -> int:
        return sum(p.bytes for p in self.parts.values())

    def types(self, limit: int = TOP_TYPES) -> list[tuple[str, int, int]]:
        """The largest types over all parts: (name, objects, bytes)."""
        merged: dict[str, list[int]] = {}
        for part in self.parts.values():
            for name, (n, size) in part.types.items():
                entry = merged.setdefault(name, [0, 0])
                entry[0] += n
                entry[1] += size
        ranked = sorted(merged.items(), key=lambda kv: -kv[1][1])
        return [(name, n, size) for name, (n, size) in ranked[:limit]]

    def lines(self, top: int = TOP_TYPES) -> list[str]:
        """The census as the control port prints it: one `name: value` per line."""
        out = [f"{name}: {part.bytes} bytes, {part.objects} objects"
               for name, part in self.parts.items()]
        out.append(f"total: {self.total} bytes, {self.objects_walked} objects"
                   + ("" if self.complete else f" (stopped at {self.objects_walked} objects)"))
        for name, n, size in self.types(top):
            out.append(f"type {name}: {size} bytes, {n} objects")
        if self.traced is not None:
            out.append(f"traced (tracemalloc): {self.traced} bytes")
        if self.rss is not None:
            out.append(f"rss: {self.rss} bytes")
        for key, value in self.allocator.items():
            if value is not None:
                out.append(f"{key}: {value} bytes")
        out.append(f"census: {self.seconds * 1000:.0f} ms")
        return out


def _managed_values_size(values: int) -> int:
    prefix = (values + 2 + 7) // 8 * 8
    return _PRE_HEADER + prefix + 8 * values


def connection_tasks(conn: Any) -> tuple[list[Any], set[int]]:
    """A connection's tasks (the one running it, its helper tasks, those in their
    nurseries) and the ids of them and their nurseries: the task and nursery objects
    its walk may enter."""
    receiving = getattr(conn, "receiving_task", None)
    if receiving is None:
        return [], set()
    tasks = [receiving, *conn.helper_tasks()]
    allowed = {id(task) for task in tasks}
    pending = [nursery for task in tasks[1:] for nursery in task.child_nurseries]
    while pending:
        n = pending.pop()
        allowed.add(id(n))
        for task in n.child_tasks:
            tasks.append(task)
            allowed.add(id(task))
            pending.extend(task.child_nurseries)
    return tasks, allowed


def _trio_shared(conn: Any) -> list[Any]:
    """What a connection's tasks point up to and share with every other task: trio's
    run loop (the runner and what it holds), the cancel status of the listener's
    nursery and those above it (each lists its children: every connection's), and
    the nursery the connections' helper tasks run in."""
    task = getattr(conn, "receiving_task", None)
    if task is None:
        return []
    shared: list[Any] = []
    runner = getattr(task, "_runner", None)
    if runner is not None:
        shared.append(runner)
        for name in getattr(type(runner), "__slots__", ()):
            if hasattr(runner, name):
                shared.append(getattr(runner, name))
        if hasattr(runner, "__dict__"):
            shared.extend(vars(runner).values())
    for outer in (task.parent_nursery, getattr(conn, "_helper_nursery", None)):
        if outer is None:
            continue
        shared.append(outer)
        status = getattr(outer, "_cancel_status", None)
        while status is not None:
            shared.append(status)
            status = getattr(status, "_parent", None)
    return shared


class _Walk:
    """The walk over the router's parts; `seen` is shared, so nothing counts twice."""

    def __init__(self, stop: set[int], max_objects: int) -> None:
        self.stop = stop
        self.seen: set[int] = set()
        self.keep: list[Any] = []  # walked objects stay alive, so no id is reused meanwhile
        self.max_objects = max_objects

    @property
    def full(self) -> bool:
        return len(self.keep) >= self.max_objects

    async def walk(self, roots: Iterable[Any], allowed: set[int], part: Part,
                   buffers: Part | None = None, chunk: int = CHUNK) -> None:
        stack = list(roots)
        seen, stop, keep = self.seen, self.stop, self.keep
        budget = chunk
        while stack and not self.full:
            obj = stack.pop()
            i = id(obj)
            if i in seen or i in stop or isinstance(obj, _SHARED_TYPES):
                continue
            if isinstance(obj, _TASK_TYPES) and i not in allowed:
                continue
            seen.add(i)
            keep.append(obj)
            referents = gc.get_referents(obj)
            size = sys.getsizeof(obj)
            if type(obj).__flags__ & _MANAGED_DICT:
                size += _managed_values_size(len(referents) - 1)
            target = part
            if buffers is not None and isinstance(obj, _BYTES_LIKE) and size >= BUFFER_MIN:
                target = buffers
            target.add(type(obj).__name__, size)
            stack.extend(referents)
            budget -= 1
            if budget <= 0:
                budget = chunk
                await trio.lowlevel.checkpoint()


async def take_census(router: MemoryParts, *, max_objects: int = MAX_OBJECTS,
                      chunk: int = CHUNK) -> Census:
    """Walk the router's parts (module docstring); serves clients between chunks."""
    started, began = time.perf_counter(), time.monotonic()
    parts = {name: Part() for name in COMPONENTS}
    connections = list(router.connections.values())
    roots = {"queue_table": [router.queues], "messages": [router.messages],
             "subscriptions": [router.subscriptions]}
    for name in ("notifications", "services"):
        extra = getattr(router, name, None)
        if extra is not None:
            roots["subscriptions"].append(extra)
    stop = {id(router), id(router.connections), id(connections)}
    stop.update(id(v) for v in vars(router).values())
    stop.update(id(c) for c in connections)
    if connections:
        stop.update(id(o) for o in _trio_shared(connections[0]))
    walk = _Walk(stop, max_objects)
    for name in ("queue_table", "messages", "subscriptions"):
        for root in roots[name]:
            walk.stop.discard(id(root))
            await walk.walk([root], set(), parts[name], chunk=chunk)
            walk.stop.add(id(root))
    for conn in connections:
        tasks, allowed = connection_tasks(conn)
        walk.stop.discard(id(conn))
        await walk.walk([conn, *tasks], allowed, parts["connections"], parts["buffers"],
                        chunk=chunk)
    walked, complete = len(walk.keep), not walk.full
    del walk
    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else None
    return Census(parts=parts, objects_walked=walked, complete=complete,
                  seconds=time.perf_counter() - started, taken_at=began, rss=_rss(),
                  traced=traced, allocator=allocator())


class MemoryCensus:
    """The latest census of one router, and at most one being taken at a time."""

    def __init__(self, router: MemoryParts, max_objects: int = MAX_OBJECTS) -> None:
        self._router = router
        self.max_objects = max_objects
        self.latest: Census | None = None
        self._lock = trio.Lock()

    async def fresh(self, max_age: float) -> Census:
        """The latest census if it is at most `max_age` seconds old, else a new one
        (a caller that finds one being taken waits for it instead of starting another)."""
        async with self._lock:
            latest = self.latest
            if latest is None or time.monotonic() - latest.taken_at > max_age:
                self.latest = latest = await take_census(self._router,
                                                         max_objects=self.max_objects)
            return latest


# --- the allocators ------------------------------------------------------------------


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]


_PYMALLOC = {
    "allocated": re.compile(r"# bytes in allocated blocks\s*=\s*([\d,]+)"),
    "available": re.compile(r"# bytes in available blocks\s*=\s*([\d,]+)"),
    "pool_headers": re.compile(r"# bytes lost to pool headers\s*=\s*([\d,]+)"),
    "quantization": re.compile(r"# bytes lost to quantization\s*=\s*([\d,]+)"),
    "alignment": re.compile(r"# bytes lost to arena alignment\s*=\s*([\d,]+)"),
    "arenas": re.compile(r"(\d+) arenas \* (\d+) bytes/arena"),
}


def pymalloc_stats() -> dict[str, int]:
    """CPython's small-object allocator, from `sys._debugmallocstats()`, which writes to
    the C-level stderr (pointed at a file for the call). Empty while tracemalloc runs:
    the statistics are only given with pymalloc as the allocator."""
    with tempfile.TemporaryFile(mode="w+") as f:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read()
    out: dict[str, int] = {}
    for key, pattern in _PYMALLOC.items():
        match = pattern.search(text)
        if match is None:
            continue
        if key == "arenas":
            out["arena_bytes"] = int(match.group(1)) * int(match.group(2))
        else:
            out[key] = int(match.group(1).replace(",", ""))
    return out


def allocator() -> dict[str, int | None]:
    """glibc malloc (in use, free, mmapped) and pymalloc (in use, free in its pools);
    None where the C library or the allocator does not say."""
    out: dict[str, int | None] = {"malloc_in_use": None, "malloc_free": None,
                                  "malloc_mmapped": None}
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
        out.update(malloc_in_use=info.uordblks + info.hblkhd, malloc_free=info.fordblks,
                   malloc_mmapped=info.hblkhd)
    except (OSError, AttributeError):
        pass
    py = pymalloc_stats()
    out["pymalloc_in_use"] = py.get("allocated")
    slack = [py.get(k) for k in ("available", "pool_headers", "quantization", "alignment")]
    out["pymalloc_free"] = sum(v for v in slack if v is not None) if py else None
    out["pymalloc_arenas"] = py.get("arena_bytes")
    return out


def _rss() -> int | None:
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
