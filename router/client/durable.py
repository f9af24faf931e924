"""The durable subscriber: decrypted messages, across drops and router restarts.

    async with open_durable_subscriber(is_processed=seen_in_my_db) as subscriber:
        subscriber.add_queues("smp://<keyHash>@host:port", queues)
        async for message in subscriber:
            apply_and_record(message)   # the message is ACKed when the next one is asked for

Theory of operation
-------------------
The subscriber reads the events of an `Agent` (agent.py), which keeps the
queues subscribed and reconnects. The router keeps a message until it is
acknowledged and delivers it again to the next subscription when the ACK did
not reach it, so the subscriber acknowledges a message only after the
application is done with it: when the application asks for the next message
(or, with `run(handler)`, when the handler returns). A message whose handling
raised, or that was being handled when the program stopped, is not
acknowledged and comes again: delivery is at least once.

Redeliveries of messages that *were* handled (the ACK was lost with the
connection, or the program stopped between handling and ACK) are recognised
by msgId: the subscriber remembers the ids it finished (a bounded memory of
the most recent ones) and asks the application's `is_processed` hook, which
can look into the application's own store. Such a message is ACKed without
being handed over again. An application that records the msgId in the same
transaction as the state change the message causes therefore applies each
message exactly once (examples/durable_sqlite.py).

The router delivers one unacknowledged message per queue, so after a crash at
most one message per queue can come back; the memory only has to cover the
ids that may still be unacknowledged, and `is_processed` covers a restart of
the program, which empties the memory.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from ._errors import SMPError
from ._types import MessageEvent, RecipientQueue
from .agent import Agent, open_agent
from .agent_state import AgentEvent, ReceivedMessage

DEFAULT_REMEMBER = 65536  # msgIds kept in memory for de-duplication


@dataclass(frozen=True, slots=True)
class DurableMessage:
    """A decrypted message, handed to the application once."""

    router: str
    recipient_id: bytes
    msg_id: bytes  # 24 bytes, unique per message: the key to record it by
    ts: int  # Unix seconds when the router accepted it
    flags: bytes
    body: bytes


IsProcessed = Callable[[DurableMessage], bool | Awaitable[bool]]
Handler = Callable[[DurableMessage], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class DurableStatistics:
    delivered: int  # messages handed to the application
    acknowledged: int  # ACKs the router took
    duplicates: int  # redeliveries of handled messages, ACKed without handing them over
    quota_markers: int  # QUOTA markers (no body), ACKed
    undecryptable: int  # messages whose body did not open, ACKed
    ack_failures: int  # ACKs refused with an error (the message comes again later)


class RecentIds:
    """A set of the `capacity` most recently added keys."""

    __slots__ = ("_capacity", "_keys")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def __contains__(self, key: bytes) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: bytes) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        if len(self._keys) > self._capacity:
            self._keys.popitem(last=False)


@asynccontextmanager
async def open_durable_subscriber(
    *,
    remember: int = DEFAULT_REMEMBER,
    is_processed: IsProcessed | None = None,
    on_event: Callable[[AgentEvent], None] | None = None,
    agent: Agent | None = None,
    **agent_options: Any,
) -> AsyncIterator[DurableSubscriber]:
    """A durable subscriber for the duration of the block.

    `remember` bounds the msgIds kept for de-duplication; `is_processed(message)`
    (plain or async) says whether the application already handled a message;
    `on_event` sees every agent event other than a message handed over (UP,
    DOWN, removals, connection events, and the QUOTA markers and undecryptable
    messages that were ACKed without being handed over). Without
    `agent`, one is opened with `agent_options` (see `open_agent`); a given
    agent must have no other reader of its events.
    """
    if agent is not None:
        yield DurableSubscriber(agent, remember, is_processed, on_event)
        return
    async with open_agent(**agent_options) as own:
        yield DurableSubscriber(own, remember, is_processed, on_event)


class DurableSubscriber:
    """An async iterator of `DurableMessage`s; see the module doc."""

    def __init__(
        self,
        agent: Agent,
        remember: int,
        is_processed: IsProcessed | None,
        on_event: Callable[[AgentEvent], None] | None,
    ) -> None:
        self.agent = agent
        self._recent = RecentIds(remember)
        self._is_processed = is_processed
        self._on_event = on_event
        self._current: ReceivedMessage | None = None
        self._delivered = self._acknowledged = self._duplicates = 0
        self._quota = self._undecryptable = self._ack_failures = 0

    def add_queues(
        self, router: str, queues: Iterable[RecipientQueue], group: str | None = None
    ) -> int:
        """Receive from these queues too (`Agent.add_queues`)."""
        return self.agent.add_queues(router, queues, group)

    def remove_queue(self, router: str, recipient_id: bytes) -> bool:
        return self.agent.remove_queue(router, recipient_id)

    # --- iteration ------------------------------------------------------------------------

    def __aiter__(self) -> DurableSubscriber:
        return self

    async def __anext__(self) -> DurableMessage:
        """ACK the message handed over last, then wait for the next new one."""
        await self._finish_current()
        while True:
            try:
                event = await self.agent.next_event()
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
            if type(event) is not ReceivedMessage:
                self._report(event)
                continue
            message = await self._accept(event)
            if message is not None:
                self._current = event
                self._delivered += 1
                return message

    async def ack(self) -> None:
        """ACK the message handed over last now, rather than when the next is asked for
        (before leaving an `async for` with `break`, say). Does nothing if there is none."""
        await self._finish_current()

    async def run(self, handler: Handler) -> None:
        """Call `handler` for each message and ACK it once the handler returns.

        Runs until the agent closes; an exception from `handler` ends it, and
        that message is not acknowledged.
        """
        async for message in self:
            await handler(message)

    def statistics(self) -> DurableStatistics:
        return DurableStatistics(
            self._delivered, self._acknowledged, self._duplicates, self._quota,
            self._undecryptable, self._ack_failures,
        )

    # --- inside -------------------------------------------------------------------------------

    async def _finish_current(self) -> None:
        event, self._current = self._current, None
        if event is not None:
            # Remembered before the ACK: if the ACK is lost, the redelivery is a duplicate.
            self._recent.add(_dedup_key(event))
            await self._ack(event)

    async def _accept(self, event: ReceivedMessage) -> DurableMessage | None:
        """The message to hand over, or None when it was ACKed here instead."""
        m = event.message
        if type(m) is not MessageEvent:
            # Left unacknowledged it would block its queue for good.
            self._undecryptable += 1
            return await self._ack_and_report(event)
        if m.quota:
            self._quota += 1
            return await self._ack_and_report(event)
        message = DurableMessage(event.router, m.recipient_id, m.msg_id, m.ts, m.flags, m.body)
        if _dedup_key(event) in self._recent or await self._handled_before(message):
            self._recent.add(_dedup_key(event))
            self._duplicates += 1
            await self._ack(event)
            return None
        return message

    async def _ack_and_report(self, event: ReceivedMessage) -> None:
        """For a message with no body to hand over."""
        await self._ack(event)
        self._report(event)

    async def _handled_before(self, message: DurableMessage) -> bool:
        if self._is_processed is None:
            return False
        answer = self._is_processed(message)
        if inspect.isawaitable(answer):
            answer = await answer
        return bool(answer)

    async def _ack(self, event: ReceivedMessage) -> None:
        try:
            taken = await self.agent.ack(event)
        except SMPError:
            self._ack_failures += 1  # e.g. INTERNAL: it comes again after a reconnection
            return
        if taken:
            self._acknowledged += 1

    def _report(self, event: AgentEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)


def _dedup_key(event: ReceivedMessage) -> bytes:
    return event.recipient_id + event.msg_id
