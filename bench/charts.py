"""PNG charts of the memory and throughput figures, drawn next to their `.md` tables.

`write_results` draws them from the same data it saves as JSON, so a chart always
shows the figures of its table. Saved figures can be drawn again without running
anything:

    python -m bench charts bench/results      # memory.png, throughput.png from the JSON
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from router.server.settings.config import DELIVERY_MODES, PER_QUEUE_TASK, SINGLE_TASK

MODES = DELIVERY_MODES
STYLES = {SINGLE_TASK: "o-", PER_QUEUE_TASK: "s--"}
COLORS = {SINGLE_TASK: "tab:blue", PER_QUEUE_TASK: "tab:orange"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _finish(fig: Any, path: Path, title: str) -> Path:
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, metadata={"Software": None})
    _pyplot().close(fig)
    return path


def _points(rows: list[dict[str, Any]], x: str, y: Callable[[dict[str, Any]], Any]) -> tuple:
    """(xs, ys) of the rows that have a value (a figure a quick run did not measure is None)."""
    pairs = [(r[x], y(r)) for r in rows if y(r) is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def memory_chart(data: dict[str, Any], path: Path) -> Path:
    """Bytes per idle subscription (RSS and traced) and trio tasks, by subscriptions held."""
    plt = _pyplot()
    rows = data["summary"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for mode in MODES:
        for measure, label in (("rss", "RSS"), ("traced", "traced")):
            key = f"{measure}_per_subscription"
            xs, ys = _points(rows, "size", lambda r, m=mode, k=key: r[m][k])
            axes[0].plot(xs, ys, STYLES[mode], color=COLORS[mode],
                         alpha=1 if measure == "traced" else 0.4, label=f"{mode}, {label}")
        xs, ys = _points(rows, "size", lambda r, m=mode: r[m]["tasks"])
        axes[1].plot(xs, ys, STYLES[mode], label=mode)
        xs, ys = _points(rows, "size", lambda r, m=mode: r[m]["rss_subscribed"])
        axes[2].plot(xs, [y / 2**20 for y in ys], STYLES[mode], label=mode)
    axes[0].set_title("bytes per idle subscription (faint: RSS, solid: traced)")
    axes[1].set_title("trio tasks in the router")
    axes[2].set_title("router RSS with N subscriptions (MiB)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("subscriptions held")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    return _finish(fig, path, "smp-router memory, both delivery modes (see memory.md)")


def throughput_chart(data: dict[str, Any], path: Path) -> Path:
    """Saturated rate against the echo ceiling, and latency percentiles, by client count."""
    plt = _pyplot()
    rows = data["summary"]["by_clients"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    xs = [r["clients"] for r in rows]
    axes[0].plot(xs, [r["echo_msgs_per_s"] for r in rows], "k^:", label="WebSocket echo")
    for mode in MODES:
        axes[0].plot(xs, [r[mode]["msgs_per_s"] for r in rows], STYLES[mode], label=mode)
        axes[1].plot(xs, [r[mode]["ratio"] for r in rows], STYLES[mode], label=mode)
        for pct, alpha in (("p50", 1.0), ("p99", 0.5)):
            px, py = _points(rows, "clients", lambda r, m=mode, p=pct: r[m][p])
            axes[2].plot(px, py, STYLES[mode], color=COLORS[mode], alpha=alpha,
                         label=f"{mode} {pct}")
    px, py = _points(rows, "clients", lambda r: r["echo_p50"])
    axes[2].plot(px, py, "k^:", label="echo p50")
    axes[0].set_title("messages per second, saturated")
    axes[1].set_title("router / echo (same run)")
    axes[2].set_title("sender -> recipient latency (ms)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xticks([], minor=True)  # only the client counts measured
        ax.set_xlabel("clients")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    return _finish(fig, path, "smp-router throughput vs a plain WebSocket echo (see throughput.md)")


PROFILE_PHASES = ("queues", "messages_empty", "messages_16k", "connected", "subscribed",
                  "after_traffic", "after_storm")
COMPONENT_COLORS = {"queue_table": "tab:green", "messages": "tab:purple",
                    "subscriptions": "tab:blue", "connections": "tab:orange",
                    "buffers": "tab:red"}


def memory_profile_chart(data: dict[str, Any], path: Path) -> Path:
    """Live bytes by component after each phase (load growing left to right), stacked,
    one panel per store kind and delivery mode; what the walk did not attribute on top."""
    plt = _pyplot()
    points = data["points"]
    stores = list(dict.fromkeys(p["store"] for p in points.values()))
    modes = list(dict.fromkeys(p["mode"] for p in points.values()))
    fig, axes = plt.subplots(len(modes), len(stores), figsize=(5 * len(stores), 4.2 * len(modes)),
                             squeeze=False, sharey=True)
    for point in points.values():
        ax = axes[modes.index(point["mode"])][stores.index(point["store"])]
        phases = point["traced"]
        base = phases["started"]
        xs = list(range(len(PROFILE_PHASES)))
        bottom = [0.0] * len(xs)
        for name, color in COMPONENT_COLORS.items():
            heights = [(phases[ph]["components"][name] - base["components"][name]) / 2**20
                       for ph in PROFILE_PHASES]
            ax.bar(xs, heights, bottom=bottom, color=color, label=name.replace("_", " "))
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        rest = [max(0.0, (phases[ph]["traced"] - base["traced"]) / 2**20 - b)
                for ph, b in zip(PROFILE_PHASES, bottom, strict=True)]
        ax.bar(xs, rest, bottom=bottom, color="white", edgecolor="grey", hatch="//",
               label="traced, not attributed")
        ax.set_xticks(xs, [ph.replace("_", " ") for ph in PROFILE_PHASES], rotation=35,
                      ha="right", fontsize="small")
        ax.set_title(f"{point['store']} store, {point['mode']}", fontsize="medium")
        ax.set_ylabel("live MiB above the empty router")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].legend(fontsize="small", loc="upper left")
    p = data["parameters"]
    return _finish(fig, path, f"smp-router live memory by component as load grows "
                              f"({p['queues']:,} queues, {p['messages']:,}+{p['messages']:,} "
                              f"messages, {p['connections']:,} connections)")


CHARTS: dict[str, Callable[[dict[str, Any], Path], Path]] = {
    "memory": memory_chart,
    "memory-profile": memory_profile_chart,
    "throughput": throughput_chart,
}


def draw_saved(results_dir: Path) -> list[Path]:
    """Charts of every benchmark in CHARTS whose JSON figures are in `results_dir`."""
    drawn = []
    for name, draw in CHARTS.items():
        figures = results_dir / f"{name}.json"
        if figures.is_file():
            drawn.append(draw(json.loads(figures.read_text()), results_dir / f"{name}.png"))
    return drawn


def main(argv: list[str] | None = None) -> int:
    """`python -m bench charts [DIR]`: draw every chart whose figures DIR holds."""
    directory = Path(argv[0]) if argv else Path(__file__).resolve().parent / "results"
    for chart in draw_saved(directory):
        print(chart)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
