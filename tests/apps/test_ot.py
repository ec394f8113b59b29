"""The transformation of text edits: convergence of two concurrent operations
(TP1) on random texts and operations, and the three classic intentions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from epto.apps._ot import Delete, Insert, apply, transform

texts = st.text(alphabet="abcdef", max_size=12)


@st.composite
def operations(draw: st.DrawFn, text: str) -> tuple[Insert | Delete, ...]:
    out: list[Insert | Delete] = []
    length = len(text)
    for _ in range(draw(st.integers(0, 3))):
        if length and draw(st.booleans()):
            pos = draw(st.integers(0, length - 1))
            n = draw(st.integers(1, length - pos))
            out.append(Delete(pos, n))
            length -= n
        else:
            pos = draw(st.integers(0, length))
            word = draw(st.text(alphabet="XYZ", min_size=1, max_size=3))
            out.append(Insert(pos, word))
            length += len(word)
    return tuple(out)


@settings(max_examples=600, deadline=None)
@given(data=st.data(), text=texts, a_first=st.booleans())
def test_two_concurrent_operations_converge(data: st.DataObject, text: str, a_first: bool) -> None:
    a = data.draw(operations(text))
    b = data.draw(operations(text))
    a2, b2 = transform(a, b, a_first)
    assert apply(apply(text, b), a2) == apply(apply(text, a), b2)


def test_concurrent_inserts_at_one_position_follow_the_order() -> None:
    first, second = (Insert(2, "AA"),), (Insert(2, "BB"),)
    later, _ = transform(second, first, a_first=False)
    assert apply(apply("xxxx", first), later) == "xxAABBxx"


def test_an_insert_inside_a_range_deleted_concurrently_survives() -> None:
    delete, insert = (Delete(1, 4),), (Insert(3, "NEW"),)
    after, _ = transform(insert, delete, a_first=False)
    assert apply(apply("abcdefg", delete), after) == "aNEWfg"
    after_delete, _ = transform(delete, insert, a_first=False)
    assert apply(apply("abcdefg", insert), after_delete) == "aNEWfg"


def test_overlapping_deletes_delete_the_overlap_once() -> None:
    one, two = (Delete(1, 4),), (Delete(3, 4),)
    after, _ = transform(two, one, a_first=False)
    assert apply(apply("abcdefghij", one), after) == "ahij"
