"""Wrong control-port passwords, per client address: a growing delay, then a lockout.

Each wrong password from an address makes that address's next answer wait
longer (`delay` seconds times the wrong passwords so far, at most
`MAX_DELAY`), and attempts from one address are answered one at a time, so
opening more sessions does not guess faster. After `lockout_after` wrong
passwords every `auth` from the address is refused, the right password
included, until `lockout` seconds have passed; a right password before that
clears the count. Refusals reach the log through a `RateLimitedLog`: one line
at once, then at most one per interval, saying how many were not logged.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import trio

MAX_DELAY = 10.0  # seconds: the longest a wrong password is answered after
LOG_INTERVAL = 10.0  # seconds between two log lines about refusals of one kind


class RateLimitedLog:
    """A warning at once, then at most one per `interval`, counting those left out."""

    __slots__ = ("_log", "_interval", "_last", "_left_out")

    def __init__(self, log: logging.Logger, interval: float = LOG_INTERVAL) -> None:
        self._log = log
        self._interval = interval
        self._last = -math.inf
        self._left_out = 0

    def warning(self, message: str, *args: object) -> None:
        now = trio.current_time()
        if now - self._last < self._interval:
            self._left_out += 1
            return
        self._last = now
        if self._left_out:
            message += " (%d more like it not logged)"
            args = (*args, self._left_out)
            self._left_out = 0
        self._log.warning(message, *args)


@dataclass(slots=True)
class _Address:
    failures: int = 0
    last_failure: float = -math.inf
    turn: trio.Lock = field(default_factory=trio.Lock)


class LoginThrottle:
    """The wrong passwords of each address, and what they cost it (module doc)."""

    def __init__(self, *, delay: float, lockout_after: int, lockout: float) -> None:
        self.delay = delay
        self.lockout_after = lockout_after
        self.lockout = lockout
        self._addresses: dict[str, _Address] = {}

    def _state(self, address: str) -> _Address:
        state = self._addresses.get(address)
        if state is None:
            state = self._addresses[address] = _Address()
        elif trio.current_time() - state.last_failure >= self.lockout:
            state.failures = 0  # long enough ago: forgiven
        return state

    def locked_for(self, address: str) -> float:
        """Seconds the address stays locked out (0: it is not)."""
        state = self._addresses.get(address)
        if state is None or state.failures < self.lockout_after:
            return 0.0
        return max(0.0, state.last_failure + self.lockout - trio.current_time())

    def turn(self, address: str) -> trio.Lock:
        """Held while an attempt from `address` is checked and answered."""
        return self._state(address).turn

    async def failed(self, address: str) -> None:
        """Count a wrong password and wait the delay it costs."""
        state = self._state(address)
        state.failures += 1
        state.last_failure = trio.current_time()
        await trio.sleep(min(MAX_DELAY, self.delay * state.failures))

    def succeeded(self, address: str) -> None:
        self._addresses.pop(address, None)

    def forget_idle(self) -> None:
        """Drop addresses whose failures are forgiven (bounds the table)."""
        now = trio.current_time()
        for address in [a for a, s in self._addresses.items()
                        if now - s.last_failure >= self.lockout and not s.turn.locked()]:
            del self._addresses[address]
