"""Who may open a connection now: the listener's caps, kept fair between addresses.

A connection is counted from its accept to its end ("open"), and until its SMP
handshake is through also as "pending". Both are capped per client address
(an IPv6 client by its /64 network, which one subscriber usually has whole) and
in total. The total of pending connections is a shared pool that a handful of
addresses holding connections open without finishing them (silent, trickling,
a TLS handshake or an SMP hello that never comes) could otherwise fill, locking
every other address out until their deadlines pass. So a full pool does not
refuse a newcomer from an address with fewer pending connections than the most
represented one: it drops that address's oldest pending connection instead
(nginx and NATS bound the same attack with per-address limits and deadlines;
a full pool that refuses everyone is what the attacker wants). A newcomer from
the most represented address is the one refused.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import trio

IPV6_PREFIX = 64  # an IPv6 client is counted by its /64 network


def address_key(host: str) -> str:
    """What the per-address caps count: an IPv4 address, or an IPv6 address's /64."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_PREFIX), strict=False))
    return str(address)


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    max_pending: int  # pending connections in total (the pool)
    max_pending_per_address: int
    max_connections: int  # open connections in total
    max_connections_per_address: int | None  # open connections per address; None: no cap


class Ticket:
    """One admitted connection: pending until `established()`, counted until `close()`.

    `scope` covers the connection's whole life (its one cancel scope): a full pool
    cancels it while the connection is pending, to drop it for a newcomer from a
    less represented address; once established, the router cancels it to end it.
    """

    __slots__ = ("key", "scope", "_admission", "_pending", "_open")

    def __init__(self, admission: Admission, key: str) -> None:
        self.key = key
        self.scope = trio.CancelScope()
        self._admission = admission
        self._pending = True
        self._open = True

    @property
    def pending(self) -> bool:
        return self._pending

    def established(self) -> None:
        if self._pending:
            self._pending = False
            self._admission._unpend(self)

    def close(self) -> None:
        self.established()
        if self._open:
            self._open = False
            self._admission._close(self)

    def evict(self) -> None:
        """Dropped from the full pool for a newcomer: no longer pending, its connection
        ended."""
        self.established()
        self.scope.cancel()


class Refused(Exception):
    """A connection the caps keep out; the message says which."""


class Admission:
    """The counts behind the listener's caps (module doc)."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self.open = 0
        self.pending = 0
        self.evicted = 0  # pending connections dropped for a newcomer, since start
        self._open_by_key: dict[str, int] = {}
        # per address, its pending tickets oldest first
        self._pending_by_key: dict[str, OrderedDict[Ticket, None]] = {}

    def pending_from(self, key: str) -> int:
        waiting = self._pending_by_key.get(key)
        return 0 if waiting is None else len(waiting)

    def open_from(self, key: str) -> int:
        return self._open_by_key.get(key, 0)

    def admit(self, key: str) -> Ticket:
        """A ticket for a new connection from `key`; Refused if the caps keep it out."""
        limits = self.limits
        if self.open >= limits.max_connections:
            raise Refused("the router is at its connection limit")
        per_address = limits.max_connections_per_address
        if per_address is not None and self.open_from(key) >= per_address:
            raise Refused("too many connections from this address")
        mine = self.pending_from(key)
        if mine >= limits.max_pending_per_address:
            raise Refused("too many connections being opened from this address")
        if self.pending >= limits.max_pending:
            self._make_room(mine)
        ticket = self._new_ticket(key)
        self._pending_by_key.setdefault(key, OrderedDict())[ticket] = None
        self.pending += 1
        self._open_by_key[key] = self.open_from(key) + 1
        self.open += 1
        return ticket

    def _new_ticket(self, key: str) -> Ticket:
        return Ticket(self, key)

    def _make_room(self, mine: int) -> None:
        """Drop the oldest pending connection of the most represented address, if the
        newcomer's address would still have fewer; Refused otherwise."""
        crowd = max(self._pending_by_key.values(), key=len)
        if mine + 1 >= len(crowd):
            raise Refused("too many connections being opened")
        victim = next(iter(crowd))
        victim.evict()  # no longer pending: its place is the newcomer's now
        self.evicted += 1

    def _unpend(self, ticket: Ticket) -> None:
        waiting = self._pending_by_key[ticket.key]
        del waiting[ticket]
        if not waiting:
            del self._pending_by_key[ticket.key]
        self.pending -= 1

    def _close(self, ticket: Ticket) -> None:
        left = self._open_by_key[ticket.key] - 1
        if left:
            self._open_by_key[ticket.key] = left
        else:
            del self._open_by_key[ticket.key]
        self.open -= 1


class AdmittedConnection(Protocol):
    """What the listener uses of a ticket (`Ticket`, or a worker's of the router's caps)."""

    @property
    def scope(self) -> trio.CancelScope: ...

    def established(self) -> None: ...

    def close(self) -> None: ...


class SharedCaps(Protocol):
    """The router's caps kept outside this process (a worker's supervisor's:
    workers/admission.py), asked after this process's own `Admission` admitted."""

    async def admit(self, key: str, local: Ticket) -> AdmittedConnection: ...

    def over_share(self, own: int, taking: int = 0) -> bool:
        """Whether this process, with `own` connections and `taking` more, holds more
        than its share of the router's (the listener then lets the others accept)."""
        ...
