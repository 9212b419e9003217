"""The machines' cost cuts keep their verdicts (issue 13).

* :class:`cortex_spec.stateful.differential.Draws` draws the same values as
  ``st.data()`` and still prints every labelled draw of a failing example;
* :func:`cortex_spec.stateful.concurrent.history_shape` tells apart exactly
  the histories a linearizability verdict can tell apart;
* the differential machine's view checks count the steps that changed the
  reference, and a backend that writes on a read is still caught.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_spec import Context, Scope
from cortex_spec.stateful.concurrent import history_shape
from cortex_spec.stateful.differential import Draws
from cortex_spec.stateful.history import Call
from cortex_spec.stateful.ops import Op, Outcome

# -- Draws ---------------------------------------------------------------------------


def _drawn(fast: bool) -> list[tuple[int, str]]:
    seen: list[tuple[int, str]] = []

    @settings(max_examples=40, database=None, derandomize=True)
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        draws = Draws(data) if fast else data
        seen.append((draws.draw(st.integers(0, 9), "n"), draws.draw(st.sampled_from("abc"), "s")))

    collect()
    return seen


def test_draws_give_what_data_draw_gives():
    fast, plain = _drawn(True), _drawn(False)
    assert fast == plain and len(set(fast)) > 5


def test_draws_of_maps_unions_and_records_replay_what_data_draw_made():
    """The shortcuts of :func:`Draws.draw` (a ``sampled_from`` with maps, a
    ``one_of``, a record's fields) make the choices Hypothesis' own draw
    makes: every example Hypothesis generates through ``st.data()``,
    replayed from its choices through the shortcuts, gives the same values
    and takes every choice — with every generated kind of every class
    (nested records, lists of records, optional and JSON fields) among the
    strategies, and ones no shortcut knows in between."""
    from hypothesis.control import BuildContext
    from hypothesis.internal.conjecture.data import ConjectureData

    from cortex_spec import CLASSES
    from cortex_spec import kinds as k
    from cortex_spec.stateful.differential import _draw_direct
    from cortex_spec.stateful.kinds import entities
    from cortex_spec.stateful.world import JSON_POOL, json_objects, optional, sampled

    def drawn_by_the_machines(table: k.Table) -> bool:  # (entities() keys them by a fixed id)
        key = k.specs(table.entity).get("id")
        return key is None or key.role != k.KEY or isinstance(key.kind, k.Id)

    strategies = [optional(sampled(("a", "b", "c"))), json_objects(), st.integers(0, 5),
                  optional(json_objects()), st.one_of(st.none(), st.booleans(), sampled((1, 2)))]
    strategies += [entities(table.entity, ()) for cls in CLASSES.values() for table in cls.tables
                   if drawn_by_the_machines(table)]
    assert len(strategies) > 15  # every generated kind of every class
    recorded: list = []

    @settings(max_examples=80, database=None, derandomize=True)
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        values = tuple(data.draw(s) for s in strategies)
        recorded.append((tuple(data.conjecture_data.choices), values))

    collect()
    assert len({repr(values) for _, values in recorded}) > 40  # the examples differ
    for choices, values in recorded:
        replay = ConjectureData.for_choices(choices)
        with BuildContext(replay, wrapped_test=collect):
            again = tuple(_draw_direct(replay, s) for s in strategies)
        assert again == values
        assert len(replay.choices) == len(choices)
        assert all(again[1] is not pooled for pooled in JSON_POOL)  # json_objects' map: a copy


def test_an_entity_normalizes_to_every_field_by_name():
    """An attrs value normalizes (``ops._attrs_normalizer``, a generated
    expression) to its class name and every field by name, in order, each
    normalized: two values that differ in any one field, or only in their
    class, normalize apart."""
    import attrs

    from cortex_spec.stateful.ops import normalize

    @attrs.frozen
    class Inner:
        n: int

    @attrs.frozen
    class Row:
        id: str
        count: int
        inner: Inner
        tags: tuple
        _hidden: float = 0.5

    @attrs.frozen
    class Other:
        id: str
        count: int
        inner: Inner
        tags: tuple
        _hidden: float = 0.5

    row = Row("r1", 1, Inner(2), ("a",))
    assert normalize(row) == ("Row", (("id", "r1"), ("count", ("int", 1)), ("inner", ("Inner", (("n", ("int", 2)),))),
                                      ("tags", ("tuple", ("a",))), ("_hidden", ("float", 0.5))))
    changed = [attrs.evolve(row, id="r2"), attrs.evolve(row, count=True), attrs.evolve(row, inner=Inner(3)),
               attrs.evolve(row, tags=["a"]), Row("r1", 1, Inner(2), ("a",), 1.5), Other("r1", 1, Inner(2), ("a",))]
    assert all(normalize(c) != normalize(row) for c in changed)


def test_a_failing_example_still_lists_every_labelled_draw():
    @settings(max_examples=50, database=None)
    @given(st.data())
    def fails(data: st.DataObject) -> None:
        draws = Draws(data)
        first = draws.draw(st.integers(0, 3), "first label")
        second = draws.draw(st.sampled_from(("a", "b")), "second label")
        assert not (first == 3 and second == "b")

    with pytest.raises(AssertionError) as caught:
        fails()
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "Draw 1 (first label): 3" in notes and "Draw 2 (second label): 'b'" in notes, notes


# -- history shapes ------------------------------------------------------------------

_CTX = Context(Scope.parse("ws=w1"))


def _call(index: int, lane: int, start: int, end: int | None, value: str = "ok") -> Call:
    op = Op("claim", _CTX, (f"row{index}",))
    return Call(index, lane, op, start, end, Outcome("ok", value) if end is not None else Outcome("unknown"))


def test_histories_with_the_same_order_of_events_have_one_shape():
    one = [_call(0, 1, 10, 20), _call(1, 2, 15, 30)]
    other = [_call(0, 1, 110, 140), _call(1, 2, 120, 170)]  # other instants, the same overlap
    assert history_shape(one) == history_shape(other)


def test_a_different_order_of_events_is_another_shape():
    overlapping = [_call(0, 1, 10, 20), _call(1, 2, 15, 30)]
    one_after_the_other = [_call(0, 1, 10, 14), _call(1, 2, 15, 30)]
    assert history_shape(overlapping) != history_shape(one_after_the_other)


def test_a_tie_is_neither_order():
    tie = [_call(0, 1, 10, 15), _call(1, 2, 15, 30)]
    before = [_call(0, 1, 10, 14), _call(1, 2, 15, 30)]
    after = [_call(0, 1, 10, 16), _call(1, 2, 15, 30)]
    assert len({history_shape(tie), history_shape(before), history_shape(after)}) == 3


def test_another_outcome_lane_or_unfinished_call_is_another_shape():
    base = [_call(0, 1, 10, 20), _call(1, 2, 15, 30)]
    assert history_shape(base) != history_shape([_call(0, 1, 10, 20), _call(1, 2, 15, 30, "other")])
    assert history_shape(base) != history_shape([_call(0, 2, 10, 20), _call(1, 1, 15, 30)])
    assert history_shape(base) != history_shape([_call(0, 1, 10, 20), _call(1, 2, 15, None)])


def _claimed(index: int, lane: int, start: int, end: int, token: str) -> Call:
    op = Op("claim", _CTX, ("row",))
    return Call(index, lane, op, start, end, Outcome("ok", ("Delivery", (("id", "row"), ("claim_token", token)))))


def test_opaque_values_are_named_by_first_appearance():
    opaque = frozenset({"claim_token"})
    one = [_claimed(0, 1, 10, 20, "t-1"), _claimed(1, 2, 30, 40, "t-2")]
    renamed = [_claimed(0, 1, 10, 20, "x-9"), _claimed(1, 2, 30, 40, "x-3")]
    repeated = [_claimed(0, 1, 10, 20, "x-9"), _claimed(1, 2, 30, 40, "x-9")]  # one token issued twice
    assert history_shape(one, opaque) == history_shape(renamed, opaque)
    assert history_shape(one, opaque) != history_shape(repeated, opaque)
    assert history_shape(one) != history_shape(renamed)  # not an opaque field: compared as it is
