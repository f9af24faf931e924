"""The process that tests/store/test_services_crash.py kills: queues made, associated
with a service and released in blocks, and deleted, on a durable store; each change
announced before it is made and reported once the store answered it.

Usage: python services_crash_child.py KIND DATA_DIR SEED. Prints JSON lines:
{"service": id} once the service is stored, then {"start": op} and {"done": op}.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from pathlib import Path

import trio

from store import Party, QueueRecord, open_stores
from store.interfaces import ServiceRecord

CERT = b"the service's identity certificate"


async def main(kind: str, data_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    async with open_stores(kind, data_dir) as stores:
        queues = stores.queues
        offered = ServiceRecord(os.urandom(24), b"M", CERT, hashlib.sha256(CERT).digest(), 1)
        service = await queues.add_service(offered)
        print(json.dumps({"service": service.service_id.hex()}), flush=True)
        live = sorted([rec.recipient_id async for rec in queues.iter_queues()])
        while True:
            op = rng.choice(["add", "add_associated", "associate", "associate", "release",
                             "delete"] if live else ["add", "add_associated"])
            if op.startswith("add"):
                rids = [os.urandom(24)]
            elif op == "delete":
                rids = [rng.choice(live)]
            else:
                rids = rng.sample(live, min(len(live), rng.randrange(1, 20)))
            print(json.dumps({"start": [op, [r.hex() for r in rids]]}), flush=True)
            if op.startswith("add"):
                associated = service.service_id if op == "add_associated" else None
                rec = QueueRecord(rids[0], os.urandom(24), os.urandom(44), os.urandom(32),
                                  None, True, rcv_service_id=associated)
                assert await queues.add_queue(rec) is None
                live.append(rids[0])
            elif op == "delete":
                assert isinstance(await queues.delete_queue(rids[0]), QueueRecord)
                live.remove(rids[0])
            else:
                target = service.service_id if op == "associate" else None
                results = await queues.set_queues_service(rids, Party.RECIPIENT, target)
                assert results == [None] * len(rids), results
            print(json.dumps({"done": [op, [r.hex() for r in rids]]}), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
