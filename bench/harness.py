"""The runner's side: the router process, the echo server, the load workers, results.

Everything here is synchronous: a benchmark is a script of phases (start the
router, connect, subscribe, measure, stop) and each phase waits for the
processes doing the work.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@contextmanager
def results_for(out: Path | None, quick: bool, name: str) -> Iterator[Path]:
    """Where a run writes its results: `--out`; else, for `--quick`, a scratch directory
    removed once the run has printed its tables (a quick run's figures are for the
    terminal and never replace bench/results; `--out DIR` keeps them); else bench/results."""
    if out is not None:
        yield out
    elif not quick:
        yield RESULTS_DIR
    else:
        with tempfile.TemporaryDirectory(prefix=f"smp-bench-{name}-") as scratch:
            yield Path(scratch)


def shown(out: Path) -> str:
    """How a run names its results directory: a scratch one is said to go away."""
    scratch = out.parent == Path(tempfile.gettempdir()) and out.name.startswith("smp-bench-")
    return f"{out} (removed after this run; --out DIR keeps them)" if scratch else str(out)
START_TIMEOUT = 30.0
# Arguments between the interpreter and `-m bench.router_process`: `bench.memray_run`
# puts `-m memray run ...` here to run the router under memray.
ROUTER_WRAPPER: list[str] = []

# The ready line's two parts, found apart: a tree of another version (compare,
# --root) may print them in another order (cli/serve.py ready_line is this one's).
_SMP_ADDRESS = re.compile(r"smp://\S+")
_WS_URL = re.compile(r"wss?://\S+")


def smp_address(line: str) -> str:
    """The router's smp:// address in its ready line, wherever the line puts it."""
    found = _SMP_ADDRESS.search(line)
    if found is None:
        raise BenchError(f"router did not start: {line!r}")
    return found.group()


class BenchError(RuntimeError):
    """A benchmark could not run as planned (a process failed or answered an error)."""


def _checked(reply: Any, what: str) -> Any:
    if isinstance(reply, dict) and "error" in reply:
        raise BenchError(f"{what}: {reply['error']}")
    return reply


class RouterProcess:
    """`python -m bench.router_process` and its control pipe."""

    def __init__(
        self, delivery: str, *, tracemalloc: bool = False, extra: Sequence[str] = (),
        root: Path | None = None,
    ) -> None:
        """`root`: the source tree to run the router from (another checkout, to compare)."""
        cmd = [sys.executable, *ROUTER_WRAPPER, "-m", "bench.router_process",
               "--delivery", delivery, *extra]
        if tracemalloc:
            cmd.append("--tracemalloc")
        self.delivery = delivery
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            cwd=root or Path(__file__).resolve().parent.parent,
        )
        assert self.proc.stdout is not None
        line = _readline(self.proc.stdout, START_TIMEOUT)
        address, url = _SMP_ADDRESS.search(line), _WS_URL.search(line)
        if address is None or url is None:
            self.close()
            raise BenchError(f"router did not start: {line!r}")
        self.tls_address, self.url = address.group(), url.group()
        # What the benchmarks measure unless they say otherwise: WebSocket (an smp://
        # address is native TLS, docs/protocol.md#native-tls).
        key_hash = self.tls_address.removeprefix("smp://").split("@")[0]
        self.address = self.url.replace("ws://", f"ws://{key_hash}@", 1)
        self.ps = psutil.Process(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, op: str, **args: Any) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise BenchError(f"router exited during {op} (code {self.proc.poll()})")
        return _checked(json.loads(line), f"router {op}")

    def rss(self) -> int:
        return self.ps.memory_info().rss

    def cpu_seconds(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("quit")
            except (BenchError, OSError, ValueError):
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> RouterProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EchoServer:
    """`python -m bench.echo`: a plain trio-websocket echo server (the ceiling)."""

    def __init__(self, server: str = "trio-websocket") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.echo", "--server", server],
            stdout=subprocess.PIPE, text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        assert self.proc.stdout is not None
        line = _readline(self.proc.stdout, START_TIMEOUT)
        match = re.search(r"ws://\S+", line)
        if match is None:
            self.close()
            raise BenchError(f"echo server did not start: {line!r}")
        self.url = match.group(0)
        self.ps = psutil.Process(self.proc.pid)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> EchoServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _readline(stream: Any, timeout: float) -> str:
    """One line from a child's stdout, or "" if none comes in time."""
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return result[0] if result else ""


def worker_context() -> multiprocessing.context.BaseContext:
    """How load processes (bench.loadgen's workers, bench.fleet's fleets) start: forked
    from a server process that has imported both once (their imports take seconds on a
    loaded machine, before a process has done anything), not each a fresh interpreter
    importing them again. A process still starts clean: no Trio loop, thread or
    connection of the runner is inherited, and `random` is reseeded at the fork."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["bench.loadgen", "bench.fleet"])
    return context


class WorkerGroup:
    """Load worker processes (bench.loadgen), each with its own Trio loop."""

    def __init__(self, address: str, count: int) -> None:
        from .loadgen import worker_main

        ctx = worker_context()
        self.pipes = []
        self.procs = []
        for index in range(count):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(child, address, index), daemon=True)
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)

    def __len__(self) -> int:
        return len(self.pipes)

    def call(self, requests: Sequence[dict | None]) -> list[dict | None]:
        """Send request i to worker i (None: nothing for it), then collect the answers."""
        for pipe, request in zip(self.pipes, requests, strict=True):
            if request is not None:
                pipe.send(request)
        replies: list[dict | None] = []
        for pipe, request in zip(self.pipes, requests, strict=True):
            if request is None:
                replies.append(None)
                continue
            replies.append(_checked(pipe.recv(), f"worker {request['op']}"))
        return replies

    def call_all(self, request: dict) -> list[dict]:
        return self.call([request] * len(self.pipes))  # type: ignore[return-value]

    def close(self) -> None:
        for pipe, proc in zip(self.pipes, self.procs, strict=True):
            if proc.is_alive():
                try:
                    pipe.send({"op": "exit"})
                except (BrokenPipeError, OSError):
                    pass
        for pipe, proc in zip(self.pipes, self.procs, strict=True):
            try:
                if pipe.poll(15):
                    pipe.recv()
            except (EOFError, OSError):
                pass
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PeakSampler:
    """Samples a process's RSS from outside in a thread; `peak` after the block."""

    def __init__(self, process: psutil.Process, interval: float = 0.005) -> None:
        self.process = process
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# --- splitting work -------------------------------------------------------------------


def split(total: int, parts: int) -> list[int]:
    """`total` as `parts` near-equal counts."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def ranges(start: int, counts: Iterable[int]) -> list[list[int]]:
    """Consecutive [start, count] ranges of the given sizes."""
    out = []
    for n in counts:
        out.append([start, n])
        start += n
    return out


def connect(
    workers: WorkerGroup, connections: int, max_version: int | None = None
) -> list[int]:
    """Open `connections` router connections spread over the workers; per-worker counts.
    `max_version` caps the SMP version the clients ask for (the newest by default)."""
    per_worker = split(connections, len(workers))
    replies = workers.call([{"op": "connect", "count": n, "max_version": max_version}
                            if n else None for n in per_worker])
    failed = sum(r["errors"] for r in replies if r)
    if failed:
        raise BenchError(f"{failed} of {connections} connections failed")
    return per_worker


def subscribe(
    workers: WorkerGroup, per_worker: list[int], start: int, queues: int,
    first: list[int] | None = None,
) -> tuple[float, list[list[list[int]]]]:
    """Subscribe queues `start..start+queues-1`, spread evenly over the connections
    `connect` opened (`first[w]`: how many worker w already had before them).

    Returns the wall time and, per worker, the [start, count] range of each client.
    """
    first = first or [0] * len(per_worker)
    counts = split(queues, sum(per_worker))
    plan: list[list[list[int]]] = []
    pos = 0
    for n in per_worker:
        plan.append(ranges(start + sum(counts[:pos]), counts[pos : pos + n]))
        pos += n
    began = time.monotonic()
    replies = workers.call([{"op": "subscribe", "ranges": r, "first": f} if r else None
                            for r, f in zip(plan, first, strict=True)])
    seconds = time.monotonic() - began
    errors = sum(r["errors"] for r in replies if r)
    if errors:
        raise BenchError(f"{errors} subscriptions failed")
    return seconds, plan


# --- figures ----------------------------------------------------------------------------


def percentiles_ms(samples_ns: Sequence[int]) -> dict[str, float | None]:
    """p50, p99, p99.9 and max of latency samples, in milliseconds."""
    if not samples_ns:
        return {"p50": None, "p99": None, "p999": None, "max": None, "samples": 0}
    ordered = sorted(samples_ns)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] / 1e6

    return {"p50": pick(0.5), "p99": pick(0.99), "p999": pick(0.999),
            "max": ordered[-1] / 1e6, "samples": len(ordered)}


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# The `.md` tables written by this process, in order: `python -m bench` prints them.
TABLES_WRITTEN: list[Path] = []


def write_results(name: str, data: dict, table: str, out_dir: Path | None = None) -> Path:
    """`<name>.json` (figures), `<name>.md` (the table) and, for the benchmarks in
    `bench.charts.CHARTS`, `<name>.png` in the results directory."""
    from .charts import CHARTS

    out = out_dir or RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    data = {"benchmark": name, "machine": machine(), "finished": _now(), **data}
    (out / f"{name}.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    (out / f"{name}.md").write_text(table.rstrip() + "\n")
    TABLES_WRITTEN.append(out / f"{name}.md")
    if name in CHARTS:
        CHARTS[name](json.loads(json.dumps(data, default=str)), out / f"{name}.png")
    return out / f"{name}.json"


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z")


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "–"
        if isinstance(v, float):
            return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
