"""NEW and NKEY draw random ids; ids the store has already (DUPLICATE) are drawn
again a few times, then the command gets INTERNAL."""

from __future__ import annotations

from itertools import count

from router.protocol.types import AUTH, INTERNAL, ErrorType
from router.server.core.commands import _ID_ATTEMPTS, _add_with_fresh_ids
from store.interfaces import DUPLICATE


def answers(*results: ErrorType | None):
    tried: list[int] = []
    pending = list(results)

    async def add(value: int) -> ErrorType | None:
        tried.append(value)
        return pending.pop(0)

    return tried, add


async def test_a_taken_id_is_drawn_again_and_the_first_free_one_is_kept() -> None:
    tried, add = answers(DUPLICATE, DUPLICATE, None)
    assert await _add_with_fresh_ids(count().__next__, add) == 2
    assert tried == [0, 1, 2]


async def test_ids_taken_every_time_give_internal() -> None:
    tried, add = answers(*[DUPLICATE] * _ID_ATTEMPTS)
    assert await _add_with_fresh_ids(count().__next__, add) == INTERNAL
    assert len(tried) == _ID_ATTEMPTS


async def test_another_error_is_the_answer_without_a_second_try() -> None:
    tried, add = answers(AUTH)
    assert await _add_with_fresh_ids(count().__next__, add) == AUTH
    assert tried == [0]
