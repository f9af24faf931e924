"""SMP client over WebSockets, on Trio.

    async with open_client("smp://<keyHash>@127.0.0.1:5224") as client:
        q = await client.create_queue()
        await client.send(q.sender_id, b"hello")
        await client.subscribe(q)
        event = await client.next_event()
        await client.ack(q, event.msg_id)

Through a router acting as a proxy, so that the destination never sees this client's
address (docs/protocol.md#private-message-routing):

    async with open_client("smp://<keyHashA>@a.example:5223") as client:
        session = await client.open_proxied_session("smp://<keyHashB>@b.example:5223")
        await client.proxied_send(session, sender_id_on_b, b"hello")
"""

from ._address import RouterAddress, format_address, parse_address
from ._client import DEFAULT_EVENT_BUFFER, SMPClient, open_client
from ._errors import (
    BadResponse,
    ConnectionClosed,
    HandshakeError,
    IdentityMismatch,
    SMPClientError,
    SMPError,
    UpgradeRejected,
)
from ._proxied import ProxiedSession, ProxyError
from ._service import ServiceCertificate
from ._types import (
    AllReceivedEvent,
    ClientStatistics,
    DeletedEvent,
    EndEvent,
    Event,
    MessageEvent,
    NotificationEvent,
    NotifierCredentials,
    RawResponse,
    RecipientQueue,
    ServiceEndEvent,
    UndecryptedMessageEvent,
)

__all__ = [
    "ServiceCertificate",
    "DEFAULT_EVENT_BUFFER",
    "AllReceivedEvent",
    "BadResponse",
    "ClientStatistics",
    "ConnectionClosed",
    "DeletedEvent",
    "EndEvent",
    "Event",
    "HandshakeError",
    "IdentityMismatch",
    "MessageEvent",
    "NotificationEvent",
    "NotifierCredentials",
    "ProxiedSession",
    "ProxyError",
    "RawResponse",
    "RecipientQueue",
    "RouterAddress",
    "SMPClient",
    "SMPClientError",
    "SMPError",
    "ServiceEndEvent",
    "UndecryptedMessageEvent",
    "UpgradeRejected",
    "format_address",
    "open_client",
    "parse_address",
]
