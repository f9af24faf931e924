"""The latency histograms the hot path fills (router/server/latency.py)."""

from __future__ import annotations

from time import perf_counter

from router.server.core.latency import BUCKETS, MAX_NOTES, Histogram, Latencies


def test_an_observation_on_a_bound_counts_in_that_bucket_and_cumulative_adds_up():
    h = Histogram()
    for seconds in (0.0001, BUCKETS[0], 0.0007, 0.3, 1000.0):
        h.observe(seconds)
    cumulative = dict(h.cumulative())
    assert cumulative[repr(BUCKETS[0])] == 2  # le is "at most"
    assert cumulative["0.001"] == 3 and cumulative["0.5"] == 4
    assert cumulative["+Inf"] == h.count == 5
    assert abs(h.sum - (0.0001 + BUCKETS[0] + 0.0007 + 0.3 + 1000.0)) < 1e-9


def test_a_delivered_message_is_timed_once_and_a_refused_one_never():
    latencies = Latencies()
    latencies.sent(b"a", perf_counter())
    latencies.sent(b"b", perf_counter())
    latencies.not_stored(b"b")
    latencies.delivered(b"a")
    latencies.delivered(b"a")  # a second MSG of the same message (SUB again) is not timed
    latencies.delivered(b"b")
    latencies.delivered(b"never sent")
    assert latencies.delivery.count == 1


def test_notes_are_bounded_and_the_oldest_goes_first():
    latencies = Latencies()
    for i in range(MAX_NOTES + 10):
        latencies.sent(i.to_bytes(4, "big"), perf_counter())
    latencies.delivered((0).to_bytes(4, "big"))  # dropped
    latencies.delivered((MAX_NOTES + 9).to_bytes(4, "big"))
    assert latencies.delivery.count == 1


def test_commands_are_timed_by_name():
    latencies = Latencies()
    latencies.command("SEND", 0.002)
    latencies.command("SEND", 0.004)
    latencies.command("SUB", 0.001)
    assert {n: h.count for n, h in latencies.commands.items()} == {"SEND": 2, "SUB": 1}
