"""RouterConfig: defaults that run, and one clear error per bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.server import ConfigError, RouterConfig


def test_the_defaults_are_a_valid_memory_router_on_loopback():
    config = RouterConfig()
    assert (config.host, config.port, config.store, config.delivery) == (
        "127.0.0.1", 5224, "memory", "single-task"
    )
    assert config.quota == 128 and config.password is None


def test_text_values_are_converted_to_what_the_router_uses():
    config = RouterConfig(password="secret", data_dir="/tmp/x")
    assert config.password == b"secret"
    assert config.data_dir == Path("/tmp/x")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"port": 70000}, "port"),
        ({"port": -1}, "port"),
        ({"host": ""}, "host"),
        ({"store": "redis"}, "store"),
        ({"delivery": "threads"}, "delivery"),
        ({"quota": 0}, "quota"),
        ({"send_queue_size": 0}, "send queue"),
        ({"stalled_writer_timeout": 0}, "stalled writer timeout"),
        ({"end_batch_interval": -1}, "end batch interval"),
        ({"handshake_timeout": float("inf")}, "handshake timeout"),
        ({"password": b"has space"}, "password"),
        ({"password": b"user:pw"}, "password"),
        ({"password": b""}, "password"),
        ({"store": "sqlite"}, "data directory"),
        ({"metrics_port": 65536}, "metrics port"),
        ({"control_port": -1}, "control port"),
        ({"control_port": 5225}, "admin or a user password"),
        ({"public_host": " "}, "public host"),
        ({"new_queue_rate": 0}, "new queue rate"),
        ({"new_queue_burst": 0}, "new queue burst"),
        ({"memory_store_max_bytes": 0}, "memory store max bytes"),
        ({"data_dir": __file__}, "not a directory"),
    ],
)
def test_a_bad_value_is_a_config_error_naming_it(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RouterConfig(**overrides)


def test_the_advertised_host_is_the_public_host_else_a_usable_listening_host():
    assert RouterConfig(host="10.0.0.5").advertised_host == "10.0.0.5"
    assert RouterConfig(host="0.0.0.0", public_host="smp.example.org").advertised_host == (
        "smp.example.org"
    )
    for wildcard in ("0.0.0.0", "::"):
        assert RouterConfig(host=wildcard).advertised_host not in ("0.0.0.0", "::", "")
