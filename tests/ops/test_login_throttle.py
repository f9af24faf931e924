"""Wrong control-port passwords on their own: the delay grows with each one, the
address is locked out after a few (the right password too) and forgiven later, and
refusals are logged at once and then at most once per interval."""

from __future__ import annotations

import logging

import trio

from router.server.ops.login_throttle import LoginThrottle, RateLimitedLog


async def test_the_delay_grows_then_the_address_is_locked_out_and_later_forgiven(
    autojump_clock,
):
    throttle = LoginThrottle(delay=0.5, lockout_after=3, lockout=60.0)
    waited = []
    for _ in range(3):
        started = trio.current_time()
        await throttle.failed("127.0.0.1")
        waited.append(trio.current_time() - started)
    assert waited == [0.5, 1.0, 1.5]
    assert 0 < throttle.locked_for("127.0.0.1") <= 60.0
    assert throttle.locked_for("127.0.0.2") == 0
    await trio.sleep(60.0)
    assert throttle.locked_for("127.0.0.1") == 0
    started = trio.current_time()
    await throttle.failed("127.0.0.1")  # forgiven: the count starts again
    assert trio.current_time() - started == 0.5
    throttle.succeeded("127.0.0.1")
    assert throttle.locked_for("127.0.0.1") == 0


async def test_refusals_are_logged_at_once_then_once_per_interval(autojump_clock, caplog):
    caplog.set_level(logging.WARNING)
    limited = RateLimitedLog(logging.getLogger("test.throttle"), interval=10.0)
    for _ in range(100):
        limited.warning("refused %s", "x")
    await trio.sleep(10.0)
    limited.warning("refused %s", "y")
    assert [r.getMessage() for r in caplog.records] == [
        "refused x", "refused y (99 more like it not logged)"
    ]
