"""throughput: SEND -> MSG -> ACK end to end, against a plain WebSocket echo ceiling.

For each client count C (router connections: C/2 senders, C/2 recipients,
each recipient subscribed to `QUEUES_PER_RECIPIENT` queues that one sender
sends to), in one run:

1. ceiling: C connections to a trio-websocket echo server with the router's
   WebSocket settings, each keeping `ECHO_WINDOW` 16384-byte messages in
   flight; echoed messages per second;
2. router, both delivery modes: every sender keeps `SENDER_WINDOW` signed
   SENDs of `BODY_SIZE` bytes in flight (a full block each, like the padded
   messages real clients send); recipients ACK what they get. Delivered
   messages per second and sender -> recipient latency (p50, p99, p99.9);
3. at the largest C, the router under an open-loop load of half the echo
   ceiling (the target throughput): latency at that rate;
4. light load: one sender sending `LIGHT_RATE` messages per second to one
   recipient while the router holds `BACKGROUND_SUBSCRIPTIONS` idle
   subscriptions, before and after `gc.freeze()` in the router; the router's
   gc pauses during each window come from `gc.callbacks`.

Load comes from two worker processes; the router and the echo server run in
processes of their own. Figures are medians over repetitions; ratios are
taken within one repetition.
"""

from __future__ import annotations

import time
from typing import Any

from router.server.settings.config import DELIVERY_MODES, PER_QUEUE_TASK, SINGLE_TASK

from .harness import (
    EchoServer,
    RouterProcess,
    WorkerGroup,
    connect,
    log,
    md_table,
    median,
    percentiles_ms,
    split,
    subscribe,
    write_results,
)

MODES = DELIVERY_MODES
CLIENTS = (2, 10, 50)
QUICK_CLIENTS = (4,)
QUEUES_PER_RECIPIENT = 8
SENDER_WINDOW = 2
ECHO_WINDOW = 1
BODY_SIZE = 16000
WARMUP = 1.0
QUICK_WARMUP = 0.25  # a quick run's figures are for the terminal: its load settles for less
DURATION = 5.0
LIGHT_RATE = 200.0
LIGHT_DURATION = 10.0
BACKGROUND_SUBSCRIPTIONS = 100_000
BACKGROUND_CONNECTIONS = 100
WORKERS = 2
SETTLE = 0.5  # seconds between handing out a job and its start, so every worker has it


def _window(duration: float, warmup: float = WARMUP) -> dict[str, float]:
    t_start = time.monotonic() + SETTLE + warmup
    return {"t_start": t_start, "t_end": t_start + duration, "stop": t_start + duration,
            "warmup": warmup}


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def echo_run(clients: int, duration: float, rate: float | None = None,
             server: str = "trio-websocket", warmup: float = WARMUP) -> dict[str, Any]:
    """The echo server under `clients` connections, each with `ECHO_WINDOW` messages
    in flight, or sending `rate` messages per second whatever the answers do."""
    with EchoServer(server) as echo, WorkerGroup(echo.url, WORKERS) as workers:
        per_worker = split(clients, WORKERS)
        workers.call([{"op": "echo_connect", "url": echo.url, "count": n} if n else None
                      for n in per_worker])
        window = _window(duration, warmup)
        workers.call([{"op": "echo_start", "window": ECHO_WINDOW, "rate": rate, **window}
                      if n else None for n in per_worker])
        _sleep_until(window["t_start"])
        cpu0 = _cpu(echo.ps)
        _sleep_until(window["t_end"])
        cpu1 = _cpu(echo.ps)
        replies = [r for r in workers.call([{"op": "wait", "job": "echo"} if n else None
                                            for n in per_worker]) if r]
        workers.call([{"op": "echo_close"} if n else None for n in per_worker])
    received = sum(r["received"] for r in replies)
    latencies = [x for r in replies for x in r["latencies"]]
    cores = (cpu1 - cpu0) / duration
    return {"msgs_per_s": received / duration, "latency_ms": percentiles_ms(latencies),
            "server_cpu": cores, "server_cpu_us_per_msg": _per_msg_us(cores, received / duration)}


def _per_msg_us(cores: float, msgs_per_s: float) -> float | None:
    return cores / msgs_per_s * 1e6 if msgs_per_s else None


def _cpu(ps: Any) -> float:
    t = ps.cpu_times()
    return t.user + t.system


class RouterLoad:
    """A router with C/2 recipients (subscribed) and C/2 senders connected."""

    def __init__(self, router: RouterProcess, workers: WorkerGroup, pairs: int,
                 queues_per_recipient: int = QUEUES_PER_RECIPIENT,
                 max_version: int | None = None) -> None:
        self.router = router
        self.max_version = max_version  # the clients' newest SMP version (None: the newest)
        self.workers = workers
        self.pairs = pairs
        self.q = queues_per_recipient
        # Senders from worker 0 first, recipients from the last worker first, so
        # that one pair puts its sender and its recipient in different processes.
        self.senders = split(pairs, WORKERS)
        self.recipients = split(pairs, WORKERS)[::-1]
        self.base = [0] * WORKERS  # index of each worker's first sender client
        router.call("preload", start=0, count=pairs * self.q, secured=True)

    def setup(self) -> None:
        workers = self.workers
        workers.call([{"op": "connect", "count": n, "max_version": self.max_version}
                      if n else None for n in self.recipients])
        first = 0
        plan = []
        for n in self.recipients:
            plan.append([[(first + i) * self.q, self.q] for i in range(n)])
            first += n
        workers.call([{"op": "subscribe", "ranges": r} if r else None for r in plan])
        replies = workers.call([{"op": "connect", "count": n, "max_version": self.max_version}
                                if n else None for n in self.senders])
        for w, reply in enumerate(replies):
            self.base[w] = (reply["clients"] if reply else 0) - self.senders[w]

    def start(self, window: dict[str, float], rate: float | None = None,
              body_size: int = BODY_SIZE) -> None:
        requests: list[dict | None] = []
        first_sender = 0
        for w in range(WORKERS):
            senders = []
            for k in range(self.senders[w]):
                pair = first_sender + k
                senders.append({
                    "client": self.base[w] + k,
                    "targets": list(range(pair * self.q, (pair + 1) * self.q)),
                    "window": SENDER_WINDOW,
                    "rate": rate / self.pairs if rate else None,
                })
            first_sender += self.senders[w]
            receivers = list(range(self.recipients[w]))
            if senders or receivers:
                requests.append({"op": "load_start", "senders": senders,
                                 "receivers": receivers, "body_size": body_size, **window})
            else:
                requests.append(None)
        self.requests = requests
        self.workers.call(requests)

    def finish(self, duration: float) -> dict[str, Any]:
        replies = [r for r in self.workers.call(
            [{"op": "wait", "job": "load"} if req else None for req in self.requests]) if r]
        latencies = [x for r in replies for x in r["latencies"]]
        return {
            "msgs_per_s": sum(r["received"] for r in replies) / duration,
            "sent_per_s": sum(r["sent"] for r in replies) / duration,
            "send_errors": sum(r["send_errors"] for r in replies),
            "ack_errors": sum(r["receive_errors"] for r in replies),
            "latency_ms": percentiles_ms(latencies),
            "delivered_total": sum(r["received_total"] for r in replies),
            "router_blocks_in": sum(r["blocks_sent"] for r in replies),
            "router_blocks_out": sum(r["blocks_received"] for r in replies),
        }

    def measure(self, duration: float, rate: float | None = None,
                warmup: float = WARMUP) -> dict[str, Any]:
        window = _window(duration, warmup)
        self.router.call("reset_hwm")
        self.start(window, rate)
        _sleep_until(window["t_start"])
        cpu0 = self.router.cpu_seconds()
        _sleep_until(window["t_end"])
        cpu1 = self.router.cpu_seconds()
        result = self.finish(duration)
        stats = self.router.call("stats")
        result["router_cpu"] = (cpu1 - cpu0) / duration
        result["router_cpu_us_per_msg"] = _per_msg_us(result["router_cpu"], result["msgs_per_s"])
        delivered = max(1, result["delivered_total"])
        result["blocks_in_per_msg"] = result["router_blocks_in"] / delivered
        result["blocks_out_per_msg"] = result["router_blocks_out"] / delivered
        result["gc_pauses"] = stats["gc_pauses"]
        result["pending_after"] = stats["messages_stored"]
        result["rss"] = stats["rss"]
        return result


def router_run(mode: str, clients: int, duration: float,
               rate: float | None = None, warmup: float = WARMUP) -> dict[str, Any]:
    with RouterProcess(mode) as router, WorkerGroup(router.address, WORKERS) as workers:
        load = RouterLoad(router, workers, max(1, clients // 2))
        load.setup()
        return load.measure(duration, rate, warmup)


def light_load_run(mode: str, background: int, duration: float = LIGHT_DURATION,
                   warmup: float = WARMUP) -> dict[str, Any]:
    """One sender, one recipient, at `LIGHT_RATE`; a router holding idle subscriptions."""
    with RouterProcess(mode) as router, WorkerGroup(router.address, WORKERS) as workers:
        load = RouterLoad(router, workers, 1, queues_per_recipient=1)
        load.setup()
        if background:
            router.call("preload", start=1, count=background, secured=True)
            before = [r + s for r, s in zip(load.recipients, load.senders, strict=True)]
            per_worker = connect(workers, BACKGROUND_CONNECTIONS)
            subscribe(workers, per_worker, 1, background, first=before)
        out = {"plain": load.measure(duration, LIGHT_RATE, warmup)}
        out["gc_freeze"] = router.call("gc_freeze")["frozen"]
        out["frozen"] = load.measure(duration, LIGHT_RATE, warmup)
        return out


def run(quick: bool = False, repeats: int = 3, duration: float | None = None,
        clients: tuple[int, ...] | None = None) -> dict[str, Any]:
    duration = duration or (2.0 if quick else DURATION)
    clients = clients or (QUICK_CLIENTS if quick else CLIENTS)
    background = 2000 if quick else BACKGROUND_SUBSCRIPTIONS
    light_duration = 1.0 if quick else LIGHT_DURATION
    warmup = QUICK_WARMUP if quick else WARMUP
    runs: list[dict[str, Any]] = []
    for rep in range(repeats):
        point: dict[str, Any] = {"repeat": rep, "by_clients": {}}
        for c in clients:
            log(f"throughput: echo, {c} clients, run {rep + 1}/{repeats}")
            entry: dict[str, Any] = {"echo": echo_run(c, duration, warmup=warmup)}
            for mode in MODES:
                log(f"throughput: {mode}, {c} clients, run {rep + 1}/{repeats}")
                entry[mode] = router_run(mode, c, duration, warmup=warmup)
                entry[mode]["ratio"] = entry[mode]["msgs_per_s"] / entry["echo"]["msgs_per_s"]
            point["by_clients"][str(c)] = entry
        top = point["by_clients"][str(clients[-1])]
        target_rate = 0.5 * top["echo"]["msgs_per_s"]
        point["at_target"] = {"clients": clients[-1], "rate": target_rate}
        for mode in MODES:
            log(f"throughput: {mode} open loop at {target_rate:.0f} msg/s")
            point["at_target"][mode] = router_run(mode, clients[-1], duration, target_rate,
                                                  warmup)
        point["light"] = {}
        log(f"throughput: echo light load, {LIGHT_RATE:.0f} msg/s")
        point["light_echo"] = echo_run(1, light_duration, rate=LIGHT_RATE, warmup=warmup)
        for mode in MODES:
            log(f"throughput: {mode} light load, {background} idle subscriptions")
            point["light"][mode] = light_load_run(mode, background, light_duration, warmup)
        runs.append(point)
    summary = summarize(runs, clients)
    parameters = {
        "clients": clients, "repeats": repeats, "duration": duration, "warmup": warmup,
        "queues_per_recipient": QUEUES_PER_RECIPIENT, "sender_window": SENDER_WINDOW,
        "echo_window": ECHO_WINDOW, "body_size": BODY_SIZE, "light_rate": LIGHT_RATE,
        "light_duration": light_duration, "background_subscriptions": background,
    }
    write_results("throughput", {"parameters": parameters, "summary": summary, "runs": runs},
                  table(summary))
    return summary


def _lat(result: dict[str, Any], key: str) -> float | None:
    return result["latency_ms"][key]


def summarize(runs: list[dict[str, Any]], clients: tuple[int, ...]) -> dict[str, Any]:
    rows = []
    for c in clients:
        entries = [r["by_clients"][str(c)] for r in runs]
        row: dict[str, Any] = {
            "clients": c,
            "echo_msgs_per_s": median(e["echo"]["msgs_per_s"] for e in entries),
            "echo_p50": median(_lat(e["echo"], "p50") for e in entries),
            "echo_p99": median(_lat(e["echo"], "p99") for e in entries),
            "echo_cpu_us_per_msg": median(e["echo"]["server_cpu_us_per_msg"] for e in entries),
        }
        for mode in MODES:
            row[mode] = {
                "msgs_per_s": median(e[mode]["msgs_per_s"] for e in entries),
                "ratio": median(e[mode]["ratio"] for e in entries),
                "p50": median(_lat(e[mode], "p50") for e in entries),
                "p99": median(_lat(e[mode], "p99") for e in entries),
                "p999": median(_lat(e[mode], "p999") for e in entries),
                "router_cpu": median(e[mode]["router_cpu"] for e in entries),
                "cpu_us_per_msg": median(e[mode]["router_cpu_us_per_msg"] for e in entries),
                # What router / echo would be if each server had a core of its own.
                "cpu_ratio": median(e["echo"]["server_cpu_us_per_msg"]
                                    / e[mode]["router_cpu_us_per_msg"] for e in entries),
                "blocks_in": median(e[mode]["blocks_in_per_msg"] for e in entries),
                "blocks_out": median(e[mode]["blocks_out_per_msg"] for e in entries),
            }
        rows.append(row)
    at_target: dict[str, Any] = {
        "clients": runs[0]["at_target"]["clients"],
        "rate": median(r["at_target"]["rate"] for r in runs),
    }
    for mode in MODES:
        at = [r["at_target"][mode] for r in runs]
        at_target[mode] = {
            "msgs_per_s": median(a["msgs_per_s"] for a in at),
            "p50": median(_lat(a, "p50") for a in at),
            "p99": median(_lat(a, "p99") for a in at),
            "p999": median(_lat(a, "p999") for a in at),
            "router_cpu": median(a["router_cpu"] for a in at),
        }
    light: dict[str, Any] = {}
    for mode in MODES:
        for variant in ("plain", "frozen"):
            ls = [r["light"][mode][variant] for r in runs]
            light[f"{mode} {variant}"] = {
                "msgs_per_s": median(x["msgs_per_s"] for x in ls),
                "p50": median(_lat(x, "p50") for x in ls),
                "p99": median(_lat(x, "p99") for x in ls),
                "p999": median(_lat(x, "p999") for x in ls),
                "max": median(_lat(x, "max") for x in ls),
                "gc2_count": median(x["gc_pauses"]["count"][2] for x in ls),
                "gc_max_ms": median(max(x["gc_pauses"]["max_ms"]) for x in ls),
            }
    echo = [r["light_echo"] for r in runs]
    light["echo round trip"] = {
        "msgs_per_s": median(x["msgs_per_s"] for x in echo),
        "p50": median(_lat(x, "p50") for x in echo),
        "p99": median(_lat(x, "p99") for x in echo),
        "p999": median(_lat(x, "p999") for x in echo),
        "max": median(_lat(x, "max") for x in echo),
        "gc2_count": None, "gc_max_ms": None,
    }
    return {"by_clients": rows, "at_target": at_target, "light": light}


def table(summary: dict[str, Any]) -> str:
    rows = []
    for r in summary["by_clients"]:
        s, q = r[SINGLE_TASK], r[PER_QUEUE_TASK]
        rows.append([r["clients"], r["echo_msgs_per_s"], s["msgs_per_s"], s["ratio"],
                     q["msgs_per_s"], q["ratio"], s["p50"], s["p99"], s["p999"],
                     q["p50"], q["p99"], q["p999"], s["router_cpu"]])
    cpu_rows = []
    for r in summary["by_clients"]:
        for mode in MODES:
            m = r[mode]
            cpu_rows.append([r["clients"], mode, m["cpu_us_per_msg"], r["echo_cpu_us_per_msg"],
                             m["cpu_ratio"], m["router_cpu"], m["blocks_in"], m["blocks_out"]])
    out = ["### Saturated (closed loop)", "", md_table(
        ["clients", "echo msg/s", "single msg/s", "single / echo", "per-queue msg/s",
         "per-queue / echo", "single p50 ms", "single p99 ms", "single p99.9 ms",
         "per-queue p50 ms", "per-queue p99 ms", "per-queue p99.9 ms", "router CPU (cores)"],
        rows)]
    out += ["", "### CPU per message (same runs)", "", md_table(
        ["clients", "mode", "router CPU us/msg", "echo server CPU us/msg",
         "echo / router CPU", "router cores busy", "blocks in / msg", "blocks out / msg"],
        cpu_rows)]
    t = summary["at_target"]
    out += ["", f"### Open loop at half the echo ceiling ({t['rate']:.0f} msg/s offered, "
            f"{t['clients']} clients)", "", md_table(
                ["mode", "delivered msg/s", "p50 ms", "p99 ms", "p99.9 ms", "router CPU"],
                [[m, t[m]["msgs_per_s"], t[m]["p50"], t[m]["p99"], t[m]["p999"],
                  t[m]["router_cpu"]] for m in MODES])]
    out += ["", "### Light load (one sender, one recipient) with idle subscriptions held", "",
            md_table(["mode", "msg/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms",
                      "gen2 collections", "longest gc pause ms"],
                     [[k, v["msgs_per_s"], v["p50"], v["p99"], v["p999"], v["max"],
                       v["gc2_count"], v["gc_max_ms"]] for k, v in summary["light"].items()])]
    return "\n".join(out)
