// SMP versions: what each adds, and the one place each per-version difference of
// encoding is decided (docs/protocol.md#version-table). The same table as
// router/protocol/versions.py; the codec asks these predicates, never a number.

export const AUTH_COMMANDS = 7; // hello keys; X25519 authenticators
export const SENDER_AUTH_KEY = 9; // SKEY; NEW and IDS carry sndSecure
export const DELETED_EVENT = 10; // DELD
export const ENCRYPTED_BLOCK = 11; // block encryption
export const BLOCKED_ENTITY = 12; // ERR BLOCKED
export const PROXY_SERVER_HANDSHAKE = 14; // proxyServer in the client hello
export const SHORT_LINKS = 15; // NEW queue data, IDS queue mode and link id, LSET LKEY LDEL LGET LNK
export const SERVICE_CERTS = 16; // service signature field, clientService, SOK
export const NEW_NTF_CREDS = 17; // NEW with notifier credentials
export const CLIENT_NOTICES = 18; // ERR BLOCKED with its notice
export const WEB_CLIENT = 19; // the web identity proof

export const CODEC_VERSION_MIN = SENDER_AUTH_KEY;
export const CODEC_VERSION_MAX = WEB_CLIENT;
// The codec's default where a caller gives no version.
export const LEGACY_VERSION = DELETED_EVENT;

export const hasHelloKeys = (v) => v >= AUTH_COMMANDS;
export const hasSenderAuthKey = (v) => v >= SENDER_AUTH_KEY && v < SHORT_LINKS;
export const hasDeletedEvent = (v) => v >= DELETED_EVENT;
export const hasBlockEncryption = (v) => v >= ENCRYPTED_BLOCK;
export const hasBlockedError = (v) => v >= BLOCKED_ENTITY;
export const hasProxyServerFlag = (v) => v >= PROXY_SERVER_HANDSHAKE;
export const hasShortLinks = (v) => v >= SHORT_LINKS;
export const hasServiceField = (v) => v >= SERVICE_CERTS;
export const hasNewNotifier = (v) => v >= NEW_NTF_CREDS;
export const hasClientNotices = (v) => v >= CLIENT_NOTICES;
export const hasWebIdentityProof = (v) => v >= WEB_CLIENT;

/** The longest SEND body at version `v` (docs/protocol.md#limits). */
export const maxMessageLength = (v) => (hasBlockEncryption(v) ? 16048 : 16064);
