"""Each benchmark runs at a tiny size and writes its figures (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import burst, harness, memory, profile, scale, throughput


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
    assert row["single-task"]["traced_per_subscription"] > 0
    assert row["per-queue-task"]["tasks"] > row["single-task"]["tasks"]


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


def test_burst_drains_every_message_in_both_modes(results_in: Path):
    burst.run(sizes=(200,), repeats=1)
    run = _figures(results_in, "burst")["runs"][0]
    for mode in burst.MODES:
        assert run[mode]["received"] == 200
        assert run[mode]["delivered"] == 200


def test_scale_writes_a_projection_and_a_plot(results_in: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(scale, "IDLE_CONNECTIONS", 3)
    result = scale.run((200, 400), repeats=1)
    assert _figures(results_in, "scale")["projection"]["single-task"]["memory_gib"] > 0
    assert result["summary"][1]["single-task"]["drain_msgs_per_s"] > 0
    assert (results_in / "scale.png").stat().st_size > 0


def test_profile_saves_the_router_profile(results_in: Path):
    result = profile.run("scale", profiler="pyinstrument", quick=True)
    assert Path(result["profiler"]["text"]).read_text()


def test_collapsed_stacks_are_summarised_by_package_and_function():
    text = profile.summarize_collapsed(
        "run (trio/_core/_run.py:1);crypto_sign_open (nacl/bindings/crypto_sign.py:103) 3\n"
        "run (trio/_core/_run.py:1);send_block (router/server/transport.py:94) 1\n"
    )
    assert "samples: 4" in text
    assert "75.0%  PyNaCl" in text and "25.0%  router.server" in text


def test_memory_breakdown_attributes_live_bytes_to_packages(
    results_in: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(memory, "BREAKDOWN_CONNECTIONS", 3)
    monkeypatch.setattr(memory, "BREAKDOWN_SUBSCRIPTIONS", 100)
    memory.breakdown()
    data = _figures(results_in, "memory-breakdown")
    assert data["connection"]["total_bytes"] > 0
    assert "router.server" in data["subscription"]["by_package"]
    assert "freed_per_connection_by_a_websocket_ping" in data
