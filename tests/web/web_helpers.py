"""Helpers of the web client's tests: Node.js, the client's npm packages, web/tools.

These tests never skip: on a machine without Node.js 20 or without
`npm ci --prefix web` having run, they fail and say what is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"
NODE_MAJOR_MIN = 20
# Node 20 has a WebSocket global only with this flag; later versions ignore it.
NODE_FLAGS = ("--experimental-websocket", "--no-warnings")


def find_node() -> str:
    """The `node` executable, version 20 or later, with web/node_modules installed."""
    path = shutil.which("node")
    if path is None:
        pytest.fail("tests/web need Node.js 20 or later on PATH (the web client's tests run on it)")
    version = subprocess.run(
        [path, "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < NODE_MAJOR_MIN:
        pytest.fail(f"tests/web need Node.js {NODE_MAJOR_MIN} or later, found {version}")
    if not (WEB / "node_modules" / "tweetnacl" / "package.json").exists():
        pytest.fail("web/node_modules is missing: run `npm ci --prefix web` first")
    return path


def run_node_json(node: str, script: str, *args: str, timeout: float = 60) -> object:
    """Run a script of web/tools and return the JSON it prints; fail with its stderr."""
    proc = subprocess.run(
        [node, *NODE_FLAGS, str(WEB / "tools" / script), *args],
        capture_output=True, text=True, timeout=timeout, cwd=WEB,
    )
    if proc.returncode != 0:
        pytest.fail(f"{script} exited with {proc.returncode}:\n{proc.stderr}")
    return json.loads(proc.stdout)
