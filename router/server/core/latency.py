"""The latency histograms the hot path fills: each command's time, and each message's
time from its SEND to the MSG that carries it to the recipient.

Filled on every command, so an observation is a bisect, an increment and an
addition: no lock (the router is one Trio thread) and no prometheus-client object.
The metrics endpoint reads them when scraped (metrics.py).

A command's time runs from the start of its verification (parsing, the queue
lookup, the signature check) to its responses, leaving out the time it waits for
the other commands of its block. SEND to MSG: a SEND to a queue that has a
subscriber notes when it arrived, under the new message's id; the MSG that carries
the message (pushed, or the answer to a SUB or an ACK) takes the note and records
the difference, so a message that waits for its recipient to ACK the one before is
timed with its wait. Notes are bounded, the oldest dropped first: a message whose
subscriber left may wait for days, and its note is not worth keeping that long.
"""

from __future__ import annotations

from bisect import bisect_left
from time import perf_counter

# Upper bounds in seconds (Prometheus `le`), from a fast in-memory command to a
# recipient that took its time to ACK.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
           10.0, 30.0)
MAX_NOTES = 4096  # SENDs waiting for their MSG that are timed at once


class Histogram:
    """Observations counted into `BUCKETS` (the last count is above the last bound)."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.sum += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, observations at most le) per bound, then ("+Inf", all)."""
        out, running = [], 0
        for bound, n in zip((*BUCKETS, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


class Latencies:
    __slots__ = ("commands", "delivery", "_sent")

    def __init__(self) -> None:
        self.commands: dict[str, Histogram] = {}  # command name (SEND, SUB, ...) -> times
        self.delivery = Histogram()  # SEND to MSG
        self._sent: dict[bytes, float] = {}  # message id -> when its SEND arrived

    def command(self, name: str, seconds: float) -> None:
        histogram = self.commands.get(name)
        if histogram is None:
            histogram = self.commands[name] = Histogram()
        histogram.observe(seconds)

    def sent(self, msg_id: bytes, arrived: float) -> None:
        """A SEND to a subscribed queue arrived at `arrived` (perf_counter)."""
        notes = self._sent
        if len(notes) >= MAX_NOTES:
            del notes[next(iter(notes))]  # the oldest
        notes[msg_id] = arrived

    def not_stored(self, msg_id: bytes) -> None:
        """The SEND was refused (QUOTA, a full store): no MSG will carry it."""
        self._sent.pop(msg_id, None)

    def delivered(self, msg_id: bytes) -> None:
        """The message's MSG was handed to its recipient's connection."""
        arrived = self._sent.pop(msg_id, None)
        if arrived is not None:
            self.delivery.observe(perf_counter() - arrived)
