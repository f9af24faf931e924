"""The information page of a real `smp-router serve` in Chromium: styled in light and
dark by the browser's preference, one file that asks nothing of any other origin."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SMP_ROUTER = Path(sys.executable).with_name("smp-router")

OPERATOR = "Example Ltd"


@pytest.fixture(scope="module")
def router_page(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(page URL, smp:// address) of a router with an [INFORMATION] section."""
    directory = tmp_path_factory.mktemp("info")
    config = directory / "r.ini"
    config.write_text("[TRANSPORT]\nport = 0\n[STORE_LOG]\nstore = memory\n"
                      f"[INFORMATION]\noperator = {OPERATOR}\n"
                      "website = https://smp.example.org\n")
    process = subprocess.Popen([str(SMP_ROUTER), "serve", "--workers", "1", "--config", str(config),
                                "--log-level", "error"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        address, url = re.search(r"(smp://\S+) and (ws://127\.0\.0\.1:\d+)", line).groups()
        yield url.replace("ws://", "http://") + "/", address
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize("scheme, background, ink", [
    ("light", "rgb(243, 245, 248)", "rgb(28, 36, 48)"),
    ("dark", "rgb(15, 20, 27)", "rgb(228, 233, 240)"),
])
def test_the_page_follows_the_color_scheme_and_loads_nothing_else(
    browser, router_page, screenshots, scheme, background, ink
):
    url, address = router_page
    page = browser.new_page(color_scheme=scheme, viewport={"width": 900, "height": 760})
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    try:
        page.goto(url)
        body = page.evaluate("() => { const s = getComputedStyle(document.body);"
                             " const r = getComputedStyle(document.documentElement);"
                             " return [r.backgroundColor, s.color, s.fontFamily]; }")
        card = page.evaluate("() => getComputedStyle(document.querySelector('.card'))"
                             ".borderRadius")
        assert body[:2] == [background, ink]
        assert "system-ui" in body[2] and "serif" not in body[2].replace("sans-serif", "")
        assert card == "14px"
        assert page.inner_text("code.address") == address
        assert OPERATOR in page.inner_text("main")
        page.screenshot(path=str(screenshots / f"info-page-{scheme}.png"), full_page=True)
    finally:
        page.close()
    origin = url.rstrip("/")
    assert requested and all(r.startswith(origin) for r in requested), requested
