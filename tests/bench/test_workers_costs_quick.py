"""The worker benches that measure costs run tiny (no timing or size is asserted):
every message and subscription went through at two workers, and each figure was read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from bench import workers_costs, workers_router, workers_shadow


def test_the_costs_of_two_workers_are_measured(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(workers_costs, "QUICK_CLIENTS", 4)
    monkeypatch.setattr(workers_costs, "QUICK_LIGHT_DURATION", 0.5)
    monkeypatch.setattr(workers_costs, "QUICK_IDLE_CONNECTIONS", 6)
    monkeypatch.setattr(workers_costs, "QUICK_IDLE_SUBSCRIPTIONS", 60)
    monkeypatch.setattr(workers_costs, "SETTLE", 0.2)
    [result] = workers_costs.run(quick=True, counts=(2,), duration=0.5, out=tmp_path)
    assert result["workers"] == 2 and len(result["idle_rss_by_process"]) == 3
    assert result["ping_ms"]["samples"] == workers_costs.QUICK_PINGS
    for load in (result["light"], result["loaded"]):
        assert load["msgs_per_s"] > 0
        assert load["send_errors"] == load["ack_errors"] == 0
    assert result["loaded"]["cpu_us_per_msg"] > 0
    memory = result["memory"]
    assert memory["rss_subscribed"] > 0 and memory["subscriptions"] == 60
    # Per process at each stage: the supervisor and both workers.
    assert [len(memory["rss_by_process"][stage]) for stage in ("empty", "connected",
                                                              "subscribed")] == [3, 3, 3]
    assert "rss_settled" not in memory  # quick: not waited for
    assert json.loads((tmp_path / "workers_costs.json").read_text())["parameters"]["counts"] == [2]


def test_the_loaded_phase_alone_is_measured(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(workers_costs, "SETTLE", 0.2)
    [result] = workers_costs.run(quick=True, counts=(2,), duration=0.5, out=tmp_path,
                                 loaded_only=True, clients=4)
    assert result["clients"] == 4 and "light" not in result and "memory" not in result
    loaded = result["loaded"]
    assert loaded["msgs_per_s"] > 0 and loaded["cpu_us_per_msg"] > 0
    assert loaded["send_errors"] == loaded["ack_errors"] == 0
    assert (tmp_path / "workers_costs.md").read_text().startswith("|")


def test_the_loaded_phase_alone_with_repeats_ends_with_the_routers_loaded_in_turn(
        tmp_path: Path):
    results = workers_costs.run(quick=True, counts=(1, 2), duration=0.5, out=tmp_path,
                                loaded_only=True, clients=4, repeats=2)
    assert [r["workers"] for r in results] == [1, 2]
    saved = json.loads((tmp_path / "workers_costs.json").read_text())
    assert len(saved["interleaved"]["2"]["x_first"]) == 2
    assert "loaded in turn" in (tmp_path / "workers_costs.md").read_text()


def test_the_loaded_phase_at_a_rate_is_measured(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(workers_costs, "SETTLE", 0.2)
    [result] = workers_costs.run(quick=True, counts=(2,), duration=1.0, out=tmp_path,
                                 loaded_only=True, clients=4, rate=40.0)
    loaded = result["loaded"]
    # Sent at the rate whatever the answers do: as fast as they go would be hundreds.
    assert 0 < loaded["msgs_per_s"] <= 80 and loaded["cpu_us_per_msg"] > 0
    assert loaded["send_errors"] == loaded["ack_errors"] == 0
    saved = json.loads((tmp_path / "workers_costs.json").read_text())
    assert saved["parameters"]["rate"] == 40.0


def test_two_checkouts_routers_are_compared_side_by_side(tmp_path: Path):
    # This checkout against itself: each router of each tree took the load, and the
    # figures of both are there.
    results = workers_costs.compare(workers_costs.HERE, counts=(2,), clients=4,
                                    duration=0.5, repeats=2, out=tmp_path)
    for name in ("base-2", "this-2"):
        runs = results["runs"][name]
        assert len(runs) == 2 and all(r["msgs_per_s"] > 0 for r in runs)
        assert all(r["send_errors"] == r["ack_errors"] == 0 for r in runs)
        assert results["medians"][name]["cpu_us_per_msg"] > 0
    assert (tmp_path / "workers_costs_compare.md").read_text().startswith("|")


def test_each_counts_routers_are_loaded_in_turn_and_their_ratio_taken_run_beside_run():
    runs = workers_costs.interleaved({"this": workers_costs.HERE}, counts=(1, 2), clients=4,
                                     duration=0.5, repeats=2)
    ratios = workers_costs.interleaved_ratios((1, 2), runs)
    assert ratios["1"]["x_first"] == [1.0, 1.0]
    two = ratios["2"]
    assert len(two["x_first"]) == 2 and two["x_first_median"] > 0
    assert two["x_first"] == [t / o for t, o in zip(two["cpu_us_per_msg"],
                                                    ratios["1"]["cpu_us_per_msg"], strict=True)]
    assert all(r["send_errors"] == r["ack_errors"] == 0 for r in runs[("this", 2)])
    assert workers_costs.ratios_table(ratios).count("\n") == 3  # header, rule, two counts


def test_a_shadows_traced_memory_is_measured(tmp_path: Path):
    result = workers_shadow.run(8, tmp_path)
    # The first SUB of the other worker's queue makes a shadow: more than a subscription.
    assert result["bytes_per_other_workers_subscription"] > result["bytes_per_own_subscription"]
    assert result["sites"] and result["files"]
    assert (tmp_path / "workers_shadow.md").read_text().startswith("|")


def test_the_routers_run_on_the_cores_they_are_given(tmp_path: Path, monkeypatch):
    core = max(os.sched_getaffinity(0))
    monkeypatch.setattr(workers_router, "_router_cores", {core})
    data_dir = tmp_path / "data"
    trio.run(workers_router.fill, workers_costs.STORE, data_dir, range(4), 2)
    with workers_router.CliRouter(2, workers_costs.STORE, data_dir) as router:
        processes = router.processes()
        assert len(processes) == 3  # the supervisor and both workers, each on that core
        assert [p.cpu_affinity() for p in processes] == [[core]] * 3


def test_cores_the_machine_lacks_or_shared_with_the_load_are_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        workers_costs.main(["--loaded-only", "--cores", "0:0"])
    assert exit_.value.code == 2 and "share cores" in capsys.readouterr().err
    missing = max(os.sched_getaffinity(0)) + 1
    assert workers_costs.main(["--loaded-only", "--cores", f"{missing}:0"]) == 1
    assert f"cores [{missing}]: this machine has" in capsys.readouterr().err
