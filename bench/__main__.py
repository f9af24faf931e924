"""`python -m bench <name> [options]`: run one benchmark, write bench/results/<name>.*

    python -m bench memory       where the memory goes: per store kind and delivery mode,
                                 per queue, message, connection, subscription, traffic, storm
    python -m bench memory --sweep      idle subscriptions and connections, 1k .. 200k
    python -m bench memory --breakdown  allocation sites and the type census of one load
    python -m bench memory --storm      RSS per subscription after a reconnect storm
    python -m bench memray       a memory scenario with the router under memray
    python -m bench throughput   SEND -> MSG -> ACK rate and latency vs a WebSocket echo
    python -m bench burst        10,000 queues get one message at the same moment
    python -m bench scale        subscribe time, memory and drain rate from 1k to 200k
    python -m bench profile      any of the above with the router under pyinstrument
    python -m bench compare      router CPU per operation, this checkout vs --base DIR
    python -m bench stores       throughput per store kind vs memory; restart with 100k queues
    python -m bench relay        a large relay's load: many connections, a storm (its own options)
    python -m bench storelog_start   serve's start-up on a long store log (its own options)
    python -m bench framing      CPU of the WebSocket framing libraries per block
    python -m bench compaction   store-log compaction, router vs Spark (its own options)
    python -m bench charts [DIR] draw the charts again from saved figures
    python -m bench block-encryption  CPU per message and idle-connection memory, v10 vs v19
    python -m bench fairness     another client's PING during a flood of signed DEL/KEY/NEW blocks
    python -m bench transports   idle-connection memory, WebSocket vs native TLS
    python -m bench hotpath      CPU and task steps per message: router, minimal router, echo
    python -m bench proxy        sending through a proxy router vs straight

`--quick` runs a small version of each and writes it to a new scratch directory
(printed), leaving the committed figures in bench/results alone; `--out DIR`
writes anywhere. Each run prints its table, the text of its `.md` file.
`relay`, `storelog_start`, `framing`, `compaction`, `charts`, `fairness`, `hotpath` and
`proxy` take their own options (`python -m bench relay --help`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import harness

NAMES = ("memory", "memray", "throughput", "burst", "scale", "profile", "stores", "compare",
         "block-encryption", "transports")
# benchmarks with command lines of their own: `python -m bench NAME ARGS` is `NAME.main(ARGS)`
OWN_OPTIONS = ("relay", "storelog_start", "framing", "compaction", "charts", "fairness",
               "hotpath", "proxy")


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(float(x)) for x in text.split(","))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=NAMES)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    parser.add_argument("--repeats", type=int, help="repetitions (figures are medians)")
    parser.add_argument("--sizes", type=_sizes, help="comma-separated sizes, e.g. 1e3,1e4")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results; "
                        "with --quick a new scratch directory)")
    parser.add_argument("--duration", type=float, help="measured seconds per throughput run")
    parser.add_argument("--clients", type=_sizes, help="throughput: client counts, e.g. 2,10,50")
    parser.add_argument("--target", choices=("throughput", "burst", "scale", "memory"),
                        default="throughput", help="profile: the benchmark to profile")
    parser.add_argument("--profiler", choices=("pyinstrument", "py-spy"),
                        default="pyinstrument", help="profile: which profiler")
    parser.add_argument("--base", type=Path, help="compare: the other source tree")
    parser.add_argument("--breakdown", action="store_true",
                        help="memory: allocation sites and type census of idle connections "
                             "and subscriptions")
    parser.add_argument("--sweep", action="store_true",
                        help="memory: bytes per idle subscription from 1k to 200k (--sizes)")
    parser.add_argument("--storm", action="store_true",
                        help="memory: only what a reconnect storm leaves, beside quiet "
                             "subscribing")
    parser.add_argument("--stores", type=lambda t: tuple(t.split(",")),
                        help="memory: store kinds, e.g. memory,sqlite (default: all three)")
    parser.add_argument("--store", default="memory", help="memray: the store kind")
    parser.add_argument("--delivery", default="single-task", help="memray: the delivery mode")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in OWN_OPTIONS:
        import importlib

        code = importlib.import_module(f"bench.{argv[0]}").main(argv[1:])
        return code or 0
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.name == "memray":
        from . import memray_run

        result = memray_run.run(args.out, quick=args.quick, store=args.store,
                                mode=args.delivery)
        print(memray_run.report(result))
        return 0
    if args.name == "compare" and args.base is None:
        parser.error("compare needs --base DIR (e.g. git archive HEAD~1 | tar -x -C DIR)")
    out = results_dir(args)
    print(f"results: {out}", flush=True)
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


def results_dir(args: argparse.Namespace) -> Path:
    """`--out`; else a new scratch directory for `--quick`, so that a small run never
    replaces the committed figures; else bench/results."""
    if args.out is not None:
        return args.out
    if args.quick:
        return Path(tempfile.mkdtemp(prefix=f"smp-bench-{args.name}-"))
    return harness.RESULTS_DIR


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
                          sizes=args.sizes)
    if args.name == "compare":
        from . import compare

        return compare.run(args.base, repeats=args.repeats or 4)
    from . import profile

    return profile.run(args.target, profiler=args.profiler, quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
