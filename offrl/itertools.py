"""d3rlpy's ``d3rlpy.itertools``: iterate with a flag marking the first or
the last item."""

from __future__ import annotations

from typing import Iterable, Iterator, Tuple, TypeVar

__all__ = ["first_flag", "last_flag"]

T = TypeVar("T")


def last_flag(iterable: Iterable[T]) -> Iterator[Tuple[bool, T]]:
    """``(is_last, item)`` for each item (nothing for an empty iterable)."""
    iterator = iter(iterable)
    try:
        previous = next(iterator)
    except StopIteration:
        return
    for item in iterator:
        yield False, previous
        previous = item
    yield True, previous


def first_flag(iterable: Iterable[T]) -> Iterator[Tuple[bool, T]]:
    """``(is_first, item)`` for each item."""
    for i, item in enumerate(iterable):
        yield i == 0, item
