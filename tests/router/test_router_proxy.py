"""Private message routing through real routers on 127.0.0.1
(docs/protocol.md#private-message-routing): a client of router A sends through A
(PRXY, PFWD) to a queue on router B; A forwards (RFWD) on its one connection to B.

The client's side is written from the protocol's pure functions (proxied.py, with
router/protocol/proxying.py), so that what is checked is the routers' part: A's
answers (PKEY, PRES, the PROXY errors) and B's (RRES, the message delivered).
"""

from __future__ import annotations

import os
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path

import loopback_router
import pytest
import trio
from proxied import ProxiedSession, broker_error, open_session, proxied, prxy_for

from router.client import MessageEvent, SMPClient, open_client
from router.protocol.types import (
    AUTH,
    CMD_NO_AUTH,
    CMD_PROHIBITED,
    ERR,
    OK,
    PING,
    PKEY,
    PROXY_BASIC_AUTH,
    PROXY_NO_SESSION,
    SEND,
    SUB,
)
from router.server.router import RouterInfo

# A short hold of a failed connection, so that a restarted destination is tried again soon.
PROXY_SETTINGS: dict[str, object] = {
    "proxy_allow_destinations": ("127.0.0.0/8",),
    "allow_proxy": True, "proxy_error_hold": 0.2, "proxy_connect_timeout": 5.0,
    "proxy_answer_timeout": 5.0,
}


def running_router(port: int = 0, data_dir: Path | None = None,
                   **settings: object) -> AbstractAsyncContextManager[RouterInfo]:
    store = "journal" if data_dir is not None else "memory"
    return loopback_router.running_router(port=port, store=store, data_dir=data_dir,
                                          **{**PROXY_SETTINGS, **settings})


def address(info: RouterInfo) -> str:
    return info.address


async def wait_until(predicate, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


async def receive(recipient: SMPClient, timeout: float = 5.0) -> MessageEvent:
    with trio.fail_after(timeout):
        event = await recipient.next_event()
    assert isinstance(event, MessageEvent), event
    return event


# --- the scenario -------------------------------------------------------------------------


@pytest.mark.one_process("each worker of A keeps connections of its own to B (its relays)")
async def test_a_message_sent_through_a_reaches_the_recipient_on_b_and_b_sees_only_a() -> None:
    async with running_router() as a, running_router() as b:
        async with open_client(address(b)) as recipient:
            queue = await recipient.create_queue()
            await recipient.subscribe(queue)
            bodies = []
            # Two senders, each its own connection to A: B sees A's one connection.
            for n in range(2):
                async with open_client(address(a)) as sender:
                    session = await open_session(sender, b)
                    for i in range(3):
                        body = f"through A, sender {n}, message {i}".encode()
                        assert await proxied(sender, session, queue.sender_id,
                                             SEND(b"F", body)) == OK()
                        event = await receive(recipient)
                        assert event.body == body
                        await recipient.ack(queue, event.msg_id)
                        bodies.append(body)
            assert len(bodies) == 6
            br, ar = b.router.statistics(), a.router.statistics()
            # B: the recipient's connection and A's, nothing of the senders.
            assert br.connections_total == 2
            assert br.proxy_messages_received == 6 and br.messages_sent == 6
            assert ar.proxy_sessions_requests == ar.proxy_sessions_successes == 2
            assert ar.proxy_messages_requests == ar.proxy_messages_successes == 6
            assert ar.proxy_sessions_requests_own == 0 and ar.proxy_connections == 1
            assert ar.messages_sent == 0  # A stored nothing


async def test_b_stopped_gives_the_proxy_error_in_bounded_time_and_a_restart_recovers(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "b"
    async with running_router() as a:
        async with running_router(data_dir=data_dir) as b:
            port, b_info = b.port, b
            async with open_client(address(b)) as recipient:
                queue = await recipient.create_queue()
        async with open_client(address(a)) as sender:
            # B is down: PRXY is answered PROXY BROKER NETWORK, within the connect timeout.
            with trio.fail_after(PROXY_SETTINGS["proxy_connect_timeout"] + 1):  # type: ignore[operator]
                down = await sender.command(b"", prxy_for(b_info))
            assert broker_error(down) == b"NETWORK", down
            assert a.router.statistics().proxy_sessions_errors_connect == 1
            async with running_router(port=port, data_dir=data_dir) as b_again:
                await trio.sleep(PROXY_SETTINGS["proxy_error_hold"])  # type: ignore[arg-type]
                session = await open_session(sender, b_again)
                assert await proxied(sender, session, queue.sender_id,
                                     SEND(b"F", b"after the restart")) == OK()
                async with open_client(address(b_again)) as recipient:
                    recipient.add_queue(queue)
                    await recipient.subscribe(queue)
                    assert (await receive(recipient)).body == b"after the restart"


async def test_a_session_whose_destination_went_away_is_no_session_then_network(
    tmp_path: Path,
) -> None:
    async with running_router() as a:
        async with running_router(data_dir=tmp_path / "b") as b:
            async with open_client(address(b)) as recipient:
                queue = await recipient.create_queue()
            async with open_client(address(a)) as sender:
                session = await open_session(sender, b)
                assert await proxied(sender, session, queue.sender_id, SEND(b"F", b"1")) == OK()
                b_info = b
        # B stopped: the session is gone, and a new one cannot be had.
        async with open_client(address(a)) as sender:
            await wait_until(lambda: a.router.statistics().proxy_connections == 0)
            with trio.fail_after(10):
                gone = await proxied(sender, session, queue.sender_id, SEND(b"F", b"2"))
            assert gone == ERR(PROXY_NO_SESSION)
            with trio.fail_after(10):
                assert broker_error(await sender.command(b"", prxy_for(b_info))) == b"NETWORK"


async def test_the_destinations_errors_come_back_inside_the_proxy_answer() -> None:
    async with running_router() as a, running_router() as b:
        async with open_client(address(b)) as recipient, open_client(address(a)) as sender:
            queue = await recipient.create_queue()
            session = await open_session(sender, b)
            # No such queue: B's AUTH, for the client only (inside PRES).
            assert await proxied(sender, session, os.urandom(24), SEND(b"F", b"x")) == ERR(AUTH)
            # Only a sender's commands may be forwarded; an unsigned SUB fails its
            # credentials first, as at the reference.
            assert await proxied(sender, session, b"", PING()) == ERR(CMD_PROHIBITED)
            assert await proxied(sender, session, queue.recipient_id, SUB()) == ERR(
                CMD_NO_AUTH)
            assert b.router.statistics().proxy_messages_received == 3
            assert a.router.statistics().proxy_messages_successes == 3


async def test_a_wrong_key_hash_is_a_network_error() -> None:
    async with running_router() as a, running_router() as b:
        async with open_client(address(a)) as sender:
            answer = await sender.command(b"", prxy_for(b, key_hash=os.urandom(32)))
            assert broker_error(answer) == b"NETWORK", answer
            assert b.router.statistics().connections_total == 0


async def test_a_pfwd_without_a_session_is_no_session() -> None:
    async with running_router() as a, open_client(address(a)) as sender:
        session = ProxiedSession(os.urandom(32), sender.version, os.urandom(32))
        assert await proxied(sender, session, os.urandom(24), SEND(b"F", b"x")) == ERR(
            PROXY_NO_SESSION)
        s = a.router.statistics()
        assert (s.proxy_messages_requests, s.proxy_messages_errors_connect) == (1, 1)


@pytest.mark.parametrize(("settings", "basic_auth", "allowed"), [
    ({"allow_proxy": False}, None, False),
    ({"proxy_password": b"relay-pass"}, None, False),
    ({"proxy_password": b"relay-pass"}, b"wrong", False),
    ({"proxy_password": b"relay-pass"}, b"relay-pass", True),
    ({"password": b"create-pass"}, b"wrong", False),  # the create password, as the reference
    ({"password": b"create-pass"}, b"create-pass", True),
])
async def test_proxying_off_and_basic_auth(settings, basic_auth, allowed) -> None:
    async with running_router(**settings) as a, running_router() as b:
        async with open_client(address(a)) as sender:
            answer = await sender.command(b"", prxy_for(b, basic_auth=basic_auth))
            if allowed:
                assert isinstance(answer, PKEY)
            else:
                assert answer == ERR(PROXY_BASIC_AUTH)
                assert b.router.statistics().connections_total == 0


async def test_the_own_case_a_router_that_is_its_own_destination() -> None:
    async with running_router() as a:
        async with open_client(address(a)) as recipient, open_client(address(a)) as sender:
            queue = await recipient.create_queue()
            await recipient.subscribe(queue)
            session = await open_session(sender, a)
            assert await proxied(sender, session, queue.sender_id, SEND(b"F", b"own")) == OK()
            assert (await receive(recipient)).body == b"own"
            s = a.router.statistics()
            assert s.proxy_sessions_requests_own == s.proxy_sessions_requests == 1
            assert s.proxy_messages_successes_own == 1 and s.proxy_messages_received == 1


async def test_the_pool_bound_holds_and_a_destination_closed_to_make_room_is_reopened() -> None:
    async with running_router(proxy_max_connections=1) as a, running_router() as b, \
            running_router() as c:
        async with open_client(address(a)) as sender:
            await open_session(sender, b)
            await open_session(sender, c)  # B's connection, idle, makes room for C's
            await wait_until(lambda: b.router.statistics().connections == 0)
            assert a.router.statistics().proxy_connections == 1
            await open_session(sender, b)
            await wait_until(lambda: c.router.statistics().connections == 0)
            assert b.router.statistics().connections_total == 2


async def test_a_proxied_answer_that_does_not_come_in_time_is_broker_timeout() -> None:
    async with running_router(proxy_answer_timeout=0.3) as a, running_router() as b:
        async with open_client(address(b)) as recipient, open_client(address(a)) as sender:
            queue = await recipient.create_queue()
            session = await open_session(sender, b)
            b.router.suspend()  # B reads nothing more: the RFWD waits
            try:
                with trio.fail_after(5):
                    answer = await proxied(sender, session, queue.sender_id, SEND(b"F", b"x"))
            finally:
                b.router.resume()
            assert broker_error(answer) == b"TIMEOUT", answer
            assert a.router.statistics().proxy_messages_errors_other == 1



async def test_pkey_names_the_proxys_session_with_b_and_the_versions_both_allow() -> None:
    async with running_router() as a, running_router() as b:
        async with open_client(address(a)) as sender:
            answer = await sender.command(b"", prxy_for(b))
            assert isinstance(answer, PKEY)
            # B offers 9..19; the proxy allows 8..19.
            assert (answer.min_version, answer.max_version) == (9, 19)
            (b_side,) = b.router.connections.values()  # A's connection, the proxy's
            assert answer.session_id == b_side.session_id
            assert len(answer.session_id) == 12  # TLS 1.2 tls-unique, short enough for PFWD
            assert a.router.relays.by_session(answer.session_id) is not None
            again = await sender.command(b"", prxy_for(b))
            assert isinstance(again, PKEY) and again.session_id == answer.session_id


async def test_proxying_turned_off_and_on_while_running() -> None:
    async with running_router() as a, running_router() as b:
        async with open_client(address(a)) as sender:
            assert isinstance(await sender.command(b"", prxy_for(b)), PKEY)
            a.router.reconfigure(replace(a.router.config, allow_proxy=False))
            assert await sender.command(b"", prxy_for(b)) == ERR(PROXY_BASIC_AUTH)
            a.router.reconfigure(replace(a.router.config, allow_proxy=True,
                                         proxy_password=b"now-one"))
            assert await sender.command(b"", prxy_for(b)) == ERR(PROXY_BASIC_AUTH)
            assert isinstance(await sender.command(b"", prxy_for(b, b"now-one")), PKEY)


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_one_clients_proxied_commands_beyond_its_concurrency_wait_their_turn(
    concurrency: int,
) -> None:
    async with running_router(proxy_client_concurrency=concurrency) as a, \
            running_router() as b:
        async with open_client(address(b)) as recipient, open_client(address(a)) as sender:
            queue = await recipient.create_queue()
            session = await open_session(sender, b)
            answers: list = []
            relays = a.router.relays
            forward, waiting, most = relays.request, [0], [0]

            async def counted(*args):
                waiting[0] += 1
                most[0] = max(most[0], waiting[0])
                try:
                    await trio.sleep(0.05)  # a slow destination: the commands pile up
                    return await forward(*args)
                finally:
                    waiting[0] -= 1

            relays.request = counted

            async def send(n: int) -> None:
                answers.append(await proxied(sender, session, queue.sender_id,
                                             SEND(b"F", b"m%d" % n)))

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    for n in range(6):
                        nursery.start_soon(send, n)
            assert answers == [OK()] * 6
            assert b.router.statistics().messages_sent == 6
            assert most[0] == concurrency


@pytest.mark.one_process("the relays and their bounds are each worker's own: the two "
                         "connections of one address land on two workers")
async def test_one_addresss_forwarded_commands_in_flight_are_bounded_on_every_connection() -> None:
    async with running_router() as a, running_router() as b:
        relays = a.router.relays
        relays.limits = replace(relays.limits, forwards_per_address=2)
        async with open_client(address(b)) as recipient, open_client(address(a)) as one, \
                open_client(address(a)) as two:
            queue = await recipient.create_queue()
            sessions = [await open_session(one, b), await open_session(two, b)]
            (relay,) = relays._relays.values()
            answers: list = []
            most = [0]

            async def send(client: SMPClient, session: ProxiedSession, n: int) -> None:
                answers.append(await proxied(client, session, queue.sender_id,
                                             SEND(b"F", b"m%d" % n)))

            b.router.suspend()  # B reads nothing: the RFWDs wait for their answers
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    for n in range(6):  # two connections of one address
                        nursery.start_soon(send, (one, two)[n % 2], sessions[n % 2], n)
                    await wait_until(lambda: relays.stats.forwards_waited > 0)
                    for _ in range(10):
                        most[0] = max(most[0], relay.in_flight)
                        await trio.sleep(0.01)
                    b.router.resume()
            assert answers == [OK()] * 6 and most[0] == 2
            assert b.router.statistics().messages_sent == 6
