"""The agent against a scripted router: a connection that goes silent, and a SUB
refused for a moment."""

from __future__ import annotations

import sys
from pathlib import Path

import trio
from agent_helpers import EventLog

from router.client.agent import open_agent
from router.client.agent_state import ConnectionLost, QueueState
from router.client.backoff import Backoff
from router.protocol.types import ERR, INTERNAL, OK, PING, PONG, SUB

# The client tests' scripted peer: the router's half of the wire, driven by a script.
sys.path.append(str(Path(__file__).resolve().parents[1] / "client"))
from smp_fake_peer import PeerConnection, fake_peer, fake_queue  # noqa: E402

FAST = Backoff(initial=0.01, maximum=0.1)


async def test_a_connection_that_stops_answering_pings_is_replaced_and_its_queues_resubscribed():
    connections: list[PeerConnection] = []

    async def script(conn: PeerConnection) -> None:
        connections.append(conn)
        silent = len(connections) == 1  # the first connection's network "dies"
        while True:
            for t, cmd in await conn.receive_commands(1):
                if isinstance(cmd, SUB):
                    await conn.send([(t.corr_id, t.entity_id, OK())])
                elif isinstance(cmd, PING) and not silent:
                    await conn.send([(t.corr_id, b"", PONG())])

    queue = fake_queue()
    log = EventLog()
    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_agent(
            backoff=FAST, ping_interval=0.05, ping_timeout=0.1
        ) as agent, trio.open_nursery() as nursery:
            nursery.start_soon(log.pump, agent)
            agent.add_queues(peer.address, [queue])
            await log.wait_all_up([queue.recipient_id], times=2)
            assert log.history[queue.recipient_id] == ["UP", "DOWN", "UP"]
            [lost] = [e for e in log.events if isinstance(e, ConnectionLost)]
            assert lost.session == 1 and len(connections) == 2
            nursery.cancel_scope.cancel()


async def test_a_sub_refused_for_a_moment_is_sent_again_on_the_same_connection():
    answers = iter([ERR(INTERNAL), OK()])
    connections: list[PeerConnection] = []

    async def script(conn: PeerConnection) -> None:
        connections.append(conn)
        while True:
            for t, cmd in await conn.receive_commands(1):
                if isinstance(cmd, SUB):
                    await conn.send([(t.corr_id, t.entity_id, next(answers))])

    queue = fake_queue()
    log = EventLog()
    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_agent(backoff=FAST) as agent, \
                trio.open_nursery() as nursery:
            nursery.start_soon(log.pump, agent)
            agent.add_queues(peer.address, [queue])
            await log.wait_all_up([queue.recipient_id])
            assert agent.state(queue.recipient_id) is QueueState.ACTIVE
            assert len(connections) == 1 and log.history[queue.recipient_id] == ["UP"]
            nursery.cancel_scope.cancel()
