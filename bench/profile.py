"""profile: a benchmark scenario with the router under a profiler, to see the hot path.

    python -m bench profile --target throughput --profiler py-spy
    python -m bench profile --target burst --profiler pyinstrument

- py-spy samples the router process from outside (no change to its speed
  worth noting); the collapsed stacks are summarised into the functions with
  the most samples of their own and the most samples below them, in
  `bench/results/profile-<target>-py-spy.txt` (the raw collapsed stacks go
  next to it as `.collapsed`, for flame graph tools).
- pyinstrument runs inside the router process (through its control pipe)
  and writes its call tree as text (and HTML, not kept in git).

Scenarios: `throughput` (10 clients, saturated, single-task), `burst` (one
client with 10,000 queues, one message each), `scale` (one connection
subscribing 50,000 queues).
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from router.server.settings.config import SINGLE_TASK

from . import harness
from .harness import BenchError, RouterProcess, WorkerGroup, connect, log
from .throughput import RouterLoad, _sleep_until, _window

TARGETS = ("throughput", "burst", "scale", "memory")


class _Profiler:
    """Start/stop one profiler around the measured part of a scenario."""

    def __init__(self, kind: str, router: RouterProcess, name: str) -> None:
        self.kind = kind
        self.router = router
        self.base = harness.RESULTS_DIR / name
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        harness.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        if self.kind == "pyinstrument":
            self.router.call("profile_start", interval=0.0005)
            return
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(self.router.pid), "--rate", "250", "--format", "raw",
             "--output", str(self.base.with_suffix(".collapsed")), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        time.sleep(0.5)  # py-spy attaches
        if self.proc.poll() is not None:
            raise BenchError(f"py-spy failed: {self.proc.stderr.read().decode()[-300:]}")

    def stop(self) -> dict[str, Any]:
        if self.kind == "pyinstrument":
            return self.router.call("profile_stop", path=str(self.base))
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)
        collapsed = self.base.with_suffix(".collapsed")
        summary = summarize_collapsed(collapsed.read_text())
        self.base.with_suffix(".txt").write_text(summary)
        return {"text": str(self.base.with_suffix(".txt")), "collapsed": str(collapsed)}


def summarize_collapsed(text: str, top: int = 40) -> str:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    by_package: collections.Counter[str] = collections.Counter()
    for frame, n in own.items():
        by_package[_package(frame)] += n
    lines = [f"samples: {total}", "", "own time by package:"]
    lines += [f"{n / total * 100:6.1f}%  {p}" for p, n in by_package.most_common()]
    lines += ["", "own time (function and line):"]
    lines += [f"{n / total * 100:6.1f}%  {f}" for f, n in own.most_common(top)]
    lines += ["", "inclusive time:"]
    lines += [f"{n / total * 100:6.1f}%  {f}" for f, n in inclusive.most_common(top + 20)]
    return "\n".join(lines) + "\n"


def _throughput(router: RouterProcess, prof: _Profiler, quick: bool) -> dict[str, Any]:
    duration = 3.0 if quick else 10.0
    with WorkerGroup(router.address, 2) as workers:
        load = RouterLoad(router, workers, 2 if quick else 5)
        load.setup()
        window = _window(duration)
        load.start(window)
        _sleep_until(window["t_start"])
        prof.start()
        _sleep_until(window["t_end"])
        out = prof.stop()
        result = load.finish(duration)
    return {"profiler": out, "msgs_per_s": result["msgs_per_s"]}


def _burst(router: RouterProcess, prof: _Profiler, quick: bool) -> dict[str, Any]:
    n = 2000 if quick else 10_000
    router.call("preload", start=0, count=n)
    with WorkerGroup(router.address, 1) as workers:
        connect(workers, 1)
        workers.call_all({"op": "subscribe", "ranges": [[0, n]]})
        workers.call_all({"op": "drain_start", "expect": [n]})
        prof.start()
        injected = router.call("inject", start=0, count=n)
        reply = workers.call_all({"op": "wait", "job": "drain"})[0]
        out = prof.stop()
    return {"profiler": out, "drain_seconds": reply["last_ack"] - injected["started"]}


def _scale(router: RouterProcess, prof: _Profiler, quick: bool) -> dict[str, Any]:
    n = 5000 if quick else 50_000
    router.call("preload", start=0, count=n)
    with WorkerGroup(router.address, 1) as workers:
        connect(workers, 1)
        prof.start()
        reply = workers.call_all({"op": "subscribe", "ranges": [[0, n]]})[0]
        out = prof.stop()
    return {"profiler": out, "subs_per_s": n / reply["seconds"]}


def run(target: str = "throughput", profiler: str = "pyinstrument", quick: bool = False,
        mode: str = SINGLE_TASK) -> dict[str, Any]:
    scenario = {"throughput": _throughput, "burst": _burst, "scale": _scale,
                "memory": _scale}[target]
    name = f"profile-{target}-{profiler}"
    log(f"profile: {target} under {profiler}")
    with RouterProcess(mode) as router:
        result = scenario(router, _Profiler(profiler, router, name), quick)
    result.update({"target": target, "mode": mode})
    return result


_PACKAGES = (
    ("nacl/", "PyNaCl (Ed25519 verify, XSalsa20-Poly1305)"),
    ("trio_websocket/", "trio-websocket"),
    ("wsproto/", "wsproto (framing, unmasking)"),
    ("h11/", "h11"),
    ("websockets/", "websockets (framing, unmasking)"),
    ("trio/_socket.py", "socket system calls (trio._socket)"),
    ("trio/_core/_io_epoll.py", "epoll (trio)"),
    ("trio/", "trio (scheduling, channels, cancel scopes)"),
    ("router/protocol/", "router.protocol"),
    ("router/server/", "router.server"),
    ("store/", "store"),
    ("sortedcontainers/", "sortedcontainers"),
    ("bench/", "bench control pipe"),
)


def _package(frame: str) -> str:
    """The package a collapsed-stack frame ``func (path:line)`` belongs to."""
    location = frame.rpartition("(")[2]
    for prefix, name in _PACKAGES:
        if location.startswith(prefix) or f"/{prefix}" in location:
            return name
    return "other (stdlib, interpreter)"
