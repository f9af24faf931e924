"""Which web pages may use the gateway: the Origin allow-list.

A browser names the page that makes a request in its `Origin` header
(`scheme://host[:port]`, the port left out when it is the scheme's default).
The gateway allows:

- the gateway's own origin, i.e. `http(s)://` + the request's own `Host`
  header: the demo page and any page the gateway serves itself;
- the origins given with `--allow-origin` (repeatable), for pages served
  elsewhere that embed the client module.

Every other origin, and the opaque origin `null` (sandboxed frames, `file:`
pages), is refused with 403 before the WebSocket upgrade, and from the health
page. A request without `Origin` is not made by a web page (browsers send it
on every WebSocket upgrade and every cross-origin request), so it is allowed:
the SMP clients of other programs connect like that.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


class OriginError(ValueError):
    """An --allow-origin value that is not an origin."""


def normalize_origin(text: str) -> str:
    """`scheme://host[:port]` in lower case, the default port left out, as browsers
    write it; OriginError if `text` is not an http(s) origin."""
    parts = urlsplit(text.strip())
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise OriginError(f"not an http(s) origin: {text!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise OriginError(f"an origin is scheme://host[:port], without path: {text!r}")
    try:
        port = parts.port
    except ValueError as e:
        raise OriginError(f"bad port in origin {text!r}") from e
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


class OriginPolicy:
    """The gateway's own origin plus an allow-list (module doc)."""

    __slots__ = ("_allowed", "_scheme")

    def __init__(self, allowed: Iterable[str] = (), *, secure: bool = False) -> None:
        self._allowed = frozenset(normalize_origin(o) for o in allowed)
        self._scheme = "https" if secure else "http"

    @property
    def allowed(self) -> frozenset[str]:
        return self._allowed

    def own_origin(self, host_header: str | None) -> str | None:
        """The origin of pages served by the gateway at this `Host`."""
        if not host_header:
            return None
        try:
            return normalize_origin(f"{self._scheme}://{host_header}")
        except OriginError:
            return None

    def allows(self, origin: str | None, host_header: str | None) -> bool:
        if origin is None:
            return True  # not sent by a web page (module doc)
        try:
            origin = normalize_origin(origin)
        except OriginError:
            return False  # "null" and anything else that is not an origin
        return origin in self._allowed or origin == self.own_origin(host_header)


class HostPolicy:
    """Which names the gateway answers to: the `Host` allow-list.

    A page on a name that an attacker's DNS points at the gateway (DNS
    rebinding) is, to the browser, of the attacker's own origin: its `Origin`
    and `Host` both carry that name, so the Origin check alone lets it through.
    The gateway therefore answers only requests whose `Host` names it: a name
    on this list (by default the names it was started with), or an IP address
    (a literal address is no name to rebind). A request without `Host` is not
    made by a browser and is answered.
    """

    __slots__ = ("_names",)

    def __init__(self, names: Iterable[str]) -> None:
        self._names = frozenset(name.strip().lower().rstrip(".") for name in names if name)

    @property
    def names(self) -> frozenset[str]:
        return self._names

    def allows(self, host_header: str | None) -> bool:
        if host_header is None:
            return True
        parts = urlsplit(f"//{host_header.strip()}")
        try:
            parts.port  # noqa: B018 - a bad port makes the header unusable
        except ValueError:
            return False
        name = (parts.hostname or "").rstrip(".")
        if not name:
            return False
        return name in self._names or _is_ip_literal(name)


def _is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
