"""hotpath: CPU and task steps per delivered message, the router against the echo and
against a minimal router on the same codec, side by side in one run.

    python -m bench hotpath [--quick] [--repeats N] [--duration S] [--tree DIR] [--out DIR]
                            [--clients C] [--background N] [--light-duration S]
                            [--light-windows N]

One repetition, under the same load (`CLIENTS` connections: half senders, half
recipients with `QUEUES_PER_RECIPIENT` queues each, as `throughput` does, every
sender keeping `SENDER_WINDOW` signed SENDs of 16,000 bytes in flight and
recipients ACKing what they get):

1. the echo server (bench/echo.py, trio-websocket) with the same number of
   connections, one 16 KB block each in flight: CPU per echoed block;
2. the minimal router (bench/minimal_router.py): the router's codec, crypto and
   transports, every block answered by the task that read it;
3. the router (`serve_router`, as `smp-router serve` runs it, memory store);

2 and 3 each with the clients at v10 (plain blocks) and at v19 (block
encryption), and the crypto a delivered message cannot do without, timed in this
process (`crypto_point`: the CPU the target leaves beside it). Each server runs in a
fresh process of its own, and reports its CPU
time and the trio task steps it has run (a `trio.abc.Instrument` counting
`before_task_step`, installed by this module's `serve` at `trio.run`: nothing in
the router changes) at the start and the end of the measured window. Per
delivered message: server CPU µs, its ratio to the echo's per echoed block
(within the repetition, then the median), and task steps.

Then light load: the same two routers hold `BACKGROUND` idle subscriptions
(opened over `BACKGROUND_CONNECTIONS` connections), while one sender sends
`LIGHT_RATE` messages per second to one recipient (both at v10, then at v19), in
`LIGHT_WINDOWS` windows one after the other: SEND -> MSG latency (p50, p99) per
window and their medians, with
the echo's round trip at the same rate beside it. The preloaded queues are frozen
out of the collector's full passes, as `smp-router serve` freezes what it loads.

`--tree DIR` runs the router and the minimal router of another checkout (its
router/ and store/ packages, this checkout's bench/), so that two trees are
measured by the same benchmark; the echo and the load clients always come from
this checkout.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

from .harness import (
    START_TIMEOUT,
    BenchError,
    WorkerGroup,
    _readline,
    connect,
    log,
    md_table,
    median,
    percentiles_ms,
    split,
    subscribe,
    write_results,
)

HERE = Path(__file__).resolve().parent.parent  # this checkout
HOST = "127.0.0.1"
KINDS = ("minimal", "router")
VERSIONS = (10, 19)
CLIENTS = 50
QUICK_CLIENTS = 4
DURATION = 5.0
QUICK_DURATION = 1.0
# Seconds of load before each window opens in a quick run (else throughput's WARMUP):
# its figures are for the terminal, so its load settles for less.
QUICK_WARMUP = 0.25
REPEATS = 3
BACKGROUND = 100_000
QUICK_BACKGROUND = 2_000
BACKGROUND_CONNECTIONS = 10
LIGHT_RATE = 200.0  # messages per second, one sender to one recipient
LIGHT_DURATION = 10.0
# Light-load windows one after the other on the same subscriptions: each window's
# percentiles, then their median, so that one burst of the machine's other work does
# not decide the figure (a backlog on the one queue lasts the rest of its window).
LIGHT_WINDOWS = 3
QUICK_LIGHT_DURATION = 1.0
ECHO_WINDOW = 1  # blocks in flight per echo connection, as `throughput`

# Targets of the hot path (the issue "The hot path"), checked against the figures.
TARGET_CPU_RATIO = {10: 2.8, 19: 3.3}
TARGET_STEPS = 3.0
TARGET_LIGHT_P50_MS = 0.8
TARGET_LIGHT_P99_MS = 2.0

# Starts `python -m bench.hotpath` with `router` and `store` from the tree given and
# `bench` from this checkout (`-P`: the working directory is not put on the path).
_BOOT = (
    "import sys, runpy, importlib.util as u\n"
    "tree, here = sys.argv[1:3]\n"
    "del sys.argv[1:3]\n"
    "sys.path.insert(0, tree)\n"
    "spec = u.spec_from_file_location('bench', here + '/bench/__init__.py',"
    " submodule_search_locations=[here + '/bench'])\n"
    "bench = u.module_from_spec(spec)\n"
    "sys.modules['bench'] = bench\n"
    "spec.loader.exec_module(bench)\n"
    "runpy.run_module('bench.hotpath', run_name='__main__', alter_sys=True)\n"
)


# --- the server process (`python -m bench.hotpath serve KIND`) ------------------------------


class TaskSteps(trio.abc.Instrument):
    """Task steps the loop has run, the control task's own left out."""

    def __init__(self) -> None:
        self.steps = 0
        self.control: trio.lowlevel.Task | None = None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is not self.control:
            self.steps += 1


class GcPauses:
    """The collector's passes and the longest one (ms) since the last `take`."""

    def __init__(self) -> None:
        self.count, self.longest_ms, self._started = 0, 0.0, 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.count += 1
        self.longest_ms = max(self.longest_ms, (time.perf_counter() - self._started) * 1000)

    def take(self) -> dict[str, Any]:
        taken = {"gc_passes": self.count, "gc_longest_ms": self.longest_ms}
        self.count, self.longest_ms = 0, 0.0
        return taken


async def _serve(kind: str, counter: TaskSteps) -> None:
    """Run the server of `kind`, print its line, answer the runner on stdin."""
    async with trio.open_nursery() as nursery:
        preload = None
        if kind == "echo":
            from .echo import start_echo

            url = f"ws://{HOST}:{await start_echo(nursery, HOST, 0, 'trio-websocket')}"
            address = url
        elif kind == "minimal":
            from router.server.edge.identity import generate_identity
            from router.server.edge.listener import serve_edge

            from .minimal_router import MinimalRouter, Queue

            fixture = MinimalRouter(generate_identity())
            listener = await nursery.start(partial(serve_edge, fixture.serve, HOST, 0))
            url = f"ws://{HOST}:{listener.port}"
            address = _ws_address(url, fixture.identity.address(HOST, listener.port))

            def preload(index: int, secured: bool) -> None:
                from . import identities

                r = identities.queue_record(index, secured=secured)
                fixture.add(Queue(r.recipient_id, r.sender_id, r.recipient_key,
                                  r.rcv_dh_secret, r.sender_key))
        else:
            from router.server import RouterConfig, serve_router

            info = await nursery.start(serve_router, RouterConfig(host=HOST, port=0))
            _as_serve_does(nursery, info.router)
            url, address = info.url, _ws_address(info.url, info.address)
            queues = info.router.queues

            def preload(index: int, secured: bool) -> None:
                from . import identities

                error = queues.add_queue_nowait(identities.queue_record(index, secured=secured))
                if error is not None:
                    raise BenchError(f"queue {index}: {error}")

        print(f"hotpath {kind} listening on {url} address {address}", flush=True)
        counter.control = trio.lowlevel.current_task()
        await _control(counter, preload)
        nursery.cancel_scope.cancel()


def _ws_address(url: str, smp_address: str) -> str:
    """The WebSocket address with the router's key hash, as the load clients take it."""
    key_hash = smp_address.removeprefix("smp://").split("@")[0]
    return url.replace("ws://", f"ws://{key_hash}@", 1)


def _as_serve_does(nursery: trio.Nursery, router: Any) -> None:
    """What `smp-router serve` does once the router is up (cli/serve.py), where the
    tree has it: freeze what is loaded, start the collector policy."""
    try:
        from router.server.cli import serve as cli
    except ImportError:
        return
    if hasattr(cli, "freeze_loaded_state"):
        cli.freeze_loaded_state()
    if hasattr(cli, "start_gc_policy"):
        cli.start_gc_policy(nursery, router)


async def _control(counter: TaskSteps, preload: Any) -> None:
    gc_pauses = GcPauses()
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    buffer = b""
    while True:
        chunk = await stdin.receive_some(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            op = request["op"]
            if op == "quit":
                _answer({"ok": True})
                return
            try:
                if op == "sample":
                    t = os.times()
                    reply = {"cpu": t.user + t.system, "steps": counter.steps,
                             "at": time.monotonic(), **gc_pauses.take()}
                elif op == "where":  # which source tree this process runs
                    import router

                    reply = {"router": str(Path(router.__file__).resolve().parent.parent)}
                elif op == "preload" and preload is not None:
                    for i in range(request["start"], request["start"] + request["count"]):
                        preload(i, request.get("secured", True))
                        if i % 5000 == 0:
                            await trio.lowlevel.checkpoint()
                    # Out of the collector's full passes, as `smp-router serve` freezes
                    # the queues it loads at start (cli/serve.py).
                    gc.collect()
                    gc.freeze()
                    reply = {"ok": True}
                else:
                    reply = {"error": f"{op} is not served here"}
            except Exception as e:  # noqa: BLE001 - reported to the runner, which stops
                reply = {"error": repr(e)}
            _answer(reply)


def _answer(reply: dict) -> None:
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


def serve_main(kind: str) -> None:
    counter = TaskSteps()
    trio.run(_serve, kind, counter, instruments=[counter])


# --- the runner's side ----------------------------------------------------------------------


class Server:
    """`python -m bench.hotpath serve KIND` from `tree`, and its control pipe (the
    `call` that `throughput.RouterLoad` uses to preload queues)."""

    def __init__(self, kind: str, tree: Path) -> None:
        self.kind = kind
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-c", _BOOT, str(tree), str(HERE), "serve", kind],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, cwd=tree,
        )
        assert self.proc.stdout is not None
        match = re.search(r"listening on (\S+) address (\S+)",
                          _readline(self.proc.stdout, START_TIMEOUT))
        if match is None:
            self.close()
            raise BenchError(f"{kind} did not start (from {tree})")
        self.url, self.address = match.group(1), match.group(2)
        self.tree = self.call("where")["router"]

    def call(self, op: str, **args: Any) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise BenchError(f"{self.kind} exited during {op} (code {self.proc.poll()})")
        reply = json.loads(line)
        if "error" in reply:
            raise BenchError(f"{self.kind} {op}: {reply['error']}")
        return reply

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

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sampled(server: Server, window: dict[str, float], delivered: Any) -> dict[str, Any]:
    """Sample the server at the window's start and end; `delivered()` then gives the
    load's result (with `received`: messages in the window). Per message figures are
    over the server's own sampled interval."""
    from .throughput import _sleep_until

    _sleep_until(window["t_start"])
    first = server.call("sample")
    _sleep_until(window["t_end"])
    last = server.call("sample")
    result = delivered()
    duration = window["t_end"] - window["t_start"]
    rate = result["received"] / duration
    interval = last["at"] - first["at"]
    messages = rate * interval
    result.update({
        "msgs_per_s": rate,
        "cpu_cores": (last["cpu"] - first["cpu"]) / interval,
        "cpu_us_per_msg": (last["cpu"] - first["cpu"]) / messages * 1e6 if messages else None,
        "steps_per_msg": (last["steps"] - first["steps"]) / messages if messages else None,
        "gc_passes": last["gc_passes"],  # during the window
        "gc_longest_ms": last["gc_longest_ms"],
        "tree": server.tree,
        "load_average": os.getloadavg()[0],
    })
    return result


def echo_point(clients: int, duration: float, rate: float | None = None,
               windows: int = 1, *, warmup: float) -> list[dict[str, Any]]:
    """The echo under `clients` connections with `ECHO_WINDOW` blocks in flight each (or
    `rate` blocks per second each, open loop): one result per window."""
    from .throughput import WORKERS, _window

    with Server("echo", HERE) as server, WorkerGroup(server.url, WORKERS) as workers:
        per_worker = split(clients, WORKERS)
        workers.call([{"op": "echo_connect", "url": server.url, "count": n} if n else None
                      for n in per_worker])

        def finish() -> dict[str, Any]:
            replies = [r for r in workers.call([{"op": "wait", "job": "echo"} if n else None
                                                for n in per_worker]) if r]
            return {"received": sum(r["received"] for r in replies),
                    "latency_ms": percentiles_ms([x for r in replies for x in r["latencies"]])}

        results = []
        for _ in range(windows):
            window = _window(duration, warmup)
            workers.call([{"op": "echo_start", "window": ECHO_WINDOW, "rate": rate, **window}
                          if n else None for n in per_worker])
            results.append(_sampled(server, window, finish))
        workers.call([{"op": "echo_close"} if n else None for n in per_worker])
        return results


CRYPTO_ROUNDS = 1000
QUICK_CRYPTO_ROUNDS = 50


def crypto_point(rounds: int) -> dict[str, float]:
    """CPU µs of the crypto that no router can leave out of a delivered message, timed
    in this process with this checkout's protocol functions: the Ed25519 checks of a
    SEND of `BODY_SIZE` bytes and of its ACK, the MSG body's box, and one block's box
    (sealed or opened, with its chain step) of block encryption (v11 on)."""
    from router.protocol import block_encryption, crypto
    from router.protocol.block import pad_block
    from router.protocol.codec import encode_command
    from router.protocol.transmission import authorized_bytes
    from router.protocol.types import ACK, SEND

    from .throughput import BODY_SIZE

    seed, spki = crypto.new_ed25519()
    session, corr, queue_id, msg_id = (os.urandom(n) for n in (32, 24, 24, 24))
    signed = {name: authorized_bytes(session, corr, queue_id, encode_command(cmd, 10))
              for name, cmd in (("send", SEND(b"T", os.urandom(BODY_SIZE))),
                                ("ack", ACK(msg_id)))}
    signatures = {name: crypto.sign(seed, data) for name, data in signed.items()}
    box_key = os.urandom(32)
    body = os.urandom(BODY_SIZE)
    dh = os.urandom(32)
    router_side = block_encryption.BlockCipher.for_router(session, dh)
    client_side = block_encryption.BlockCipher.for_client(session, dh)
    plain = pad_block(b"x" * 200)

    def check(name: str) -> None:
        if not crypto.verify_authorization(signatures[name], spki, signed[name]):
            raise BenchError(f"the {name.upper()} signature did not verify")

    def block_there_and_back() -> None:  # two blocks: one sealed, one opened
        router_side.open_to_plain_block(client_side.seal_plain_block(plain))

    def timed(work: Any, per: int = 1) -> float:
        start = time.process_time()
        for _ in range(rounds):
            work()
        return (time.process_time() - start) / rounds / per * 1e6

    return {
        "send_check_us": timed(partial(check, "send")),
        "ack_check_us": timed(partial(check, "ack")),
        "msg_box_us": timed(partial(crypto.encrypt_msg_body, box_key, msg_id, 0, b"T", body)),
        "block_us": timed(block_there_and_back, per=2),
    }


def crypto_floor(costs: dict[str, float], version: int, blocks_per_msg: float) -> float:
    """The crypto µs of one delivered message at `version`: two checks, a box, and at v11
    on every block through the connection boxed once."""
    from router.protocol.versions import ENCRYPTED_BLOCK

    floor = costs["send_check_us"] + costs["ack_check_us"] + costs["msg_box_us"]
    return floor + (blocks_per_msg * costs["block_us"] if version >= ENCRYPTED_BLOCK else 0.0)


def load_point(kind: str, tree: Path, version: int, clients: int,
               duration: float, warmup: float) -> dict[str, Any]:
    """`throughput`'s closed loop against the server of `kind`, clients at `version`."""
    from .throughput import WORKERS, RouterLoad, _window

    with Server(kind, tree) as server, WorkerGroup(server.address, WORKERS) as workers:
        load = RouterLoad(server, workers, max(1, clients // 2),  # type: ignore[arg-type]
                          max_version=version)
        load.setup()
        window = _window(duration, warmup)
        load.start(window)
        return _sampled(server, window, lambda: _load_result(load, duration))


def _load_result(load: Any, duration: float) -> dict[str, Any]:
    result = load.finish(duration)
    result["received"] = round(result["msgs_per_s"] * duration)
    delivered = max(1, result["delivered_total"])
    result["blocks_in_per_msg"] = result["router_blocks_in"] / delivered
    result["blocks_out_per_msg"] = result["router_blocks_out"] / delivered
    return result


def light_point(kind: str, tree: Path, version: int, background: int, connections: int,
                duration: float, windows: int, warmup: float) -> dict[str, Any]:
    """One sender at `LIGHT_RATE` to one recipient, both at `version`, `background` idle
    subscriptions held; `windows` windows one after the other."""
    from .throughput import WORKERS, RouterLoad, _window

    with Server(kind, tree) as server, WorkerGroup(server.address, WORKERS) as workers:
        load = RouterLoad(server, workers, 1, queues_per_recipient=1,  # type: ignore[arg-type]
                          max_version=version)
        load.setup()
        server.call("preload", start=1, count=background, secured=True)
        before = [r + s for r, s in zip(load.recipients, load.senders, strict=True)]
        per_worker = connect(workers, connections)
        seconds, _ = subscribe(workers, per_worker, 1, background, first=before)
        results = []
        for _ in range(windows):
            window = _window(duration, warmup)
            load.start(window, LIGHT_RATE)
            results.append(_sampled(server, window, lambda: _load_result(load, duration)))
        return {"subscribe_seconds": seconds, "windows": results}


# --- the run -------------------------------------------------------------------------------------


def run(out: Path, *, quick: bool = False, repeats: int | None = None,
        duration: float | None = None, clients: int | None = None, tree: Path | None = None,
        background: int | None = None, light_duration: float | None = None,
        light_windows: int | None = None) -> dict[str, Any]:
    tree = (tree or HERE).resolve()
    repeats = repeats or (1 if quick else REPEATS)
    duration = duration or (QUICK_DURATION if quick else DURATION)
    clients = clients or (QUICK_CLIENTS if quick else CLIENTS)
    background = background if background is not None else (
        QUICK_BACKGROUND if quick else BACKGROUND)
    light_duration = light_duration or (QUICK_LIGHT_DURATION if quick else LIGHT_DURATION)
    light_windows = light_windows or (1 if quick else LIGHT_WINDOWS)
    from .throughput import WARMUP

    warmup = QUICK_WARMUP if quick else WARMUP
    runs: list[dict[str, Any]] = []
    for rep in range(repeats):
        log(f"hotpath: echo, {clients} clients, run {rep + 1}/{repeats}")
        point: dict[str, Any] = {"echo": echo_point(clients, duration, warmup=warmup)[0]}
        point["crypto"] = crypto_point(QUICK_CRYPTO_ROUNDS if quick else CRYPTO_ROUNDS)
        for version in VERSIONS:
            for kind in KINDS:
                log(f"hotpath: {kind} v{version}, {clients} clients, run {rep + 1}/{repeats}")
                row = load_point(kind, tree, version, clients, duration, warmup)
                row["cpu_ratio_to_echo"] = _ratio(row["cpu_us_per_msg"],
                                                  point["echo"]["cpu_us_per_msg"])
                point[f"{kind} v{version}"] = row
            point[f"router / minimal v{version}"] = _ratio(
                point[f"router v{version}"]["cpu_us_per_msg"],
                point[f"minimal v{version}"]["cpu_us_per_msg"])
            point[f"crypto v{version}"] = _crypto_row(point, version)
        runs.append(point)
    light: dict[str, Any] = {}
    log(f"hotpath: echo round trip at {LIGHT_RATE:.0f}/s")
    light["echo"] = {"windows": echo_point(1, light_duration, rate=LIGHT_RATE,
                                           windows=light_windows, warmup=warmup)}
    for version in VERSIONS:
        for kind in KINDS:
            log(f"hotpath: {kind} v{version}, light load, {background} idle subscriptions")
            light[f"{kind} v{version}"] = light_point(
                kind, tree, version, background, BACKGROUND_CONNECTIONS, light_duration,
                light_windows, warmup)
    parameters = {
        "clients": clients, "repeats": repeats, "duration": duration, "warmup": warmup,
        "versions": VERSIONS,
        "background_subscriptions": background, "background_connections": BACKGROUND_CONNECTIONS,
        "light_rate": LIGHT_RATE, "light_duration": light_duration,
        "light_windows": light_windows, "tree": str(tree),
        "tree_commit": _commit(tree), "bench_commit": _commit(HERE),
        "command": "python -m bench hotpath" + ("" if tree == HERE else f" --tree {tree}"),
    }
    summary = summarize(runs, light)
    write_results("hotpath", {"parameters": parameters, "summary": summary, "runs": runs,
                              "light": light}, table(summary, parameters), out_dir=out)
    return summary


def _crypto_row(point: dict[str, Any], version: int) -> dict[str, Any]:
    """The crypto floor of a message at `version` (the router's blocks per message),
    against the echo, the CPU the target leaves beside it, and each router's CPU beyond
    its own floor."""
    echo = point["echo"]["cpu_us_per_msg"]

    def floor(kind: str) -> float:
        row = point[f"{kind} v{version}"]
        return crypto_floor(point["crypto"], version,
                            row["blocks_in_per_msg"] + row["blocks_out_per_msg"])

    return {
        "crypto_us_per_msg": floor("router"),
        "crypto_ratio_to_echo": _ratio(floor("router"), echo),
        "target_leaves_us": TARGET_CPU_RATIO[version] * echo - floor("router"),
        **{f"{kind}_beyond_crypto_us": point[f"{kind} v{version}"]["cpu_us_per_msg"]
           - floor(kind) for kind in KINDS},
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _commit(tree: Path) -> str | None:
    """The tree's commit, marked when its router or store has uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--",
                                  "router", "store"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{head} with uncommitted changes" if changed else head


ROW_KEYS = ("msgs_per_s", "cpu_cores", "cpu_us_per_msg", "cpu_ratio_to_echo", "steps_per_msg",
            "blocks_in_per_msg", "blocks_out_per_msg")


def summarize(runs: list[dict[str, Any]], light: dict[str, Any]) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for name in ["echo"] + [f"{k} v{v}" for v in VERSIONS for k in KINDS]:
        rows[name] = {key: median(r[name].get(key) for r in runs) for key in ROW_KEYS}
    for v in VERSIONS:
        rows[f"router v{v}"]["router_to_minimal"] = median(
            r[f"router / minimal v{v}"] for r in runs)
    crypto_keys = list(runs[0]["crypto v10"])
    crypto = {f"v{v}": {key: median(r[f"crypto v{v}"][key] for r in runs) for key in crypto_keys}
              for v in VERSIONS}
    light_rows = {}
    for name, x in light.items():
        ws = x["windows"]
        light_rows[name] = {
            "msgs_per_s": median(w["msgs_per_s"] for w in ws),
            **{k: median(w["latency_ms"][k] for w in ws) for k in ("p50", "p99", "p999")},
            "max": max((w["latency_ms"]["max"] or 0) for w in ws),
            "p50_by_window": [w["latency_ms"]["p50"] for w in ws],
            "p99_by_window": [w["latency_ms"]["p99"] for w in ws],
            "samples": sum(w["latency_ms"]["samples"] for w in ws),
            "cpu_us_per_msg": median(w["cpu_us_per_msg"] for w in ws),
            "steps_per_msg": median(w["steps_per_msg"] for w in ws),
            "refused": sum(w.get("send_errors", 0) for w in ws) if name != "echo" else None,
            "gc_longest_ms": max(w["gc_longest_ms"] for w in ws),
            "subscribe_seconds": x.get("subscribe_seconds"),
        }
    return {"saturated": rows, "crypto": crypto, "light": light_rows,
            "targets": targets(rows, light_rows)}


def targets(rows: dict[str, Any], light: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for v in VERSIONS:
        ratio = rows[f"router v{v}"]["cpu_ratio_to_echo"]
        out.append({"target": f"router CPU per delivered message <= {TARGET_CPU_RATIO[v]}x the "
                              f"echo's per echoed block, v{v}",
                    "measured": ratio, "met": ratio is not None and ratio <= TARGET_CPU_RATIO[v]})
    for v in VERSIONS:
        steps = rows[f"router v{v}"]["steps_per_msg"]
        out.append({"target": f"<= {TARGET_STEPS:g} task steps per delivered message, v{v}",
                    "measured": steps, "met": steps is not None and steps <= TARGET_STEPS})
    for v in VERSIONS:
        p50, p99 = light[f"router v{v}"]["p50"], light[f"router v{v}"]["p99"]
        out.append({"target": f"light load, idle subscriptions held: p50 <= "
                              f"{TARGET_LIGHT_P50_MS} ms, v{v}",
                    "measured": p50, "met": p50 is not None and p50 <= TARGET_LIGHT_P50_MS})
        out.append({"target": f"light load, idle subscriptions held: p99 <= "
                              f"{TARGET_LIGHT_P99_MS} ms, v{v}",
                    "measured": p99, "met": p99 is not None and p99 <= TARGET_LIGHT_P99_MS})
    return out


def table(summary: dict[str, Any], p: dict[str, Any]) -> str:
    rows = summary["saturated"]
    head = (f"`{p['command']}` (router tree {p['tree_commit']}, bench {p['bench_commit']}): "
            f"{p['clients']} clients, {p['duration']:g} s windows, medians of {p['repeats']} "
            f"repetitions, ratios taken within each repetition.")
    sat = md_table(
        ["server", "msg/s", "server cores", "CPU µs / msg", "x echo", "x minimal",
         "task steps / msg", "blocks in / msg", "blocks out / msg"],
        [[name, r["msgs_per_s"], r["cpu_cores"], r["cpu_us_per_msg"], r["cpu_ratio_to_echo"],
          r.get("router_to_minimal"), r["steps_per_msg"], r["blocks_in_per_msg"],
          r["blocks_out_per_msg"]] for name, r in rows.items()])
    crypto = md_table(
        ["clients at", "crypto µs / msg", "x echo", "target x echo", "the target leaves µs",
         "minimal router beyond its crypto µs", "router beyond its crypto µs"],
        [[version, c["crypto_us_per_msg"], c["crypto_ratio_to_echo"],
          TARGET_CPU_RATIO[int(version[1:])], c["target_leaves_us"],
          c["minimal_beyond_crypto_us"], c["router_beyond_crypto_us"]]
         for version, c in summary["crypto"].items()])
    light = md_table(
        ["server", "msg/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "p50 / p99 by window",
         "samples", "SENDs refused (QUOTA)", "CPU µs / msg", "task steps / msg",
         "longest gc pass ms", "subscribing took s"],
        [[name, x["msgs_per_s"], x["p50"], x["p99"], x["p999"], x["max"],
          ", ".join(f"{_ms(a)} / {_ms(b)}" for a, b in zip(x["p50_by_window"],
                                                           x["p99_by_window"], strict=True)),
          x["samples"], x["refused"], x["cpu_us_per_msg"], x["steps_per_msg"],
          x["gc_longest_ms"], x["subscribe_seconds"]]
         for name, x in summary["light"].items()])
    goals = md_table(["target", "measured", "met?"],
                     [[t["target"], t["measured"], "yes" if t["met"] else "no"]
                      for t in summary["targets"]])
    return "\n".join([
        head, "", "### Saturated: per delivered message (echo: per echoed block)", "", sat, "",
        "### The crypto a message cannot do without (two Ed25519 checks, the MSG body's box; "
        "from v11 a box per block through the connection, the router's blocks per message; "
        "timed in the bench process)", "", crypto, "",
        f"### Light load: {p['light_rate']:g} msg/s from one sender to one recipient, "
        f"{p['background_subscriptions']:,} idle subscriptions held over "
        f"{p['background_connections']} connections ({p['light_windows']} windows of "
        f"{p['light_duration']:g} s, medians across them; echo: its round trip at the same "
        f"rate, no subscriptions)", "", light, "",
        "### Targets", "", goals])


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        serve_main(argv[1])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench hotpath", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, one repetition, into a new scratch directory")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--duration", type=float, help="measured seconds per saturated run")
    parser.add_argument("--clients", type=int)
    parser.add_argument("--background", type=int, help="idle subscriptions under light load")
    parser.add_argument("--light-duration", type=float)
    parser.add_argument("--light-windows", type=int)
    parser.add_argument("--tree", type=Path,
                        help="the source tree whose router and minimal router run "
                             "(default: this checkout)")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results; "
                        "with --quick a new scratch directory)")
    args = parser.parse_args(argv)
    if args.tree is not None and not (args.tree / "router" / "server").is_dir():
        parser.error(f"--tree {args.tree}: no router/server there")
    from . import harness

    with harness.results_for(args.out, args.quick, "hotpath") as out:
        print(f"results: {harness.shown(out)}", flush=True)
        try:
            run(out, quick=args.quick, repeats=args.repeats, duration=args.duration,
                clients=args.clients, tree=args.tree, background=args.background,
                light_duration=args.light_duration, light_windows=args.light_windows)
        except BenchError as exc:
            print(f"python -m bench hotpath: error: {exc}", file=sys.stderr)
            return 1
        print((out / "hotpath.md").read_text().rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
