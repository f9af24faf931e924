"""Each benchmark runs at a tiny size and writes its figures (no timing is asserted)."""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from pathlib import Path

import pytest

from bench import burst, harness, memory, profile, scale, throughput, transports
from bench.__main__ import main

COMMITTED = Path(burst.__file__).resolve().parent / "results"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def results_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    return tmp_path


def _figures(directory: Path, name: str) -> dict:
    data = json.loads((directory / f"{name}.json").read_text())
    assert data["benchmark"] == name
    assert (directory / f"{name}.md").read_text().startswith(("|", "#"))
    return data


def test_memory_writes_per_subscription_figures_for_both_modes(results_in: Path):
    summary = memory.run((200,), repeats=1, max_connections=4)
    row = _figures(results_in, "memory")["summary"][0]
    assert row["size"] == 200 and summary[0]["connections"] == 4
    # At 200 subscriptions a single-task figure is a few bytes and may come out below
    # zero from unrelated frees; a task per queue costs kilobytes more, well above that.
    single, per_queue = row["single-task"], row["per-queue-task"]
    assert per_queue["traced_per_subscription"] > single["traced_per_subscription"] + 1000
    assert row["per-queue-task"]["tasks"] > row["single-task"]["tasks"]
    assert (results_in / "memory.png").read_bytes()[:8] == PNG


def test_transports_writes_idle_connection_figures_for_websocket_and_tls(
    results_in: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(transports, "QUICK_IDLE_CONNECTIONS", 10)
    summary = transports.run(quick=True)
    data = _figures(results_in, "transports")
    assert data["parameters"]["idle_connections"] == 10
    for name in transports.TRANSPORTS:
        # every connection is a router task or more: both transports were really opened
        assert summary[name]["tasks_per_connection"] >= 1
        assert summary[name]["idle_connection_traced"] > 0


def test_throughput_writes_rates_latencies_and_the_echo_ceiling(results_in: Path):
    throughput.run(quick=True, repeats=1, duration=0.5, clients=(2,))
    data = _figures(results_in, "throughput")
    row = data["summary"]["by_clients"][0]
    assert row["echo_msgs_per_s"] > 0
    assert row["single-task"]["msgs_per_s"] > 0 and row["per-queue-task"]["msgs_per_s"] > 0
    assert set(data["summary"]["light"]) == {
        "single-task plain", "single-task frozen", "per-queue-task plain",
        "per-queue-task frozen", "echo round trip",
    }
    assert (results_in / "throughput.png").read_bytes()[:8] == PNG


def test_burst_drains_every_message_in_both_modes(results_in: Path):
    burst.run(sizes=(200,), repeats=1)
    run = _figures(results_in, "burst")["runs"][0]
    for mode in burst.MODES:
        assert run[mode]["received"] == 200
        assert run[mode]["delivered"] == 200


def test_scale_writes_a_projection_and_a_plot(results_in: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(scale, "IDLE_CONNECTIONS", 3)
    result = scale.run((200, 400), repeats=1)
    projection = _figures(results_in, "scale")["projection"]
    # RSS at 200 and 400 subscriptions is too close for the fitted slope to have a
    # reliable sign; what the smoke run can show is a finite projection per mode and
    # the task counts of the two designs.
    assert all(math.isfinite(projection[mode]["memory_gib"]) for mode in scale.MODES)
    assert projection["per-queue-task"]["trio_tasks"] > projection["single-task"]["trio_tasks"]
    assert result["summary"][1]["single-task"]["drain_msgs_per_s"] > 0
    assert (results_in / "scale.png").stat().st_size > 0


def test_profile_saves_the_router_profile(results_in: Path):
    result = profile.run("scale", profiler="pyinstrument", quick=True)
    assert Path(result["profiler"]["text"]).read_text()


def test_collapsed_stacks_are_summarised_by_package_and_function():
    text = profile.summarize_collapsed(
        "run (trio/_core/_run.py:1);crypto_sign_open (nacl/bindings/crypto_sign.py:103) 3\n"
        "run (trio/_core/_run.py:1);send_block (router/server/edge/transport.py:94) 1\n"
    )
    assert "samples: 4" in text
    assert "75.0%  PyNaCl" in text and "25.0%  router.server" in text


def test_memory_breakdown_names_the_routers_own_lines_and_types(
    results_in: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(memory, "BREAKDOWN_CONNECTIONS", 3)
    monkeypatch.setattr(memory, "BREAKDOWN_SUBSCRIPTIONS", 100)
    memory.breakdown()
    data = _figures(results_in, "memory-breakdown")
    assert data["connection"]["total_bytes"] > 0
    lines = [line for line, _ in data["subscription"]["by_router_line"]]
    assert any(line.startswith("router/server/core/subscriptions.py:") for line in lines), lines
    sites = data["connection"]["sites"] + data["subscription"]["sites"]
    # tracemalloc's own allocations (its snapshots, linecache's source lines) are left out
    assert not any("tracemalloc.py" in t["allocated_at"] or "linecache.py" in t["allocated_at"]
                   for t in sites)
    subscription_types = {name for name, _, _ in data["subscription"]["types"]}
    assert "Sub" in subscription_types
    assert data["frozen_objects"] > 0  # the router froze what it loaded; the census saw it


def _contents(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir()) if p.is_file()}


def test_a_quick_run_prints_its_table_and_leaves_no_scratch_directory(
    results_in: Path, capsys: pytest.CaptureFixture[str]
):
    committed = _contents(COMMITTED)
    before = set(Path(tempfile.gettempdir()).glob("smp-bench-burst-*"))
    assert main(["burst", "--quick", "--sizes", "200"]) == 0
    printed = capsys.readouterr().out
    first, table = printed.split("\n", 1)
    assert first.startswith("results: ") and first.endswith("(removed after this run; "
                                                            "--out DIR keeps them)")
    scratch = Path(first.removeprefix("results: ").split(" (")[0])
    assert not scratch.exists()
    assert set(Path(tempfile.gettempdir()).glob("smp-bench-burst-*")) == before
    assert _contents(COMMITTED) == committed  # the figures RESULTS.md cites stay
    assert list(results_in.iterdir()) == []  # nor does it write to the default directory
    assert table.strip().startswith("| queues | mode |")
    assert "{" not in printed  # a table, not JSON


def test_out_overrides_the_scratch_directory_of_quick(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]):
    chosen = tmp_path / "mine"
    assert main(["burst", "--quick", "--sizes", "200", "--out", str(chosen)]) == 0
    assert capsys.readouterr().out.startswith(f"results: {chosen}\n")
    assert {p.name for p in chosen.iterdir()} == {"burst.json", "burst.md"}
