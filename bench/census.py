"""Where a running router's memory is, for the benchmarks: the router's own census
(router/server/ops/memory.py: by component, by type within each, by allocator) in the
form the benchmarks record, and a census of every object in the process by type.

`type_census()` counts every object the collector knows, the frozen ones included
(`gc.get_objects()` does not list what `gc.freeze()` moved to the permanent
generation), and the untracked ones (bytes, str, int) that containers refer to.
It walks the whole process, so it runs in the benchmark's router only.
"""

from __future__ import annotations

import gc
import sys
from collections import Counter
from typing import Any

from router.server.ops.memory import COMPONENTS, Census, allocator, take_census

__all__ = ["COMPONENTS", "allocator", "components", "type_census"]


async def components(router: Any, top_types: int = 8) -> dict[str, Any]:
    """The census's parts as {name: {bytes, objects, types: {type: [objects, bytes]}}}."""
    census: Census = await take_census(router, max_objects=10**9)
    out: dict[str, Any] = {}
    for name, part in census.parts.items():
        out[name] = {"bytes": part.bytes, "objects": part.objects,
                     "types": {t: [n, size] for t, n, size in part.top_types(top_types)}}
    out["total"] = {"bytes": census.total, "objects": census.objects_walked}
    out["connections_count"] = len(router.connections)
    out["seconds"] = census.seconds
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
