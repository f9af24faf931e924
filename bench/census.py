"""Where a running router's memory is: by component, by type, by allocator.

Three views, each from inside the router's process (`bench.router_process`
runs them on request):

- `components(router)`: the objects reachable from each part of the router,
  by `sys.getsizeof`, each object counted once, in the part that reaches it
  first (in `COMPONENTS` order). The walk stops at the router's shared
  objects (the router itself, its configuration, the other parts' roots),
  at modules, classes, functions and code, and at trio tasks and nurseries
  that are not a connection's own, so that one connection's walk does not
  wander into the listener and from there into everything else. It is an
  independent measure: tracemalloc's traced total is the check on it.
- `type_census()`: every object by type, the frozen ones included
  (`gc.get_objects()` does not list what `gc.freeze()` moved to the permanent
  generation), and the untracked ones (bytes, str, int) that containers refer to.
- `allocator()`: what glibc's malloc and CPython's small-object allocator
  (pymalloc) hold, in use and free: the gap between live Python bytes and RSS.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import re
import sys
import tempfile
import types
from collections import Counter
from typing import Any

import trio

COMPONENTS = ("queue_table", "messages", "subscriptions", "connections", "buffers")
# bytes-like objects at least this long, reached from a connection: I/O buffers
BUFFER_MIN = 1024

_SHARED_TYPES = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                 types.CodeType, types.WrapperDescriptorType, types.MethodDescriptorType,
                 types.GetSetDescriptorType, types.MemberDescriptorType,
                 logging.Logger, logging.Manager, logging.Handler)
_BYTES_LIKE = (bytes, bytearray, memoryview)


# An instance of a plain class keeps its attributes in a values array of its own
# (and, on 3.11, two pointers before the object), which `sys.getsizeof` leaves out
# on 3.11 and 3.12: its size is estimated from the number of attribute values.
_MANAGED_DICT = 1 << 4 if sys.version_info[:2] in ((3, 11), (3, 12)) else 0
_PRE_HEADER = 16 if sys.version_info[:2] == (3, 11) else 0


def _managed_values_size(values: int) -> int:
    prefix = (values + 2 + 7) // 8 * 8
    return _PRE_HEADER + prefix + 8 * values


def _router_roots(router: Any) -> dict[str, list[Any]]:
    subscriptions = [router.subscriptions]
    for name in ("notifications", "services"):
        part = getattr(router, name, None)
        if part is not None:
            subscriptions.append(part)
    return {
        "queue_table": [router.queues],
        "messages": [router.messages],
        "subscriptions": subscriptions,
        "connections": list(router.connections.values()),
    }


def _connection_tasks(conn: Any) -> tuple[list[Any], set[int]]:
    """A connection's tasks (the one running it, those in its nursery, nested) and the
    ids of them and of their nurseries: the task and nursery objects its walk may enter."""
    nursery = getattr(conn, "nursery", None)
    if nursery is None:
        return [], set()
    tasks, allowed = [nursery.parent_task], {id(nursery), id(nursery.parent_task)}
    pending = [nursery]
    while pending:
        n = pending.pop()
        for task in n.child_tasks:
            tasks.append(task)
            allowed.add(id(task))
            for child in task.child_nurseries:
                allowed.add(id(child))
                pending.append(child)
    return tasks, allowed


class _Walk:
    """One pass over the router's parts; `seen` is shared so nothing counts twice."""

    def __init__(self, stop: set[int]) -> None:
        self.stop = stop
        self.seen: set[int] = set()
        self.keep: list[Any] = []  # walked objects stay alive, so no id is reused meanwhile
        self.task_types = (trio.lowlevel.Task, trio.Nursery)

    def walk(self, roots: list[Any], allowed: set[int], result: dict[str, Any],
             buffers: dict[str, Any] | None = None) -> None:
        stack = list(roots)
        seen, stop, keep = self.seen, self.stop, self.keep
        while stack:
            obj = stack.pop()
            i = id(obj)
            if i in seen or i in stop or isinstance(obj, _SHARED_TYPES):
                continue
            if isinstance(obj, self.task_types) and i not in allowed:
                continue
            seen.add(i)
            keep.append(obj)
            referents = gc.get_referents(obj)
            size = sys.getsizeof(obj)
            if type(obj).__flags__ & _MANAGED_DICT:
                size += _managed_values_size(len(referents) - 1)
            name = type(obj).__name__
            target = result
            if buffers is not None and isinstance(obj, _BYTES_LIKE) and size >= BUFFER_MIN:
                target = buffers
            target["bytes"] += size
            target["objects"] += 1
            counted = target["types"].get(name)
            if counted is None:
                target["types"][name] = [1, size]
            else:
                counted[0] += 1
                counted[1] += size
            stack.extend(referents)


def _trio_shared(conn: Any) -> list[Any]:
    """What a connection's tasks point up to and share with every other task: trio's
    run loop (the runner and what it holds) and the cancel status of the listener's
    nursery and those above it (each lists its children: every connection's)."""
    nursery = getattr(conn, "nursery", None)
    if nursery is None:
        return []
    task = nursery.parent_task
    shared: list[Any] = []
    runner = getattr(task, "_runner", None)
    if runner is not None:
        shared.append(runner)
        shared.extend(getattr(runner, name) for name in getattr(type(runner), "__slots__", ())
                      if hasattr(runner, name))
        shared.extend(vars(runner).values() if hasattr(runner, "__dict__") else ())
    outer = task.parent_nursery
    status = getattr(outer, "_cancel_status", None) if outer is not None else None
    while status is not None:
        shared.append(status)
        status = getattr(status, "_parent", None)
    return shared


def components(router: Any, top_types: int = 8) -> dict[str, Any]:
    """Bytes and objects reachable from each part of the router (module docstring), and
    [objects, bytes] of its `top_types` largest types (0: all)."""
    roots = _router_roots(router)
    stop = {id(router), id(router.connections)}
    stop.update(id(v) for v in vars(router).values())
    stop.update(id(r) for rs in roots.values() for r in rs)
    if roots["connections"]:
        stop.update(id(o) for o in _trio_shared(roots["connections"][0]))
    out: dict[str, Any] = {name: {"bytes": 0, "objects": 0, "types": {}}
                           for name in COMPONENTS}
    walker = _Walk(stop)
    for name in ("queue_table", "messages", "subscriptions"):
        for root in roots[name]:
            walker.stop.discard(id(root))
            walker.walk([root], set(), out[name])
            walker.stop.add(id(root))
    for conn in roots["connections"]:
        tasks, allowed = _connection_tasks(conn)
        walker.stop.discard(id(conn))
        walker.walk([conn, *tasks], allowed, out["connections"], out["buffers"])
    for name in COMPONENTS:  # [objects, bytes] of the largest types
        ranked = sorted(out[name]["types"].items(), key=lambda kv: -kv[1][1])
        out[name]["types"] = dict(ranked[:top_types] if top_types else ranked)
    out["total"] = {"bytes": sum(out[n]["bytes"] for n in COMPONENTS),
                    "objects": sum(out[n]["objects"] for n in COMPONENTS)}
    out["connections_count"] = len(roots["connections"])
    return out


def type_census(top: int = 25) -> dict[str, Any]:
    """Objects and bytes by type, over every object the collector knows (the frozen ones
    too) and the untracked ones they refer to.

    The frozen set is made visible with `gc.unfreeze()` and frozen again afterwards,
    as the router's collector policy does in its quiet-time pass; the objects that
    were young then are frozen with it."""
    frozen = gc.get_freeze_count()
    gc.collect()
    gc.unfreeze()
    try:
        tracked = gc.get_objects()
    finally:
        gc.freeze()
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    seen = {id(o) for o in tracked}
    seen.add(id(tracked))
    for obj in tracked:
        name = type(obj).__name__
        counts[name] += 1
        sizes[name] += sys.getsizeof(obj)
        for ref in gc.get_referents(obj):
            if not gc.is_tracked(ref) and id(ref) not in seen:
                seen.add(id(ref))
                rname = type(ref).__name__
                counts[rname] += 1
                sizes[rname] += sys.getsizeof(ref)
    del tracked
    return {"frozen_before": frozen, "objects": sum(counts.values()),
            "bytes": sum(sizes.values()),
            "types": {name: [counts[name], size] for name, size in sizes.most_common(top)},
            "all_types": {name: [counts[name], sizes[name]] for name in sizes}}


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
    """CPython's small-object allocator, from `sys._debugmallocstats()` (which writes
    to the C-level stderr, so that is pointed at a file for the call)."""
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
    None where this C library does not say (not glibc)."""
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
    out["pymalloc_free"] = (py.get("available", 0) + py.get("pool_headers", 0)
                            + py.get("quantization", 0) + py.get("alignment", 0)) or None
    out["pymalloc_arenas"] = py.get("arena_bytes")
    return out
