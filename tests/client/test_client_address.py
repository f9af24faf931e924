"""Router addresses: smp://<keyHash>@host:port and ws:// URLs with a key hash."""

from __future__ import annotations

import base64

import pytest

from router.client import format_address, parse_address

KEY_HASH = bytes(range(32))


def test_an_smp_address_round_trips_through_format_and_parse():
    text = format_address(KEY_HASH, "127.0.0.1", 5224)
    address = parse_address(text)
    assert (address.host, address.port, address.key_hash) == ("127.0.0.1", 5224, KEY_HASH)
    assert address.address == text
    assert address.native and address.secure  # SMP over TLS, as in SimpleX


def test_an_smp_address_keeps_base64url_padding():
    assert format_address(KEY_HASH, "h", 1).split("@")[0].endswith("=")


def test_an_smp_address_without_padding_is_accepted():
    encoded = base64.urlsafe_b64encode(KEY_HASH).decode().rstrip("=")
    assert parse_address(f"smp://{encoded}@example.org:5223").key_hash == KEY_HASH


def test_an_smp_address_with_several_hosts_uses_the_first():
    text = format_address(KEY_HASH, "a.example", 7).replace("a.example", "a.example,b.example")
    assert parse_address(text).host == "a.example"


def test_an_smp_address_with_a_path_is_a_websocket_that_asks_for_tls_only_when_told_to():
    text = format_address(KEY_HASH, "h", 1, "/smp")
    assert not parse_address(text).native and not parse_address(text).secure
    assert parse_address(text, secure=True).secure


def test_ws_urls_are_never_native_tls():
    assert not parse_address("wss://router.example", KEY_HASH).native
    assert not parse_address("ws://router.example", KEY_HASH).native


def test_an_ipv6_host_is_bracketed_and_parsed_back():
    text = format_address(KEY_HASH, "::1", 9)
    assert "[::1]" in text
    assert parse_address(text).host == "::1"


def test_a_ws_url_takes_the_key_hash_from_the_caller():
    address = parse_address("ws://127.0.0.1:8080/smp", KEY_HASH)
    assert (address.host, address.port, address.path) == ("127.0.0.1", 8080, "/smp")
    assert address.key_hash == KEY_HASH and not address.secure


def test_a_wss_url_means_tls_and_port_443_by_default():
    address = parse_address("wss://router.example", KEY_HASH)
    assert address.secure and address.port == 443 and address.path == "/"


@pytest.mark.parametrize(
    ("text", "key_hash"),
    [
        ("ws://127.0.0.1:1", None),  # a URL needs a key hash
        ("ws://127.0.0.1:1", b"short"),  # of 32 bytes
        ("smp://127.0.0.1:1", None),  # an address carries one
        ("smp://AAAA@127.0.0.1:1", None),  # of 32 bytes
        ("smp://!!!@127.0.0.1:1", None),  # in base64url
        ("http://127.0.0.1:1", KEY_HASH),  # of the right scheme
    ],
)
def test_malformed_addresses_are_refused(text, key_hash):
    with pytest.raises(ValueError):
        parse_address(text, key_hash)


def test_a_key_hash_that_contradicts_the_address_is_refused():
    text = format_address(KEY_HASH, "h", 1)
    with pytest.raises(ValueError):
        parse_address(text, bytes(32))


def test_an_smp_address_carries_the_path_of_a_router_behind_one():
    text = format_address(KEY_HASH, "gw.example", 443, "/smp")
    assert text.endswith("@gw.example:443/smp")
    address = parse_address(text)
    assert (address.host, address.port, address.path) == ("gw.example", 443, "/smp")
    assert address.address == text
    assert parse_address(format_address(KEY_HASH, "h", 1)).path == "/"


def test_a_ws_url_may_carry_the_key_hash_as_its_user_part():
    encoded = base64.urlsafe_b64encode(KEY_HASH).decode()
    address = parse_address(f"wss://{encoded}@gw.example/smp")
    assert (address.host, address.port, address.path) == ("gw.example", 443, "/smp")
    assert address.key_hash == KEY_HASH and address.secure
    assert parse_address(f"ws://{encoded}@h:1/smp", KEY_HASH).key_hash == KEY_HASH
    with pytest.raises(ValueError, match="does not match"):
        parse_address(f"ws://{encoded}@h:1/smp", bytes(32))
    with pytest.raises(ValueError, match="key hash"):
        parse_address("ws://h:1/smp")
