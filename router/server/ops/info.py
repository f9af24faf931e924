"""The server information page: what a plain HTTP GET of `/` on the router's port gets.

It tells a prospective user what this router is and how it is run: its
version and address, how queues and messages are kept, how long messages
wait, whether anyone may create queues and whether a password is needed,
and the operator's `[INFORMATION]` fields from the configuration file.

HTML by default; JSON (the same facts, `application/json`) for `/?format=json`
or when the request's `Accept` header names `application/json` and not
`text/html`. `/?format=html` forces HTML. Building the page is pure
(`page_facts`, `render_html`, `render_json`); `information_page` wraps it as
the `(HttpRequest) -> HttpResponse` function the router's listener calls.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from ..settings.config import RouterConfig

if TYPE_CHECKING:
    from ..edge.http import HttpRequest, HttpResponse

JSON_TYPE = "application/json"
HTML_TYPE = "text/html; charset=utf-8"
_LINK_KEYS = ("source_code", "usage_conditions", "condition_amendments", "website")


def router_version() -> str:
    try:
        return metadata.version("smp-router")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def persistence(config: RouterConfig) -> str:
    if config.store == "memory":
        if config.data_dir is None:
            return "memory: nothing is kept when the router stops"
        return "memory, saved to disk when the router stops"
    return f"{config.store} store on disk, fsync {config.fsync}"


def page_facts(config: RouterConfig, address: str) -> dict[str, object]:
    """What the page shows, as JSON-ready values."""
    return {
        "server": "smp-router",
        "version": router_version(),
        "address": address,
        "persistence": persistence(config),
        "messageExpirationDays": round(config.message_ttl / 86400, 2),
        "queueQuota": config.quota,
        "newQueuesAllowed": config.allow_new_queues,
        "newQueuesNeedPassword": config.allow_new_queues and config.password is not None,
        "information": dict(config.information),
    }


def render_json(facts: dict[str, object]) -> bytes:
    return json.dumps(facts, indent=2).encode() + b"\n"


def render_html(facts: dict[str, object]) -> bytes:
    information = facts["information"]
    assert isinstance(information, dict)
    rows = [
        ("Server", f"{facts['server']} {facts['version']}"),
        ("Address", facts["address"]),
        ("Persistence", facts["persistence"]),
        ("Undelivered messages are kept", f"{facts['messageExpirationDays']} days"),
        ("Messages per queue", facts["queueQuota"]),
        ("New queues", _new_queues(facts)),
    ]
    body = "".join(_row(name, value) for name, value in rows)
    info_rows = "".join(
        _row(key.replace("_", " ").capitalize(), value, link=key in _LINK_KEYS)
        for key, value in information.items()
    )
    page = (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<title>SMP router</title></head><body>\n<h1>SMP router</h1>\n"
        f"<table>\n{body}</table>\n"
        + (f"<h2>Operator</h2>\n<table>\n{info_rows}</table>\n" if info_rows else "")
        + "<p><a href=\"?format=json\">This page as JSON</a></p>\n</body></html>\n"
    )
    return page.encode()


def _new_queues(facts: dict[str, object]) -> str:
    if not facts["newQueuesAllowed"]:
        return "not allowed"
    return "allowed with a password" if facts["newQueuesNeedPassword"] else "allowed"


def _row(name: str, value: object, *, link: bool = False) -> str:
    text = html.escape(str(value))
    if link and str(value).startswith(("https://", "http://")):
        text = f"<a href=\"{text}\">{text}</a>"
    return f"<tr><th>{html.escape(name)}</th><td>{text}</td></tr>\n"


def wants_json(target: str, accept: str | None) -> bool:
    query = parse_qs(urlsplit(target).query)
    requested = query.get("format", [""])[-1].lower()
    if requested in ("json", "html"):
        return requested == "json"
    accept = (accept or "").lower()
    return JSON_TYPE in accept and "text/html" not in accept


def information_page(
    config: RouterConfig, address: str
) -> Callable[[HttpRequest], HttpResponse]:
    """The page as the listener's `(HttpRequest) -> HttpResponse`; rendered once, since
    nothing on it changes while the router runs."""
    from ..edge.http import HttpResponse

    facts = page_facts(config, address)
    as_json = HttpResponse(200, render_json(facts), JSON_TYPE)
    as_html = HttpResponse(200, render_html(facts), HTML_TYPE)
    not_found = HttpResponse(404, b"not found\n")
    not_allowed = HttpResponse(405, b"only GET\n", headers=(("allow", "GET, HEAD"),))

    def answer(request: HttpRequest) -> HttpResponse:
        if urlsplit(request.target).path != "/":
            return not_found
        if request.method not in ("GET", "HEAD"):
            return not_allowed
        return as_json if wants_json(request.target, request.header("accept")) else as_html

    return answer
