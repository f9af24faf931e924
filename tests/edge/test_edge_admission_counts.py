"""The admission counts on their own: per-address and total caps, the /64 of an IPv6
client, and a full pool that drops the oldest pending connection of the most
represented address for a newcomer from a less represented one."""

from __future__ import annotations

import pytest

from router.server.edge.admission import Admission, AdmissionLimits, Refused, address_key


def admission(pool: int = 4, per_address: int = 3, total: int = 100,
              open_per_address: int | None = None) -> Admission:
    return Admission(AdmissionLimits(pool, per_address, total, open_per_address))


def test_addresses_are_counted_by_ipv4_address_and_ipv6_64():
    assert address_key("127.0.0.2") == "127.0.0.2"
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:bbbb::2")
    assert address_key("2001:db8:1:2::1") != address_key("2001:db8:1:3::1")
    assert address_key("::ffff:10.0.0.1") == "10.0.0.1"
    assert address_key("fe80::1%eth0") == address_key("fe80::2")


async def test_a_full_pool_drops_the_oldest_pending_of_the_most_represented_address():
    a = admission()
    first, second, third = (a.admit("A") for _ in range(3))
    a.admit("B")
    assert a.pending == 4
    newcomer = a.admit("C")  # A holds 3 of 4: its oldest makes room
    assert first.scope.cancel_called and not first.pending
    assert not second.scope.cancel_called and not third.scope.cancel_called
    assert (a.pending, a.pending_from("A"), a.evicted) == (4, 2, 1)
    assert newcomer.pending
    with pytest.raises(Refused):  # A (2) and C (1) + 1: no one has more than the newcomer would
        a.admit("C")
    with pytest.raises(Refused):
        a.admit("A")


async def test_established_connections_leave_the_pool_and_closed_ones_every_count():
    a = admission(open_per_address=2)
    one = a.admit("A")
    two = a.admit("A")
    one.established()
    assert (a.pending, a.open) == (1, 2)
    with pytest.raises(Refused, match="too many connections from this address"):
        a.admit("A")
    one.close()
    two.close()
    two.close()  # twice is once
    assert (a.pending, a.open, a.open_from("A")) == (0, 0, 0)
    a.admit("A")


async def test_the_per_address_and_total_caps_refuse():
    a = admission(pool=10, per_address=2, total=3)
    a.admit("A")
    a.admit("A")
    with pytest.raises(Refused, match="being opened from this address"):
        a.admit("A")
    a.admit("B")
    with pytest.raises(Refused, match="connection limit"):
        a.admit("C")
