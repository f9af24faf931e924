"""Router addresses: ``smp://<base64url keyHash>@host:port[/path]``.

An ``smp://`` address means SMP over TLS (docs/protocol.md#native-tls), as in
SimpleX. A path (this project's addition to the address form) names the URL
path of a router embedded behind a path, which is reached by WebSocket, e.g.
``smp://<keyHash>@example.net:443/smp`` for a gateway's ``/smp``; without
one the path is ``/``.

A router is also reachable by a plain WebSocket URL (``ws://host:port/path`` or
``wss://...``) with the 32-byte key hash given separately or as the URL's user
part (``wss://<base64url keyHash>@host:port/path``, one string that names the
router completely). All forms become one `RouterAddress`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from urllib.parse import urlsplit

KEY_HASH_SIZE = 32
DEFAULT_SMP_PORT = 5223  # the reference router's port; our CLI uses an explicit one


@dataclass(frozen=True, slots=True)
class RouterAddress:
    host: str
    port: int
    key_hash: bytes
    secure: bool = False  # TLS: native, or wss:// rather than ws://
    path: str = "/"
    native: bool = False  # SMP straight over TLS (ALPN smp/1), not WebSocket

    @property
    def address(self) -> str:
        """The ``smp://`` form of this address (with its path, unless it is ``/``)."""
        return format_address(self.key_hash, self.host, self.port, self.path)


def format_address(key_hash: bytes, host: str, port: int, path: str = "/") -> str:
    """``smp://<base64url(keyHash) with '=' padding>@host:port[/path]``."""
    encoded = base64.urlsafe_b64encode(key_hash).decode("ascii")
    shown = f"[{host}]" if ":" in host else host
    suffix = "" if path in ("", "/") else path
    return f"smp://{encoded}@{shown}:{port}{suffix}"


def parse_address(
    text: str, key_hash: bytes | None = None, *, secure: bool = False
) -> RouterAddress:
    """A `RouterAddress` from an ``smp://`` address or a ``ws(s)://`` URL.

    `key_hash` is required with a WebSocket URL; with an ``smp://`` address it
    may be given too, and then it must agree. An ``smp://`` address without a
    path is native TLS; with one it is a WebSocket on that path, and `secure`
    asks for wss:// there (a ``wss://`` URL asks for it by itself).
    """
    parts = urlsplit(text)
    if parts.scheme == "smp":
        return _smp_address(parts, key_hash, secure)
    if parts.scheme in ("ws", "wss"):
        return _ws_address(parts, key_hash)
    raise ValueError(f"not an smp:// address or ws:// URL: {text!r}")


def _smp_address(parts, key_hash: bytes | None, secure: bool) -> RouterAddress:
    if not parts.username:
        raise ValueError("smp:// address without a key hash")
    parsed = decode_key_hash(parts.username)
    if key_hash is not None and key_hash != parsed:
        raise ValueError("key_hash does not match the address")
    # An address may list several hosts ("h1,h2"); the first one is used.
    host = (parts.hostname or "").split(",")[0]
    if not host:
        raise ValueError("smp:// address without a host")
    path = _path(parts)
    native = path == "/"
    return RouterAddress(
        host, parts.port or DEFAULT_SMP_PORT, parsed, secure or native, path, native
    )


def _ws_address(parts, key_hash: bytes | None) -> RouterAddress:
    if parts.username:
        in_url = decode_key_hash(parts.username)
        if key_hash is not None and key_hash != in_url:
            raise ValueError("key_hash does not match the one in the URL")
        key_hash = in_url
    if key_hash is None:
        raise ValueError(
            "a ws:// URL needs the router's key hash: pass key_hash, or write it in "
            "the URL as ws://<base64url keyHash>@host:port/path"
        )
    _check_key_hash(key_hash)
    if not parts.hostname:
        raise ValueError("ws:// URL without a host")
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    return RouterAddress(parts.hostname, port, key_hash, secure, _path(parts))


def _path(parts) -> str:
    path = parts.path or "/"
    return f"{path}?{parts.query}" if parts.query else path


def has_key_hash(text: str) -> bool:
    """Whether the address or URL names the router's key hash itself."""
    return bool(urlsplit(text).username)


def decode_key_hash(text: str) -> bytes:
    """base64url with or without '=' padding -> 32 bytes."""
    padded = text + "=" * (-len(text) % 4)
    try:
        raw = base64.urlsafe_b64decode(padded.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError) as e:
        raise ValueError(f"bad key hash {text!r}") from e
    _check_key_hash(raw)
    return raw


def _check_key_hash(key_hash: bytes) -> None:
    if len(key_hash) != KEY_HASH_SIZE:
        raise ValueError(f"key hash must be {KEY_HASH_SIZE} bytes, got {len(key_hash)}")
