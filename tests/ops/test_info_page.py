"""The server information page: HTML and JSON, for a plain HTTP GET on the router's port."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from ops_helpers import http_get

from router.server import RouterConfig
from router.server.edge.http import HttpRequest
from router.server.ops.info import (
    information_page,
    page_facts,
    render_html,
    router_version,
    wants_json,
)

SMP_ROUTER = Path(sys.executable).with_name("smp-router")
INFO = (("operator", "Example <Ops>"), ("website", "https://smp.example.org"),
        ("admin_email", "ops@example.org"))


def request(target: str, accept: str | None = None, method: str = "GET") -> HttpRequest:
    headers = (("accept", accept),) if accept else ()
    return HttpRequest(method, target, headers, "127.0.0.1:1", False)


@pytest.mark.parametrize("target, accept, expected", [
    ("/", None, False),
    ("/", "text/html,application/xhtml+xml,*/*;q=0.8", False),
    ("/", "application/json", True),
    ("/?format=json", None, True),
    ("/?format=json", "text/html", True),
    ("/?format=html", "application/json", False),
])
def test_json_is_chosen_by_query_or_accept_header(target, accept, expected):
    assert wants_json(target, accept) is expected


def test_the_facts_say_how_the_router_is_run():
    config = RouterConfig(store="memory", password=b"pw", message_ttl=7 * 86400, quota=50,
                          information=INFO)
    facts = page_facts(config, "smp://k@h:1")
    assert facts["version"] == router_version() != "unknown"
    assert facts["persistence"] == "memory: nothing is kept when the router stops"
    assert (facts["messageExpirationDays"], facts["queueQuota"]) == (7, 50)
    assert facts["newQueuesAllowed"] is True and facts["newQueuesNeedPassword"] is True
    assert facts["information"] == dict(INFO)
    closed = page_facts(RouterConfig(allow_new_queues=False), "a")
    assert closed["newQueuesAllowed"] is False and closed["newQueuesNeedPassword"] is False


def test_html_escapes_operator_text_and_links_only_web_urls():
    page = render_html(page_facts(RouterConfig(information=INFO + (
        ("usage_conditions", "javascript:alert(1)"),)), "smp://k@h:1")).decode()
    assert "Example &lt;Ops&gt;" in page and "<Ops>" not in page
    assert '<a href="https://smp.example.org">' in page
    assert 'href="javascript' not in page


def test_the_page_function_answers_html_json_404_and_405():
    page = information_page(RouterConfig(information=INFO), "smp://k@h:1")
    html = page(request("/"))
    assert html.status == 200 and html.content_type.startswith("text/html")
    as_json = page(request("/?format=json"))
    assert as_json.content_type == "application/json"
    assert json.loads(as_json.body)["information"]["operator"] == "Example <Ops>"
    assert page(request("/", "application/json")).body == as_json.body
    assert page(request("/other")).status == 404
    assert page(request("/", method="POST")).status == 405


async def test_a_plain_get_on_the_router_port_gets_the_page(start_router):
    info = await start_router(information=INFO, password=b"pw")
    info.router.info_page = information_page(info.router.config, info.address)
    status, headers, body = await http_get(info.port, "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "allowed with a password" in body.decode() and info.address in body.decode()
    status, headers, body = await http_get(info.port, "/", {"Accept": "application/json"})
    facts = json.loads(body)
    assert status == 200 and facts["address"] == info.address
    assert facts["newQueuesNeedPassword"] is True
    assert json.loads((await http_get(info.port, "/?format=json"))[2]) == facts
    assert (await http_get(info.port, "/nothing"))[0] == 404


async def test_smp_router_serve_answers_the_page(tmp_path):
    config = tmp_path / "r.ini"
    config.write_text("[TRANSPORT]\nport = 0\n[STORE_LOG]\nstore = memory\n"
                      f"data_dir = {tmp_path / 'd'}\n[INFORMATION]\noperator = Test Operator\n")
    command = [str(SMP_ROUTER)] if SMP_ROUTER.exists() else [sys.executable, "-m",
                                                              "router.server"]
    process = await trio.lowlevel.open_process(
        [*command, "serve", "--workers", "1", "--config", str(config), "--log-level", "error"],
        stdout=subprocess.PIPE,
    )
    try:
        with trio.fail_after(30):
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive_some(1)
            port = int(line.split(b"ws://127.0.0.1:")[1].split()[0])
            status, _, body = await http_get(port, "/?format=json")
        facts = json.loads(body)
        assert status == 200 and facts["information"] == {"operator": "Test Operator"}
        assert facts["persistence"] == "memory, saved to disk when the router stops"
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()
