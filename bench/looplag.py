"""How late a process's Trio loop runs, and what it was doing when it stalled.

A benchmark's latency figure is the router's delay plus the delay of the
processes that measure it. `LoopLag` tells them apart: a task in the loop sleeps
`interval` and records how much later than asked it wakes (the lag every task of
the process waits on top of its own work), and a watchdog thread, seeing the
loop not come back for `stall` seconds, takes the stack of the loop's thread
once per stall, so that a report says what a stall was made of rather than only
that it happened.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
import traceback
from typing import Any

import trio

KEEP_STALLS = 20  # the longest stalls kept with their stacks


class LoopLag:
    def __init__(self, interval: float = 0.01, stall: float = 0.2) -> None:
        self.interval = interval
        self.stall = stall
        self._loop_thread = threading.get_ident()
        self._last_wake = time.perf_counter()
        self._stack: str | None = None  # taken during the stall in progress
        self._in_gc_since: float | None = None
        self._stop = threading.Event()
        self.reset()
        gc.callbacks.append(self._gc_callback)
        threading.Thread(target=self._watch, daemon=True, name="loop-lag").start()

    def reset(self) -> None:
        self.max_ms = 0.0
        self.over_100ms = 0
        self.wakes = 0
        self.stalls: list[dict[str, Any]] = []

    async def run(self) -> None:
        """Until cancelled: sleep, measure the lateness, repeat."""
        try:
            while True:
                asked = time.perf_counter()
                await trio.sleep(self.interval)
                now = time.perf_counter()
                self._woke(now, (now - asked - self.interval) * 1000)
        finally:
            self._stop.set()
            gc.callbacks.remove(self._gc_callback)

    def _woke(self, now: float, late_ms: float) -> None:
        self.wakes += 1
        self.max_ms = max(self.max_ms, late_ms)
        if late_ms > 100:
            self.over_100ms += 1
        stack, self._stack = self._stack, None
        if stack is not None and late_ms >= self.stall * 500:  # not a stack taken just late
            self.stalls.append({"at": time.monotonic(), "ms": round(late_ms, 1), "stack": stack})
            self.stalls.sort(key=lambda s: -s["ms"])
            del self.stalls[KEEP_STALLS:]
        self._last_wake = now

    def _gc_callback(self, phase: str, info: dict[str, int]) -> None:
        self._in_gc_since = time.perf_counter() if phase == "start" else None

    def _watch(self) -> None:
        while not self._stop.wait(self.stall / 2):
            if self._stack is not None or time.perf_counter() - self._last_wake < self.stall:
                continue
            frame = sys._current_frames().get(self._loop_thread)
            if frame is None:
                continue
            stack = "".join(traceback.format_stack(frame, limit=25))
            # Not kept until the next stall: a frame held here keeps the locals of the
            # code that stalled (and everything they refer to) alive in the router.
            del frame
            gc_started = self._in_gc_since
            if gc_started is not None:
                seconds = time.perf_counter() - gc_started
                stack = f"(in a gc collection for {seconds:.2f} s)\n{stack}"
            self._stack = stack

    def report(self) -> dict[str, Any]:
        return {"max_ms": round(self.max_ms, 1), "over_100ms": self.over_100ms,
                "wakes": self.wakes, "stalls": self.stalls}
