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


# One file, no external assets: the page is served by the router alone, on a port that
# may be the only one a visitor can reach. The palette is the demo's (web/demo/style.css),
# with a dark one chosen by the browser's preference.
_STYLE = """
:root {
  color-scheme: light dark;
  --bg: #f3f5f8; --card: #ffffff; --ink: #1c2430; --muted: #6b7686; --line: #e3e7ee;
  --accent: #2f6fed; --code: #f5f7fa; --ok: #1f9d55; --ok-bg: #e5f6ec; --ok-line: #bfe6cf;
  --warn: #a87300; --warn-bg: #fff5db; --warn-line: #f3dfa8;
  --bad: #c0392b; --bad-bg: #fbe9e7; --bad-line: #f2c4be;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: var(--ink); background: var(--bg);
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0f141b; --card: #171e28; --ink: #e4e9f0; --muted: #93a0b2; --line: #263141;
    --accent: #6d9bff; --code: #111821; --ok: #4cc38a; --ok-bg: #12291e; --ok-line: #1f4a35;
    --warn: #e0b341; --warn-bg: #2b2412; --warn-line: #4d3f16;
    --bad: #f07a6c; --bad-bg: #2e1714; --bad-line: #5a2a24;
  }
}
* { box-sizing: border-box; }
body { margin: 0; }
main { max-width: 720px; margin: 0 auto; padding: 28px 16px 32px; display: flex;
  flex-direction: column; gap: 16px; }
header { display: flex; align-items: center; justify-content: space-between; gap: 12px;
  flex-wrap: wrap; }
h1 { font-size: 22px; margin: 0; letter-spacing: -0.01em; }
h1 small { font-size: 13px; font-weight: 500; color: var(--muted); margin-left: 8px; }
h2 { font-size: 16px; margin: 0 0 10px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 14px;
  padding: 18px; box-shadow: 0 1px 2px rgba(20, 30, 50, 0.04); }
.hint { margin: 8px 0 0; color: var(--muted); font-size: 13px; }
code.address { display: block; font-family: ui-monospace, SFMono-Regular, Menlo, monospace;
  font-size: 13px; padding: 10px 12px; border-radius: 9px; border: 1px solid var(--line);
  background: var(--code); overflow-wrap: anywhere; user-select: all; }
dl { display: grid; grid-template-columns: 220px 1fr; gap: 10px 18px;
  margin: 0; font-size: 14px; }
dt { color: var(--muted); }
dd { margin: 0; overflow-wrap: anywhere; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
.pill { display: inline-flex; align-items: center; gap: 6px; font-size: 13px;
  padding: 4px 10px; border-radius: 999px; border: 1px solid; white-space: nowrap; }
.pill::before { content: ""; width: 7px; height: 7px; border-radius: 50%;
  background: currentColor; }
.pill.open { color: var(--ok); background: var(--ok-bg); border-color: var(--ok-line); }
.pill.password { color: var(--warn); background: var(--warn-bg); border-color: var(--warn-line); }
.pill.closed { color: var(--bad); background: var(--bad-bg); border-color: var(--bad-line); }
footer { color: var(--muted); font-size: 12px; text-align: center; }
@media (max-width: 520px) {
  dl { grid-template-columns: 1fr; gap: 2px; }
  dd { margin-bottom: 8px; }
}
"""

_NEW_QUEUES_PILL = {"allowed": "open", "allowed with a password": "password",
                    "not allowed": "closed"}


def render_html(facts: dict[str, object]) -> bytes:
    information = facts["information"]
    assert isinstance(information, dict)
    new_queues = _new_queues(facts)
    rows = [
        ("Persistence", facts["persistence"]),
        ("Undelivered messages kept", f"{facts['messageExpirationDays']:g} days"),
        ("Messages per queue", facts["queueQuota"]),
        ("New queues", new_queues),
    ]
    info_rows = "".join(
        _row(key.replace("_", " ").capitalize(), value, link=key in _LINK_KEYS)
        for key, value in information.items()
    )
    address = html.escape(str(facts["address"]))
    version = html.escape(f"{facts['server']} {facts['version']}")
    page = (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<meta name=\"color-scheme\" content=\"light dark\">\n"
        f"<title>SMP router</title>\n<style>{_STYLE}</style></head>\n<body><main>\n"
        f"<header><h1>SMP router<small>{version}</small></h1>"
        f"<span class=\"pill {_NEW_QUEUES_PILL[new_queues]}\">New queues "
        f"{html.escape(new_queues)}</span></header>\n"
        "<section class=\"card\"><h2>Address</h2>\n"
        f"<code class=\"address\">{address}</code>\n"
        "<p class=\"hint\">SimpleX Messaging Protocol clients reach this router with this "
        "address; the part before @ is the hash of its identity.</p></section>\n"
        "<section class=\"card\"><h2>How it is run</h2>\n<dl>\n"
        + "".join(_row(name, value) for name, value in rows)
        + "</dl></section>\n"
        + (f"<section class=\"card\"><h2>Operator</h2>\n<dl>\n{info_rows}</dl></section>\n"
           if info_rows else "")
        + f"<footer>{version} &middot; <a href=\"?format=json\">This page as JSON</a>"
        "</footer>\n</main></body></html>\n"
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
    return f"<dt>{html.escape(name)}</dt><dd>{text}</dd>\n"


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
