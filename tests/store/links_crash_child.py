"""The process that tests/store/test_links_crash.py kills: random link changes on a
durable store, each announced before it is made and reported once it returned.

Usage: python links_crash_child.py KIND DATA_DIR SEED. Prints JSON lines:
{"start": op} before a change, {"done": op} once the store answered it.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import trio

from store import QueueLinkData, QueueRecord, open_stores


def _hex_link(link: QueueLinkData | None) -> list[str] | None:
    if link is None:
        return None
    return [link.link_id.hex(), link.fixed_data.hex(), link.user_data.hex()]


async def main(kind: str, data_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    async with open_stores(kind, data_dir) as stores:
        queues = stores.queues
        live = {rec.recipient_id async for rec in queues.iter_queues()}
        links = {rid: link async for rid, link in queues.iter_links()}
        while True:
            ops = ["add", "add", "set", "set", "delete_link", "delete"] if live else ["add"]
            op = rng.choice(ops)
            rid = rng.choice(sorted(live)) if op != "add" else os.urandom(24)
            link = None
            if op == "add" and rng.random() < 0.6 or op == "set":
                old = links.get(rid)
                if op == "set" and old is not None:  # a link's fixed part never changes
                    link = QueueLinkData(old.link_id, old.fixed_data, os.urandom(rng.randrange(40)))
                else:
                    link = QueueLinkData(os.urandom(24), os.urandom(rng.randrange(300)), b"u")
            if op == "delete_link" and rid not in links:
                op = "set"
                link = QueueLinkData(os.urandom(24), b"", b"")
            print(json.dumps({"start": [op, rid.hex(), _hex_link(link)]}), flush=True)
            if op == "add":
                rec = QueueRecord(
                    rid, os.urandom(24), os.urandom(44), os.urandom(32), None, link is None,
                    queue_mode=b"M" if link is None else b"C",
                    link_id=None if link is None else link.link_id,
                )  # fmt: skip
                result = await queues.add_queue(rec, link)
                live.add(rid)
            elif op == "set":
                result = await queues.set_link(rid, link)
            elif op == "delete_link":
                result = await queues.delete_link(rid)
            else:
                deleted = await queues.delete_queue(rid)
                result = None if isinstance(deleted, QueueRecord) else deleted
                live.discard(rid)
            if result is not None:
                raise SystemExit(f"{op} answered {result}")
            if op in ("add", "set") and link is not None:
                links[rid] = link
            else:
                links.pop(rid, None)
            print(json.dumps({"done": [op, rid.hex(), _hex_link(link)]}), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
