"""The web client's reconnecting, durable subscription against a real router that restarts.

The durable subscription keeps its queues and the msgIds it handled in a
store (IndexedDB in a browser, the same interface in memory here). A new
subscription on the same store stands for the page after a reload.
"""

from __future__ import annotations

from pathlib import Path

import trio
from web_helpers import RestartableRouter, node_driver

from router.client import open_client
from router.protocol import crypto


async def send(address: str, sender_id: bytes, seed: bytes, *texts: str) -> None:
    async with open_client(address) as py:
        for text in texts:
            await py.send(sender_id, text.encode(), sender_seed=seed)


async def test_resubscribes_after_a_router_restart(
    node: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    router = RestartableRouter(nursery, store="journal", data_dir=tmp_path / "router")
    info = await router.start()
    async with node_driver(node) as js:
        await js.call("connect", client="maker", url=info.url, keyHash=info.key_hash.hex())
        fields = await js.call("create", client="maker", queue="q")
        await js.call("close", client="maker")
        seed, key = crypto.new_ed25519()
        sender_id = bytes.fromhex(fields["senderId"])
        async with open_client(info.address) as py:
            await py.secure_sender(sender_id, seed, key)

        await js.call("durableStart", durable="page", store="db", url=info.url,
                      keyHash=info.key_hash.hex())
        await js.call("durableAdd", durable="page", queue="q")
        await send(info.address, sender_id, seed, "before the restart")
        got = await js.call("durableNext", durable="page", index=0)
        assert got["text"] == "before the restart"

        await router.stop()
        await router.start()
        await send(info.address, sender_id, seed, "after the restart")
        got = await js.call("durableNext", durable="page", index=1)
        assert got["text"] == "after the restart"
        state = await js.call("durableState", durable="page")
        # connected, then offline (and connecting again, with backoff), then connected.
        statuses = state["statuses"]
        assert statuses[0] == "connecting" and "offline" in statuses
        assert statuses.count("connected") >= 2 and state["status"] == "connected"
        assert [m["text"] for m in state["handled"]] == ["before the restart", "after the restart"]


async def test_a_reload_gets_what_it_missed_exactly_once(
    node: str, nursery: trio.Nursery
) -> None:
    router = RestartableRouter(nursery, store="memory")
    info = await router.start()
    key_hash = info.key_hash.hex()
    async with node_driver(node) as js:
        await js.call("connect", client="maker", url=info.url, keyHash=key_hash)
        fields = await js.call("create", client="maker", queue="q")
        await js.call("close", client="maker")
        seed, key = crypto.new_ed25519()
        sender_id = bytes.fromhex(fields["senderId"])
        async with open_client(info.address) as py:
            await py.secure_sender(sender_id, seed, key)

        # The first visit handles a message and the page goes away before its ACK.
        await js.call("durableStart", durable="visit1", store="db", url=info.url,
                      keyHash=key_hash, closeAfterHandling=True)
        await js.call("durableAdd", durable="visit1", queue="q")
        await send(info.address, sender_id, seed, "one")
        assert (await js.call("durableNext", durable="visit1", index=0))["text"] == "one"
        first = await js.call("durableStop", durable="visit1")
        assert first["stats"]["delivered"] == 1

        # Sent while no page is open.
        await send(info.address, sender_id, seed, "two", "three")

        # The reload: the router delivers "one" again (never acknowledged); it is
        # recognised by its msgId and not handed over a second time.
        reload = await js.call("durableStart", durable="visit2", store="db", url=info.url,
                               keyHash=key_hash)
        assert reload["restored"] == [fields["recipientId"]]
        assert (await js.call("durableNext", durable="visit2", index=1))["text"] == "three"
        state = await js.call("durableState", durable="visit2")
        assert [m["text"] for m in state["handled"]] == ["two", "three"]
        assert state["stats"]["duplicates"] == 1
        await js.call("durableStop", durable="visit2")

        # Everything was acknowledged: a third visit finds nothing waiting.
        async with open_client(info.address) as py:
            await py.send(sender_id, b"four", sender_seed=seed)
        third = await js.call("durableStart", durable="visit3", store="db", url=info.url,
                              keyHash=key_hash)
        assert third["restored"] == [fields["recipientId"]]
        assert (await js.call("durableNext", durable="visit3", index=0))["text"] == "four"
        state = await js.call("durableState", durable="visit3")
        assert [m["text"] for m in state["handled"]] == ["four"]
        assert state["stats"]["duplicates"] == 0
