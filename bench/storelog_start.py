"""Start-up of `smp-router serve` on a long store log: time and peak memory.

    python -m bench storelog_start --records 10000000 [--log PATH] [--base DIR]

A synthetic store log of `records` lines (`pipeline.synth`, seed 1: creates,
secures, notifier changes, service changes, suspensions and deletes, as the
router's queue store writes them) becomes the `queues.log` of a journal-store
data directory, and `smp-router serve --store journal` starts on it: it
recovers, replays and compacts the log before it listens. Measured from
outside: seconds until the router prints its address, its peak RSS (VmHWM)
and RSS by then, and the queues the compacted log keeps. `--base DIR` runs
the same start with another source tree (e.g. the commit before the
streaming replay) first, so the two figures come from one session.
Results: bench/results/storelog-start.json and .md (full size only; a run
below 1M records writes into a temporary directory unless `--out` is given).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import harness
from .harness import log, md_table, write_results
from .one_process import one_process

SEED = 1
FULL_SIZE = 1_000_000


def _serve(source: Path, data_dir: Path, timeout: float) -> dict[str, Any]:
    """Start the router from `source` on `data_dir`; measure until it listens."""
    cmd = [sys.executable, "-c", "from router.server.cli.main import main; main()",
           "serve", *one_process(source), "--store", "journal", "--data-dir", str(data_dir),
           "--port", "0", "--no-stats-log", "--log-level", "warning"]
    env = {**os.environ, "PYTHONPATH": str(source)}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=source, env=env)
    try:
        assert proc.stdout is not None
        line = harness._readline(proc.stdout, timeout)
        seconds = time.monotonic() - started
        if "listening" not in line:
            raise harness.BenchError(f"router did not start: {line!r}")
        status = Path(f"/proc/{proc.pid}/status").read_text()
        return {"seconds": seconds, "peak_rss": _kib(status, "VmHWM"),
                "rss": _kib(status, "VmRSS")}
    finally:
        proc.terminate()
        proc.wait(60)


def _kib(status: str, field: str) -> int:
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _data_dir(root: Path, source: Path, log_path: Path) -> Path:
    """A journal data directory whose store log is a copy of `log_path`."""
    data = root / "data"
    shutil.rmtree(data, ignore_errors=True)
    _serve(source, data, 120)  # lays out an empty store (identity, STORE_KIND)
    queues = data / "journal-store" / "queues.log"
    for old in queues.parent.glob("queues.*.log"):
        old.unlink()
    shutil.copyfile(log_path, queues)
    return data


def run(records: int, log_path: Path | None, base: Path | None, out: Path) -> dict[str, Any]:
    from pipeline.synth import write_synthetic_log

    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="storelog-start-") as tmp:
        root = Path(tmp)
        if log_path is None:
            log_path = root / "synthetic.log"
            log(f"storelog-start: writing {records:,} records")
            write_synthetic_log(log_path, records, SEED)
        size = log_path.stat().st_size
        runs = []
        for label, source in (("before", base), ("this tree", here)):
            if source is None:
                continue
            data = _data_dir(root, source, log_path)
            log(f"storelog-start: {label}: starting on {size / 2**20:,.0f} MiB")
            figures = _serve(source, data, 7200)
            kept, digest = _lines_and_digest(data / "journal-store" / "queues.log")
            runs.append({"tree": label, "source": str(source), "queues": kept,
                         "sha256": digest, **figures})
    result = {"records": records, "log_bytes": size, "runs": runs,
              "same_compacted_log": len({r["sha256"] for r in runs}) == 1}
    write_results("storelog-start", result, table(result), out)
    return result


def _lines_and_digest(path: Path) -> tuple[int, str]:
    digest, lines = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            lines += chunk.count(b"\n")
    return lines, digest.hexdigest()


def table(result: dict[str, Any]) -> str:
    rows = [[r["tree"], result["records"], result["log_bytes"] / 2**20, r["seconds"],
             r["peak_rss"] / 2**20, r["rss"] / 2**20, r["queues"]] for r in result["runs"]]
    text = md_table(["router", "log records", "log MiB", "start s", "peak RSS MiB",
                     "RSS listening MiB", "queues kept"], rows)
    if len(result["runs"]) > 1:
        same = "the same" if result["same_compacted_log"] else "DIFFERENT"
        text += f"\n\nCompacted logs of the two trees: {same} bytes."
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench storelog_start", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--log", type=Path, help="an existing store log of --records lines")
    parser.add_argument("--base", type=Path, help="another source tree to start first")
    parser.add_argument("--out", type=Path, help="results directory")
    args = parser.parse_args(argv)
    with harness.results_for(args.out, args.records < FULL_SIZE, "storelog-start") as out:
        result = run(args.records, args.log, args.base, out)
        sys.stdout.write(table(result) + f"\n\nresults in {harness.shown(out)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
