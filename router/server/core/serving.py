"""Serving one client: a block in, its answers out, then what waits for them.

This is where the order of a block's answers against the pushes for the same
client is kept (docs/architecture.md, "Ordering"); the dispatcher, delivery
and the service walk do the work.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

from .delivery import Deliverer
from .dispatch import Dispatcher
from .services import Services
from .subscriptions import ClientSubscriptions, PendingEvents


@dataclass(frozen=True, slots=True)
class ClientServing:
    """How each connection's client is served (`Connection.run`): one for the
    router, so that a connection costs no object of its own to join the parts.

    The order it keeps: the END/DELD events for a client wait while one of its
    blocks is being answered and go after the answers (`in_block`, released in
    `answered`), and a SUBS walk starts only once its SOKS is written or
    pending (the walk's MSGs are written after it). A costly block that pauses
    for its turn (dispatch.py, turns.py) writes its answers so far itself; its
    events still wait for the rest."""

    dispatcher: Dispatcher
    deliverer: Deliverer
    services: Services
    events: PendingEvents

    def process_block(self, client: ClientSubscriptions, block: bytes) -> Awaitable[list[bytes]]:
        client.in_block = True  # its END/DELD now wait for this block's answers
        return self.dispatcher.process_block(client, block)

    def process_transmissions(self, client: ClientSubscriptions,
                              raw_transmissions: list[bytes]) -> Awaitable[list[bytes]]:
        """A block's transmissions already taken apart (a hand-off's part), as its block."""
        client.in_block = True
        return self.dispatcher.process_transmissions(client, raw_transmissions)

    def delivery_loop(self, client: ClientSubscriptions) -> Awaitable[None]:
        return self.deliverer.delivery_loop(client, self.services)

    def answered(self, client: ClientSubscriptions) -> None:
        client.in_block = False
        self.events.release(client)
        client.start_catch_up()
