"""The benchmarks of client certificates and service subscriptions, at a size that
runs in seconds: what they count must come out whole."""

from __future__ import annotations

import pytest
import trio

from bench import service_subscribe, tls_client_certs


@pytest.mark.parametrize("way", ["subs", "sub"])
def test_both_ways_of_subscribing_get_every_waiting_message(way, tmp_path):
    figures = trio.run(service_subscribe._run, way, 300, 12, tmp_path)
    assert figures["messages"] == 12
    assert figures["seconds"] > 0
    assert figures["router_rss_peak_mb"] >= figures["router_rss_before_mb"] > 0


def test_the_tls_benchmark_measures_both_ways(capsys):
    assert tls_client_certs.main(["--handshakes", "3", "--idle", "3"]) == 0
    table = capsys.readouterr().out
    assert "| handshake_ms |" in table and "| idle_rss_bytes |" in table
