"""SMP versions: what each one adds, and the one place every per-version difference of
encoding is decided (docs/protocol.md#versions, #version-table).

The codec never compares a version number with a literal: it asks one of the
predicates below, so a reader can see at once which version changed which bytes.
A connection negotiates one version in its hellos (docs/protocol.md#handshake) and
both ends encode and decode everything after them at that version.

Numbers follow the reference implementation: simplexmq `master` for 11-18 and its
`smp-web` branch for 19 (the web identity proof). 13 was never assigned.
"""

from __future__ import annotations

# --- what each version adds (docs/protocol.md#version-table) ---------------------

AUTH_COMMANDS = 7  # hello keys; X25519 authenticators; session id signed, not sent
SENDING_PROXY = 8  # PRXY PKEY, PFWD PRES, RFWD RRES (docs/protocol.md#private-message-routing)
SENDER_AUTH_KEY = 9  # SKEY; NEW and IDS carry sndSecure
DELETED_EVENT = 10  # DELD to other subscribers of a deleted queue
ENCRYPTED_BLOCK = 11  # block encryption with chain keys from the session DH secret
BLOCKED_ENTITY = 12  # ERR BLOCKED for blocked queues (AUTH before)
PROXY_SERVER_HANDSHAKE = 14  # the client hello's proxyServer flag
SHORT_LINKS = 15  # NEW queue request data, IDS queue mode and link id, LSET/LKEY/LDEL/LGET/LNK
SERVICE_CERTS = 16  # service signature field in transmissions, clientService in the hello, SOK
NEW_NTF_CREDS = 17  # NEW with notifier credentials, IDS with the notifier
CLIENT_NOTICES = 18  # ERR BLOCKED carries the client notice
WEB_CLIENT = 19  # the server hello's web identity proof (signed challenge)
# The reference's v19 (master): SUBS/NSUBS with count and ids hash, SOKS/ENDS with the
# hash. The browser client's line numbers its web proof 19 too; the router serves both
# at 19 (docs/protocol.md#two-v19s).
SERVICE_SUBSCRIPTIONS = 19

# The versions this codec encodes and decodes.
CODEC_VERSION_MIN = SENDER_AUTH_KEY
CODEC_VERSION_MAX = WEB_CLIENT

# The range the router offers in its hello and the project's clients ask for
# (docs/protocol.md#versions); it reaches CODEC_VERSION_MAX once the router and the
# clients speak every encoding the codec knows.
SMP_VERSION_MIN = CODEC_VERSION_MIN
SMP_VERSION_MAX = CODEC_VERSION_MAX

# The version a caller that predates negotiation means (the project's clients before
# they spoke the newer versions); the codec's default where a version is not given.
LEGACY_VERSION = DELETED_EVENT

# The highest version offered to a native TLS client that agreed no ALPN
# (docs/protocol.md#native-tls). The reference offers such a client its oldest
# version only (v6, from before ALPN was asked for); this router's oldest is v9.
LEGACY_TLS_VERSION_MAX = SMP_VERSION_MIN

VERSION_ADDITIONS: dict[int, str] = {
    SENDING_PROXY: "private message routing: PRXY PKEY, PFWD PRES, RFWD RRES",
    SENDER_AUTH_KEY: "SKEY, sndSecure in NEW and IDS (the oldest version served)",
    DELETED_EVENT: "DELD to the other subscribers of a deleted queue",
    ENCRYPTED_BLOCK: "block encryption (chain keys from the session DH secret)",
    BLOCKED_ENTITY: "ERR BLOCKED for blocked queues",
    PROXY_SERVER_HANDSHAKE: "proxyServer flag in the client hello",
    SHORT_LINKS: "short links: NEW queue data, IDS queue mode and link id, LSET LKEY LDEL LGET LNK",
    SERVICE_CERTS: "service signature byte, clientService in the client hello, SOK",
    NEW_NTF_CREDS: "NEW with notifier credentials, IDS with the notifier",
    CLIENT_NOTICES: "client notices in ERR BLOCKED",
    WEB_CLIENT: "web identity proof: the signed challenge in the server hello;"
    " SUBS/NSUBS with count and ids hash, SOKS/ENDS with the ids hash",
}

# Longest SEND body per version (docs/protocol.md#limits): block encryption takes 16
# bytes of every block, so the body limit shrinks with it.
_MAX_MESSAGE_LENGTH_PLAIN = 16064
_MAX_MESSAGE_LENGTH_ENCRYPTED = 16048


def supported(version: int) -> bool:
    """Whether the codec knows `version`."""
    return CODEC_VERSION_MIN <= version <= CODEC_VERSION_MAX


# --- predicates the codec asks -----------------------------------------------------


def has_hello_keys(v: int) -> bool:
    """The server hello's cert part and the client hello's X25519 key."""
    return v >= AUTH_COMMANDS


def has_sender_auth_key(v: int) -> bool:
    """NEW and IDS end with sndSecure (until short links replace it)."""
    return SENDER_AUTH_KEY <= v < SHORT_LINKS


def has_deleted_event(v: int) -> bool:
    return v >= DELETED_EVENT


def has_block_encryption(v: int) -> bool:
    return v >= ENCRYPTED_BLOCK


def has_blocked_error(v: int) -> bool:
    return v >= BLOCKED_ENTITY


def has_proxy_server_flag(v: int) -> bool:
    return v >= PROXY_SERVER_HANDSHAKE


def has_short_links(v: int) -> bool:
    return v >= SHORT_LINKS


def has_service_field(v: int) -> bool:
    """The service signature after the authorization, `clientService` in the hello,
    SOK as the answer to SUB and NSUB, the service id in IDS."""
    return v >= SERVICE_CERTS


def has_new_notifier(v: int) -> bool:
    return v >= NEW_NTF_CREDS


def has_client_notices(v: int) -> bool:
    return v >= CLIENT_NOTICES


def has_service_subscriptions(v: int) -> bool:
    """SUBS and NSUBS carry the service's count and ids hash; SOKS and ENDS the hash."""
    return v >= SERVICE_SUBSCRIPTIONS


def has_web_identity_proof(v: int) -> bool:
    return v >= WEB_CLIENT


def max_message_length(v: int) -> int:
    """The longest SEND body at version `v`."""
    return _MAX_MESSAGE_LENGTH_ENCRYPTED if has_block_encryption(v) else _MAX_MESSAGE_LENGTH_PLAIN
