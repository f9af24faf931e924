"""The control port against guessing and hoarding: wrong passwords are slowed down
per address and locked out after a few, refusals are logged without flooding the
log, and the sessions held at once are capped."""

from __future__ import annotations

import logging

import pytest
import trio
from ops_helpers import open_control

from router.server.router import RouterInfo

ADMIN = "admin-pw"
LOCKOUT_AFTER = 5
GUESSES = 20


@pytest.fixture
async def router(start_router, tmp_path) -> RouterInfo:
    return await start_router(control_port=0, control_admin_password=ADMIN,
                              control_login_delay=0.01, control_lockout_after=LOCKOUT_AFTER,
                              control_max_sessions=4)


async def test_wrong_passwords_lock_the_address_out_even_for_the_right_one(router):
    with trio.fail_after(20):
        control = await open_control(router.control_port)
        answers = [await control.command(f"auth guess{i}") for i in range(GUESSES)]
        right = await control.command(f"auth {ADMIN}")
    refused = sum(a == ["Current role is none"] for a in answers)
    locked = sum(a[0].startswith("error: locked out") for a in answers)
    assert (refused, locked) == (LOCKOUT_AFTER, GUESSES - LOCKOUT_AFTER), answers
    assert right[0].startswith("error: locked out"), right
    # another connection from the same address is locked out too
    other = await open_control(router.control_port)
    assert (await other.command(f"auth {ADMIN}"))[0].startswith("error: locked out")


async def test_refusals_are_logged_without_flooding_the_log(router, caplog):
    caplog.set_level(logging.INFO, logger="router")
    with trio.fail_after(20):
        control = await open_control(router.control_port)
        for _ in range(200):
            assert await control.command("stats") == ["AUTH"]
        for i in range(3):
            await control.command(f"auth guess{i}")
    lines = [r.getMessage() for r in caplog.records if "control port" in r.getMessage()]
    assert any("login refused" in line for line in lines), lines
    assert len(lines) <= 3, lines


async def test_sessions_beyond_the_cap_are_refused_at_once(router):
    held = [await open_control(router.control_port) for _ in range(4)]
    for control in held:  # each one is served
        assert await control.command("auth nothing") == ["Current role is none"]
    refused = 0
    for _ in range(6):
        extra = await open_control(router.control_port)
        with trio.move_on_after(5):
            try:
                line = await extra.read_line()  # the router speaks first, then closes
                refused += line.startswith("error: too many control sessions")
            except EOFError:
                pass
    assert refused == 6
    await held[0].stream.aclose()
    with trio.fail_after(5):
        while True:  # a place is free again once a session ends
            control = await open_control(router.control_port)
            try:
                if await control.command("help", lines=1):
                    break
            except EOFError:
                await trio.sleep(0.05)
