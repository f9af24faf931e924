"""Queue credentials the client keeps, and the events it hands to its user."""

from __future__ import annotations

from dataclasses import dataclass

from router.protocol.types import Response


@dataclass(frozen=True, slots=True)
class RecipientQueue:
    """Everything the recipient needs to use a queue it created (docs/protocol.md#command-table,
    #encryption).

    `box_key` is the NaCl precomputed key for X25519(rcv_dh_priv, srv_dh_key):
    it opens the bodies of the `MSG`s of this queue.
    """

    recipient_id: bytes
    sender_id: bytes
    rcv_auth_seed: bytes  # Ed25519 seed that signs the recipient's commands
    rcv_auth_key: bytes  # its SPKI
    rcv_dh_priv: bytes  # X25519 private key sent (as public) in NEW
    srv_dh_key: bytes  # the router's X25519 SPKI from IDS
    box_key: bytes
    snd_secure: bool


@dataclass(frozen=True, slots=True)
class NotifierCredentials:
    """What `NKEY` set up: the notifier uses id and seed, the recipient the box key."""

    recipient_id: bytes
    notifier_id: bytes
    notifier_seed: bytes  # Ed25519 seed that signs NSUB
    notifier_key: bytes  # its SPKI
    rcv_ntf_dh_priv: bytes
    srv_ntf_dh_key: bytes
    ntf_box_key: bytes  # opens NMSG metadata (docs/protocol.md#encryption)


@dataclass(frozen=True, slots=True)
class MessageEvent:
    """A decrypted `MSG`: pushed, piggybacked on ACK/SUB, or returned by GET.

    `quota` marks the router's QUOTA marker, which carries no body but must be
    acknowledged like any message.
    """

    recipient_id: bytes
    msg_id: bytes
    ts: int  # Unix seconds when the router accepted the SEND
    flags: bytes
    body: bytes
    quota: bool = False


@dataclass(frozen=True, slots=True)
class UndecryptedMessageEvent:
    """A `MSG` for a queue this client has no key for, or whose body did not open."""

    recipient_id: bytes
    msg_id: bytes
    enc_body: bytes


@dataclass(frozen=True, slots=True)
class EndEvent:
    """`END`: another connection subscribed to the queue (or it was deleted, at v9)."""

    recipient_id: bytes


@dataclass(frozen=True, slots=True)
class DeletedEvent:
    """`DELD` (v10): the queue was deleted while this connection was subscribed."""

    recipient_id: bytes


@dataclass(frozen=True, slots=True)
class NotificationEvent:
    """`NMSG` to a subscribed notifier.

    `msg_id` and `ts` are filled in when this client knows the notifier's box
    key (see `SMPClient.add_notifier`); otherwise only the sealed form is here.
    """

    notifier_id: bytes
    nonce: bytes
    enc_meta: bytes
    msg_id: bytes | None = None
    ts: int | None = None


@dataclass(frozen=True, slots=True)
class ServiceEndEvent:
    """`ENDS n`: another connection took over this service's subscriptions."""

    service_id: bytes
    count: int


@dataclass(frozen=True, slots=True)
class AllReceivedEvent:
    """`ALLS`: everything waiting for a service subscription has been delivered."""


Event = (
    MessageEvent
    | UndecryptedMessageEvent
    | EndEvent
    | DeletedEvent
    | NotificationEvent
    | ServiceEndEvent
    | AllReceivedEvent
)


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A transmission from the router that answers no pending command.

    `response` is None when the command bytes did not parse.
    """

    corr_id: bytes
    entity_id: bytes
    command: bytes
    response: Response | None


@dataclass(frozen=True, slots=True)
class ClientStatistics:
    """A snapshot of one connection's counters (see `SMPClient.statistics`)."""

    pending_commands: int  # transmissions sent or queued and not answered yet
    queued_transmissions: int  # waiting for the writer
    events_waiting: int  # received, not read by the user yet
    blocks_sent: int
    blocks_received: int
