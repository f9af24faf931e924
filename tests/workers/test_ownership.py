"""Ownership by queue (docs/workers.md): the owner is read from any id of a queue,
and the ids the router mints map to the queue's owner."""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from functools import partial

import pytest
import trio

from router.client import open_client
from router.protocol import (
    IDS,
    NEW,
    QueueLink,
    Transmission,
    crypto,
    encode_command,
    encode_transmission,
    pad_block,
)
from router.server import RouterConfig, RouterInfo, serve_router
from router.server.core.ownership import ID_SIZE, ONE_WORKER, Ownership


def test_one_worker_owns_every_id_and_mints_plain_random_ids() -> None:
    ids = {ONE_WORKER.mint() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == ID_SIZE for i in ids)
    assert {ONE_WORKER.owner_of(os.urandom(ID_SIZE)) for _ in range(100)} == {0}
    assert ONE_WORKER.owns(os.urandom(ID_SIZE))


@pytest.mark.parametrize("workers", [2, 3, 7])
def test_minted_ids_map_to_the_owner_they_were_minted_for(workers: int) -> None:
    for index in range(workers):
        ownership = Ownership(workers, index)
        for _ in range(50):
            own = ownership.mint()
            assert len(own) == ID_SIZE and ownership.owns(own)
            for owner in range(workers):
                minted = ownership.mint(owner)
                assert ownership.owner_of(minted) == owner
                # Every worker reads the same owner from the id: no shared lookup.
                assert Ownership(workers, (index + 1) % workers).owner_of(minted) == owner


def test_random_ids_are_shared_about_evenly() -> None:
    ownership = Ownership(4, 0)
    shares = Counter(ownership.owner_of(os.urandom(ID_SIZE)) for _ in range(8000))
    assert set(shares) == {0, 1, 2, 3}
    assert all(1600 < n < 2400 for n in shares.values()), shares


def test_minted_ids_differ_beyond_the_bytes_that_choose_the_owner() -> None:
    ownership = Ownership(2, 1)
    ids = [ownership.mint() for _ in range(200)]
    assert len({i[4:] for i in ids}) == 200


@pytest.mark.parametrize(("workers", "index"), [(0, 0), (2, 2), (3, -1)])
def test_an_impossible_share_is_refused(workers: int, index: int) -> None:
    with pytest.raises(ValueError):
        Ownership(workers, index)


def test_minting_for_a_worker_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="worker 5"):
        Ownership(3, 0).mint(5)


async def _new_with_link(client, mode: bytes, link_id: bytes | None) -> IDS:
    """NEW with short-link data: the client chooses the sender id (from its corrId)."""
    seed, key = crypto.new_ed25519()
    _, dh = crypto.new_x25519()
    corr_id = os.urandom(24)
    sender_id = hashlib.sha3_384(corr_id).digest()[:24]
    cmd = NEW(key, dh, None, False, mode == b"M", QueueLink(sender_id, b"f", b"u", link_id))
    body = encode_command(cmd, client.version)
    auth = crypto.authorize(seed, client.session_id, corr_id, b"", body)
    data = encode_transmission(Transmission(auth, corr_id, b"", body), client.version)
    await client.send_raw_block(pad_block(bytes((1,)) + len(data).to_bytes(2, "big") + data))
    with trio.fail_after(10):
        response = await client.next_raw_response()
    assert isinstance(response, IDS) and response.snd_id == sender_id
    return response


async def test_a_worker_mints_every_id_of_a_queue_for_the_queue_owner() -> None:
    ownership = Ownership(3, 2)
    async with trio.open_nursery() as nursery:
        config = RouterConfig(host="127.0.0.1", port=0, store="memory")
        info: RouterInfo = await nursery.start(
            partial(serve_router, config, ownership=ownership)
        )
        async with open_client(info.address) as client:
            # The router chooses every id: the queue is this worker's.
            queue = await client.create_queue()
            notifier = await client.enable_notifications(queue)
            assert {ownership.owner_of(i) for i in
                    (queue.recipient_id, queue.sender_id, notifier.notifier_id)} == {2}
            # The client chose the sender id: the queue is that id's owner's, and so are
            # the ids the router mints for it; a contact queue's link id is the client's.
            owners = set()
            for _ in range(12):
                messaging = await _new_with_link(client, b"M", None)
                owner = ownership.owner_of(messaging.snd_id)
                assert ownership.owner_of(messaging.rcv_id) == owner
                assert messaging.link_id is not None
                assert ownership.owner_of(messaging.link_id) == owner
                owners.add(owner)
            assert len(owners) > 1  # twelve random sender ids all of one worker: 1 in 3^11
            link_id = os.urandom(24)
            contact = await _new_with_link(client, b"C", link_id)
            assert contact.link_id == link_id
            assert ownership.owner_of(contact.rcv_id) == ownership.owner_of(contact.snd_id)
        nursery.cancel_scope.cancel()

