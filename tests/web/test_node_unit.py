"""The web client's own unit tests (`node --test web/test/`), run as part of pytest."""

from __future__ import annotations

import subprocess

from web_helpers import NODE_FLAGS, WEB


def test_node_unit_tests_pass(node: str) -> None:
    proc = subprocess.run(
        [node, *NODE_FLAGS, "--test", "test/"],
        capture_output=True, text=True, timeout=300, cwd=WEB,
    )
    summary = [line for line in proc.stdout.splitlines() if line.startswith("# ")]
    output = f"{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, f"node --test failed:\n{output}"
    # A run that found no test files also exits 0: make sure the tests ran.
    passed = next(int(line.split()[-1]) for line in summary if line.startswith("# pass"))
    assert passed >= 20, summary
