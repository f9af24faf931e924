"""Which destinations the proxy may connect to (docs/protocol.md#private-message-routing).

A PRXY names any host and port, and the proxy opens a TCP and TLS connection there.
Unchecked, that is an open relay into the operator's own network: loopback, the
private ranges, link-local addresses (a cloud's metadata service), this machine's
public address with its database port. So a destination is refused unless every
address its host resolves to is a public unicast address of another machine; the
refusal is `PROXY BROKER HOST`, the reference's "no compatible server host" (the one
it gives for an onion host without Tor).

A name is resolved by the proxy itself and the connection made to the address that
was checked, never to the name again, so a name cannot point inside after its check
(DNS rebinding). An operator who proxies inside their own network names the ranges
the proxy may reach anyway (`[PROXY] allow_destinations`, `--proxy-allow-destinations`);
they are allowed whatever they hold, this machine's addresses included.

Resolving a name takes a thread for as long as the name's servers take, and a
client may name hosts under a domain whose servers never answer. So names are
resolved on threads of the proxy's own (`DNS_THREADS`, not the router's default
pool that the stores use), at most `DNS_PER_ADDRESS` at once for one client
address; an address literal needs none.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable

import trio

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # an IPv4 address behind the well-known prefix
DNS_THREADS = 8  # names being resolved at once, for every client
DNS_PER_ADDRESS = 2  # of those, for one client address


class DestinationRefused(Exception):
    """A destination the proxy must not connect to; the message says why."""


def parse_networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """`10.0.0.0/8`, `fd00::/8`, `192.168.1.7`: networks, or single addresses;
    ValueError naming the entry that is neither."""
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{entry.strip()!r} is not an IP network or address") from None
    return tuple(networks)


def is_this_machine(address: IPAddress) -> bool:
    """An address of one of this machine's interfaces: the kernel lets a socket bind
    only to those."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries to reach it (mapped, 6to4, NAT64)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


class DestinationPolicy:
    """The check of the module doc; `local` tells this machine's addresses."""

    def __init__(self, allowed: Iterable[str] = (),
                 local: Callable[[IPAddress], bool] = is_this_machine) -> None:
        self.allowed = parse_networks(allowed)
        self._local = local
        self._threads: trio.CapacityLimiter | None = None  # made in the run that uses it
        self._resolving: dict[str, int] = {}  # client address -> names being resolved
        self._lock = threading.Lock()  # _resolving is changed by the resolving threads too

    def refusal(self, address: IPAddress) -> str | None:
        """Why the proxy must not connect to `address`, or None if it may."""
        if any(address.version == n.version and address in n for n in self.allowed):
            return None
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return self.refusal(embedded)
        if address.is_loopback:
            return "a loopback address"
        if address.is_link_local:
            return "a link-local address"
        if address.is_multicast or address.is_unspecified or address.is_reserved:
            return "not a unicast address"
        if not address.is_global:
            return "a private address"
        if self._local(address):
            return "an address of this router's machine"
        return None

    def check_literal(self, host: str) -> None:
        """Refuse a host given as an IP address at once (no resolving needed);
        a name passes here and is checked by `resolve`."""
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return
        why = self.refusal(address)
        if why is not None:
            raise DestinationRefused(f"{host} is {why}")

    async def resolve(self, host: str, port: int, asker: str = "") -> str:
        """The address to connect to for `host` (for the client address `asker`):
        DestinationRefused if any address the host resolves to is refused; OSError if
        it does not resolve, or `asker` has its share of names being resolved."""
        try:
            literal = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            infos = await self._getaddrinfo(host, port, asker)
        else:
            infos = [(0, 0, 0, "", (str(literal), port))]
        addresses: list[IPAddress] = []
        for _, _, _, _, sockaddr in infos:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
            if address not in addresses:
                addresses.append(address)
        if not addresses:
            raise OSError(f"{host} has no address")
        for address in addresses:
            why = self.refusal(address)
            if why is not None:
                shown = host if host == str(address) else f"{host} ({address})"
                raise DestinationRefused(f"{shown} is {why}")
        return str(addresses[0])

    async def _getaddrinfo(self, host: str, port: int, asker: str) -> list:  # type: ignore[type-arg]
        """getaddrinfo on the proxy's threads; a name counts against `asker` until its
        thread ends, even if its PRXY gave up waiting for it (an abandoned thread
        still holds its place)."""
        with self._lock:
            resolving = self._resolving.get(asker, 0)
            if resolving >= DNS_PER_ADDRESS:
                raise OSError(f"{resolving} names being resolved for this client address")
            self._resolving[asker] = resolving + 1
        if self._threads is None:
            self._threads = trio.CapacityLimiter(DNS_THREADS)

        state = {"started": False, "given_up": False}

        def lookup() -> list:  # type: ignore[type-arg]
            with self._lock:
                if state["given_up"]:
                    return []
                state["started"] = True
            try:
                return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
            finally:
                self._done_resolving(asker)

        try:
            return await trio.to_thread.run_sync(lookup, abandon_on_cancel=True,
                                                 limiter=self._threads)
        except BaseException:
            with self._lock:
                given_up = not state["started"]  # else its thread counts it off
                state["given_up"] = given_up
            if given_up:
                self._done_resolving(asker)
            raise

    def _done_resolving(self, asker: str) -> None:
        with self._lock:
            left = self._resolving[asker] - 1
            if left:
                self._resolving[asker] = left
            else:
                del self._resolving[asker]

    def resolving_for(self, asker: str) -> int:
        with self._lock:
            return self._resolving.get(asker, 0)
