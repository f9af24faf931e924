"""SMP values: commands, responses, errors and transmissions (docs/protocol.md#transmissions,
#command-table).

Wire tokens become types. Every command and response is a frozen, slotted
dataclass named after its wire tag; every error the protocol defines is an
`ErrorType` value. Keys are carried as their X.509 SubjectPublicKeyInfo DER
(44 bytes for Ed25519 / X25519, docs/protocol.md#keys), never as library key objects, so
this module stays free of crypto and I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# --- errors (docs/protocol.md#errors) -------------------------------------------------


class CmdErr(Enum):
    UNKNOWN = "UNKNOWN"
    SYNTAX = "SYNTAX"
    PROHIBITED = "PROHIBITED"
    NO_AUTH = "NO_AUTH"
    HAS_AUTH = "HAS_AUTH"
    NO_ENTITY = "NO_ENTITY"


@dataclass(frozen=True, slots=True)
class ErrorType:
    """One `ERR` payload.

    `tag` is the wire token (BLOCK, SESSION, CMD, PROXY, AUTH, QUOTA, NO_MSG,
    LARGE_MSG, INTERNAL, CRYPTO, SERVICE, EXPIRED, STORE, BLOCKED, DUPLICATE_).
    `arg` holds what follows the tag: a CmdErr for CMD, the text for STORE and
    BLOCKED, the still-encoded proxy error bytes for PROXY; None otherwise.
    """

    tag: str
    arg: CmdErr | str | bytes | None = None

    def __str__(self) -> str:
        if self.arg is None:
            return self.tag
        arg = self.arg.value if isinstance(self.arg, CmdErr) else self.arg
        if isinstance(arg, bytes):
            arg = arg.decode("latin-1")
        return f"{self.tag} {arg}"


BLOCK = ErrorType("BLOCK")
SESSION = ErrorType("SESSION")
AUTH = ErrorType("AUTH")
QUOTA = ErrorType("QUOTA")
NO_MSG = ErrorType("NO_MSG")
LARGE_MSG = ErrorType("LARGE_MSG")
INTERNAL = ErrorType("INTERNAL")
CRYPTO = ErrorType("CRYPTO")
SERVICE = ErrorType("SERVICE")
EXPIRED = ErrorType("EXPIRED")
CMD_UNKNOWN = ErrorType("CMD", CmdErr.UNKNOWN)
CMD_SYNTAX = ErrorType("CMD", CmdErr.SYNTAX)
CMD_PROHIBITED = ErrorType("CMD", CmdErr.PROHIBITED)
CMD_NO_AUTH = ErrorType("CMD", CmdErr.NO_AUTH)
CMD_HAS_AUTH = ErrorType("CMD", CmdErr.HAS_AUTH)
CMD_NO_ENTITY = ErrorType("CMD", CmdErr.NO_ENTITY)
# The proxy errors without arguments (docs/protocol.md#private-message-routing); the
# others are built by `errors.proxy_protocol_error` and `errors.proxy_broker_error`.
PROXY_BASIC_AUTH = ErrorType("PROXY", b"BASIC_AUTH")
PROXY_NO_SESSION = ErrorType("PROXY", b"NO_SESSION")


def store_error(text: str) -> ErrorType:
    return ErrorType("STORE", text)


class ProtocolError(Exception):
    """Raised inside the codec when bytes do not parse; carries the ERR to answer."""

    def __init__(self, error: ErrorType, detail: str = "") -> None:
        super().__init__(f"{error}{': ' + detail if detail else ''}")
        self.error = error


# --- client commands (docs/protocol.md#command-table) ------------------------------------------


@dataclass(frozen=True, slots=True)
class PING:
    pass


@dataclass(frozen=True, slots=True)
class QueueLink:
    """Short-link data sent with NEW (docs/protocol.md#short-links): the sender id the
    client chose, the two encrypted parts of the link data, and, for a contact queue,
    the link id the client chose (a messaging queue's link id is the router's)."""

    sender_id: bytes
    fixed_data: bytes  # immutable once set
    user_data: bytes
    link_id: bytes | None = None


@dataclass(frozen=True, slots=True)
class NewNotifier:
    """Notifier credentials sent with NEW (v17): the notifier's auth key and the
    recipient's DH key for notification metadata."""

    notifier_key: bytes
    rcv_ntf_dh_key: bytes


@dataclass(frozen=True, slots=True)
class NEW:
    rcv_auth_key: bytes  # SPKI DER: Ed25519, Ed448 or X25519
    rcv_dh_key: bytes  # SPKI DER, X25519
    basic_auth: bytes | None  # the queue-creation password, if sent
    subscribe: bool  # subMode 'S' (True) or 'C'
    # True: a messaging queue the sender may secure (queue mode M); False: a contact
    # queue (mode C); None: no queue request data at all (from v15 only; F before).
    snd_secure: bool | None
    link: QueueLink | None = None  # from v15
    notifier: NewNotifier | None = None  # from v17

    @property
    def queue_mode(self) -> bytes | None:
        """b"M", b"C" or None, as IDS echoes it from v15."""
        if self.snd_secure is None:
            return None
        return b"M" if self.snd_secure else b"C"


@dataclass(frozen=True, slots=True)
class SUB:
    pass


@dataclass(frozen=True, slots=True)
class KEY:
    sender_key: bytes


@dataclass(frozen=True, slots=True)
class SKEY:
    sender_key: bytes


@dataclass(frozen=True, slots=True)
class SEND:
    flags: bytes  # b"T" / b"F", possibly followed by reserved non-space bytes
    body: bytes

    @property
    def notify(self) -> bool:
        return self.flags[:1] == b"T"


@dataclass(frozen=True, slots=True)
class ACK:
    msg_id: bytes


@dataclass(frozen=True, slots=True)
class GET:
    pass


@dataclass(frozen=True, slots=True)
class OFF:
    pass


@dataclass(frozen=True, slots=True)
class DEL:
    pass


@dataclass(frozen=True, slots=True)
class QUE:
    pass


@dataclass(frozen=True, slots=True)
class NKEY:
    notifier_key: bytes
    rcv_ntf_dh_key: bytes


@dataclass(frozen=True, slots=True)
class NDEL:
    pass


@dataclass(frozen=True, slots=True)
class NSUB:
    pass


NO_IDS_HASH = bytes(16)  # the ids hash of no queue (docs/protocol.md#service-subscriptions)


@dataclass(frozen=True, slots=True)
class SUBS:
    """Subscribe every queue associated with the connection's service
    (docs/protocol.md#service-subscriptions): from v19 with the count and ids hash
    the service holds; before, as the reference reads it, -1 and no hash."""

    count: int = -1
    ids_hash: bytes = NO_IDS_HASH


@dataclass(frozen=True, slots=True)
class NSUBS:
    """SUBS for the notifier side of a notifier service's queues."""

    count: int = -1
    ids_hash: bytes = NO_IDS_HASH


@dataclass(frozen=True, slots=True)
class RKEY:
    """Replace the recipient keys of a contact queue (v15)."""

    rcv_keys: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class LSET:
    """Set a queue's short-link data (v15); entityId = rcvId."""

    link_id: bytes
    fixed_data: bytes
    user_data: bytes


@dataclass(frozen=True, slots=True)
class LDEL:
    pass


@dataclass(frozen=True, slots=True)
class LKEY:
    """Secure a messaging queue by its link and read the link data (v15); entityId = linkId,
    signed with the key it installs."""

    sender_key: bytes


@dataclass(frozen=True, slots=True)
class LGET:
    """Read a contact queue's link data (v15); entityId = linkId, not signed."""


# --- private message routing (docs/protocol.md#private-message-routing) ---------------


@dataclass(frozen=True, slots=True)
class PRXY:
    """Client to proxy: open (or reuse) a session with the destination router named by
    its hosts, port and identity key hash; no entity id, no authorization."""

    hosts: tuple[str, ...]  # at least one; as written in the smp:// address
    port: str  # "" for the default port
    key_hash: bytes  # SHA-256 of the destination's identity certificate
    basic_auth: bytes | None = None  # the proxy's password, if it asks for one


@dataclass(frozen=True, slots=True)
class PFWD:
    """Client to proxy: one transmission for the destination, encrypted to the
    destination's session key; entity id = the session id from PKEY, corrId = nonce."""

    version: int  # the version the inner transmission is encoded at
    client_key: bytes  # X25519 SPKI, fresh for this transmission
    enc_transmission: bytes  # `proxying.PROXIED_ENC_SIZE` bytes


@dataclass(frozen=True, slots=True)
class RFWD:
    """Proxy to destination: a forwarded transmission boxed with the proxy's session
    secret; no entity id, no authorization, corrId = nonce."""

    enc_fwd_transmission: bytes


Command = (
    PING | NEW | SUB | KEY | SKEY | SEND | ACK | GET | OFF | DEL | QUE
    | NKEY | NDEL | NSUB | SUBS | NSUBS | RKEY | LSET | LDEL | LKEY | LGET | PRXY | PFWD
    | RFWD
)

# --- router responses and pushes --------------------------------------------


@dataclass(frozen=True, slots=True)
class NID:
    notifier_id: bytes
    srv_ntf_dh_key: bytes


@dataclass(frozen=True, slots=True)
class IDS:
    rcv_id: bytes
    snd_id: bytes
    srv_dh_key: bytes  # SPKI DER, X25519
    snd_secure: bool | None  # NEW's; None: NEW sent no queue request data (v15+)
    link_id: bytes | None = None  # from v15
    service_id: bytes | None = None  # from v16
    notifier: NID | None = None  # from v17: the notifier NEW asked for

    @property
    def queue_mode(self) -> bytes | None:
        if self.snd_secure is None:
            return None
        return b"M" if self.snd_secure else b"C"


@dataclass(frozen=True, slots=True)
class LNK:
    """A queue's short-link data (v15): the answer to LKEY and LGET."""

    sender_id: bytes
    fixed_data: bytes
    user_data: bytes


@dataclass(frozen=True, slots=True)
class SOK:
    """The answer to SUB and NSUB from v16 (OK before): the service the queue is now
    associated with, if any."""

    service_id: bytes | None


@dataclass(frozen=True, slots=True)
class MSG:
    msg_id: bytes
    enc_body: bytes  # crypto_box output, 16122 bytes (docs/protocol.md#encryption)


@dataclass(frozen=True, slots=True)
class NMSG:
    nonce: bytes  # 24 bytes
    enc_meta: bytes  # 144 bytes


@dataclass(frozen=True, slots=True)
class END:
    pass


@dataclass(frozen=True, slots=True)
class DELD:
    pass


@dataclass(frozen=True, slots=True)
class OK:
    pass


@dataclass(frozen=True, slots=True)
class PONG:
    pass


@dataclass(frozen=True, slots=True)
class INFO:
    json: str


@dataclass(frozen=True, slots=True)
class ERR:
    error: ErrorType


@dataclass(frozen=True, slots=True)
class SOKS:
    """The router's count and ids hash of the service's queues (the hash from v19)."""

    count: int
    ids_hash: bytes = NO_IDS_HASH


@dataclass(frozen=True, slots=True)
class ENDS:
    """A service subscription taken over by another session: what it held."""

    count: int
    ids_hash: bytes = NO_IDS_HASH


@dataclass(frozen=True, slots=True)
class ALLS:
    pass


@dataclass(frozen=True, slots=True)
class PKEY:
    """Proxy to client, the answer to PRXY: the proxy's session with the destination
    (its TLS session id), the version range the proxy allows for it, and the
    destination's certificate chain with its X25519 session key signed by the chain's
    first (online) certificate; no entity id."""

    session_id: bytes
    min_version: int
    max_version: int
    cert_chain: tuple[bytes, ...]  # DER certificates, online first, at least one
    signed_key: bytes  # DER X.509 SignedExact of the X25519 SubjectPublicKeyInfo


@dataclass(frozen=True, slots=True)
class RRES:
    """Destination to proxy, the answer to RFWD: the boxed forwarded response; no
    entity id."""

    enc_fwd_response: bytes


@dataclass(frozen=True, slots=True)
class PRES:
    """Proxy to client, the answer to PFWD: the destination's response, still
    encrypted for the client; entity id = the session id."""

    enc_response: bytes


Response = (
    IDS | MSG | NID | NMSG | END | DELD | OK | PONG | INFO | ERR | SOKS | ENDS | ALLS
    | LNK | SOK | PKEY | RRES | PRES
)

# --- transmissions (docs/protocol.md#transmissions) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Transmission:
    """One transmission as it sits on the wire, command still encoded.

    Keeping `command` as bytes lets the router verify the signature over the
    exact bytes received before it decodes anything.
    """

    authorization: bytes
    corr_id: bytes
    entity_id: bytes
    command: bytes
    # From v16 a transmission with an authorization carries a service signature field
    # after it (docs/protocol.md#service-signature): None when it says none.
    service_sig: bytes | None = None


# --- local errors (never sent in ERR) ----------------------------------------

# A hello block that does not parse (docs/protocol.md#handshake): the connection is closed, no ERR
# is sent.
HANDSHAKE = ErrorType("HANDSHAKE")
