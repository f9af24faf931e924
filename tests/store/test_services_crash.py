"""Services and their figures on the durable stores survive kill -9: a child process
associates and releases queues in blocks (tests/store/services_crash_child.py) and is
killed with SIGKILL at a random moment, several times on one data directory. After
each kill the service has the same id, every answered change is there, the change in
flight is there or not queue by queue (a store log writes a block a line per queue),
and the count and ids hash the store keeps are those of the queues it holds."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trio

from router.protocol.ids_hash import queue_ids_hash
from store import Party, open_stores
from store.interfaces import ServiceQueues

CHILD = Path(__file__).with_name("services_crash_child.py")
CYCLES = 4
Model = dict[bytes, bool]  # live queue -> associated with the service


def apply(model: Model, op: list) -> Model:
    kind, rids_hex = op
    after = dict(model)
    for rid in map(bytes.fromhex, rids_hex):
        if kind == "delete":
            after.pop(rid, None)
        elif kind in ("associate", "release"):
            if rid in after:
                after[rid] = kind == "associate"
        else:
            after[rid] = kind == "add_associated"
    return after


def run_and_kill(kind: str, data_dir: Path, seed: int, kill_after: int):
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), kind, str(data_dir), str(seed)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    watchdog = threading.Timer(60, proc.kill)  # a hung child fails the test, never hangs it
    watchdog.start()
    service, done, started = None, [], None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.endswith("\n"):  # cut off by the kill
                break
            msg = json.loads(line)
            if "service" in msg:
                service = bytes.fromhex(msg["service"])
            elif "start" in msg:
                started = msg["start"]
            else:
                done.append(msg["done"])
                started = None
            if len(done) >= kill_after and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        watchdog.cancel()
        proc.kill()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    return service, done, started


async def stored(kind: str, data_dir: Path, service_id: bytes) -> tuple[Model, ServiceQueues]:
    async with open_stores(kind, data_dir) as stores:
        model = {rec.recipient_id: rec.rcv_service_id == service_id
                 async for rec in stores.queues.iter_queues()}
        return model, await stores.queues.service_summary(service_id, Party.RECIPIENT)


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_services_and_their_figures_survive_kill_9(tmp_path, kind):
    rng = random.Random()
    data_dir = tmp_path / "data"
    model: Model = {}
    service_id = None
    for cycle in range(CYCLES):
        service, done, started = run_and_kill(kind, data_dir, rng.randrange(2**32),
                                              rng.randrange(1, 40))
        assert service is not None
        if service_id is None:
            service_id = service
        assert service == service_id, f"cycle {cycle}: the service got another id"
        for op in done:
            model = apply(model, op)
        found, figures = trio.run(stored, kind, data_dir, service_id)
        if started is not None:
            after = apply(model, started)
            for rid in {bytes.fromhex(r) for r in started[1]}:
                if found.get(rid) == after.get(rid):  # this queue's part of it was made
                    if rid in after:
                        model[rid] = after[rid]
                    else:
                        model.pop(rid, None)
        assert found == model, f"cycle {cycle}"
        associated = [rid for rid, yes in found.items() if yes]
        assert figures == ServiceQueues(len(associated), queue_ids_hash(associated))
