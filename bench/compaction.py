"""Store-log compaction: Spark (`smp-pipeline compact`) against the router's own.

    python -m bench compaction --records 1000000 10000000 [--data-dir DIR]

For each size, a synthetic store log (pipeline.synth, fixed seed) is written
once, then compacted in a fresh process each way:

- router: `store.journal.storelog.open_log`, what the router runs at start (read and
  check every line, replay, write the snapshot, rename), on a copy of the log;
- spark: `pipeline.compact_job.run_compact` on a local session (`--master`).

Reported: wall time of the compaction itself (Spark: without JVM start-up,
given separately), input records per second, peak RSS of the process tree, and
whether the two compacted logs are byte for byte the same.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil


class PeakRss:
    """Samples the resident memory of this process and its children (the JVM)."""

    def __init__(self, interval: float = 0.2) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def _run(self, interval: float) -> None:
        me = psutil.Process()
        while not self._stop.wait(interval):
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_router(log: Path, out: Path) -> dict:
    from store.journal.storelog import open_log

    shutil.copyfile(log, out)
    with PeakRss() as rss:
        started = time.perf_counter()
        table = open_log(out, backups=0, skip_corrupt=False)
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "queues": len(table.queues), "peak_rss": rss.peak}


def run_spark(log: Path, out: Path, master: str, driver_memory: str) -> dict:
    from pipeline.compact_job import run_compact
    from pipeline.session import build_session

    with PeakRss() as rss:
        started = time.perf_counter()
        spark = build_session(
            "bench compaction",
            master,
            {"spark.ui.enabled": "false", "spark.driver.memory": driver_memory},
        )
        spark.sparkContext.setLogLevel("WARN")
        ready = time.perf_counter()
        queues = run_compact(spark, [str(log)], str(out))
        done = time.perf_counter()
        spark.stop()
    return {
        "seconds": done - ready,
        "startup": ready - started,
        "queues": queues,
        "peak_rss": rss.peak,
    }


def measure(kind: str, log: Path, out: Path, args: argparse.Namespace) -> dict:
    """One compaction in a fresh Python process, so neither side warms the other."""
    cmd = [sys.executable, "-m", "bench.compaction", "--one", kind, str(log), str(out)]
    cmd += ["--master", args.master, "--driver-memory", args.driver_memory]
    result = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def ensure_log(records: int, data_dir: Path) -> Path:
    from pipeline.synth import write_synthetic_log

    path = data_dir / f"synthetic-{records}.log"
    if not path.exists():
        print(f"writing {path} ...", file=sys.stderr)
        tmp = path.with_name(path.name + ".tmp")
        write_synthetic_log(tmp, records, seed=1)
        os.replace(tmp, path)
    return path


def same_file(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while chunk := fa.read(1 << 20):
            if chunk != fb.read(1 << 20):
                return False
    return True


def bench_size(records: int, args: argparse.Namespace) -> list[str]:
    log = ensure_log(records, args.data_dir)
    router_out, spark_out = log.with_suffix(".router.log"), log.with_suffix(".spark.log")
    router = measure("router", log, router_out, args)
    print(f"router {records}: {router}", file=sys.stderr)
    spark = measure("spark", log, spark_out, args)
    print(f"spark {records}: {spark}", file=sys.stderr)
    same = "yes" if same_file(router_out, spark_out) else "NO"
    size_mb = log.stat().st_size / 1e6
    rows = []
    for name, r in (("router (open_log)", router), (f"Spark {args.master}", spark)):
        startup = f"{r['startup']:.1f}" if "startup" in r else "-"
        rows.append(
            f"| {records:,} | {size_mb:,.0f} | {name} | {r['seconds']:.1f} | {startup} | "
            f"{records / r['seconds']:,.0f} | {r['queues']:,} | {r['peak_rss'] / 2**20:,.0f} | "
            f"{same} |"
        )
    for path in (router_out, spark_out):
        path.unlink(missing_ok=True)
    return rows


HEADER = (
    "| records | log MB | compactor | seconds | JVM start s | records/s | queues kept "
    "| peak RSS MiB | same output |\n"
    "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench compaction",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/smp-bench-compaction"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--one", nargs=3, metavar=("KIND", "LOG", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        kind, log, out = args.one
        if kind == "router":
            result = run_router(Path(log), Path(out))
        else:
            result = run_spark(Path(log), Path(out), args.master, args.driver_memory)
        print(json.dumps(result))
        return 0
    args.data_dir.mkdir(parents=True, exist_ok=True)
    print(
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM\n"
    )
    print(HEADER)
    for records in args.records:
        load = os.getloadavg()[0]
        for row in bench_size(records, args):
            print(row, flush=True)
        print(f"load average (1 min) when the {records:,} run began: {load:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
