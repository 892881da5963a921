"""Id checks give the same answer with their memo warm or cold, and the memo stays bounded.

``statemachine/ids.py`` remembers ids and names that passed (every command repeats them); a
value that fails is checked again each time. With the memo cleared, a check runs the full
validation; the answer (the kind, or the rejection with its code, message and fields) must not
change once the value is remembered, nor after the memo fills up and is cleared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import examples
from waitgraph.statemachine import ids
from waitgraph.statemachine.errors import Rejection
from waitgraph.statemachine.ids import CREATED_TARGET_KINDS, TARGET_KINDS, Kind

CHECKS: list[Callable[[Any], Any]] = [
    lambda v: ids.id_kind(v, "target_id", TARGET_KINDS),
    lambda v: ids.id_kind(v, "execution_id", frozenset({Kind.EXEC})),
    lambda v: ids.id_kind(v, "target_id", CREATED_TARGET_KINDS),
    ids.actor_kind,
    lambda v: ids.validate_name(v, "agent_id"),
]

PREFIXES = [*(k.value + ":" for k in Kind), "agent:", "operator:", "node:", "", ":", "bogus:", "exec"]
values = st.one_of(
    st.builds(
        str.__add__,
        st.sampled_from(PREFIXES),
        st.text(alphabet="ab-_.:/@+ 9Z\u00e9>", max_size=12) | st.sampled_from(["x" * 130, "r-1", ""]),
    ),
    st.sampled_from(PREFIXES),
    st.integers(),
    st.none(),
)


def answer(check: Callable[[Any], Any], value: Any) -> Any:
    try:
        return ("ok", check(value))
    except Rejection as rej:
        return ("rejected", rej)


@settings(max_examples=examples(400), deadline=None)
@given(batch=st.lists(values, min_size=1, max_size=8))
def test_remembered_answers_equal_fresh_ones(batch: list[Any]) -> None:
    for check in CHECKS:
        ids._PREFIXES.clear()
        ids._NAMES.clear()
        cold = [answer(check, v) for v in batch]
        warm = [answer(check, v) for v in batch]
        assert warm == cold
        assert [answer(check, v) for v in reversed(batch)] == cold[::-1]


def test_memo_is_bounded_and_still_right_after_it_fills() -> None:
    ids._PREFIXES.clear()
    for i in range(ids._MEMO_SIZE * 2 + 7):
        assert ids.id_kind(f"exec:e{i}", "execution_id", frozenset({Kind.EXEC})) is Kind.EXEC
        assert len(ids._PREFIXES) <= ids._MEMO_SIZE
    assert ids.id_kind("exec:e1", "execution_id", frozenset({Kind.EXEC})) is Kind.EXEC
    assert answer(lambda v: ids.id_kind(v, "target_id", TARGET_KINDS), "exec:e1") == ("ok", Kind.EXEC)
    assert answer(lambda v: ids.id_kind(v, "target_id", CREATED_TARGET_KINDS), "exec:e1")[0] == "rejected"
