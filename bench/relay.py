"""relay: the production load of a large relay on this machine, measured phase by phase.

    python -m bench relay --quick                   # seconds; results in a temporary directory
    python -m bench relay --mode single-task        # 1.4M queues, 22k connections
    python -m bench relay --mode per-queue-task     # as far as the memory goes

Phases, in one router process (`bench.router_process`, started from a memory
snapshot of N queues as `smp-router serve` would be, with its collector
policy) and several lean load processes (`bench.fleet`), each connection from
a loopback address of its own (127.N.x.y):

1. loaded: the router holds N queues; RSS, trio tasks;
2. connected: C WebSocket connections open and idle (RSS per connection);
3. subscribed: every connection subscribes its share of the N queues, all its
   SUBs in as few blocks as fit, all connections at once (SUB/s; the longest
   gc pause while it ran);
4. idle: a light open-loop traffic to a fraction of the queues (`active`)
   while the rest sit idle: latency p50/p99/p99.9, the longest gc pause;
5. storm: every connection drops within `drop_spread` seconds and comes back
   within `return_spread` more, retrying when the router refuses it, and
   resubscribes; the traffic goes on. Settled when the router again has C
   connections and N subscriptions, the connections' own maps agree, and every
   queue is registered to the connection that holds it. Time to settle, peak
   RSS, the longest gc pause, latency of messages to subscribed queues and of
   those the router held while their recipient was away;
6. after: no message lost (every SEND the router answered OK was received),
   RSS once the collector policy has settled, and the quiet-time full
   collection's pause (outside every measured window).

A watchdog stops the run (and says where) when the machine's available memory
falls below `MIN_AVAILABLE`: per-queue-task mode is expected to stop so.
Full runs write bench/results/relay-<mode>.json and .md; `--quick` never
writes there unless `--out` says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from router.server.settings.config import DELIVERY_MODES, SINGLE_TASK

from . import harness
from .harness import BenchError, RouterProcess, log, md_table, percentiles_ms, write_results

MIN_AVAILABLE = 4 * 2**30  # stop when the machine has less than this left (of 24 GiB)
NOFILE = 65_536
SENDER_CONNECTIONS = 8
STORM_SEQ = 1 << 24  # message ids of the storm's traffic start here


@dataclass(frozen=True)
class Setting:
    queues: int
    connections: int
    processes: int  # load processes holding the recipients' connections
    active: int  # queues that get traffic
    rate: float  # messages per second to them, open loop
    idle_seconds: float
    drop_spread: float
    return_spread: float
    settle_timeout: float
    policy_settle: float  # seconds the collector policy needs to freeze a settled wave
    tail_seconds: float = 3.0  # traffic goes on this long after the storm settled
    grace_seconds: float = 5.0  # then the last messages have this long to arrive


STORM_TIMELINE_STEP = 10.0  # seconds per row of the storm's latency timeline

FULL = Setting(queues=1_400_000, connections=22_000, processes=4, active=2_000, rate=100,
               idle_seconds=45, drop_spread=2, return_spread=5, settle_timeout=900,
               policy_settle=15)
QUICK = Setting(queues=20_000, connections=400, processes=2, active=100, rate=50,
                idle_seconds=3, drop_spread=0.5, return_spread=1, settle_timeout=120,
                policy_settle=12)


class Fleets:
    """The load processes (`bench.fleet`), each with a pipe to it."""

    def __init__(self, url: str, address: str, count: int) -> None:
        from .fleet import worker_main

        ctx = harness.worker_context()
        self.pipes, self.procs = [], []
        for index in range(count):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(child, url, address, index),
                               daemon=True)
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)

    def cpu_seconds(self) -> float:
        total = 0.0
        for proc in self.procs:
            try:
                t = psutil.Process(proc.pid).cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system
        return total

    def send(self, index: int, request: dict) -> None:
        self.pipes[index].send(request)

    def receive(self, index: int, timeout: float = 3600) -> dict:
        if not self.pipes[index].poll(timeout):
            raise BenchError(f"load process {index} did not answer in {timeout} s")
        reply = self.pipes[index].recv()
        if "error" in reply:
            raise BenchError(f"load process {index}: {reply['error']}")
        return reply

    def call(self, indexes: list[int], request: dict | list[dict]) -> list[dict]:
        requests = request if isinstance(request, list) else [request] * len(indexes)
        for i, r in zip(indexes, requests, strict=True):
            self.send(i, r)
        return [self.receive(i) for i in indexes]

    def close(self) -> None:
        for pipe, proc in zip(self.pipes, self.procs, strict=True):
            if proc.is_alive():
                try:
                    pipe.send({"op": "exit"})
                except (BrokenPipeError, OSError):
                    pass
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()


class Watchdog:
    """Samples the router's RSS and the machine's available memory once a second;
    kills the router when the machine runs short (the run then stops)."""

    def __init__(self, router: RouterProcess, time_budget: float | None = None) -> None:
        self.router = router
        self.deadline = None if time_budget is None else time.monotonic() + time_budget
        self.timeline: list[tuple[float, int]] = []  # (seconds since start, router RSS)
        self._started = time.monotonic()
        self.peak_rss = 0
        self.min_available = psutil.virtual_memory().available
        self.tripped: str | None = None
        self.phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                rss = self.router.rss()
            except psutil.Error:
                return
            self.peak_rss = max(self.peak_rss, rss)
            now = time.monotonic()
            if not self.timeline or now - self._started - self.timeline[-1][0] >= 5:
                self.timeline.append((now - self._started, rss))
            available = psutil.virtual_memory().available
            self.min_available = min(self.min_available, available)
            if available < MIN_AVAILABLE:
                self._trip(f"{self.phase}: {available / 2**30:.1f} GiB left on the machine "
                           f"with the router at {rss / 2**30:.2f} GiB")
                return
            if self.deadline is not None and now > self.deadline:
                self._trip(f"{self.phase}: the time budget ran out with the router at "
                           f"{rss / 2**30:.2f} GiB")
                return

    def _trip(self, reason: str) -> None:
        self.tripped = reason
        log(f"relay: stopping, {reason}")
        self.router.proc.kill()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


def _check_descriptors(setting: Setting) -> None:
    """The router holds one descriptor per connection, below its RLIMIT_NOFILE less the
    listener's headroom; a limit the router cannot raise caps the run."""
    import resource

    from router.server.settings.edge_limits import EdgeLimits

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # The router raises its soft limit to the hard one (above it only with
    # CAP_SYS_RESOURCE, which a root process here may lack).
    limit = hard if hard != resource.RLIM_INFINITY else NOFILE
    room = min(NOFILE, limit) - EdgeLimits().fd_headroom - 16  # stores, pipes, logs
    if setting.connections + SENDER_CONNECTIONS > room:
        raise BenchError(
            f"RLIMIT_NOFILE allows the router about {room:,} connections, not "
            f"{setting.connections + SENDER_CONNECTIONS:,} (the hard limit can only be "
            f"raised with CAP_SYS_RESOURCE); use --connections {room - SENDER_CONNECTIONS}")


def _ranges(setting: Setting) -> list[list[list[int]]]:
    """Per load process, the [first queue, count] of each of its connections."""
    per, extra = divmod(setting.queues, setting.connections)
    conns, first = [], 0
    for c in range(setting.connections):
        count = per + (1 if c < extra else 0)
        conns.append([first, count])
        first += count
    return [conns[p::setting.processes] for p in range(setting.processes)]


def _active_queues(setting: Setting) -> list[int]:
    step = max(1, setting.queues // setting.active)
    return list(range(0, setting.queues, step))[: setting.active]


def _router_stats(router: RouterProcess, fleets: Fleets | None = None) -> dict[str, Any]:
    s = router.call("stats")
    return {"rss": s["rss"], "hwm": s["hwm"], "tasks": s["tasks"],
            "router_cpu": router.cpu_seconds(), "at": time.monotonic(),
            "load_cpu": None if fleets is None else fleets.cpu_seconds(),
            "gc_pauses": s["gc_pauses"], "traced": s.get("traced"),
            "loop_lag": s.get("loop_lag"),
            "load_loop_lag": None if fleets is None else fleets.call(
                list(range(len(fleets.pipes))), {"op": "loop_lag"}),
            "subscriptions": s["statistics"]["subscriptions"],
            "connections": s["statistics"]["connections"]}


def _new_phase(router: RouterProcess, fleets: Fleets) -> None:
    """Start the per-phase records: peak RSS, gc pauses, every process's loop lag."""
    router.call("reset_hwm")
    fleets.call(list(range(len(fleets.pipes))), {"op": "loop_lag", "reset": True})


def _lag_ms(report: dict[str, Any] | None) -> float | None:
    return None if report is None else report["max_ms"]


def _load_lag_ms(phase: dict[str, Any]) -> float | None:
    reports = phase.get("load_loop_lag")
    return None if not reports else max(r["max_ms"] for r in reports)


def _stall_summary(report: dict[str, Any] | None) -> str:
    """The longest stall and the innermost frames of the router's code in its stack."""
    if not report or not report["stalls"]:
        return "none"
    stall = report["stalls"][0]
    frames = [line.strip() for line in stall["stack"].splitlines() if line.startswith("  File")]
    own = [f for f in frames if "/router/" in f or "/store/" in f] or frames
    return f"{stall['ms']:.0f} ms at {own[-1] if own else '?'}"


def _longest_pause(stats: dict[str, Any], key: str = "max_ms") -> float:
    return max(stats["gc_pauses"][key])


def run(setting: Setting, mode: str, out_dir: Path, *, tracemalloc: bool = False,
        profile_storm: bool = False, time_budget: float | None = None) -> dict:
    harness.START_TIMEOUT = 3600  # a snapshot of 1.4M queues takes minutes to write and load
    _check_descriptors(setting)
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"setting": asdict(setting), "mode": mode, "phases": {},
}
    log(f"relay: {mode}, {setting.queues:,} queues over {setting.connections:,} connections")
    started = time.monotonic()
    router = RouterProcess(mode, tracemalloc=tracemalloc, extra=[
        "--snapshot-queues", str(setting.queues), "--nofile", str(NOFILE)])
    result["start_seconds"] = time.monotonic() - started
    watchdog = Watchdog(router, time_budget)
    fleets = Fleets(router.url, router.address, setting.processes + 1)
    try:
        profiler = _storm_profiler(router, out_dir, mode) if profile_storm else None
        _phases(setting, router, fleets, watchdog, result, profiler)
    except (BenchError, OSError, EOFError) as e:
        if watchdog.tripped is None:
            raise
        result["stopped"] = watchdog.tripped
        log(f"relay: stopped ({e})")
    finally:
        result["peak_rss"] = watchdog.peak_rss
        result["min_available"] = watchdog.min_available
        result["rss_timeline"] = watchdog.timeline
        watchdog.close()
        fleets.close()
        router.close()
    name = f"relay-{mode}"
    write_results(name, result, table(result), out_dir)
    return result


def _storm_profiler(router: RouterProcess, out_dir: Path, mode: str) -> Any:
    """py-spy on the router from the storm's start until it settled (bench.profile)."""
    from .profile import _Profiler

    profiler = _Profiler("py-spy", router, f"profile-relay-storm-{mode}")
    profiler.base = out_dir / f"profile-relay-storm-{mode}"
    return profiler


def _phases(setting: Setting, router: RouterProcess, fleets: Fleets, watchdog: Watchdog,
            result: dict[str, Any], profiler: Any = None) -> None:
    phases = result["phases"]
    recipients = list(range(setting.processes))
    sender = setting.processes
    phases["loaded"] = _router_stats(router, fleets)

    watchdog.phase = "connect"
    ranges = _ranges(setting)
    t0 = time.monotonic()
    requests = [{"op": "connect", "queues": ranges[p], "source_net": f"127.{10 + p}"}
                for p in recipients]
    replies = fleets.call(recipients, requests)
    fleets.call([sender], {"op": "connect", "queues": [[0, 0]] * SENDER_CONNECTIONS,
                           "source_net": "127.9"})
    phases["connected"] = {**_router_stats(router, fleets), "seconds": time.monotonic() - t0,
                           "refused": sum(r["refused"] for r in replies)}

    watchdog.phase = "subscribe"
    _new_phase(router, fleets)
    t0 = time.monotonic()
    replies = fleets.call(recipients, {"op": "subscribe"})
    seconds = time.monotonic() - t0
    census = router.call("census", verify=True)
    phases["subscribed"] = {**_router_stats(router, fleets), "seconds": seconds,
                            "subs_per_s": setting.queues / seconds,
                            "sub_errors": sum(r["sub_errors"] for r in replies),
                            "census": census, "gc_policy": router.call("gc_policy")}
    log(f"relay: subscribed {census['subscriptions']:,} in {seconds:.0f} s")

    watchdog.phase = "idle"
    time.sleep(setting.policy_settle)  # the policy freezes the settled wave
    _new_phase(router, fleets)
    active = _active_queues(setting)
    t_start = time.monotonic() + 0.5
    fleets.call([sender], {"op": "traffic", "targets": active, "rate": setting.rate,
                           "stop": t_start + setting.idle_seconds})
    time.sleep(setting.idle_seconds + 1.5)
    warmup = min(1.0, setting.idle_seconds / 4)
    phases["idle"] = {**_router_stats(router, fleets),
                      "window": [t_start + warmup, t_start + setting.idle_seconds]}

    watchdog.phase = "storm"
    _new_phase(router, fleets)
    if profiler is not None:
        profiler.start()
    storm_start = time.monotonic()
    fleets.call([sender], {"op": "traffic", "targets": active, "rate": setting.rate,
                           "stop": storm_start + setting.settle_timeout, "seq": STORM_SEQ})
    fleets.call(recipients, {"op": "storm", "drop_spread": setting.drop_spread,
                             "return_spread": setting.return_spread})
    settled_at, census, polls = _wait_settled(setting, router, fleets, recipients, storm_start)
    if profiler is not None:
        result["storm_profile"] = profiler.stop()
    phases["storm"] = {**_router_stats(router, fleets), "settle_seconds": (
        None if settled_at is None else settled_at - storm_start), "census": census,
        "polls": polls, "window": [storm_start, settled_at or time.monotonic()],
        "fleets": fleets.call(recipients, {"op": "status"})}
    log(f"relay: storm settled after {phases['storm']['settle_seconds']} s")

    watchdog.phase = "after"
    time.sleep(setting.tail_seconds)
    fleets.call([sender], {"op": "traffic_stop"})
    time.sleep(setting.grace_seconds)  # the last messages arrive and are ACKed
    phases["after"] = _router_stats(router, fleets)
    time.sleep(setting.policy_settle)
    phases["after"]["rss_settled"] = router.call("stats")["rss"]
    phases["after"]["gc_policy"] = router.call("gc_policy")
    phases["after"]["full_collection"] = router.call("full_collection")
    phases["after"]["rss_after_full_collection"] = router.call("stats")["rss"]
    trim_started = time.monotonic()
    phases["after"]["rss_after_malloc_trim"] = router.call("malloc_trim")["rss"]
    phases["after"]["malloc_trim_seconds"] = time.monotonic() - trim_started
    result["messages"] = _messages(fleets, recipients, sender, phases)


def _wait_settled(setting: Setting, router: RouterProcess, fleets: Fleets,
                  recipients: list[int], storm_start: float
                  ) -> tuple[float | None, dict, list[dict]]:
    """Poll until every queue is subscribed again, once, on a live connection."""
    polls: list[dict] = []
    want_connections = setting.connections + SENDER_CONNECTIONS
    while time.monotonic() - storm_start < setting.settle_timeout:
        time.sleep(0.5)
        census = router.call("census")
        statuses = fleets.call(recipients, {"op": "status"})
        done = sum(s["storm"]["done"] for s in statuses)
        polls.append({"t": census["at"] - storm_start, "subscriptions": census["subscriptions"],
                      "connections": census["connections"], "resubscribed_connections": done,
                      "listener": census.get("listener"),
                      "router_cpu": router.cpu_seconds()})
        if (done == setting.connections and census["connections"] == want_connections
                and census["subscriptions"] == setting.queues
                and census["connection_subscriptions"] == setting.queues):
            settled_at = max(census["at"], max(s["storm"]["last_done"] for s in statuses))
            verified = router.call("census", verify=True)
            if verified["one_subscriber_each"]:
                return settled_at, verified, polls
    return None, router.call("census", verify=True), polls


def _messages(fleets: Fleets, recipients: list[int], sender: int,
              phases: dict[str, Any]) -> dict[str, Any]:
    reports = fleets.call(recipients + [sender], {"op": "report"})
    sent_ok = set(reports[-1]["sent_ok"])
    received_ids: set[int] = set()
    triples: list[int] = []
    for r in reports[:-1]:
        received_ids.update(r["received_ids"])
        triples.extend(r["received"])
    rows = [triples[i:i + 3] for i in range(0, len(triples), 3)]
    out: dict[str, Any] = {
        "sent_ok": len(sent_ok), "received": len(received_ids),
        "lost": len(sent_ok - received_ids),
        "send_errors": reports[-1]["send_errors"],
        "duplicates": sum(r["duplicates"] for r in reports[:-1]),
        "ends": sum(r["ends"] for r in reports[:-1]),
    }
    for name in ("idle", "storm"):
        a, b = phases[name]["window"]
        a_ns, b_ns = int(a * 1e9), int(b * 1e9)
        live = [lat for t, lat, held in rows if a_ns <= t <= b_ns and not held]
        held = [lat for t, lat, held in rows if a_ns <= t <= b_ns and held]
        out[name] = {"count": len(live), **percentiles_ms(live),
                     "held_count": len(held), "held": percentiles_ms(held)}
    a, b = phases["storm"]["window"]
    out["storm_timeline"] = _timeline(rows, a, b)
    return out


def _timeline(rows: list[list[int]], start: float, end: float,
              step: float = STORM_TIMELINE_STEP) -> list[dict[str, Any]]:
    """Latency of messages to subscribed queues, by when they arrived: where in the
    storm the long waits are."""
    buckets: dict[int, list[int]] = {}
    for t, lat, held in rows:
        at = t / 1e9 - start
        if not held and 0 <= at <= end - start:
            buckets.setdefault(int(at // step), []).append(lat)
    return [{"from_s": k * step, "count": len(v), **percentiles_ms(v)}
            for k, v in sorted(buckets.items())]


def table(result: dict[str, Any]) -> str:
    s, phases = result["setting"], result["phases"]
    rows = []
    for name in ("loaded", "connected", "subscribed", "idle", "storm", "after"):
        p = phases.get(name)
        if p is None:
            continue
        rows.append([name, p["rss"] / 2**20, (p.get("hwm") or 0) / 2**20, p["tasks"],
                     p["connections"], p["subscriptions"], _longest_pause(p),
                     _longest_pause(p, "max_cpu_ms"), _lag_ms(p.get("loop_lag")),
                     _load_lag_ms(p)])
    text = md_table(["phase", "router RSS MiB", "peak RSS in phase MiB", "trio tasks",
                     "connections", "subscriptions", "longest gc pause ms",
                     "its CPU ms", "router loop lag ms", "load loop lag ms"], rows)
    lines = [f"{result['mode']}: {s['queues']:,} queues, {s['connections']:,} connections "
             f"({s['processes']} load processes), {s['active']:,} active queues at "
             f"{s['rate']:g} msg/s", "", text, ""]
    if "stopped" in result:
        lines.append(f"Stopped: {result['stopped']}.")
    sub = phases.get("subscribed")
    if sub:
        conn = phases["connected"]
        per_conn = (conn["rss"] - phases["loaded"]["rss"]) / s["connections"]
        lines.append(f"- start from the snapshot: {result['start_seconds']:.0f} s; "
                     f"RSS per idle connection {per_conn / 1024:.1f} KiB; "
                     f"subscribe: {sub['subs_per_s']:,.0f} SUB/s ({sub['seconds']:.0f} s), "
                     f"{sub['sub_errors']} errors")
    cpu = [f"{b}: router {phases[b]['router_cpu'] - phases[a]['router_cpu']:.0f} s, load "
           f"processes {phases[b]['load_cpu'] - phases[a]['load_cpu']:.0f} s in "
           f"{phases[b]['at'] - phases[a]['at']:.0f} s"
           for a, b in zip(("loaded", "connected", "subscribed", "idle"),
                           ("connected", "subscribed", "idle", "storm"), strict=True)
           if a in phases and b in phases and phases[a].get("load_cpu") is not None]
    if cpu:
        lines.append("- CPU time by phase: " + "; ".join(cpu))
    storm = phases.get("storm")
    if storm:
        lines.append(f"- storm settled in {storm['settle_seconds']} s; one subscriber each: "
                     f"{storm['census'].get('one_subscriber_each')}")
    for name in ("idle", "storm"):
        if name in phases and phases[name].get("loop_lag"):
            lines.append(f"- longest router stall, {name}: "
                         f"{_stall_summary(phases[name]['loop_lag'])}")
    msgs = result.get("messages")
    if msgs:
        lines.append(f"- messages: {msgs['sent_ok']} sent, {msgs['received']} received, "
                     f"{msgs['lost']} lost, {msgs['duplicates']} redelivered")
        for name in ("idle", "storm"):
            m = msgs[name]
            lines.append(f"- latency {name}: p50 {m['p50']} ms, p99 {m['p99']} ms, "
                         f"p99.9 {m['p999']} ms over {m['count']} messages; held while "
                         f"the recipient was away: {m['held_count']} (p50 {m['held']['p50']} ms)")
    timeline = (msgs or {}).get("storm_timeline")
    if timeline:
        lines += ["", "Latency of messages to subscribed queues during the storm, by arrival:",
                  "", md_table(["from s", "messages", "p50 ms", "p99 ms", "max ms"],
                               [[r["from_s"], r["count"], r["p50"], r["p99"], r["max"]]
                                for r in timeline]), ""]
    after = phases.get("after")
    if after:
        fc = after["full_collection"]
        lines.append(f"- after: RSS {after['rss_settled'] / 2**20:.0f} MiB once settled, "
                     f"{after['rss_after_malloc_trim'] / 2**20:.0f} MiB after malloc_trim "
                     f"({after['malloc_trim_seconds'] * 1000:.0f} ms); "
                     f"quiet-time full collection {fc['ms']:.0f} ms, {fc['collected']} freed; "
                     f"collector policy {json.dumps(after['gc_policy'])}")
    lines.append(f"- peak router RSS {result['peak_rss'] / 2**20:.0f} MiB; least memory "
                 f"available on the machine {result['min_available'] / 2**30:.1f} GiB")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench relay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small setting (seconds)")
    parser.add_argument("--mode", default=SINGLE_TASK,
                        choices=DELIVERY_MODES)
    parser.add_argument("--queues", type=int)
    parser.add_argument("--connections", type=int)
    parser.add_argument("--processes", type=int)
    parser.add_argument("--idle-seconds", type=float)
    parser.add_argument("--rate", type=float)
    parser.add_argument("--settle-timeout", type=float, help="seconds the storm may take")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="trace the router's memory (costs memory and time itself)")
    parser.add_argument("--time-budget", type=float,
                        help="stop the run (and say where it got) after this many seconds")
    parser.add_argument("--profile-storm", action="store_true",
                        help="sample the router with py-spy during the storm")
    parser.add_argument("--out", type=Path, help="results directory")
    args = parser.parse_args(argv)
    setting = QUICK if args.quick else FULL
    for name in ("queues", "connections", "processes", "idle_seconds", "rate",
                 "settle_timeout"):
        if getattr(args, name) is not None:
            setting = replace(setting, **{name: getattr(args, name)})
    with harness.results_for(args.out, args.quick, "relay") as out:
        result = run(setting, args.mode, out, tracemalloc=args.tracemalloc,
                     profile_storm=args.profile_storm, time_budget=args.time_budget)
        sys.stdout.write(table(result) + f"\n\nresults in {harness.shown(out)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
