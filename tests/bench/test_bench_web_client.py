"""The browser benchmarks run at a tiny size and write their figures (no timing
is asserted): bench/web_client.py in Chromium, bench/web_signing.mjs in Node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_browser_client_benchmark_writes_its_figures(tmp_path: Path):
    out = tmp_path / "web.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.web_client", "--queues", "20", "--repeats", "1",
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    (run,) = summary["runs"]
    assert summary["queues"] == 20 and summary["webcrypto"] is True
    assert run["requests"] >= 2 and run["body_bytes"] > 10_000
    assert run["subscribe_ms"] > 0 and run["create_ms"] > 0 and run["connected_ms"] > 0


def test_the_signing_benchmark_compares_the_three_ways():
    proc = subprocess.run(["node", str(REPO / "bench" / "web_signing.mjs"), "20"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout)
    for way in ("tweetnacl_us", "noble_us", "webcrypto_us", "webcrypto_fresh_keys_us"):
        assert figures[way] > 0, way
