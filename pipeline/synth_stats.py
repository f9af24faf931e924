"""Synthetic stats logs (docs/stats-log.md format), for trying `smp-pipeline stats`.

Each router writes an hourly line and a `P1D` roll-up line per UTC day, as the
router's own writer does, and its numbers behave like a busy router's: a queue
population that grows slowly (created a little above deleted), weekday and
time-of-day rhythms, acknowledged a few percent below sent, a little expiry and
now and then a burst of quota refusals; active-queue counts run up within their
day, ISO week and month and restart with the next one.

Gaps: no router writes anything on the days given with `down` (an outage of the
whole service); with more than one router and 20 days or more, every router
after the first is also down for two days of its own (a seeded choice), so
per-router charts show gaps as well. Same arguments, same bytes.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from router.server.ops.stats_lines import COUNTER_FIELDS, HEADER, format_line

from .checks import UsageError

log = logging.getLogger(__name__)

HOUR, DAY = 3600, 86400
# relative traffic by UTC hour: quiet at night, busiest in the evening
HOURLY = [0.35 + 0.65 * (1 + math.sin(2 * math.pi * (h - 10) / 24)) / 2 for h in range(24)]
WEEKDAY = [1.0, 1.02, 1.03, 1.0, 0.97, 0.8, 0.75]  # Monday first


def parse_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--first-day takes a date like 2024-05-01, not {text!r}") from None


@dataclass
class _Router:
    """The state one synthetic router carries from day to day."""

    rng: random.Random
    live: float  # queues that exist
    week_active: int = 0  # running distinct counts at the end of the last day written
    month_active: int = 0
    down: set[int] = field(default_factory=set)  # days (from 0) without lines

    def day_lines(self, day: date) -> list[str]:
        """The 24 hourly lines and the P1D line of `day`, updating the running counts."""
        if day.weekday() == 0:
            self.week_active = 0
        if day.day == 1:
            self.month_active = 0
        totals = self._day_totals(day)
        active = int(self.live * 0.55 * WEEKDAY[day.weekday()] * self._noise(0.05))
        week_end, month_end = (
            self._grown(self.week_active, active),
            self._grown(self.month_active, active),
        )
        start = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())
        lines, done, so_far = [], dict.fromkeys(COUNTER_FIELDS, 0), 0.0
        for hour, counts in enumerate(_split_by_hour(totals, self.rng)):
            so_far += HOURLY[hour] / sum(HOURLY)
            ran = min(1.0, so_far) ** 0.7  # distinct queues come quickly, then level off
            gauges = self._gauges(hour)
            lines.append(
                format_line(
                    start + hour * HOUR,
                    HOUR,
                    counts,
                    gauges,
                    {
                        "active_queues_day": round(active * ran),
                        "active_queues_week": round(
                            self.week_active + (week_end - self.week_active) * ran
                        ),
                        "active_queues_month": round(
                            self.month_active + (month_end - self.month_active) * ran
                        ),
                    },
                )
            )
            done = {k: done[k] + counts[k] for k in COUNTER_FIELDS}
        lines.append(
            format_line(
                start,
                DAY,
                done,
                gauges,
                {
                    "active_queues_day": active,
                    "active_queues_week": week_end,
                    "active_queues_month": month_end,
                },
            )
        )
        self.week_active, self.month_active = week_end, month_end
        self.live += done["queues_created"] - done["queues_deleted"]
        return lines

    def _grown(self, running: int, active: int) -> int:
        """A running distinct count after a day with `active` queues: the first day adds
        all of them, later days the 30% not seen before in the period (the same rule for
        weeks and months, so a month holds at least the weeks that started in it)."""
        added = active if running == 0 else int(0.3 * active)
        return min(int(self.live), running + added)

    def _noise(self, spread: float) -> float:
        return 1 + self.rng.uniform(-spread, spread)

    def _day_totals(self, day: date) -> dict[str, int]:
        busy = WEEKDAY[day.weekday()] * self._noise(0.08)
        created = self.live * 0.04 * busy
        sent = self.live * 0.55 * 12 * busy
        refusing = self.rng.random() < 0.06  # a few days with full queues somewhere
        return {
            "queues_created": int(created),
            "queues_secured": int(created * 0.92),
            "queues_deleted": int(created * self.rng.uniform(0.75, 0.95)),
            "msgs_sent": int(sent),
            "msgs_delivered": int(sent * self.rng.uniform(0.975, 0.995)),
            "msgs_acknowledged": int(sent * self.rng.uniform(0.94, 0.98)),
            "msgs_expired": int(sent * self.rng.uniform(0.002, 0.006)),
            "msgs_quota_refused": int(sent * (0.03 if refusing else 0.0005) * self._noise(0.5)),
        }

    def _gauges(self, hour: int) -> dict[str, int]:
        subscriptions = int(self.live * 0.3 * (0.7 + 0.3 * HOURLY[hour]) * self._noise(0.03))
        return {"subscriptions": subscriptions, "clients": subscriptions // 6}


def _split_by_hour(totals: dict[str, int], rng: random.Random) -> list[dict[str, int]]:
    """Each day total spread over 24 hours by HOURLY; the hours add up to the total."""
    weight = sum(HOURLY)
    hours: list[dict[str, int]] = [{} for _ in range(24)]
    for name, total in totals.items():
        shares = [int(total * w / weight * rng.uniform(0.9, 1.1)) for w in HOURLY]
        shares[-1] = max(0, total - sum(shares[:-1]))
        excess = sum(shares) - total  # the noise may have overshot: take it off the biggest
        while excess > 0:
            biggest = shares.index(max(shares))
            cut = min(excess, shares[biggest])
            shares[biggest] -= cut
            excess -= cut
        for hour, share in enumerate(shares):
            hours[hour][name] = share
    return hours


def synthetic_stats_lines(
    days: int,
    router: int = 0,
    first_day: date = date(2024, 5, 1),
    down: Iterable[tuple[int, int]] = (),
    seed: int = 1,
) -> Iterator[str]:
    """The lines (with LF, header first) of router number `router`; `down` in days from 1."""
    rng = random.Random(seed * 1009 + router)
    state = _Router(rng, live=5000 * rng.uniform(0.6, 1.4))
    state.down = {d - 1 for first, last in down for d in range(first, last + 1)}
    if router > 0 and days >= 20:
        own = rng.randrange(days // 4, days - 3)
        state.down |= {own, own + 1}
    yield HEADER + "\n"
    for index in range(days):
        if index in state.down:
            continue
        yield from state.day_lines(first_day + timedelta(days=index))


def write_synthetic_stats_logs(
    out: str | Path,
    *,
    days: int,
    routers: int = 1,
    first_day: str = "2024-05-01",
    down: Iterable[tuple[int, int]] = (),
    seed: int = 1,
) -> list[Path]:
    """`OUT/router-<i>/stats.csv` for each router; returns the paths."""
    start, down = parse_day(first_day), list(down)
    paths = []
    for router in range(routers):
        path = Path(out) / f"router-{router + 1}" / "stats.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="ascii", newline="\n") as f:
            f.writelines(synthetic_stats_lines(days, router, start, down, seed))
        paths.append(path)
    log.info("synth: %d stats log(s) of %d day(s) under %s", routers, days, out)
    return paths
