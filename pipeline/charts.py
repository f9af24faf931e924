"""PNG charts for operators, drawn on the driver from the (small) aggregated tables."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

Rows = list[dict[str, object]]

CHARTS = (
    "messages_per_day.png",
    "active_queues.png",
    "delivery_ratio.png",
    "expired_and_quota_refused.png",
)


def write_charts(
    out_dir: Path, total_daily: Rows, router_daily: Rows, total_weekly: Rows, total_monthly: Rows
) -> list[Path]:
    """Every chart in CHARTS, written to `out_dir`; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    drawers = (
        lambda ax: _messages(ax, total_daily),
        lambda ax: _active_queues(ax, total_daily, total_weekly, total_monthly),
        lambda ax: _delivery_ratio(ax, total_daily, router_daily),
        lambda ax: _expired_and_quota(ax, total_daily),
    )
    paths = []
    for name, draw in zip(CHARTS, drawers, strict=True):
        fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
        draw(ax)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize="small")
        fig.autofmt_xdate()
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, metadata={"Software": None})  # no version stamp: same data, same file
        plt.close(fig)
        paths.append(path)
    return paths


def _series(rows: Rows, key: str, column: str) -> tuple[list, list]:
    # a missing value (a ratio of a day with nothing sent) is a gap in the line
    return [r[key] for r in rows], [_number(r[column]) for r in rows]


def _number(value: object) -> float:
    return float("nan") if value is None else float(value)


def _messages(ax, daily: Rows) -> None:
    for column, label in (
        ("msgs_sent", "sent"),
        ("msgs_delivered", "delivered"),
        ("msgs_acknowledged", "acknowledged"),
    ):
        ax.plot(*_series(daily, "day", column), marker=".", label=label)
    ax.set_title("Messages per day, all routers")
    ax.set_ylabel("messages")


def _active_queues(ax, daily: Rows, weekly: Rows, monthly: Rows) -> None:
    ax.plot(*_series(daily, "day", "active_queues_day"), marker=".", label="per day")
    ax.step(*_series(weekly, "week", "active_queues"), where="post", label="per ISO week")
    ax.step(*_series(monthly, "month", "active_queues"), where="post", label="per month")
    ax.set_title("Active queues, all routers (HyperLogLog estimates)")
    ax.set_ylabel("queues")


def _delivery_ratio(ax, total: Rows, by_router: Rows) -> None:
    per_router: dict[str, Rows] = defaultdict(list)
    for row in by_router:
        per_router[str(row["router"])].append(row)
    for router, rows in sorted(per_router.items()):
        ax.plot(*_series(rows, "day", "delivery_ratio"), alpha=0.6, label=router)
    ax.plot(*_series(total, "day", "delivery_ratio"), color="black", linewidth=2, label="all")
    ax.set_title("Delivery ratio per day (acknowledged / sent)")
    ax.set_ylim(bottom=0)


def _expired_and_quota(ax, daily: Rows) -> None:
    days = [r["day"] for r in daily]
    ax.bar(days, [r["msgs_expired"] for r in daily], label="expired")
    ax.bar(
        days,
        [r["msgs_quota_refused"] for r in daily],
        bottom=[r["msgs_expired"] for r in daily],
        label="refused for quota",
    )
    ax.set_title("Expired and quota-refused messages per day, all routers")
    ax.set_ylabel("messages")
