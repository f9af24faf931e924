"""Short links with two workers (docs/workers.md#a-contact-queues-link-id): a contact
queue's link id is the client's, of any worker, so LGET / LKEY are asked of every
worker and a NEW of a link id another worker has is refused as in one process."""

from __future__ import annotations

import hashlib
import os

import trio
from loopback_router import running_router

from router.client import open_client
from router.protocol import (
    AUTH,
    ERR,
    IDS,
    LGET,
    LKEY,
    LNK,
    NEW,
    QueueLink,
    Transmission,
    crypto,
    encode_command,
    encode_transmission,
    pad_block,
)
from router.server import RouterConfig
from router.server.core.ownership import Ownership
from router.server.workers.in_process import workers_in_process

OWNER = Ownership(2, 0).owner_of
PROXY = {"proxy_allow_destinations": ("127.0.0.0/8",), "allow_proxy": True,
         "proxy_connect_timeout": 5.0, "proxy_answer_timeout": 5.0}


def _id_of(worker: int) -> bytes:
    return next(i for i in iter(lambda: os.urandom(24), None) if OWNER(i) == worker)


def _corr_id_of(worker: int) -> bytes:
    """A corrId whose sender id (SHA3-384(corrId)[:24]) is `worker`'s."""
    return next(c for c in iter(lambda: os.urandom(24), None)
                if OWNER(hashlib.sha3_384(c).digest()[:24]) == worker)


async def _new_with_link(c, mode: bytes, corr_id: bytes, link_id: bytes | None,
                         fixed: bytes = b"fixed", user: bytes = b"user"):
    seed, key = crypto.new_ed25519()
    _, dh = crypto.new_x25519()
    sender_id = hashlib.sha3_384(corr_id).digest()[:24]
    cmd = NEW(key, dh, None, False, mode == b"M", QueueLink(sender_id, fixed, user, link_id))
    body = encode_command(cmd, c.version)
    auth = crypto.authorize(seed, c.session_id, corr_id, b"", body)
    data = encode_transmission(Transmission(auth, corr_id, b"", body), c.version)
    await c.send_raw_block(pad_block(bytes((1,)) + len(data).to_bytes(2, "big") + data))
    with trio.fail_after(10):
        return await c.next_raw_response()


async def test_a_contact_queues_link_is_found_from_either_worker(tmp_path) -> None:
    config = RouterConfig(host="127.0.0.1", port=0, store="memory", data_dir=tmp_path / "d")
    async with (
        workers_in_process(config) as (w0, w1),
        open_client(w0.address) as c0,
        open_client(w1.address) as c1,
    ):
        # The queue is worker 0's (its sender id's), its link id worker 1's.
        link_id = _id_of(1)
        ids = await _new_with_link(c0, b"C", _corr_id_of(0), link_id, b"fixed-c", b"user-c")
        assert isinstance(ids, IDS) and ids.link_id == link_id and OWNER(ids.rcv_id) == 0
        for c in (c0, c1):
            assert await c.command(link_id, LGET()) == LNK(ids.snd_id, b"fixed-c", b"user-c")
        assert await c1.command(_id_of(1), LGET()) == ERR(AUTH)
        # The same link id again, for a queue of either worker: taken, AUTH.
        for c, worker in ((c1, 1), (c0, 1), (c1, 0)):
            assert await _new_with_link(c, b"C", _corr_id_of(worker), link_id) == ERR(AUTH)
        assert await c1.command(link_id, LGET()) == LNK(ids.snd_id, b"fixed-c", b"user-c")
        # A messaging queue's link id is minted for its worker; LKEY from the other.
        m = await _new_with_link(c1, b"M", _corr_id_of(1), None)
        assert isinstance(m, IDS) and OWNER(m.link_id) == 1
        seed, key = crypto.new_ed25519()
        assert await c0.command(m.link_id, LKEY(key), seed) == LNK(m.snd_id, b"fixed", b"user")
        other_seed, other_key = crypto.new_ed25519()
        assert await c0.command(m.link_id, LKEY(other_key), other_seed) == ERR(AUTH)


async def test_a_contact_link_is_read_through_a_proxy_landing_on_the_other_worker(
        tmp_path) -> None:
    config = RouterConfig(host="127.0.0.1", port=0, store="memory", data_dir=tmp_path / "d")
    async with (
        workers_in_process(config) as (w0, w1),
        running_router(**PROXY) as proxy,
        open_client(w0.address) as c0,
        open_client(proxy.address) as sender,
    ):
        link_id = _id_of(0)  # the queue is worker 1's, its link id worker 0's
        ids = await _new_with_link(c0, b"C", _corr_id_of(1), link_id, b"f", b"u")
        assert isinstance(ids, IDS) and OWNER(ids.rcv_id) == 1
        for worker in (w0, w1):
            session = await sender.open_proxied_session(worker.address)
            assert await sender.proxied_command(session, link_id, LGET()) == LNK(
                ids.snd_id, b"f", b"u")
            assert await sender.proxied_command(session, _id_of(1), LGET()) == ERR(AUTH)


async def _send_new_with_link(c, corr_id: bytes, link_id: bytes) -> None:
    seed, key = crypto.new_ed25519()
    _, dh = crypto.new_x25519()
    sender_id = hashlib.sha3_384(corr_id).digest()[:24]
    cmd = NEW(key, dh, None, False, False, QueueLink(sender_id, b"f", b"u", link_id))
    body = encode_command(cmd, c.version)
    auth = crypto.authorize(seed, c.session_id, corr_id, b"", body)
    data = encode_transmission(Transmission(auth, corr_id, b"", body), c.version)
    await c.send_raw_block(pad_block(bytes((1,)) + len(data).to_bytes(2, "big") + data))


async def test_two_news_of_one_link_id_at_once_on_two_workers_one_is_refused(tmp_path) -> None:
    """The front of a contact NEW holds its link id reserved in owner(link id) while it
    checks every worker and the NEW runs: the second waits, finds it taken, AUTH."""
    config = RouterConfig(host="127.0.0.1", port=0, store="memory", data_dir=tmp_path / "d")
    async with (
        workers_in_process(config) as (w0, w1),
        open_client(w0.address) as c0,
        open_client(w1.address) as c1,
    ):
        for round_ in range(12):
            # Each queue in its front's worker, the link id either's: both fronts check
            # the other worker before either NEW is stored.
            link_id = _id_of(round_ % 2)
            await _send_new_with_link(c0, _corr_id_of(0), link_id)
            await _send_new_with_link(c1, _corr_id_of(1), link_id)
            with trio.fail_after(10):
                answers = [await c0.next_raw_response(), await c1.next_raw_response()]
            assert sorted(type(a).__name__ for a in answers) == ["ERR", "IDS"], answers
            assert ERR(AUTH) in answers
            ids = next(a for a in answers if isinstance(a, IDS))
            for c in (c0, c1):
                assert await c.command(link_id, LGET()) == LNK(ids.snd_id, b"f", b"u")
