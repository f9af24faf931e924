"""`python -m bench hotpath` at a tiny size: every row is measured and written (no
timing is asserted), and the minimal router it measures serves what the load uses."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from functools import partial
from pathlib import Path

import pytest
import trio

from bench import harness, hotpath
from bench.__main__ import main
from bench.minimal_router import MinimalRouter
from router.client import MessageEvent, SMPError, open_client
from router.protocol import crypto
from router.server.edge.identity import generate_identity
from router.server.edge.listener import serve_edge

COMMITTED = harness.RESULTS_DIR


@pytest.mark.parametrize("version", [10, 19])
async def test_the_minimal_router_creates_secures_delivers_and_takes_acks(version: int):
    fixture = MinimalRouter(generate_identity())
    async with trio.open_nursery() as nursery:
        listener = await nursery.start(partial(serve_edge, fixture.serve, "127.0.0.1", 0))
        url = f"ws://127.0.0.1:{listener.port}"
        address = hotpath._ws_address(url, fixture.identity.address("127.0.0.1", listener.port))
        with trio.fail_after(20):
            async with open_client(address, versions=(10, version)) as recipient, \
                    open_client(address, versions=(10, version)) as sender:
                queue = await recipient.create_queue()
                seed, key = crypto.new_ed25519()
                await recipient.secure_queue(queue, key)
                await recipient.subscribe(queue)
                await sender.send(queue.sender_id, b"first", sender_seed=seed)
                await sender.send(queue.sender_id, b"second", sender_seed=seed)
                first = await recipient.next_event()
                assert isinstance(first, MessageEvent) and first.body == b"first"
                await recipient.ack(queue, first.msg_id)  # answered with the next MSG
                second = await recipient.next_event()
                assert isinstance(second, MessageEvent) and second.body == b"second"
                await recipient.ack(queue, second.msg_id)
                with pytest.raises(SMPError, match="AUTH"):  # unsigned: refused
                    await sender.send(queue.sender_id, b"third")
        nursery.cancel_scope.cancel()


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def test_a_quick_hotpath_run_measures_every_row_and_leaves_the_results_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    committed = {name: _digest(COMMITTED / name) for name in ("hotpath.json", "hotpath.md")}
    directory = tmp_path / "kept"
    code = main(["hotpath", "--quick", "--clients", "2", "--duration", "0.5",
                 "--background", "200", "--light-duration", "0.5", "--light-windows", "2",
                 "--out", str(directory)])
    assert code == 0
    assert directory.resolve() != COMMITTED.resolve()
    assert {name: _digest(COMMITTED / name) for name in committed} == committed
    data = json.loads((directory / "hotpath.json").read_text())
    assert data["benchmark"] == "hotpath" and data["parameters"]["clients"] == 2
    rows = data["summary"]["saturated"]
    assert list(rows) == ["echo", "minimal v10", "router v10", "minimal v19", "router v19"]
    for name, row in rows.items():
        assert row["msgs_per_s"] > 0, name
        assert row["cpu_us_per_msg"] > 0, name
        assert row["steps_per_msg"] > 0, name  # the instrument counted in that process
        if name != "echo":
            assert row["cpu_ratio_to_echo"] > 0, name
            assert row["blocks_in_per_msg"] > 0, name
    crypto = data["summary"]["crypto"]
    assert list(crypto) == ["v10", "v19"]
    for key in ("crypto_us_per_msg", "crypto_ratio_to_echo", "router_beyond_crypto_us"):
        assert crypto["v10"][key] > 0, key
    # Block encryption only adds: a box per block through the connection.
    assert crypto["v19"]["crypto_us_per_msg"] > crypto["v10"]["crypto_us_per_msg"]
    run = data["runs"][0]
    assert {run[name]["tree"] for name in rows} == {str(hotpath.HERE)}
    light = data["summary"]["light"]
    assert list(light) == ["echo", "minimal v10", "router v10", "minimal v19", "router v19"]
    for name, row in light.items():
        assert row["samples"] > 0 and row["p50"] is not None, name
        assert len(row["p50_by_window"]) == 2, name
    assert len(data["summary"]["targets"]) == 8
    table = (directory / "hotpath.md").read_text()
    assert "router v19" in table and "### Targets" in table
    assert "### The crypto a message cannot do without" in table


def test_a_quick_run_without_out_prints_its_table_and_removes_its_scratch_directory(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    def measured(out: Path, **_: object) -> None:  # the run itself is the test above
        (out / "hotpath.md").write_text("| the table |\n")

    monkeypatch.setattr(hotpath, "run", measured)
    before = set(Path(tempfile.gettempdir()).glob("smp-bench-hotpath-*"))
    assert main(["hotpath", "--quick"]) == 0
    first, table = capsys.readouterr().out.split("\n", 1)
    assert first.endswith("(removed after this run; --out DIR keeps them)")
    assert table.strip() == "| the table |"
    assert set(Path(tempfile.gettempdir()).glob("smp-bench-hotpath-*")) == before


def test_a_server_of_another_tree_runs_that_trees_router(tmp_path: Path):
    tree = tmp_path / "tree"
    for package in ("router", "store"):
        shutil.copytree(hotpath.HERE / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for kind in hotpath.KINDS:
        with hotpath.Server(kind, tree) as server:
            assert server.tree == str(tree.resolve())
            assert server.call("sample")["steps"] > 0  # its loop ran, counted
