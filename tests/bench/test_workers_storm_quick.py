"""The workers' storm bench runs tiny at one worker and at two (no timing is asserted):
every SUB answered OK at both counts, every waiting message delivered once, each
queue written into its owner's share, and the CPU and memory of every process read."""

from __future__ import annotations

import json
from pathlib import Path

from bench import workers_storm


def test_a_tiny_storm_subscribes_every_queue_at_one_and_two_workers(tmp_path: Path):
    results = workers_storm.run(quick=True, queues=120, connections=3, messages_every=4,
                                out=tmp_path)
    assert [r["workers"] for r in results] == [1, 2]
    for r in results:
        assert r["errors"] == 0, r
        assert r["messages"] == 120 // 4, r  # one MSG per queue with a message, no more
        assert sum(r["queues_per_worker"].values()) == 120
        assert r["router_cpu_s"] > 0 and r["rss_after"] > 0 and r["ping_ms"]["samples"] > 0
        # Each worker's connections (the storm's and the PING client's) and its CPU.
        assert sum(r["connections_per_worker"]) == 3 + 1, r
        assert len(r["per_worker"]) == r["workers"] == len(r["cpu_profile"][0]) - 1
        for worker in r["per_worker"]:
            assert 0 <= worker["started_s"] <= worker["done_s"] <= r["storm_s"], worker
        assert r["machine_idle_cores"] >= 0 and r["load_cores"] >= 0
    # Both workers own some of the queues, and the two processes' memory is counted.
    assert min(results[1]["queues_per_worker"].values()) > 0
    assert results[1]["rss_before"] > results[0]["rss_before"]
    data = json.loads((tmp_path / "workers_storm.json").read_text())
    scaling = data["machine_scaling"]
    assert scaling["processes"] == 2 and scaling["alone_s"] > 0 and scaling["together_s"] > 0
    assert data["parameters"]["counts"] == [1, 2]
    assert (tmp_path / "workers_storm.md").read_text().startswith("|")


def _answer(corr_id: bytes, command: bytes) -> bytes:
    # A router's answer: empty authorization, the corrId, an empty entity id (v10).
    return b"\x00" + bytes([len(corr_id)]) + corr_id + b"\x00" + command


class _Arriving:
    """What `_LoadConnection.take` reads: the bytes given since its last read."""

    def __init__(self) -> None:
        self.data = bytearray()

    def read_into(self, into: bytearray) -> None:
        into += self.data
        self.data = bytearray()


def test_the_load_checks_its_answers_once_the_clock_has_stopped():
    """The load counts transmissions while the clock runs and takes them apart only
    afterwards: a repeated, unknown, refused or missing answer is still an error, and
    a block cut short too, or one whose length runs past its end."""
    from router.protocol.block import BLOCK_SIZE, BatchPacker

    arriving = _Arriving()
    load = workers_storm._LoadConnection(arriving, 10, b"")  # type: ignore[arg-type]
    load.unanswered = {b"a" * 24, b"b" * 24, b"c" * 24, b"d" * 24}
    packer = BatchPacker()
    for t in [_answer(b"a" * 24, b"OK"), _answer(b"b" * 24, b"OK"),
              _answer(b"b" * 24, b"OK"),  # repeated
              _answer(b"e" * 24, b"OK"),  # unknown
              _answer(b"c" * 24, b"ERR AUTH"),  # refused
              _answer(b"", b"MSG x")]:  # a push: counted
        assert packer.add(t)
    block = packer.take_block()
    arriving.data += block[:100]
    assert not load.take() and not load.contents  # a block not whole yet is not counted
    arriving.data += block[100:]
    assert load.take()  # six transmissions counted for four SUBs
    assert load.check() == (1, 4)  # and "d" is not answered: 3 + 1
    load = workers_storm._LoadConnection(arriving, 10, b"")  # type: ignore[arg-type]
    load.unanswered = {b"a" * 24}
    assert packer.add(_answer(b"a" * 24, b"OK"))
    arriving.data += packer.take_block()
    assert load.take() and load.check() == (0, 0)
    arriving.data += b"\xff" * (BLOCK_SIZE // 2)
    load.take()
    assert load.check() == (0, 1)  # a block cut short
    arriving.data += b"\xff" * (BLOCK_SIZE // 2)
    load.take()
    assert load.contents[-1] is None and not load.pending
    assert load.check() == (0, 1)  # a length past the block's end
