"""RKEY (docs/protocol.md#rkey): a contact queue's recipient keys are replaced, and
every recipient command is then verified against any of them, on every store kind,
across a restart of the durable ones. A v19 client over a loopback WebSocket."""

from __future__ import annotations

from test_router_short_links import new_with_link, running_router

from router.client import open_client
from router.protocol import AUTH, CMD_NO_AUTH, DEL, ERR, LDEL, LGET, LNK, LSET, OK, RKEY, crypto


async def test_rkey_replaces_a_contact_queues_keys_and_any_of_them_signs(store_kind, tmp_path):
    async with (
        running_router(store_kind, tmp_path / "data") as info,
        open_client(info.address) as c,
    ):
        queue = await new_with_link(c, b"C", b"fixed", b"user")
        rid, link_id, first = queue.ids.rcv_id, queue.ids.link_id, queue.rcv_seed
        (seed2, key2), (seed3, key3) = crypto.new_ed25519(), crypto.new_ed25519()
        assert await c.command(rid, RKEY((key2, key3)), first) == OK()
        # The replaced key signs nothing any more; each new one signs every command.
        assert await c.command(rid, LDEL(), first) == ERR(AUTH)
        assert await c.command(rid, LSET(link_id, b"fixed", b"by 2"), seed2) == OK()
        assert await c.command(link_id, LGET()) == LNK(queue.ids.snd_id, b"fixed", b"by 2")
        assert await c.command(rid, LSET(link_id, b"fixed", b"by 3"), seed3) == OK()
        assert await c.command(link_id, LGET()) == LNK(queue.ids.snd_id, b"fixed", b"by 3")
        # Back to one key, signed by one of the two.
        seed4, key4 = crypto.new_ed25519()
        assert await c.command(rid, RKEY((key4,)), seed3) == OK()
        assert await c.command(rid, LDEL(), seed2) == ERR(AUTH)
        assert await c.command(rid, LDEL(), seed3) == ERR(AUTH)
        assert await c.command(rid, DEL(), seed4) == OK()


async def test_rkey_is_for_contact_queues_only_and_must_be_signed(store_kind, tmp_path):
    async with (
        running_router(store_kind, tmp_path / "data") as info,
        open_client(info.address) as c,
    ):
        messaging = await new_with_link(c, b"M")
        contact = await new_with_link(c, b"C")
        seed2, key2 = crypto.new_ed25519()
        # A messaging queue keeps its one key, as the reference's checkMode QMContact.
        rid = messaging.ids.rcv_id
        assert await c.command(rid, RKEY((key2,)), messaging.rcv_seed) == ERR(AUTH)
        assert await c.command(rid, LDEL(), seed2) == ERR(AUTH)
        assert await c.command(rid, LDEL(), messaging.rcv_seed) == OK()
        # Unsigned, or signed by a key the queue does not have: nothing changes.
        rid = contact.ids.rcv_id
        assert await c.command(rid, RKEY((key2,))) == ERR(CMD_NO_AUTH)
        assert await c.command(rid, RKEY((key2,)), seed2) == ERR(AUTH)
        assert await c.command(rid, LDEL(), contact.rcv_seed) == OK()


async def test_recipient_keys_outlive_a_restart_of_a_durable_store(store_kind, tmp_path):
    data_dir = tmp_path / "data"
    (seed2, key2), (seed3, key3) = crypto.new_ed25519(), crypto.new_ed25519()
    async with running_router(store_kind, data_dir) as info, open_client(info.address) as c:
        queue = await new_with_link(c, b"C", b"fixed", b"user")
        rid, link_id = queue.ids.rcv_id, queue.ids.link_id
        assert await c.command(rid, RKEY((key2, key3)), queue.rcv_seed) == OK()
    async with running_router(store_kind, data_dir) as info, open_client(info.address) as c:
        if store_kind == "memory":  # the memory store keeps nothing across a restart
            assert await c.command(rid, LDEL(), seed3) == ERR(AUTH)
            return
        assert await c.command(rid, LSET(link_id, b"fixed", b"u"), queue.rcv_seed) == ERR(AUTH)
        assert await c.command(rid, LSET(link_id, b"fixed", b"by 3"), seed3) == OK()
        assert await c.command(link_id, LGET()) == LNK(queue.ids.snd_id, b"fixed", b"by 3")
        assert await c.command(rid, DEL(), seed2) == OK()


async def test_every_key_is_tried_whichever_signs(tmp_path, monkeypatch):
    """The count of verifications is that of the queue's keys, for the first key, the
    last one and a key the queue does not have alike (docs/protocol.md#rkey)."""
    from router.server.core import dispatch

    calls: list[bytes | None] = []
    real = dispatch.verify_authorization

    def counting(authorization, key, *args, **kwargs):
        calls.append(key)
        return real(authorization, key, *args, **kwargs)

    monkeypatch.setattr(dispatch, "verify_authorization", counting)
    async with running_router("memory", tmp_path) as info, open_client(info.address) as c:
        queue = await new_with_link(c, b"C")
        rid, link_id = queue.ids.rcv_id, queue.ids.link_id
        seeds, keys = zip(*(crypto.new_ed25519() for _ in range(3)), strict=True)
        assert await c.command(rid, RKEY(keys), queue.rcv_seed) == OK()
        for seed, expected in ((seeds[0], OK()), (seeds[2], OK()), (queue.rcv_seed, ERR(AUTH))):
            calls.clear()
            assert await c.command(rid, LSET(link_id, b"fixed", b"u"), seed) == expected
            assert calls == list(keys)
