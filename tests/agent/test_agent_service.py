"""The agent acting for a service by its TLS client certificate: one SUBS per session
with its own figures; drift from the router's repaired by SUBs
(docs/protocol.md#service-subscriptions)."""

from __future__ import annotations

from functools import partial

import trio
from agent_helpers import create_queues, restartable_router, send_to

from bench.service_client import self_signed_cert
from router.client import ServiceCertificate, SMPClient, open_client
from router.client.agent import open_agent
from router.client.agent_state import ReceivedMessage
from router.client.backoff import Backoff

FAST = Backoff(initial=0.01, maximum=0.2)


async def _receive(agent, count: int) -> set[bytes]:
    bodies = set()
    async for event in agent.events():
        if isinstance(event, ReceivedMessage):
            bodies.add(event.message.body)
            assert await agent.ack(event)
            if len(bodies) == count:
                return bodies
    raise AssertionError("the agent's events ended")


async def test_drift_is_repaired_by_subs_and_the_next_session_needs_one_subs(
    tmp_path, monkeypatch
):
    cert_file, key_file = self_signed_cert().files()
    connect = partial(open_client, service_cert=ServiceCertificate(cert_file, key_file))
    sub_blocks = []
    original = SMPClient.subscribe_many

    async def counted(self, queues):
        sub_blocks.append(len(queues))
        return await original(self, queues)

    monkeypatch.setattr(SMPClient, "subscribe_many", counted)
    with trio.fail_after(30):
        async with restartable_router(tmp_path) as router:
            queues = await create_queues(router.address, 3)  # not the service's yet
            for n, q in enumerate(queues):
                await send_to(router.address, q, b"first %d" % n)
            async with open_agent(backoff=FAST, connect=connect) as agent:
                agent.add_queues(router.address, [q.queue for q in queues])
                assert await _receive(agent, 3) == {b"first 0", b"first 1", b"first 2"}
                assert agent.statistics().service_drift == 1
            assert sub_blocks == [3]  # the repair: SUBs, which associate them
            for n, q in enumerate(queues):
                await send_to(router.address, q, b"second %d" % n)
            async with open_agent(backoff=FAST, connect=connect) as agent:
                agent.add_queues(router.address, [q.queue for q in queues])
                assert await _receive(agent, 3) == {b"second 0", b"second 1", b"second 2"}
                assert agent.statistics().service_drift == 0
            assert sub_blocks == [3]  # one SUBS this time, no SUB
