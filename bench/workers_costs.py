"""workers_costs: what a second worker costs and gains, one worker beside two in one run.

    python -m bench workers_costs [--counts 1,2] [--duration 5] [--quick] [--out DIR]
                                  [--loaded-only] [--clients N]
                                  [--loaded-only --base TREE [--repeats 5]]
                                  [--repeats R] [--cores ROUTER:LOAD]

For each count N of `--counts`, against `smp-router serve --workers N` on the memory
store (`bench.workers_router`: queues written into their owners' shares first; CPU
and RSS summed over the supervisor and every worker), in one run:

1. idle: the router's RSS with no client, per process;
2. light load: 200 PINGs one after the other (round trip), then one sender and one
   recipient at `LIGHT_RATE` messages a second (SEND -> MSG latency, p50 / p99);
3. 50 clients (`CLIENTS`: 25 senders, 25 recipients of 8 queues each, every sender
   keeping 2 signed SENDs of 16,000 bytes in flight, recipients ACKing, as
   `bench.throughput`): delivered messages a second and the router's CPU per
   delivered message, every process summed;
4. memory, in a fresh router: RSS after `IDLE_CONNECTIONS` idle connections, then
   after `IDLE_SUBSCRIPTIONS` idle subscriptions over them (every connection then
   has queues of every worker: with N > 1 a shadow connection in each other one);
   bytes per idle connection and per idle subscription, each read `SETTLE` after
   the last answer, per process too. Beside them (not instead), with `--settled`
   (the default of a full run), the RSS once more `SETTLED` seconds later: after
   the router's gc policy has frozen the settled wave and trimmed the heap again;
5. the 50 clients again, every count's router started at once and loaded in turn,
   `--repeats` times (`RATIO_REPEATS`), the order reversed every other time: each
   count's CPU per message over the first count's, run beside run, and their median.
   One loaded run of each count (step 3) moved that ratio by more than a change to the
   router did (bench/RESULTS.md, "Worker processes").

`--memory-only` runs the memory phase alone.

`--rate R` sends the 50 clients' messages at R a second over all the senders, whatever
the answers do (open loop), rather than as fast as the senders' windows go: CPU per
message below saturation, where the load's processes and the router's do not take
the cores from each other.

`--loaded-only` runs only step 3 (with `--quick`: a short one at the full 50 clients,
to compare CPU per message quickly; `--clients` changes the count; `--repeats R`: step
5 after it, R times). With `--base
TREE` (another checkout, e.g. `git worktree add /tmp/base main`) it compares: the
routers of TREE and of this checkout, at every count, all started at once, take the
load in turn, `--repeats` times, which tree goes first alternating; the medians and
this checkout's CPU per message over TREE's at each count (a machine shared with
other work moves single figures by 10-20 %: the ratio of neighbours in time moves
less).

`--cores ROUTER:LOAD` (e.g. `1:0`) runs the routers on the cores ROUTER and the load on
the cores LOAD: each count's router then has the same cores, which the load does not
take from it (`workers_router.pin_cores`).

The load comes from two `bench.loadgen` processes. A connection lands on whichever
worker accepts it; a queue belongs to its ids' owner, so with N workers (N-1)/N of
the SENDs, SUBs and ACKs are handed off.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from router.client import open_client

from . import harness
from .fairness import _ping_ms, summary_ms
from .harness import WorkerGroup
from .throughput import SENDER_WINDOW, RouterLoad, _sleep_until, _window
from .workers_router import HERE, CliRouter, fill, pin_cores, pinning

COUNTS = (1, 2)
CLIENTS, QUICK_CLIENTS = 50, 8
QUEUES_PER_RECIPIENT = 8
DURATION, QUICK_DURATION = 5.0, 1.5
LIGHT_RATE = 200.0
LIGHT_DURATION, QUICK_LIGHT_DURATION = 5.0, 1.0
PINGS, QUICK_PINGS = 200, 20
IDLE_CONNECTIONS, QUICK_IDLE_CONNECTIONS = 1_000, 40
IDLE_SUBSCRIPTIONS, QUICK_IDLE_SUBSCRIPTIONS = 50_000, 400  # ~50 a connection, as smp19's
SETTLE = 1.0  # seconds before reading RSS, so the last answers are written
SETTLED = 11.0  # seconds more: the gc policy's settled wave (10 s) is frozen and trimmed
LOAD_PROCESSES = 2
RATIO_REPEATS = 5  # loaded runs of each count's router, in turn (`interleaved`)
STORE = "memory"


class _Filled:
    """What `RouterLoad` asks of its router, for a CLI router whose queues are in its
    store already: `preload` has nothing to do."""

    def __init__(self, router: CliRouter) -> None:
        self.router = router

    def call(self, op: str, **args: Any) -> dict:
        if op != "preload":
            raise harness.BenchError(f"{op}: not served by a router of the command line")
        return {}


def _loaded(router: CliRouter, workers: WorkerGroup, pairs: int, queues: int) -> RouterLoad:
    load = RouterLoad(_Filled(router), workers, pairs,  # type: ignore[arg-type]
                      queues_per_recipient=queues)
    load.setup()
    return load


def _measure(router: CliRouter, load: RouterLoad, duration: float,
             rate: float | None = None) -> dict[str, Any]:
    window = _window(duration)
    load.start(window, rate)
    _sleep_until(window["t_start"])
    cpu0 = router.cpu_seconds()
    _sleep_until(window["t_end"])
    cpu1 = router.cpu_seconds()
    result = load.finish(duration)
    cores = (cpu1 - cpu0) / duration
    result["router_cores"] = cores
    result["cpu_us_per_msg"] = (cores / result["msgs_per_s"] * 1e6 if result["msgs_per_s"]
                                else None)
    # Blocks the clients sent and got per message delivered: each one written is
    # encrypted, framed and a write of its own (hand-offs answer in blocks of their own).
    delivered = max(1, result["delivered_total"])
    result["blocks_in_per_msg"] = result["router_blocks_in"] / delivered
    result["blocks_out_per_msg"] = result["router_blocks_out"] / delivered
    return result


async def _pings(address: str, count: int) -> dict[str, float]:
    async with open_client(address) as client:
        await client.ping()
        return summary_ms([await _ping_ms(client) for _ in range(count)])


def load_count(workers: int, tmp: Path, *, clients: int, duration: float,
               light_duration: float, pings: int, loaded_only: bool = False,
               rate: float | None = None) -> dict[str, Any]:
    """Idle RSS, light-load latencies and the 50 clients' CPU per message, one router
    (`loaded_only`: the 50 clients only)."""
    pairs = max(1, clients // 2)
    data_dir = tmp / f"load-{workers}"
    trio.run(fill, STORE, data_dir, range(pairs * QUEUES_PER_RECIPIENT), workers)
    out: dict[str, Any] = {"workers": workers, "clients": clients}
    with CliRouter(workers, STORE, data_dir) as router:
        time.sleep(SETTLE)
        out["idle_rss"] = router.rss()
        out["idle_rss_by_process"] = router.rss_by_process()
        if loaded_only:
            with WorkerGroup(router.url, LOAD_PROCESSES) as group:
                out["loaded"] = _measure(router, _loaded(router, group, pairs,
                                                         QUEUES_PER_RECIPIENT), duration, rate)
            return out
        out["ping_ms"] = trio.run(_pings, router.address, pings)
        # One sender and one recipient on queue 0; their connections close before the
        # 50 clients come (queue 0 is one of theirs too).
        with WorkerGroup(router.url, LOAD_PROCESSES) as group:
            out["light"] = _measure(router, _loaded(router, group, 1, 1), light_duration,
                                    LIGHT_RATE)
        with WorkerGroup(router.url, LOAD_PROCESSES) as group:
            load = _loaded(router, group, pairs, QUEUES_PER_RECIPIENT)
            out["loaded"] = _measure(router, load, duration, rate)
        out["rss_after_load"] = router.rss()
    return out


def memory_count(workers: int, tmp: Path, *, connections: int, subscriptions: int,
                 settled: bool = False) -> dict[str, Any]:
    data_dir = tmp / f"memory-{workers}"
    trio.run(fill, STORE, data_dir, range(subscriptions), workers)
    by_process: dict[str, list[int]] = {}
    with CliRouter(workers, STORE, data_dir, max_connections=connections + 64) as router, \
            WorkerGroup(router.url, LOAD_PROCESSES) as group:

        def rss(stage: str) -> int:
            # The supervisor first, then the workers (N = 1: the one process).
            by_process[stage] = router.rss_by_process()
            return sum(by_process[stage])

        time.sleep(SETTLE)
        empty = rss("empty")
        per_worker = harness.connect(group, connections)
        time.sleep(SETTLE)
        connected = rss("connected")
        harness.subscribe(group, per_worker, 0, subscriptions)
        time.sleep(SETTLE)
        subscribed = rss("subscribed")
        if settled:
            time.sleep(SETTLED)
            rss("settled")
    out = {"workers": workers, "connections": connections, "subscriptions": subscriptions,
           "rss_empty": empty, "rss_connected": connected, "rss_subscribed": subscribed,
           "rss_by_process": by_process,
           "bytes_per_connection": (connected - empty) / connections,
           "bytes_per_subscription": (subscribed - connected) / subscriptions}
    if settled:
        out["rss_settled"] = sum(by_process["settled"])
        out["bytes_per_subscription_settled"] = (out["rss_settled"] - connected) / subscriptions
    return out


def run(*, quick: bool = False, counts: tuple[int, ...] = COUNTS, duration: float | None = None,
        out: Path | None = None, loaded_only: bool = False, clients: int | None = None,
        memory_only: bool = False, settled: bool | None = None,
        connections: int | None = None, subscriptions: int | None = None,
        rate: float | None = None, repeats: int | None = None) -> list[dict[str, Any]]:
    duration = duration or (QUICK_DURATION if quick else DURATION)
    clients = clients or (CLIENTS if loaded_only or not quick else QUICK_CLIENTS)
    connections = connections or (QUICK_IDLE_CONNECTIONS if quick else IDLE_CONNECTIONS)
    subscriptions = subscriptions or (QUICK_IDLE_SUBSCRIPTIONS if quick else IDLE_SUBSCRIPTIONS)
    settled = not quick if settled is None else settled
    if repeats is None:  # a full run ends with the loaded phase in turn; a loaded-only one if asked
        repeats = 0 if loaded_only else RATIO_REPEATS
    results = []
    with tempfile.TemporaryDirectory(prefix="smp-bench-workers-costs-") as tmp:
        for workers in counts:
            entry: dict[str, Any] = {"workers": workers}
            if not memory_only:
                harness.log(f"workers_costs: --workers {workers}: idle, light load, "
                            f"{clients} clients")
                entry = load_count(workers, Path(tmp), clients=clients, duration=duration,
                                   light_duration=(QUICK_LIGHT_DURATION if quick
                                                   else LIGHT_DURATION),
                                   pings=QUICK_PINGS if quick else PINGS,
                                   loaded_only=loaded_only, rate=rate)
            if loaded_only:
                results.append(entry)
                continue
            harness.log(f"workers_costs: --workers {workers}: {connections:,} idle connections, "
                        f"{subscriptions:,} idle subscriptions")
            entry["memory"] = memory_count(workers, Path(tmp), connections=connections,
                                           subscriptions=subscriptions, settled=settled)
            results.append(entry)
    ratios: dict[str, Any] | None = None
    if repeats and not memory_only and len(counts) > 1:
        harness.log(f"workers_costs: {clients} clients again, every count's router loaded "
                    f"in turn, {repeats} times")
        ratios = interleaved_ratios(counts, interleaved(
            {"this": HERE}, counts=counts, clients=clients, duration=duration,
            repeats=repeats, rate=rate))
    if loaded_only:
        text = loaded_table(results)
    else:
        text = memory_table(results)
        if not memory_only:
            text = table(results) + "\n" + text
    if ratios is not None:
        text += "\n" + ratios_table(ratios)
    harness.write_results("workers_costs", {"parameters": {
        "loaded_only": loaded_only,
        "counts": counts, "store": STORE, "clients": clients, "duration": duration,
        "rate": rate, "queues_per_recipient": QUEUES_PER_RECIPIENT, "sender_window": SENDER_WINDOW,
        "light_rate": LIGHT_RATE, "idle_connections": connections,
        "idle_subscriptions": subscriptions, "repeats": repeats, "cores": pinning()},
        "results": results,
        "interleaved": ratios}, text, out)
    print(text)
    return results


def interleaved_ratios(counts: tuple[int, ...],
                       runs: dict[tuple[str, int], list[dict[str, Any]]]) -> dict[str, Any]:
    """Per count: its CPU per message over the first count's, run beside run."""
    first = runs[("this", counts[0])]
    out: dict[str, Any] = {}
    for workers in counts:
        these = runs[("this", workers)]
        ratios = _neighbours(these, first)
        out[str(workers)] = {
            "cpu_us_per_msg": [r["cpu_us_per_msg"] for r in these],
            "msgs_per_s": [r["msgs_per_s"] for r in these],
            "p99_ms": [r["latency_ms"]["p99"] for r in these],
            "x_first": ratios,
            "x_first_median": statistics.median(ratios) if ratios else None}
    return out


def ratios_table(ratios: dict[str, Any]) -> str:
    first = next(iter(ratios))
    rows = [[workers, _f(statistics.median(r["cpu_us_per_msg"]), 0),
             ", ".join(_f(v, 0) for v in r["cpu_us_per_msg"]),
             _f(r["x_first_median"], 2), ", ".join(f"{v:.2f}" for v in r["x_first"]),
             _f(statistics.median(r["msgs_per_s"]), 0),
             ", ".join(_f(v, 0) for v in r["p99_ms"])] for workers, r in ratios.items()]
    return harness.md_table(
        ["workers (50 clients, loaded in turn)", "CPU us/msg (median)", "each run",
         f"x {first} worker(s): median", "each run beside its neighbour", "msg/s (median)",
         "loaded p99 ms, each run"], rows)


def _x(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}"


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(results: list[dict[str, Any]]) -> str:
    base = results[0]
    rows = []
    for r in results:
        loaded, light, mem = r["loaded"], r["light"], r["memory"]
        rows.append([
            r["workers"], f"{r['idle_rss'] / 2**20:.0f}",
            " + ".join(f"{rss / 2**20:.0f}" for rss in r["idle_rss_by_process"]),
            _f(r["ping_ms"]["median"], 2), _f(r["ping_ms"]["p99"], 2),
            _f(light["latency_ms"]["p50"], 2), _f(light["latency_ms"]["p99"], 2),
            _f(loaded["msgs_per_s"], 0), _f(loaded["router_cores"], 2),
            _f(loaded["cpu_us_per_msg"], 0),
            _x(loaded["cpu_us_per_msg"], base["loaded"]["cpu_us_per_msg"]),
            _f(loaded["blocks_in_per_msg"], 2), _f(loaded["blocks_out_per_msg"], 2),
            _f(loaded["latency_ms"]["p50"], 1), _f(loaded["latency_ms"]["p99"], 1),
            _f(mem["bytes_per_connection"], 0),
            _x(mem["bytes_per_connection"], base["memory"]["bytes_per_connection"]),
            _f(mem["bytes_per_subscription"], 0),
            _x(mem["bytes_per_subscription"], base["memory"]["bytes_per_subscription"]),
            loaded["send_errors"] + loaded["ack_errors"] + light["send_errors"]
            + light["ack_errors"],
        ])
    clients = results[0]["clients"]
    return harness.md_table(
        ["workers", "idle RSS MB", "idle RSS by process MB", "PING p50 ms", "PING p99 ms",
         f"light SEND->MSG p50 ms ({LIGHT_RATE:.0f}/s)", "light SEND->MSG p99 ms",
         f"{clients} clients msg/s", "router cores busy", "CPU us/msg (all processes)",
         f"CPU/msg x {base['workers']}", "blocks in / msg", "blocks out / msg",
         "loaded p50 ms", "loaded p99 ms",
         "B/idle connection (RSS)", f"x {base['workers']}", "B/idle subscription (RSS)",
         f"x {base['workers']}", "errors"], rows)


def loaded_table(results: list[dict[str, Any]]) -> str:
    """The 50 clients only (`--loaded-only`)."""
    base = results[0]["loaded"]
    rows = [[r["workers"], _f(r["loaded"]["msgs_per_s"], 0), _f(r["loaded"]["router_cores"], 2),
             _f(r["loaded"]["cpu_us_per_msg"], 0),
             _x(r["loaded"]["cpu_us_per_msg"], base["cpu_us_per_msg"]),
             _f(r["loaded"]["blocks_in_per_msg"], 2), _f(r["loaded"]["blocks_out_per_msg"], 2),
             _f(r["loaded"]["latency_ms"]["p50"], 1), _f(r["loaded"]["latency_ms"]["p99"], 1),
             r["loaded"]["send_errors"] + r["loaded"]["ack_errors"]] for r in results]
    return harness.md_table(
        ["workers", f"{results[0]['clients']} clients msg/s", "router cores busy",
         "CPU us/msg (all processes)", f"CPU/msg x {results[0]['workers']}",
         "blocks in / msg", "blocks out / msg", "loaded p50 ms", "loaded p99 ms", "errors"],
        rows)


def interleaved(trees: dict[str, Path], *, counts: tuple[int, ...], clients: int,
                duration: float, repeats: int, rate: float | None = None,
                ) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The loaded phase on every tree's router at every count, all started at once and
    loaded in turn, `repeats` times, the order reversed every other time: a machine
    shared with other work moves single figures by 10-20 %, neighbours in time less."""
    setups = [(name, workers) for workers in counts for name in trees]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {setup: [] for setup in setups}
    pairs = max(1, clients // 2)
    with tempfile.TemporaryDirectory(prefix="smp-bench-workers-costs-") as tmp, \
            contextlib.ExitStack() as stack:
        loads = {}
        for name, workers in setups:
            data_dir = Path(tmp) / f"{name}-{workers}"
            trio.run(fill, STORE, data_dir, range(pairs * QUEUES_PER_RECIPIENT), workers)
            router = stack.enter_context(CliRouter(workers, STORE, data_dir,
                                                   tree=trees[name]))
            group = stack.enter_context(WorkerGroup(router.url, LOAD_PROCESSES))
            loads[(name, workers)] = (router, _loaded(router, group, pairs,
                                                      QUEUES_PER_RECIPIENT))
        for repeat in range(repeats):
            for setup in (setups if repeat % 2 == 0 else setups[::-1]):
                router, load = loads[setup]
                runs[setup].append(_measure(router, load, duration, rate))
                harness.log(f"workers_costs: {setup[0]} --workers {setup[1]}: "
                            f"{runs[setup][-1]['cpu_us_per_msg'] or 0:.0f} us/msg")
    return runs


def _neighbours(these: list[dict[str, Any]], others: list[dict[str, Any]]) -> list[float]:
    """CPU per message of each run of `these` over the run of `others` beside it."""
    return [t["cpu_us_per_msg"] / o["cpu_us_per_msg"] for t, o in zip(these, others, strict=True)
            if t["cpu_us_per_msg"] and o["cpu_us_per_msg"]]


def compare(base: Path, *, counts: tuple[int, ...], clients: int, duration: float,
            repeats: int, out: Path | None, rate: float | None = None) -> dict[str, Any]:
    """The loaded phase on TREE's router and this checkout's, side by side (`--base`)."""
    trees = {"base": base.resolve(), "this": HERE}
    setups = [(name, workers) for workers in counts for name in trees]
    runs = interleaved(trees, counts=counts, clients=clients, duration=duration,
                       repeats=repeats, rate=rate)
    medians = {f"{name}-{workers}": {
        key: statistics.median(r[key] or 0 for r in runs[(name, workers)])
        for key in ("cpu_us_per_msg", "msgs_per_s", "blocks_in_per_msg", "blocks_out_per_msg")}
        for name, workers in setups}
    rows = []
    for workers in counts:
        this, other = medians[f"this-{workers}"], medians[f"base-{workers}"]
        neighbours = _neighbours(runs[("this", workers)], runs[("base", workers)])
        rows.append([workers, _f(other["cpu_us_per_msg"], 0), _f(this["cpu_us_per_msg"], 0),
                     _x(this["cpu_us_per_msg"], other["cpu_us_per_msg"]),
                     f"{statistics.median(neighbours):.2f}" if neighbours else "-",
                     _x(other["cpu_us_per_msg"], medians[f"base-{counts[0]}"]["cpu_us_per_msg"]),
                     _x(this["cpu_us_per_msg"], medians[f"this-{counts[0]}"]["cpu_us_per_msg"]),
                     f"{other['blocks_out_per_msg']:.2f} / {this['blocks_out_per_msg']:.2f}",
                     f"{other['msgs_per_s']:,.0f} / {this['msgs_per_s']:,.0f}"])
    text = harness.md_table(
        ["workers", "base CPU us/msg", "this CPU us/msg", "this / base (medians)",
         "this / base (median of neighbours)", f"base x {counts[0]} worker",
         f"this x {counts[0]} worker", "blocks out / msg (base / this)",
         "msg/s (base / this)"], rows)
    results = {"parameters": {"base": str(trees["base"]), "counts": counts, "clients": clients,
                              "duration": duration, "repeats": repeats, "rate": rate,
                              "cores": pinning()},
               "medians": medians,
               "runs": {f"{name}-{workers}": r for (name, workers), r in runs.items()}}
    harness.write_results("workers_costs_compare", results, text, out)
    print(text)
    return results


def memory_table(results: list[dict[str, Any]]) -> str:
    """The memory phase: RSS per process at each stage, bytes per idle subscription at
    the bench's moment and, where read, once the router has settled."""
    base = results[0]["memory"]
    rows = []
    for r in results:
        mem = r["memory"]
        stages = mem["rss_by_process"]
        settled = mem.get("bytes_per_subscription_settled")
        rows.append([
            r["workers"],
            *(" + ".join(f"{rss / 2**20:.1f}" for rss in stages[stage]) if stage in stages
              else "-" for stage in ("empty", "connected", "subscribed", "settled")),
            _f(mem["bytes_per_connection"], 0),
            _x(mem["bytes_per_connection"], base["bytes_per_connection"]),
            _f(mem["bytes_per_subscription"], 0),
            _x(mem["bytes_per_subscription"], base["bytes_per_subscription"]),
            _f(settled, 0), _x(settled, base.get("bytes_per_subscription_settled")),
        ])
    first = results[0]["workers"]
    return harness.md_table(
        ["workers", "RSS empty MB (per process)", "connected", "subscribed",
         f"settled (+{SETTLED:.0f} s)", "B/idle connection", f"x {first}",
         "B/idle subscription", f"x {first}", "B/idle subscription settled", f"x {first}"],
        rows)


def _counts(text: str) -> tuple[int, ...]:
    counts = tuple(int(x) for x in text.split(","))
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: counts of workers, e.g. 1,2")
    return counts


def _cores(text: str) -> tuple[set[int], set[int]]:
    try:
        router, load = (set(int(core) for core in side.split(",")) for side in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the router's cores, then the load's, "
                                         "e.g. 1:0") from None
    if router & load:
        raise argparse.ArgumentTypeError(f"{text!r}: the router and the load share cores")
    return router, load


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench workers_costs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=_counts, default=COUNTS,
                        help="counts of workers, run in this order (default 1,2)")
    parser.add_argument("--duration", type=float, help="measured seconds of the 50 clients")
    parser.add_argument("--quick", action="store_true", help="small sizes, scratch output")
    parser.add_argument("--loaded-only", action="store_true",
                        help=f"only the {CLIENTS} clients' CPU per message (with --quick: "
                        f"{QUICK_DURATION} s of it)")
    parser.add_argument("--base", type=Path, help="with --loaded-only: another checkout, "
                        "its router beside this one's")
    parser.add_argument("--repeats", type=int,
                        help="loaded runs of each router, in turn: a full run's last phase "
                        f"and --base's (default {RATIO_REPEATS}); with --loaded-only, "
                        "after its one run of each")
    parser.add_argument("--clients", type=int, help=f"clients of the loaded phase "
                        f"(default {CLIENTS}; --quick without --loaded-only: {QUICK_CLIENTS})")
    parser.add_argument("--rate", type=float,
                        help="the loaded phase's messages a second over all its senders, "
                        "sent whatever the answers do (default: as fast as 2 SENDs in "
                        "flight per sender go)")
    parser.add_argument("--memory-only", action="store_true",
                        help="the memory phase alone (idle connections and subscriptions)")
    parser.add_argument("--settled", action=argparse.BooleanOptionalAction, default=None,
                        help=f"read the RSS again {SETTLED:.0f} s after the subscriptions "
                        "(default: on, off with --quick)")
    parser.add_argument("--connections", type=int,
                        help="idle connections of the memory phase "
                        f"(default {IDLE_CONNECTIONS:,}, quick {QUICK_IDLE_CONNECTIONS})")
    parser.add_argument("--subscriptions", type=int,
                        help="idle subscriptions of the memory phase "
                        f"(default {IDLE_SUBSCRIPTIONS:,}, quick {QUICK_IDLE_SUBSCRIPTIONS})")
    parser.add_argument("--cores", type=_cores, metavar="ROUTER:LOAD",
                        help="the routers on the cores ROUTER, the load on the cores LOAD "
                        "(e.g. 1:0): each side's CPU without the other's taking its cores")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results; "
                        "with --quick a new scratch directory)")
    args = parser.parse_args(argv)
    out = args.out
    if out is None and args.quick:
        out = Path(tempfile.mkdtemp(prefix="smp-bench-workers-costs-"))
    if args.loaded_only and args.memory_only:
        parser.error("--loaded-only and --memory-only: give one")
    if args.base is not None and not args.loaded_only:
        parser.error("--base compares the loaded phase: give --loaded-only")
    if args.base is not None and not (args.base / "router").is_dir():
        parser.error(f"--base {args.base}: not a checkout of the router")
    try:
        if args.cores is not None:
            pin_cores(*args.cores)
        if args.base is not None:
            compare(args.base, counts=args.counts, clients=args.clients or CLIENTS,
                    duration=args.duration or (QUICK_DURATION if args.quick else DURATION),
                    repeats=args.repeats or RATIO_REPEATS, out=out, rate=args.rate)
        else:
            run(quick=args.quick, counts=args.counts, duration=args.duration, out=out,
                loaded_only=args.loaded_only, clients=args.clients,
                memory_only=args.memory_only, settled=args.settled,
                connections=args.connections, subscriptions=args.subscriptions,
                rate=args.rate, repeats=args.repeats)
    except harness.BenchError as exc:
        print(f"python -m bench workers_costs: error: {exc}", file=sys.stderr)
        return 1
    print(f"results: {out or harness.RESULTS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
