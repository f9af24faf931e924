"""What SIGHUP logs (router/server/cli/lifecycle.py): each changed setting under the
configuration file's key, with values as the file writes them; a reload is routine,
logged at info, a setting that needs a restart at warning."""

from __future__ import annotations

import logging
from dataclasses import replace
from types import SimpleNamespace

from router.server.cli.lifecycle import Reloaded, reload_configuration
from router.server.router import LIVE_SETTINGS
from router.server.settings.config import RouterConfig
from router.server.settings.config_file import KEYS

KEY_NAMES = {f"[{key.section}] {key.name}" for key in KEYS}


class FakeRouter:
    def __init__(self, config: RouterConfig) -> None:
        self.config = config

    def reconfigure(self, new: RouterConfig) -> tuple[list[str], list[str]]:
        names = [n for n in LIVE_SETTINGS | {"port"} if getattr(new, n) != getattr(self.config, n)]
        live = [n for n in names if n in LIVE_SETTINGS]
        self.config = replace(self.config, **{n: getattr(new, n) for n in live})
        return live, [n for n in names if n not in live]


def reload_with(before: RouterConfig, after: RouterConfig, caplog) -> list[logging.LogRecord]:
    info = SimpleNamespace(router=FakeRouter(before))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="smp-router"):
        assert reload_configuration(info, lambda: Reloaded(after))  # type: ignore[arg-type]
    return list(caplog.records)


def test_a_reload_that_changes_nothing_is_logged_at_info(caplog):
    config = RouterConfig()
    (record,) = reload_with(config, config, caplog)
    assert record.levelno == logging.INFO and "nothing changed" in record.getMessage()


def test_every_live_setting_is_logged_under_its_file_key(caplog):
    before = replace(
        RouterConfig(), new_queue_rate=10.0, memory_store_max_bytes=1 << 30, allow_proxy=True
    )
    after = replace(
        before, quota=7, new_queue_burst=5, new_queue_rate=None, new_queue_address_burst=9,
        memory_store_max_bytes=512 << 20, drain_period=12.0, allow_new_queues=False,
        allow_proxy=False, password=b"secret-1", proxy_password=b"secret-2",
        control_admin_password="secret-3", port=before.port + 1,
    )
    records = reload_with(before, after, caplog)
    reloaded, restart = records
    assert reloaded.levelno == logging.INFO and restart.levelno == logging.WARNING
    text = reloaded.getMessage()
    for expected in (
        "[STORE_LOG] quota 128 -> 7", "[LIMITS] new_queues_burst 100 -> 5",
        "[LIMITS] new_queues_per_second 10 -> unset",
        "[LIMITS] new_queues_burst_per_address 200 -> 9",
        "[LIMITS] memory_store_max_bytes 1G -> 512M", "[TRANSPORT] drain_period 30 -> 12",
        "[AUTH] new_queues on -> off", "[PROXY] enable on -> off",
        "[AUTH] create_password changed", "[PROXY] password changed",
        "[AUTH] control_port_admin_password changed",
    ):
        assert expected in text, (expected, text)
    assert "secret" not in text
    assert f"[TRANSPORT] port {before.port} -> {before.port + 1}" in restart.getMessage()
    for part in text.split("reloaded; ", 1)[1].split("; "):
        name = part.split("]", 1)[0] + "] " + part.split("] ", 1)[1].split(" ")[0]
        assert name in KEY_NAMES, part


def test_every_setting_a_file_can_set_is_named_by_its_file_key(caplog):
    """Whatever differs after a reload, the log names it as the file does."""
    from dataclasses import fields

    from router.server.cli.lifecycle import _change

    before = RouterConfig()
    file_keys = {key.setting for key in KEYS} | {"idle_timeout", "information"}
    for field in fields(RouterConfig):
        if not field.compare or field.name not in file_keys:
            continue  # set in code only: never differs on a reload
        text = _change(field.name, before, before)
        assert text.startswith("["), text
        section, rest = text[1:].split("] ", 1)
        named = f"[{section}] {rest.split(' ')[0]}"
        assert named in KEY_NAMES or section in ("INFORMATION", "INACTIVE_CLIENTS"), text
