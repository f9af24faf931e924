"""Short links (docs/protocol.md#short-links): NEW with link data, LSET, LDEL, LGET and
LKEY against the link data the store keeps, on every store kind of the router-level
suite. A v19 client over a loopback WebSocket, since the links start at v15.
"""

from __future__ import annotations

import hashlib
import os
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio
from postgres_server import router_store_settings
from worker_count import serve_router_under_test

from router.client import open_client
from router.protocol import (
    AUTH,
    CMD_NO_AUTH,
    CMD_PROHIBITED,
    DEL,
    ERR,
    IDS,
    LDEL,
    LGET,
    LKEY,
    LNK,
    LSET,
    NEW,
    OK,
    QueueLink,
    Transmission,
    crypto,
    encode_command,
    encode_transmission,
    pad_block,
)
from router.server import RouterConfig, RouterInfo


@asynccontextmanager
async def running_router(store_kind: str, data_dir):
    options = router_store_settings(store_kind, data_dir)
    async with trio.open_nursery() as nursery:
        info: RouterInfo = await nursery.start(
            serve_router_under_test, RouterConfig(host="127.0.0.1", port=0, **options)
        )
        yield info
        nursery.cancel_scope.cancel()


@dataclass
class LinkedQueue:
    ids: IDS
    rcv_seed: bytes


async def new_with_link(
    c, mode: bytes, fixed: bytes = b"fixed", user: bytes = b"user", *,
    link_id: bytes | None = None, sender_id: bytes | None = None, corr_id: bytes | None = None,
):
    """NEW with queue data, sent with a corrId of our own so the sender id can be
    SHA3-384(corrId)[:24] (or `sender_id`); the response, and the recipient's seed."""
    seed, key = crypto.new_ed25519()
    _, dh = crypto.new_x25519()
    corr_id = os.urandom(24) if corr_id is None else corr_id
    if sender_id is None:
        sender_id = hashlib.sha3_384(corr_id).digest()[:24]
    if mode == b"C":
        link_id = os.urandom(24) if link_id is None else link_id
    cmd = NEW(key, dh, None, False, mode == b"M", QueueLink(sender_id, fixed, user, link_id))
    body = encode_command(cmd, c.version)
    auth = crypto.authorize(seed, c.session_id, corr_id, b"", body)
    data = encode_transmission(Transmission(auth, corr_id, b"", body), c.version)
    await c.send_raw_block(pad_block(bytes((1,)) + len(data).to_bytes(2, "big") + data))
    with trio.fail_after(10):
        response = await c.next_raw_response()
    if isinstance(response, IDS):
        assert response.snd_id == sender_id
        return LinkedQueue(response, seed)
    return response


async def test_a_messaging_queue_gets_a_router_link_id_and_lkey_secures_it(
    store_kind, tmp_path
):
    async with (
        running_router(store_kind, tmp_path / "data") as info,
        open_client(info.address) as c,
    ):
        queue = await new_with_link(c, b"M", b"fixed-m", b"user-m")
        ids = queue.ids
        assert ids.queue_mode == b"M" and ids.link_id is not None and len(ids.link_id) == 24
        other = await new_with_link(c, b"M")
        assert other.ids.link_id != ids.link_id
        # LGET reads contact queues only.
        assert await c.command(ids.link_id, LGET()) == ERR(AUTH)
        snd_seed, snd_key = crypto.new_ed25519()
        lnk = await c.command(ids.link_id, LKEY(snd_key), snd_seed)
        assert lnk == LNK(ids.snd_id, b"fixed-m", b"user-m")
        # Again with the same key: the same answer; another key: AUTH.
        assert await c.command(ids.link_id, LKEY(snd_key), snd_seed) == lnk
        seed2, key2 = crypto.new_ed25519()
        assert await c.command(ids.link_id, LKEY(key2), seed2) == ERR(AUTH)
        # Signed with another key than the one it installs: AUTH.
        assert await c.command(other.ids.link_id, LKEY(key2), snd_seed) == ERR(AUTH)
        # The queue is secured: SEND needs the sender's key now.
        await c.send(ids.snd_id, b"by link", sender_seed=snd_seed)
        # A secured messaging queue's link data cannot change any more.
        rid = ids.rcv_id
        lset = LSET(ids.link_id, b"fixed-m", b"user-2")
        assert await c.command(rid, lset, queue.rcv_seed) == ERR(AUTH)
        # Before securing, LSET of the same fixed data changes the user data.
        other_set = LSET(other.ids.link_id, b"fixed", b"user-2")
        assert await c.command(other.ids.rcv_id, other_set, other.rcv_seed) == OK()
        assert await c.command(other.ids.link_id, LKEY(key2), seed2) == LNK(
            other.ids.snd_id, b"fixed", b"user-2"
        )


async def test_a_contact_queue_link_is_read_changed_and_deleted(store_kind, tmp_path):
    async with (
        running_router(store_kind, tmp_path / "data") as info,
        open_client(info.address) as c,
    ):
        link_id = os.urandom(24)
        queue = await new_with_link(c, b"C", b"fixed-c", b"user-c", link_id=link_id)
        ids, seed = queue.ids, queue.rcv_seed
        assert ids.queue_mode == b"C" and ids.link_id == link_id
        assert await c.command(link_id, LGET()) == LNK(ids.snd_id, b"fixed-c", b"user-c")
        # LKEY secures messaging queues only.
        snd_seed, snd_key = crypto.new_ed25519()
        assert await c.command(link_id, LKEY(snd_key), snd_seed) == ERR(AUTH)
        # The user data may change; the link id and the fixed data may not.
        assert await c.command(ids.rcv_id, LSET(link_id, b"fixed-c", b"user-2"), seed) == OK()
        assert await c.command(link_id, LGET()) == LNK(ids.snd_id, b"fixed-c", b"user-2")
        assert await c.command(ids.rcv_id, LSET(link_id, b"fixed-x", b"u"), seed) == ERR(AUTH)
        other_id = LSET(os.urandom(24), b"fixed-c", b"u")
        assert await c.command(ids.rcv_id, other_id, seed) == ERR(AUTH)
        assert await c.command(link_id, LGET()) == LNK(ids.snd_id, b"fixed-c", b"user-2")
        # LSET and LDEL are the recipient's: unsigned, CMD NO_AUTH; another key, AUTH.
        unsigned = await c.command(ids.rcv_id, LSET(link_id, b"fixed-c", b"u"))
        assert unsigned == ERR(CMD_NO_AUTH)
        assert await c.command(ids.rcv_id, LDEL(), snd_seed) == ERR(AUTH)
        # LDEL removes the link; then another link (other id, other fixed data) may be set.
        assert await c.command(ids.rcv_id, LDEL(), seed) == OK()
        assert await c.command(link_id, LGET()) == ERR(AUTH)
        assert await c.command(ids.rcv_id, LDEL(), seed) == OK()  # no link: still OK
        new_link = os.urandom(24)
        assert await c.command(ids.rcv_id, LSET(new_link, b"fixed-n", b"user-n"), seed) == OK()
        assert await c.command(new_link, LGET()) == LNK(ids.snd_id, b"fixed-n", b"user-n")
        assert await c.command(link_id, LGET()) == ERR(AUTH)
        assert await c.command(os.urandom(24), LGET()) == ERR(AUTH)


async def test_link_ids_are_unique_and_del_frees_them(store_kind, tmp_path):
    async with (
        running_router(store_kind, tmp_path / "data") as info,
        open_client(info.address) as c,
    ):
        link_id = os.urandom(24)
        first = await new_with_link(c, b"C", link_id=link_id)
        # A taken link id: NEW is AUTH (the client chose it, no retry), and so is LSET.
        assert await new_with_link(c, b"C", link_id=link_id) == ERR(AUTH)
        second = await new_with_link(c, b"C")
        taken = LSET(link_id, b"fixed", b"user")
        assert await c.command(second.ids.rcv_id, taken, second.rcv_seed) == ERR(AUTH)
        # DEL of the queue removes its link.
        assert await c.command(first.ids.rcv_id, DEL(), first.rcv_seed) == OK()
        assert await c.command(link_id, LGET()) == ERR(AUTH)
        third = await new_with_link(c, b"C", b"f3", b"u3", link_id=link_id)
        assert third.ids.link_id == link_id
        assert await c.command(link_id, LGET()) == LNK(third.ids.snd_id, b"f3", b"u3")


async def test_new_with_link_data_needs_the_sender_id_from_the_corr_id(store_kind, tmp_path):
    async with (
        running_router(store_kind, tmp_path / "data") as info,
        open_client(info.address) as c,
    ):
        for mode in (b"M", b"C"):
            answer = await new_with_link(c, mode, sender_id=os.urandom(24))
            assert answer == ERR(CMD_PROHIBITED)
        # A sender id that is taken (the same corrId's hash again) is AUTH, not a retry.
        corr_id = os.urandom(24)
        queue = await new_with_link(c, b"M", corr_id=corr_id)
        assert isinstance(queue, LinkedQueue)
        assert await new_with_link(c, b"M", corr_id=corr_id) == ERR(AUTH)


async def test_links_outlive_a_restart_of_a_durable_store(store_kind, tmp_path):
    data_dir = tmp_path / "data"
    async with running_router(store_kind, data_dir) as info, open_client(info.address) as c:
        queue = await new_with_link(c, b"C", b"fixed-r", b"user-r")
        link_id = queue.ids.link_id
    async with running_router(store_kind, data_dir) as info, open_client(info.address) as c:
        expected = LNK(queue.ids.snd_id, b"fixed-r", b"user-r")
        if store_kind == "memory":
            expected = ERR(AUTH)  # the memory store keeps nothing across a restart
        assert await c.command(link_id, LGET()) == expected
