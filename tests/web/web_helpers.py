"""Helpers of the web client's tests: Node.js, the client's npm packages, web/tools.

These tests never skip: on a machine without Node.js 20 or without
`npm ci --prefix web` having run, they fail and say what is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from router.client import RecipientQueue
from router.server import RouterConfig, RouterInfo, serve_router

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


class DriverError(Exception):
    """The JavaScript side answered a request with an error."""

    def __init__(self, error: dict) -> None:
        super().__init__(f"{error.get('name')}: {error.get('message')}")
        self.name = error.get("name")
        self.type = error.get("type")


class NodeDriver:
    """web/tools/smp-driver.mjs in a subprocess: the web client, one JSON line per request."""

    def __init__(self, process: trio.Process) -> None:
        self._process = process
        self._buffer = b""
        self._next_id = 0
        self._lock = trio.Lock()

    async def call(self, op: str, timeout: float = 20, **args: object) -> Any:
        """The result of `op`; `DriverError` when the client raised."""
        async with self._lock:
            self._next_id += 1
            request = {"id": self._next_id, "op": op, **args}
            assert self._process.stdin is not None
            await self._process.stdin.send_all(json.dumps(request).encode() + b"\n")
            with trio.fail_after(timeout):
                while True:
                    answer = json.loads(await self._line())
                    if answer["id"] == self._next_id:
                        break
        if not answer["ok"]:
            raise DriverError(answer["error"])
        return answer["result"]

    async def error(self, op: str, **args: object) -> DriverError:
        """The error `op` must end with."""
        try:
            result = await self.call(op, **args)
        except DriverError as e:
            return e
        raise AssertionError(f"{op} succeeded with {result!r}, an error was expected")

    async def _line(self) -> bytes:
        assert self._process.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self._process.stdout.receive_some(65536)
            if not chunk:
                raise AssertionError("the web client driver exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line


@asynccontextmanager
async def node_driver(node: str) -> AsyncIterator[NodeDriver]:
    """A running driver, ended (stdin closed, then killed if it lingers) on exit."""
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            partial(
                trio.run_process,
                [node, *NODE_FLAGS, str(WEB / "tools" / "smp-driver.mjs")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, check=False, cwd=WEB,
            )
        )
        try:
            yield NodeDriver(process)
        finally:
            assert process.stdin is not None
            await process.stdin.aclose()
            with trio.move_on_after(10):
                await process.wait()
            process.kill()


def queue_fields(q: RecipientQueue) -> dict[str, object]:
    """A Python client's queue as the driver takes it."""
    return {
        "recipientId": q.recipient_id.hex(), "senderId": q.sender_id.hex(),
        "rcvAuthSeed": q.rcv_auth_seed.hex(), "rcvAuthKey": q.rcv_auth_key.hex(),
        "rcvDhPriv": q.rcv_dh_priv.hex(), "srvDhKey": q.srv_dh_key.hex(),
        "boxKey": q.box_key.hex(), "sndSecure": q.snd_secure,
    }


def queue_from_fields(f: dict[str, Any]) -> RecipientQueue:
    """A queue the web client created, for the Python client."""
    b = {k: bytes.fromhex(v) for k, v in f.items() if isinstance(v, str)}
    return RecipientQueue(
        b["recipientId"], b["senderId"], b["rcvAuthSeed"], b["rcvAuthKey"], b["rcvDhPriv"],
        b["srvDhKey"], b["boxKey"], f["sndSecure"],
    )


class RestartableRouter:
    """A router in the test's nursery that can stop and start again on the same port."""

    def __init__(self, nursery: trio.Nursery, **options: object) -> None:
        self._nursery = nursery
        self._options = {"host": "127.0.0.1", "port": 0, **options}
        self.info: RouterInfo | None = None
        self._scope: trio.CancelScope | None = None
        self._done = trio.Event()

    async def start(self) -> RouterInfo:
        self.info = await self._nursery.start(self._serve, RouterConfig(**self._options))
        self._options["port"] = self.info.port
        return self.info

    async def _serve(self, config: RouterConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._done = trio.Event()
        try:
            with trio.CancelScope() as self._scope:
                await serve_router(config, task_status=task_status)
        finally:
            self._done.set()

    async def stop(self) -> None:
        assert self._scope is not None
        self._scope.cancel()
        await self._done.wait()
