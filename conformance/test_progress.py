"""Certifies conformance class ``progress`` (spec: progress.md): a run's
snapshot made and replaced at exactly the caller's scope (its creation time
kept, its JSON whole), one snapshot per run and exact scope, reads and
deletes that reach only the caller's own scope, a delete of nothing that is
not an error, bad input refused with nothing written, and threaded saves
and deletes of one snapshot that each land whole; and the class's examples
for the scope, common and size suites.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from cortex_spec import Context, Scope, ids
from cortex_spec.errors import InvalidArgument, NoScope, ProgressNotFound
from cortex_spec.progress import Progress, StoredProgress, progress_key, stored_row
from cortex_spec.testing import (
    ZERO, clause, ctx, expect, expect_is, expect_op, expect_raises, expect_strict, expect_true, race, shorten,
)

from .examples import HOME, Examples, Site, long_call, long_check, long_scope_of

S = Scope.parse
#: the scopes a snapshot at HOME is compared with: an ancestor, a descendant,
#: a sibling and look-alikes — each holds a snapshot of its own
AROUND = ["ws=w1", "ws=w1/proj=p1/env=e1", "ws=w1/proj=p2", "ws=w10/proj=p1", "ws=w1/proj=p10", "WS=w1/proj=p1"]


def _progress(run: str | None = None, **fields: Any) -> Progress:
    fields.setdefault("step_index", 3)
    fields.setdefault("snapshot", {"messages": 2, "ratio": 0.5, "done": True, "plan": ["a", "b"]})
    return Progress(run_id=run or ids.new_id(ids.RUN), **fields)


def _seed(store: Any, fixture: Any) -> SimpleNamespace:
    run = ids.new_id(ids.RUN)
    store.save_progress(ctx(HOME), _progress(run))
    return SimpleNamespace(progress_run=run)


def _view(store: Any, w: SimpleNamespace, scopes: Any) -> dict:
    out: dict = {}
    run = getattr(w, "progress_run", None)
    if run is None:
        return out
    for sc in list(scopes) + [HOME]:
        c = sc if not isinstance(sc, str) else ctx(sc)
        try:
            out[f"progress@{c.scope.canonical()}"] = store.get_progress(c, run)
        except ProgressNotFound:
            out[f"progress@{c.scope.canonical()}"] = "<none>"
    return out


def _stored(store: Any, c: Any, w: SimpleNamespace, result: Any) -> StoredProgress:
    """The row a save stored (what RSC-GEN-8 measures), read back afresh."""
    return stored_row(store.get_progress(c, w.progress_run))


def _fresh(store: Any, c: Any, w: SimpleNamespace) -> None:
    w.progress_run = ids.new_id(ids.RUN)


def _saved(store: Any, c: Any, w: SimpleNamespace) -> None:
    _fresh(store, c, w)
    store.save_progress(c, _progress(w.progress_run, snapshot={"p": "small"}))


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    run = ids.new_id(ids.RUN)
    saved = long_call("save_progress", lambda: store.save_progress(c, Progress(run_id=run, step_index=1)))
    long_scope_of("saved progress", saved, c.scope)
    long_call("save_progress (replacing)", lambda: store.save_progress(c, Progress(run_id=run, step_index=2)))
    long_check("get_progress", store.get_progress(c, run).step_index, 2)
    long_call("delete_progress", lambda: store.delete_progress(c, run))


#: The class's methods for the cross-class suites (every method is exact,
#: SCOPE-EXACT-3: tested here, test_each_exact_scope_holds_a_snapshot_of_its_own).
EXAMPLES = Examples(
    "progress",
    long_scopes=_long_scopes,
    seed=_seed,
    view=_view,
    exact_byid=frozenset({"save_progress", "get_progress", "delete_progress"}),
    size_methods=frozenset({"save_progress"}),
    good={
        "save_progress": lambda s, c, w: s.save_progress(c, _progress(w.progress_run, step_index=4)),
        "get_progress": lambda s, c, w: s.get_progress(c, w.progress_run),
        "delete_progress": lambda s, c, w: s.delete_progress(c, w.progress_run),
    },
    bad={
        "save_progress": lambda s, c, w: s.save_progress(c, _progress(w.progress_run, step_index=-1)),
        "get_progress": lambda s, c, w: s.get_progress(c, "arun_bad"),
        "delete_progress": lambda s, c, w: s.delete_progress(c, ids.new_id(ids.SESSION)),
    },
    sites={
        # PROG-SAVE-1: a first save stamps both instants from the clock
        "create": (
            Site("save_progress", "progress",
                 lambda s, c, w, v: s.save_progress(c, _progress(ids.new_id(ids.RUN), **v)),
                 read=lambda s, c, w, r: s.get_progress(c, r.run_id), clauses=("PROG-SAVE-1",)),
        ),
        "id": (
            Site("save_progress.progress.run_id", "progress",
                 lambda s, c, w, v: s.save_progress(c, Progress(run_id=v)), prefix=ids.RUN),
            Site("get_progress.run_id", "progress", lambda s, c, w, v: s.get_progress(c, v), prefix=ids.RUN),
            Site("delete_progress.run_id", "progress", lambda s, c, w, v: s.delete_progress(c, v), prefix=ids.RUN),
        ),
        "json": (
            Site("progress.snapshot", "progress",
                 lambda s, c, w, v: s.save_progress(c, _progress(ids.new_id(ids.RUN), snapshot=v)),
                 read=lambda s, c, w, r: s.get_progress(c, r.run_id).snapshot),
        ),
        "counter": (
            Site("progress.step_index", "progress",
                 lambda s, c, w, v: s.save_progress(c, _progress(ids.new_id(ids.RUN), step_index=v)),
                 read=lambda s, c, w, r: s.get_progress(c, r.run_id).step_index),
        ),
        "size": (
            Site("save_progress.snapshot", "progress",
                 lambda s, c, w, t: s.save_progress(c, _progress(w.progress_run, snapshot={"p": t})),
                 read=_stored, prepare=_fresh),
            Site("save_progress.snapshot (replacing)", "progress",
                 lambda s, c, w, t: s.save_progress(c, _progress(w.progress_run, snapshot={"p": t})),
                 read=_stored, prepare=_saved),
        ),
    },
)


# -- save (PROG-SAVE) -----------------------------------------------------------------------------


@pytest.mark.clause("PROG-SAVE-1", "PROG-SAVE-3", "PROG-GET-1", "RSC-GEN-4", "RSC-GEN-7")
def test_a_first_save_stores_the_snapshot_stamped_at_the_callers_scope(store, clock):
    """The object's scope and instants are ignored; the run need not exist;
    the JSON reads back with its types."""
    run = ids.new_id(ids.RUN)
    clock.advance(milliseconds=7)
    given = _progress(run, scope=S("elsewhere=x"), created_at=clock.now() - timedelta(days=3), updated_at=None)
    made = store.save_progress(ctx(HOME), given)
    want = Progress(run_id=run, scope=S(HOME), step_index=given.step_index, snapshot=given.snapshot,
                    created_at=clock.now(), updated_at=clock.now())
    with clause("PROG-SAVE-1", what="the snapshot save_progress returns"):
        expect_strict("PROG-SAVE-1", made, want, "made" + ": " + shorten(made))
    with clause("PROG-GET-1", "RSC-GEN-7", what="the snapshot read back"):
        expect_strict(("PROG-GET-1", "RSC-GEN-7"), store.get_progress(ctx(HOME), run), want,
                      "store.get_progress(ctx(HOME), run)")


@pytest.mark.clause("PROG-SAVE-2", "PROG-ENT-1")
def test_a_second_save_replaces_the_snapshot_whole_and_keeps_its_creation(store, clock):
    run = ids.new_id(ids.RUN)
    first = store.save_progress(ctx(HOME), _progress(run, step_index=1, snapshot={"a": 1, "b": 2}))
    clock.advance(milliseconds=250)
    second = store.save_progress(ctx(HOME), _progress(run, step_index=2, snapshot={"c": 3}))
    with clause("PROG-SAVE-2", what="the replacing save's result"):
        expect("PROG-SAVE-2", (second.step_index, second.snapshot), (2, {"c": 3}),
               "the JSON must be the object's, whole")
        expect("PROG-SAVE-2", second.created_at, first.created_at, "second.created_at")
        expect("PROG-SAVE-2", second.updated_at, clock.now(), "second.updated_at")
    expect("PROG-SAVE-2", store.get_progress(ctx(HOME), run), second, "the snapshot after the second save")


@pytest.mark.clause("PROG-ENT-1", "PROG-GET-1", "SCOPE-EXACT-3", "SCOPE-VIS-5")
def test_each_exact_scope_holds_a_snapshot_of_its_own(store):
    """Snapshots of one run id at HOME, an ancestor, a descendant, a sibling
    and look-alikes are separate: each read returns its own scope's, and a
    scope that saved none finds none whatever its relatives hold."""
    run = ids.new_id(ids.RUN)
    mine = store.save_progress(ctx(HOME), _progress(run, step_index=100))
    expect_raises("PROG-GET-1", ProgressNotFound, lambda: store.get_progress(ctx("ws=w1"), run),
                  "get_progress from an ancestor of the only snapshot")
    expect_raises("PROG-GET-1", ProgressNotFound, lambda: store.get_progress(ctx("ws=w1/proj=p1/env=e1"), run),
                  "get_progress from a descendant of the only snapshot")
    others = {sc: store.save_progress(ctx(sc), _progress(run, step_index=i)) for i, sc in enumerate(AROUND)}
    expect("PROG-ENT-1", store.get_progress(ctx(HOME), run), mine, "HOME's snapshot after its relatives saved")
    for sc, row in others.items():
        expect("PROG-ENT-1", store.get_progress(ctx(sc), run), row, f"the snapshot of {sc}")
    expect_raises("PROG-GET-1", ProgressNotFound, lambda: store.get_progress(ctx("ws=w2"), run),
                  "get_progress from a scope that saved nothing")
    expect_raises("PROG-GET-1", ProgressNotFound, lambda: store.get_progress(ctx(HOME), ids.new_id(ids.RUN)),
                  "get_progress of a run without any snapshot")


@pytest.mark.clause("PROG-SAVE-4", "RSC-GEN-5", "RSC-GEN-7", "RSC-GEN-9")
def test_bad_input_is_refused_and_writes_nothing(store):
    run = ids.new_id(ids.RUN)
    kept = store.save_progress(ctx(HOME), _progress(run))
    bad = [
        None, {"run_id": run}, "progress",
        _progress("not-an-id"), _progress(ids.new_id(ids.SESSION)), _progress(7),
        _progress(run, step_index=-1), _progress(run, step_index=True), _progress(run, step_index=1.0),
        _progress(run, step_index=2**63), _progress(run, snapshot=None), _progress(run, snapshot=[1]),
        _progress(run, snapshot={"k": float("nan")}), _progress(run, snapshot={"k": "a\x00b"}),
        _progress(run, snapshot={1: "int key"}), _progress(run, snapshot={"t": (1, 2)}),
    ]
    for value in bad:
        expect_raises("PROG-SAVE-4", InvalidArgument, lambda value=value: store.save_progress(ctx(HOME), value),
                      f"save_progress({value!r:.80})")
    expect("PROG-SAVE-4", store.get_progress(ctx(HOME), run), kept, "the snapshot after the refused saves")
    for arg in (None, "arun_bad", ids.new_id(ids.SESSION), 5):
        expect_raises("PROG-SAVE-4", InvalidArgument, lambda arg=arg: store.get_progress(ctx(HOME), arg),
                      f"get_progress({arg!r})")
        expect_raises("PROG-SAVE-4", InvalidArgument, lambda arg=arg: store.delete_progress(ctx(HOME), arg),
                      f"delete_progress({arg!r})")
    expect("PROG-SAVE-4", store.get_progress(ctx(HOME), run), kept, "the snapshot after the refused calls")


@pytest.mark.clause("SCOPE-ZERO-1", "SCOPE-ZERO-3", "PROG-GET-1")
def test_zero_scope_is_refused_before_the_arguments(store):
    run = ids.new_id(ids.RUN)
    for call in (lambda: store.save_progress(ZERO, _progress(run)),
                 lambda: store.save_progress(ZERO, "garbage"),
                 lambda: store.get_progress(ZERO, run), lambda: store.get_progress(ZERO, None),
                 lambda: store.delete_progress(ZERO, run), lambda: store.delete_progress(ZERO, 3)):
        expect_raises("SCOPE-ZERO-1", NoScope, call, "a progress call from the zero scope")
    expect_raises("PROG-GET-1", ProgressNotFound, lambda: store.get_progress(ctx(HOME), run),
                  "the run after the refused zero-scope save")


# -- delete (PROG-DEL) ------------------------------------------------------------------------------


@pytest.mark.clause("PROG-DEL-1", "PROG-DEL-2", "PROG-ENT-1", "PROG-SAVE-1")
def test_delete_removes_only_the_callers_snapshot_and_nothing_is_no_error(store, clock):
    run, other = ids.new_id(ids.RUN), ids.new_id(ids.RUN)
    rows = {sc: store.save_progress(ctx(sc), _progress(run, step_index=i)) for i, sc in enumerate([HOME] + AROUND)}
    # another run's snapshot at the same exact scope: a delete names one run
    neighbour = store.save_progress(ctx(HOME), _progress(other, step_index=77))
    expect("PROG-DEL-1", store.delete_progress(ctx(HOME), run), None, "delete_progress's result")
    expect_raises("PROG-DEL-1", ProgressNotFound, lambda: store.get_progress(ctx(HOME), run),
                  "the deleted snapshot")
    expect("PROG-DEL-1", store.get_progress(ctx(HOME), other), neighbour,
           "another run's snapshot at the same scope after the delete")
    for sc in AROUND:
        expect("PROG-DEL-1", store.get_progress(ctx(sc), run), rows[sc], f"the snapshot of {sc} after HOME's delete")
    with clause("PROG-DEL-2", what="a second delete, and a delete from a scope that saved nothing"):
        expect_is("PROG-DEL-2", store.delete_progress(ctx(HOME), run), None, "store.delete_progress(ctx(HOME), run)")
        expect_is("PROG-DEL-2", store.delete_progress(ctx("ws=w2"), run), None,
                  'store.delete_progress(ctx("ws=w2"), run)')
        expect_is("PROG-DEL-2", store.delete_progress(ctx(HOME), ids.new_id(ids.RUN)), None,
                  "store.delete_progress(ctx(HOME), ids.new_id(ids.RUN))")
    for sc in AROUND:
        expect("PROG-DEL-2", store.get_progress(ctx(sc), run), rows[sc], f"the snapshot of {sc} afterwards")
    clock.advance(milliseconds=5)
    again = store.save_progress(ctx(HOME), _progress(run, step_index=9))
    expect("PROG-SAVE-1", again.created_at, clock.now(), "a save after a delete makes a new snapshot")


# -- size (PROG-SAVE-5): a refused replacing save keeps the snapshot ----------------------------------


@pytest.mark.clause("PROG-SAVE-5", "RSC-GEN-8", "RSC-GEN-13")
def test_an_oversized_replacing_save_keeps_the_snapshot(store):
    from cortex_spec.validation import MAX_ENTITY_BYTES, entity_size

    run = ids.new_id(ids.RUN)
    kept = store.save_progress(ctx(HOME), _progress(run, snapshot={"p": ""}))
    base = entity_size(stored_row(kept))
    huge = _progress(run, snapshot={"p": "x" * (MAX_ENTITY_BYTES + 1 - base)})
    expect_raises("PROG-SAVE-5", InvalidArgument, lambda: store.save_progress(ctx(HOME), huge),
                  "a replacing save one byte over the limit")
    expect("PROG-SAVE-5", store.get_progress(ctx(HOME), run), kept, "the snapshot after the refused save")
    key = progress_key(run, S(HOME))
    expect("PROG-SAVE-5", stored_row(kept).id, key, "the stored row's key (a digest of run and exact scope)")


# -- races (PROG-RACE-1) ----------------------------------------------------------------------------


@pytest.mark.clause("PROG-RACE-1", "RSC-GEN-12")
def test_concurrent_saves_and_deletes_each_land_whole(store, profile):
    """Four threads save different snapshots of one run at one scope (and,
    in every other round, two of them delete instead): afterwards the run has
    one snapshot, one of the saved ones whole, or none when a delete came
    last; the creation time is that of a save of the round."""
    for round_ in range(profile.race_rounds):
        run = ids.new_id(ids.RUN)
        saves = [_progress(run, step_index=i, snapshot={"writer": i, "pad": "x" * (i * 10)}) for i in range(4)]
        deleting = round_ % 2 == 1
        calls = [(lambda p=p: store.save_progress(ctx(HOME), p)) for p in saves]
        if deleting:
            calls[1] = calls[3] = lambda run=run: store.delete_progress(ctx(HOME), run)
        outcomes = race(calls)
        with clause("PROG-RACE-1", what=f"round {round_}: the calls' outcomes"):
            expect_true("PROG-RACE-1", all(o.ok for o in outcomes),
                        "all(o.ok for o in outcomes)" + ": " + shorten([o.error for o in outcomes]))
        try:
            final = store.get_progress(ctx(HOME), run)
        except ProgressNotFound:
            with clause("PROG-RACE-1", what=f"round {round_}: no snapshot left"):
                expect_true("PROG-RACE-1", deleting, "every call saved, yet no snapshot is stored")
            continue
        with clause("PROG-RACE-1", what=f"round {round_}: the snapshot left"):
            written = [(p.step_index, p.snapshot) for i, p in enumerate(saves) if not (deleting and i in (1, 3))]
            expect_op("PROG-RACE-1", (final.step_index, final.snapshot), "in", written,
                      "(final.step_index, final.snapshot)" + ": " + shorten(final))
            returned = [o.value for o in outcomes if o.value is not None]
            expect_op("PROG-RACE-1", final.created_at, "in", {r.created_at for r in returned}, "final.created_at")
