"""The gateway's answers to HTTP requests, without a socket: URL layout, static
files kept inside the web root, the generated client configuration, the Origin
allow-list in front of the SMP upgrade and the health page."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from router.gateway.origins import HostPolicy, OriginError, OriginPolicy, normalize_origin
from router.gateway.site import (
    ACCEPT_WEBSOCKET,
    GatewaySite,
    HttpRequest,
    HttpResponse,
    SiteConfig,
    client_config,
    static_file,
)

KEY_HASH = bytes(range(32))
KEY_TEXT = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
HOST = "127.0.0.1:8080"
OWN = f"http://{HOST}"
FRIEND = "https://chat.example"


@pytest.fixture
def web_root(tmp_path: Path) -> Path:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "index.html").write_text("<title>demo</title>")
    (tmp_path / "demo" / "app.js").write_text("export {};")
    (tmp_path / "demo" / ".secret").write_text("hidden")
    (tmp_path / "smp").mkdir()
    (tmp_path / "smp" / "index.js").write_text("export const x = 1;")
    (tmp_path / "smp" / "index.js.gz").write_bytes(gzip.compress(b"export const x = 1;"))
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "app-AbC123.js").write_text("console.log(1);")
    (tmp_path / "package.json").write_text("{}")
    return tmp_path


def site_for(web_root: Path, *, secure: bool = False, allow=(FRIEND,)) -> GatewaySite:
    config = SiteConfig(web_root, KEY_HASH, OriginPolicy(allow, secure=secure), secure)
    return GatewaySite(config, lambda: {"connections": 3})


def request(target: str, *, origin: str | None = None, upgrade: bool = False,
            method: str = "GET", host: str | None = HOST,
            extra: tuple[tuple[str, str], ...] = ()) -> HttpRequest:
    headers = list(extra)
    if host is not None:
        headers.append(("host", host))
    if origin is not None:
        headers.append(("origin", origin))
    return HttpRequest(method, target, tuple(headers), "127.0.0.1:5000", upgrade)


def header(response: HttpResponse, name: str) -> str | None:
    return dict(response.headers).get(name)


async def test_the_root_redirects_to_the_demo_and_the_demo_serves_its_files(web_root):
    site = site_for(web_root)
    root = await site(request("/"))
    assert (root.status, header(root, "location")) == (302, "/demo/")
    assert header(await site(request("/demo")), "location") == "/demo/"
    index = await site(request("/demo/"))
    assert (index.status, index.body) == (200, b"<title>demo</title>")
    assert index.content_type == "text/html; charset=utf-8"
    script = await site(request("/demo/app.js?v=2"))
    assert script.content_type.startswith("text/javascript") and script.body == b"export {};"
    assert header(script, "x-content-type-options") == "nosniff"


async def test_the_client_module_and_the_assets_come_from_their_directories(web_root):
    site = site_for(web_root)
    assert (await site(request("/smp/index.js"))).body == b"export const x = 1;"
    asset = await site(request("/assets/app-AbC123.js"))
    assert (asset.status, asset.body) == (200, b"console.log(1);")
    assert (await site(request("/vendor/tweetnacl/nacl-fast.js"))).status == 404


async def test_gzip_goes_to_browsers_that_accept_it_and_only_to_them(web_root):
    site = site_for(web_root)
    plain = await site(request("/smp/index.js"))
    assert header(plain, "content-encoding") is None and plain.body == b"export const x = 1;"
    for accept in ("gzip, deflate, br", "br;q=1.0, gzip;q=0.8", "*"):
        packed = await site(request("/smp/index.js", extra=(("accept-encoding", accept),)))
        assert header(packed, "content-encoding") == "gzip", accept
        assert gzip.decompress(packed.body) == b"export const x = 1;"
        assert "accept-encoding" in header(packed, "vary")
    for refused in ("gzip;q=0", "br", "identity"):
        answer = await site(request("/smp/index.js", extra=(("accept-encoding", refused),)))
        assert header(answer, "content-encoding") is None, refused
    # No .gz twin: the file as it is.
    asset = await site(request("/assets/app-AbC123.js", extra=(("accept-encoding", "gzip"),)))
    assert header(asset, "content-encoding") is None and asset.body == b"console.log(1);"
    # The twins themselves are not addressable.
    assert (await site(request("/smp/index.js.gz"))).status == 404


async def test_assets_are_cached_for_good_and_the_rest_is_revalidated_by_etag(web_root):
    site = site_for(web_root)
    asset = await site(request("/assets/app-AbC123.js"))
    assert header(asset, "cache-control") == "public, max-age=31536000, immutable"
    first = await site(request("/smp/index.js", extra=(("accept-encoding", "gzip"),)))
    assert header(first, "cache-control") == "no-cache"
    etag = header(first, "etag")
    assert etag and etag.startswith('"') and etag.endswith('-gzip"')
    again = await site(request("/smp/index.js", extra=(
        ("accept-encoding", "gzip"), ("if-none-match", etag))))
    assert (again.status, again.body, header(again, "etag")) == (304, b"", etag)
    # The plain form is another entity: its own tag, so no 304 for the gzip one's.
    plain = await site(request("/smp/index.js", extra=(("if-none-match", etag),)))
    assert plain.status == 200 and header(plain, "etag") != etag
    other_tags = f'"x", {header(plain, "etag")}'
    page = await site(request("/demo/", extra=(("if-none-match", other_tags),)))
    assert page.status == 200


@pytest.mark.parametrize("target", [
    "/demo/../package.json", "/demo/%2e%2e/package.json", "/demo/.secret", "/smp/../demo/app.js",
    "/assets/../../package.json", "/demo//index.html", "/demo/missing.js",
    "/package.json", "/node_modules/tweetnacl/nacl-fast.js", "/smp/", "/demo/a%5C..%5Cb",
])
async def test_nothing_outside_the_served_directories_is_reachable(web_root, target):
    response = await site_for(web_root)(request(target))
    assert response.status == 404, target


def test_static_file_refuses_every_unusual_segment(tmp_path):
    assert static_file(tmp_path, "a/b.js") == tmp_path / "a" / "b.js"
    assert static_file(tmp_path, "a/") == tmp_path / "a" / "index.html"
    for bad in ("..", "a/../b", ".git/config", "a//b", "a\\b", "a\0b"):
        assert static_file(tmp_path, bad) is None


async def test_the_config_names_the_smp_websocket_for_the_host_the_page_came_from(web_root):
    response = await site_for(web_root)(request("/demo/config.json", host="chat.example:9000"))
    assert response.content_type == "application/json"
    assert header(response, "cache-control") == "no-store"
    assert json.loads(response.body) == {
        "smpUrl": "ws://chat.example:9000/smp",
        "keyHash": KEY_TEXT,
        "address": f"smp://{KEY_TEXT}@chat.example:9000/smp",
    }


async def test_a_site_mounted_at_a_path_names_its_websocket_and_redirects_under_it(web_root):
    site = site_for(web_root)
    config = await site(request("/demo/config.json", host="app.example"), mount_path="/chat")
    assert json.loads(config.body) == {
        "smpUrl": "ws://app.example/chat/smp",
        "keyHash": KEY_TEXT,
        "address": f"smp://{KEY_TEXT}@app.example:80/chat/smp",
    }
    root = await site(request("/"), mount_path="/chat")
    assert (root.status, header(root, "location")) == (302, "/chat/demo/")
    assert header(await site(request("/demo"), mount_path="/chat"), "location") == "/chat/demo/"


def test_the_config_over_tls_uses_wss_and_the_default_port():
    config = SiteConfig(Path("."), KEY_HASH, OriginPolicy(secure=True), secure=True)
    assert client_config(config, "chat.example") == {
        "smpUrl": "wss://chat.example/smp",
        "keyHash": KEY_TEXT,
        "address": f"smp://{KEY_TEXT}@chat.example:443/smp",
    }
    ipv6 = client_config(config, "[::1]:8443")
    assert ipv6["address"].endswith("@[::1]:8443/smp")
    assert client_config(config, None)["smpUrl"] == "wss://127.0.0.1:8080/smp"
    for odd in ("evil.example/x?", "a b", "h:99999", "user@h", ""):
        assert client_config(config, odd)["smpUrl"] == "wss://127.0.0.1:8080/smp", odd


@pytest.mark.parametrize(("origin", "accepted"), [
    (None, True),  # not a web page: e.g. the Python client
    (OWN, True),
    (FRIEND, True),
    ("HTTPS://Chat.Example:443", True),
    ("http://chat.example", False),  # another scheme is another origin
    ("http://127.0.0.1:8081", False),  # another port too
    ("https://evil.example", False),
    ("null", False),
    ("garbage", False),
])
async def test_the_smp_upgrade_is_refused_for_origins_not_allowed(web_root, origin, accepted):
    response = await site_for(web_root)(request("/smp", origin=origin, upgrade=True))
    if accepted:
        assert response is ACCEPT_WEBSOCKET
    else:
        assert isinstance(response, HttpResponse) and response.status == 403


async def test_only_the_smp_path_upgrades_and_it_only_upgrades(web_root):
    site = site_for(web_root)
    assert (await site(request("/other", upgrade=True))).status == 404
    plain = await site(request("/smp"))
    assert (plain.status, header(plain, "upgrade")) == (426, "websocket")
    assert (await site(request("/demo/", method="POST"))).status == 405


async def test_the_health_page_is_for_the_gateway_own_pages_and_never_shared(web_root):
    site = site_for(web_root)
    health = await site(request("/health"))
    assert json.loads(health.body) == {"status": "ok", "statistics": {"connections": 3}}
    assert header(health, "access-control-allow-origin") is None
    same = await site(request("/health", origin=OWN))
    assert same.status == 200 and header(same, "access-control-allow-origin") is None
    assert (await site(request("/health", origin="https://evil.example"))).status == 403


async def test_client_modules_carry_cors_only_for_allowed_origins(web_root):
    site = site_for(web_root)
    allowed = await site(request("/smp/index.js", origin=FRIEND))
    assert header(allowed, "access-control-allow-origin") == FRIEND
    assert header(allowed, "vary") == "accept-encoding, origin"
    foreign = await site(request("/smp/index.js", origin="https://evil.example"))
    assert foreign.status == 200 and header(foreign, "access-control-allow-origin") is None
    demo = await site(request("/demo/app.js", origin=FRIEND))
    assert header(demo, "access-control-allow-origin") is None
    config = await site(request("/demo/config.json", origin=FRIEND))
    assert header(config, "access-control-allow-origin") == FRIEND
    config = await site(request("/demo/config.json", origin="https://evil.example"))
    assert header(config, "access-control-allow-origin") is None


def test_origins_are_normalized_as_browsers_write_them():
    assert normalize_origin("HTTP://LOCALHOST:80/") == "http://localhost"
    assert normalize_origin("https://[::1]:8443") == "https://[::1]:8443"
    for bad in ("ftp://x", "https://x/path", "x.example", "https://", "http://h:99999"):
        with pytest.raises(OriginError):
            normalize_origin(bad)


def test_the_host_policy_answers_its_names_and_ip_addresses_only():
    policy = HostPolicy(["chat.example", "Localhost"])
    for allowed in (None, "chat.example", "CHAT.example:8080", "chat.example.", "localhost:1",
                    "127.0.0.1:8080", "[::1]:443", "10.1.2.3"):
        assert policy.allows(allowed), allowed
    for refused in ("evil.example", "chat.example.evil.example", "", "chat.example:99999",
                    "a b", "127.0.0.1.nip.io"):
        assert not policy.allows(refused), refused


async def test_a_host_not_on_the_list_gets_421_and_health_only_ok(web_root):
    config = SiteConfig(web_root, KEY_HASH, OriginPolicy((FRIEND,)),
                        hosts=HostPolicy(["chat.example"]))
    site = GatewaySite(config, lambda: {"connections": 3})
    own = await site(request("/health", host="chat.example"))
    assert json.loads(own.body) == {"status": "ok", "statistics": {"connections": 3}}
    other = await site(request("/health", host="rebind.example"))
    assert other.status == 200 and json.loads(other.body) == {"status": "ok"}
    for target, upgrade in (("/smp", True), ("/demo/config.json", False), ("/demo/", False)):
        refused = await site(request(target, host="rebind.example:8080",
                                     origin="http://rebind.example:8080", upgrade=upgrade))
        assert isinstance(refused, HttpResponse) and refused.status == 421, target
        assert header(refused, "access-control-allow-origin") is None
