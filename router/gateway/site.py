"""What the gateway answers on each HTTP request (the listener's request hook).

URL layout (one port); the files are the web build's (web/dist/site, made by
`npm ci --prefix web`, see web/build.mjs):

    /                               302 to /demo/
    /demo/                          the demo chat page
    /demo/config.json               generated: {"smpUrl", "keyHash", "address"}
    /assets/<name>-<hash>.<ext>     the demo's script and style, named by their content
    /smp/index.js                   the JavaScript SMP client, one ES module
    /smp                            the SMP WebSocket (upgrade only), handed to the router
    /health                         {"status": "ok", "statistics": {...}}

Files go out gzip-compressed to browsers that accept it (the build writes a
`.gz` twin of each). Assets never change under their name, so they are
cacheable for good (`immutable`); the page and /smp/index.js keep their
names across builds, so browsers revalidate them (`no-cache`) with their ETag
and get 304 while they are the same.


Only requests whose `Host` names the gateway are answered (origins.py,
`HostPolicy`: a DNS-rebinding name gets 421); `/health` answers such a request
`{"status": "ok"}` alone, so a load balancer that knows the gateway by another
name can still check it, and never reads the router's statistics.
The upgrade on `/smp` and the health page are refused with 403 for a page of
a foreign origin (origins.py). The health page never carries CORS headers,
so no other site's page can read the router's statistics. The client module
(`/smp/index.js`) and `/demo/config.json` carry
`Access-Control-Allow-Origin` for the allowed origins only, so a page served
elsewhere can import them when its origin is on the allow-list.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import trio

from router.server.edge.http import ACCEPT_WEBSOCKET, HttpRequest, HttpResponse
from router.server.edge.identity import host_port

from .origins import HostPolicy, OriginPolicy

SMP_PATH = "/smp"
DEMO_PREFIX = "/demo/"
CLIENT_PREFIX = "/smp/"
ASSETS_PREFIX = "/assets/"
CONFIG_PATH = "/demo/config.json"
HEALTH_PATH = "/health"
MAX_FILE_BYTES = 4 * 1024 * 1024  # the largest static file served; the client's are far smaller

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
    ".webmanifest": "application/manifest+json",
}
JSON = "application/json"
# Every answer: no MIME sniffing, and no Referer (invitation links carry keys in
# their fragment; browsers do not send fragments, this makes sure of the rest).
COMMON_HEADERS = (("x-content-type-options", "nosniff"), ("referrer-policy", "no-referrer"))
NO_STORE = ("cache-control", "no-store")
REVALIDATE = ("cache-control", "no-cache")
FOREVER = ("cache-control", "public, max-age=31536000, immutable")


@dataclass(frozen=True, slots=True)
class SiteConfig:
    site_root: Path  # the web build's site: demo/, smp/, assets/ (web/dist/site)
    key_hash: bytes  # the embedded router's
    origins: OriginPolicy
    secure: bool = False  # served over TLS: https:// pages, wss:// SMP
    fallback_host: str = "127.0.0.1:8080"  # host:port for a request without Host
    hosts: HostPolicy | None = None  # the names answered (origins.py); None: any name


# A Host header worth repeating in config.json: a name or IPv4 address, or an
# IPv6 literal in brackets, and an optional port; anything else gets the fallback.
_AUTHORITY = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


def key_hash_text(key_hash: bytes) -> str:
    """base64url with '=' padding, as in an smp:// address."""
    return base64.urlsafe_b64encode(key_hash).decode("ascii")


def client_config(
    config: SiteConfig, host_header: str | None, mount_path: str = ""
) -> dict[str, str]:
    """What /demo/config.json says: where the page's SMP WebSocket is, for the
    host name the browser used to load the page (and, for a site mounted at a
    path of a larger application, under that path)."""
    authority = host_header if host_header and _AUTHORITY.fullmatch(host_header) else None
    authority = authority or config.fallback_host
    default_port = 443 if config.secure else 80
    parts = urlsplit(f"//{authority}")
    try:
        host, port = parts.hostname or "127.0.0.1", parts.port or default_port
    except ValueError:  # a port out of range
        authority = config.fallback_host
        parts = urlsplit(f"//{authority}")
        host, port = parts.hostname or "127.0.0.1", parts.port or default_port
    scheme = "wss" if config.secure else "ws"
    key_hash = key_hash_text(config.key_hash)
    return {
        "smpUrl": f"{scheme}://{authority}{mount_path}{SMP_PATH}",
        "keyHash": key_hash,
        "address": f"smp://{key_hash}@{host_port(host, port)}{mount_path}{SMP_PATH}",
    }


def _text(status: int, text: str, *headers: tuple[str, str]) -> HttpResponse:
    return HttpResponse(status, (text + "\n").encode(), headers=(*COMMON_HEADERS, *headers))


def _json(document: Mapping[str, object]) -> HttpResponse:
    body = json.dumps(document, separators=(",", ":")).encode()
    return HttpResponse(200, body, JSON, (*COMMON_HEADERS, NO_STORE))


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding header takes gzip (named, or `*`, and not with q=0)."""
    for item in (accept_encoding or "").split(","):
        name, _, params = item.partition(";")
        if name.strip().lower() not in ("gzip", "*"):
            continue
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        return quality > 0
    return False


def entity_tag(body: bytes, encoding: str | None) -> str:
    """A strong ETag of the bytes sent: the compressed and the plain form differ."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()[:12]).decode("ascii")
    return f'"{digest}{"-" + encoding if encoding else ""}"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def _with_headers(response: HttpResponse, extra: list[tuple[str, str]]) -> HttpResponse:
    return HttpResponse(response.status, response.body, response.content_type,
                        (*response.headers, *extra))


def _redirect(location: str, status: int = 302) -> HttpResponse:
    return _text(status, f"see {location}", ("location", location))


def static_file(base: Path, relative: str) -> Path | None:
    """`base/relative` if every segment is an ordinary name; None for '..', '.',
    hidden names, empty segments (other than a trailing one: index.html) and
    backslashes or NULs, so no request reaches outside `base`."""
    segments = relative.split("/")
    if segments[-1] == "":
        segments[-1] = "index.html"
    for segment in segments:
        if not segment or segment.startswith(".") or "\\" in segment or "\0" in segment:
            return None
    return base.joinpath(*segments)


class GatewaySite:
    """The request hook: static files, the generated client configuration, the
    health page, and the Origin check in front of the SMP upgrade."""

    def __init__(self, config: SiteConfig, statistics: Callable[[], Mapping[str, object]]):
        self.config = config
        self._statistics = statistics
        self._roots = {
            DEMO_PREFIX: config.site_root / "demo",
            CLIENT_PREFIX: config.site_root / "smp",
            ASSETS_PREFIX: config.site_root / "assets",
        }

    def _allowed(self, request: HttpRequest) -> bool:
        return self.config.origins.allows(request.header("origin"), request.header("host"))

    async def __call__(self, request: HttpRequest, mount_path: str = "") -> HttpResponse | object:
        """The answer to `request`, whose target is below `mount_path` (the path
        a larger application mounted the site at, router.gateway.asgi; "" on the
        gateway's own listener)."""
        path = unquote(urlsplit(request.target).path)
        hosts = self.config.hosts
        if hosts is not None and not hosts.allows(request.header("host")):
            if path == HEALTH_PATH and request.method == "GET" and not request.is_websocket_upgrade:
                return _json({"status": "ok"})
            return _text(421, "this gateway does not answer to that host name")
        if path == SMP_PATH:
            return self._smp(request)
        if request.is_websocket_upgrade:
            return _text(404, f"no WebSocket here; the SMP WebSocket is {SMP_PATH}")
        if request.method != "GET":
            return _text(405, "only GET", ("allow", "GET"))
        if path == "/":
            return _redirect(mount_path + DEMO_PREFIX)
        if path == "/demo":
            return _redirect(mount_path + DEMO_PREFIX, 301)
        if path == HEALTH_PATH:
            if not self._allowed(request):
                return _text(403, "origin not allowed")
            return _json({"status": "ok", "statistics": dict(self._statistics())})
        if path == CONFIG_PATH:
            config = _json(client_config(self.config, request.header("host"), mount_path))
            return _with_headers(config, [*self._cors(request), ("vary", "origin")])
        for prefix, base in self._roots.items():
            if path.startswith(prefix):
                return await self._file(request, base, path[len(prefix):], prefix)
        return _text(404, "not found")

    def _smp(self, request: HttpRequest) -> HttpResponse | object:
        if not request.is_websocket_upgrade:
            return _text(426, "the SMP WebSocket: upgrade required", ("upgrade", "websocket"))
        if not self._allowed(request):
            return _text(403, "origin not allowed")
        return ACCEPT_WEBSOCKET

    async def _file(
        self, request: HttpRequest, base: Path, relative: str, prefix: str
    ) -> HttpResponse:
        file = static_file(base, relative)
        if file is None or file.suffix == ".gz":
            return _text(404, "not found")
        body = await _read_small_file(file)
        if body is None:
            return _text(404, "not found")
        content_type = CONTENT_TYPES.get(file.suffix, "application/octet-stream")
        headers = [*COMMON_HEADERS, FOREVER if prefix == ASSETS_PREFIX else REVALIDATE]
        vary = ["accept-encoding"]
        if prefix == CLIENT_PREFIX:  # pages of allowed origins elsewhere may import the client
            headers += self._cors(request)
            vary.append("origin")
        headers.append(("vary", ", ".join(vary)))
        encoding = None
        if accepts_gzip(request.header("accept-encoding")):
            compressed = await _read_small_file(file.with_name(file.name + ".gz"))
            if compressed is not None:
                body, encoding = compressed, "gzip"
                headers.append(("content-encoding", "gzip"))
        etag = entity_tag(body, encoding)
        headers.append(("etag", etag))
        if etag_matches(request.header("if-none-match"), etag):
            return HttpResponse(304, b"", content_type, tuple(headers))
        return HttpResponse(200, body, content_type, tuple(headers))

    def _cors(self, request: HttpRequest) -> list[tuple[str, str]]:
        """Module scripts are fetched with CORS: a page of an allowed origin elsewhere
        may import the client; the answer varies with Origin."""
        origin = request.header("origin")
        if origin is None or not self._allowed(request):
            return []
        return [("access-control-allow-origin", origin)]


async def _read_small_file(file: Path) -> bytes | None:
    """The file's bytes; None if it is missing, not a regular file, or too large."""
    path = trio.Path(file)
    try:
        info = await path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
            return None
        return await path.read_bytes()
    except OSError:
        return None

