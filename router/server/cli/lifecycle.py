"""The signals of a `smp-router serve` process, once the router accepts clients.

SIGINT and SIGTERM stop it. SIGHUP reads the configuration again and applies what
can change while the router runs (limits, passwords, the log level, the
information page, the TLS certificate; `Router.reconfigure`), reopens the log
file (after logrotate moved it), and logs what changed and what would need a
restart; a configuration with an error changes nothing and is logged, the router
goes on. SIGUSR2 drains: no new clients, the connected ones closed over the drain
period, then the process ends (exit 0), as a drain from the control port does.
Connected clients are kept across a SIGHUP.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import trio

from ..router import RouterInfo
from ..settings.config import ConfigError, RouterConfig, StartupError
from ..settings.config_file import KEYS, Key, display

log = logging.getLogger("smp-router")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
RELOAD_SIGNAL, DRAIN_SIGNAL = signal.SIGHUP, signal.SIGUSR2
SIGNALS = (*STOP_SIGNALS, RELOAD_SIGNAL, DRAIN_SIGNAL)
SECRETS = frozenset({
    "password", "control_admin_password", "control_user_password", "proxy_password",
})
# The configuration file's key of each setting: the log names what the operator writes.
_KEY_OF_SETTING: dict[str, Key] = {key.setting: key for key in KEYS}
_LABELS = {"idle_timeout": "[INACTIVE_CLIENTS] ttl"}  # settings the file sets another way


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What reading the configuration again gave: the router's new configuration, and
    what the reader did itself (the log level, the log file) in words for the log."""

    config: RouterConfig
    done: tuple[str, ...] = ()


Reload = Callable[[], Reloaded]  # raises ConfigError (or OSError) for a configuration in error


async def run_until_stopped(
    info: RouterInfo, reload: Reload, after_reload: Callable[[RouterInfo], None],
    signals: AsyncIterator[int],
) -> None:
    """Answer `signals` (opened on SIGNALS before the router started, so that an early
    SIGHUP does not kill the process) until a stop signal or the end of a drain."""
    router = info.router
    async with trio.open_nursery() as nursery:

        async def stop_when_drained() -> None:
            await router.drained.wait()
            log.info("stopping: drained")
            nursery.cancel_scope.cancel()

        nursery.start_soon(stop_when_drained)
        async for signum in signals:
            if signum == RELOAD_SIGNAL:
                reload_configuration(info, reload)
                after_reload(info)
            elif signum == DRAIN_SIGNAL:
                period = router.config.drain_period
                if router.start_drain(period):
                    log.info("draining on SIGUSR2 over %g s", period)
            else:
                log.info("stopping on %s", signal.Signals(signum).name)
                break
        nursery.cancel_scope.cancel()


def reload_configuration(info: RouterInfo, reload: Reload) -> bool:
    """One SIGHUP: read, apply, log; False (and nothing changed) if the configuration
    has an error."""
    router = info.router
    try:
        reloaded = reload()
        before = router.config
        live, restart = router.reconfigure(reloaded.config)
    except (ConfigError, StartupError, OSError) as e:
        log.error("SIGHUP: the configuration was not reloaded, nothing changed: %s", e)
        return False
    changed = [*reloaded.done, *(_change(name, before, router.config) for name in live)]
    log.info("SIGHUP: configuration reloaded; %s",
             "; ".join(changed) if changed else "nothing changed")
    if restart:
        log.warning("SIGHUP: these settings change only with a restart: %s",
                    ", ".join(_change(name, before, reloaded.config) for name in restart))
    return True


def _change(name: str, before: RouterConfig, after: RouterConfig) -> str:
    """`KEY OLD -> NEW` with the file's key and values as the file writes them."""
    key = _KEY_OF_SETTING.get(name)
    label = _LABELS.get(name, name) if key is None else f"[{key.section}] {key.name}"
    if name in SECRETS:
        return f"{label} changed"
    if name == "information":
        return "[INFORMATION] changed"
    old, new = getattr(before, name), getattr(after, name)
    if key is not None:
        old, new = display(key, old) or "unset", display(key, new) or "unset"
    return f"{label} {old} -> {new}"
