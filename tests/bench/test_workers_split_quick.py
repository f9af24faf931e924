"""`python -m bench workers_split`, in a few loops: the shadow's answers to a block of
SUBs come through the front whole, and every figure is there."""

from __future__ import annotations

import pytest

from bench import workers_split


@pytest.mark.parametrize("version", [10, 19])
def test_the_answers_handed_back_come_through_and_are_timed(
        version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers_split, "LOOPS", 5)
    figures = workers_split._measure(version)
    assert 0 < figures["SUBs of the block handed off"] < workers_split.SUBS
    assert figures["front's sort of the block"] > 0
    assert figures["the owner's answers handed back"] > 0
