"""`python -m bench <name> [options]`: run one benchmark, write bench/results/<name>.*

Every benchmark is in COMMANDS, the one list the help (`python -m bench --help`,
`python -m bench NAME --help`) and the dispatch are made from.

`--quick` runs a small version of each and prints its table, writing its files to
a scratch directory that is removed afterwards, so the committed figures in
bench/results stay as they are; `--out DIR` writes (and keeps) them anywhere.
Each run prints its table, the text of its `.md` file. The benchmarks marked
"own options" have command lines of their own (`python -m bench relay --help`).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import harness


@dataclass(frozen=True)
class Command:
    summary: str
    options: tuple[str, ...] = ()  # of OPTIONS, besides --quick, --repeats and --out
    own_options: bool = False  # `python -m bench NAME ARGS` is `bench/NAME.py`'s main(ARGS)


COMMANDS: dict[str, Command] = {
    "memory": Command("where the memory goes: per store kind and delivery mode, per queue, "
                      "message, connection, subscription, traffic, storm; --storm: RSS per "
                      "subscription after a reconnect storm; --sweep: idle "
                      "subscriptions and connections, 1k .. 200k; --breakdown: allocation "
                      "sites and the type census of one load",
                      ("sizes", "sweep", "breakdown", "storm", "stores")),
    "memray": Command("a memory scenario with the router under memray", ("store", "delivery")),
    "throughput": Command("SEND -> MSG -> ACK rate and latency vs a WebSocket echo",
                          ("duration", "clients")),
    "burst": Command("10,000 queues get one message at the same moment", ("sizes",)),
    "scale": Command("subscribe time, memory and drain rate from 1k to 200k", ("sizes",)),
    "profile": Command("any of throughput, burst, scale, memory with the router under "
                       "pyinstrument", ("target", "profiler")),
    "compare": Command("router CPU per operation, this checkout vs --base DIR", ("base",)),
    "stores": Command("every store kind, PostgreSQL included: NEW, SEND -> MSG rate and "
                      "latency, bytes per queue and message, memory per queue, resubscribing "
                      "100k, 300k queues on one connection (--sizes N: N stored queues)",
                      ("duration", "sizes")),
    "block-encryption": Command("CPU per message and idle-connection memory, v10 vs v19",
                                ("duration",)),
    "transports": Command("idle-connection memory, WebSocket vs native TLS"),
    "relay": Command("a large relay's load: many connections, a storm", own_options=True),
    "storelog_start": Command("serve's start-up on a long store log", own_options=True),
    "owner_exceptions": Command("a workers-move's owner exceptions: memory per exception, "
                                "the cost of a lookup", own_options=True),
    "workers_split": Command("a hand-off's byte work per SUB: the front's sort, the answers "
                             "handed back", own_options=True),
    "framing": Command("CPU of the WebSocket framing libraries per block", own_options=True),
    "compaction": Command("store-log compaction, router vs Spark", own_options=True),
    "charts": Command("draw the charts again from saved figures", own_options=True),
    "fairness": Command("another client's PING during a flood of signed DEL/KEY/NEW blocks",
                        own_options=True),
    "hotpath": Command("CPU and task steps per message: router, minimal router, echo",
                       own_options=True),
    "proxy": Command("sending through a proxy router vs straight", own_options=True),
    "tls_client_certs": Command("TLS handshake and idle memory, before and after client "
                                "certificates (Python ssl vs pyOpenSSL)", own_options=True),
    "service_subscribe": Command("a service's queues: one SUBS vs SUBs in blocks",
                                 own_options=True),
    "storm": Command("a reconnect storm of signed SUB blocks on every store kind",
                     own_options=True),
    "postgres_writes": Command("a block's 100 SENDs into PostgreSQL: one by one, pipelined, "
                               "one statement over arrays", own_options=True),
    "workers_storm": Command("the reconnect storm at --workers 1 and 2 in one run",
                             own_options=True),
    "workers_costs": Command("one worker beside two: idle memory, light-load latency, CPU "
                             "per message at 50 clients, memory per idle connection and "
                             "subscription", own_options=True),
    "workers_shadow": Command("the Python memory of a client's hand-offs per connection "
                              "(front and shadow, traced)", own_options=True),
    "workers_steps": Command("Trio's tasks started and scheduler steps per message across "
                             "two workers, counted (--base TREE beside)", own_options=True),
    "web_client": Command("the JavaScript client in Chromium: page load, connect, subscribe",
                          own_options=True),
}
NAMES = tuple(name for name, command in COMMANDS.items() if not command.own_options)
OWN_OPTIONS = tuple(name for name, command in COMMANDS.items() if command.own_options)


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(float(x)) for x in text.split(","))


# name -> (flag, add_argument keywords); a command lists the names it takes
OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "sizes": ("--sizes", {"type": _sizes, "help": "comma-separated sizes, e.g. 1e3,1e4"}),
    "duration": ("--duration", {"type": float, "help": "measured seconds per run"}),
    "clients": ("--clients", {"type": _sizes, "help": "client counts, e.g. 2,10,50"}),
    "target": ("--target", {"choices": ("throughput", "burst", "scale", "memory"),
                            "default": "throughput", "help": "the benchmark to profile"}),
    "profiler": ("--profiler", {"choices": ("pyinstrument", "py-spy"),
                                "default": "pyinstrument", "help": "which profiler"}),
    "base": ("--base", {"type": Path, "help": "the other source tree"}),
    "breakdown": ("--breakdown", {"action": "store_true",
                                  "help": "allocation sites and type census of idle "
                                          "connections and subscriptions"}),
    "sweep": ("--sweep", {"action": "store_true",
                          "help": "bytes per idle subscription from 1k to 200k (--sizes)"}),
    "storm": ("--storm", {"action": "store_true",
                          "help": "only what a reconnect storm leaves, beside quiet subscribing"}),
    "stores": ("--stores", {"type": lambda t: tuple(t.split(",")),
                            "help": "store kinds, e.g. memory,sqlite (default: all three)"}),
    "store": ("--store", {"default": "memory", "help": "the store kind"}),
    "delivery": ("--delivery", {"default": "single-task", "help": "the delivery mode"}),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.split("\n\n")[2].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    names = parser.add_subparsers(dest="name", required=True, metavar="NAME",
                                  title="benchmarks (python -m bench NAME --help)")
    for name, command in COMMANDS.items():
        own = " (own options)" if command.own_options else ""
        sub = names.add_parser(name, help=command.summary + own, description=command.summary)
        if command.own_options:
            continue  # never parsed here: main() hands its arguments to bench/NAME.py
        sub.add_argument("--quick", action="store_true", help="small sizes, one repetition")
        sub.add_argument("--repeats", type=int, help="repetitions (figures are medians)")
        sub.add_argument("--out", type=Path, help="results directory (default bench/results; "
                         "with --quick a scratch directory, removed after the run)")
        for option in command.options:
            flag, keywords = OPTIONS[option]
            sub.add_argument(flag, **keywords)
    return parser


def _with_every_option(args: argparse.Namespace) -> argparse.Namespace:
    """The options a command does not take, at their defaults (what _run reads)."""
    for flag, keywords in OPTIONS.values():
        dest = flag.removeprefix("--").replace("-", "_")
        if not hasattr(args, dest):
            default = keywords.get("default", False if keywords.get("action") else None)
            setattr(args, dest, default)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in OWN_OPTIONS:
        import importlib

        code = importlib.import_module(f"bench.{argv[0]}").main(argv[1:])
        return code or 0
    parser = build_parser()
    args = _with_every_option(parser.parse_args(argv))
    if args.name == "memray":
        from . import memray_run

        result = memray_run.run(args.out, quick=args.quick, store=args.store,
                                mode=args.delivery)
        print(memray_run.report(result))
        return 0
    if args.name == "stores" and args.quick and args.out is None:
        args.out = harness.RESULTS_DIR  # as stores-quick.*, beside the committed stores.*
    if args.name == "compare" and args.base is None:
        parser.error("compare needs --base DIR (e.g. git archive HEAD~1 | tar -x -C DIR)")
    with harness.results_for(args.out, args.quick, args.name) as out:
        print(f"results: {harness.shown(out)}", flush=True)
        saved_dir, first_table = harness.RESULTS_DIR, len(harness.TABLES_WRITTEN)
        harness.RESULTS_DIR = out
        try:
            summary = _run(args)
        except harness.BenchError as exc:  # a process failed: say which, not a traceback
            print(f"python -m bench {args.name}: error: {exc}", file=sys.stderr)
            return 1
        finally:
            harness.RESULTS_DIR = saved_dir
        print(report(args.name, summary, harness.TABLES_WRITTEN[first_table:]))
    return 0


def report(name: str, summary: Any, tables: list[Path]) -> str:
    """What a run prints: the tables it wrote; for runs that write none, their figures."""
    if tables:
        return "\n\n".join(path.read_text().rstrip() for path in tables)
    if name == "compare":
        medians = summary["medians"]
        keys = list(medians["this"])
        return harness.md_table(["figure", "base", "this", "this / base"], [
            [k, medians["base"][k], medians["this"][k],
             medians["this"][k] / medians["base"][k] if medians["base"][k] else None]
            for k in keys])
    files = summary.get("profiler", {}) if isinstance(summary, dict) else {}
    return "\n".join(f"{kind}: {path}" for kind, path in files.items()) or str(summary)


def _run(args: argparse.Namespace) -> object:
    repeats = args.repeats or (1 if args.quick else 3)
    if args.name == "memory":
        from . import memory

        if args.breakdown:
            return memory.breakdown()
        if args.sweep or args.sizes:
            sizes = args.sizes or (memory.QUICK_SIZES if args.quick else memory.SIZES)
            return memory.run(sizes, repeats=repeats,
                              max_connections=100 if args.quick else 1000)
        from . import memory_profile

        stores = args.stores or memory_profile.STORES
        stormy = memory.storm(memory.QUICK_STORM if args.quick else memory.STORM, stores)
        if args.storm:
            return stormy
        return memory_profile.run(memory_profile.QUICK if args.quick else memory_profile.DEFAULT,
                                  stores=stores)
    if args.name == "block-encryption":
        from . import block_encryption

        return block_encryption.run(quick=args.quick, repeats=repeats, duration=args.duration)
    if args.name == "transports":
        from . import transports

        return transports.run(quick=args.quick, repeats=args.repeats or 1)
    if args.name == "throughput":
        from . import throughput

        return throughput.run(quick=args.quick, repeats=repeats, duration=args.duration,
                              clients=args.clients)
    if args.name == "burst":
        from . import burst

        return burst.run(sizes=args.sizes or ((1000,) if args.quick else burst.SIZES),
                         repeats=repeats)
    if args.name == "scale":
        from . import scale

        sizes = args.sizes or (scale.QUICK_SIZES if args.quick else scale.SIZES)
        return scale.run(sizes, repeats=repeats)
    if args.name == "stores":
        from . import stores

        return stores.run(quick=args.quick, repeats=repeats, duration=args.duration,
                          sizes=args.sizes, out=args.out)
    if args.name == "compare":
        from . import compare

        return compare.run(args.base, repeats=args.repeats or 4)
    from . import profile

    return profile.run(args.target, profiler=args.profiler, quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
