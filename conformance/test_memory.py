"""Certifies conformance class ``memory`` (spec: memory.md) beyond what the
sessions' description generates (``test_kinds.py``): the counters a
session's conversation keeps and that no update rolls back, one default per
agent and exact scope through updates, deletes that take the messages along,
conversation saves, loads and clears at exactly the session's scope,
working memory per run, key and exact scope, summaries in the order they
were saved, and threaded races of saves, clears and deletes; and the
examples of the hand-written methods for the scope and common suites.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from cortex_spec import Context, Scope, ids
from cortex_spec.errors import AlreadyExists, InvalidArgument, SessionNotFound, WorkingMemoryNotFound
from cortex_spec.memory import Message, Session
from cortex_spec.testing import (
    clause, ctx, example, expect, expect_is, expect_op, expect_raises, expect_result, expect_strict, expect_that,
    expect_true, race, Said, shorten,
)

from .examples import HOME, Examples, long_call, long_check, long_ids, long_scope_of

S = Scope.parse
AGENT = ids.new_id(ids.AGENT)


def _session(store: Any, scope: str = HOME, agent: str | None = None, **fields: Any) -> Session:
    fields.setdefault("is_default", False)
    return store.create_session(ctx(scope), example(Session, agent_id=agent or AGENT, **fields))


def _msgs(*contents: str, role: str = "user") -> list[Message]:
    return [Message(role=role, content=c, tool_calls=[{"n": i}], metadata={"i": i, "f": 1.0})
            for i, c in enumerate(contents)]


def _seed(store: Any, fixture: Any) -> SimpleNamespace:
    c = ctx(HOME)
    session = _session(store)
    store.save_conversation(c, session.agent_id, session.id, _msgs("hello", "world"))
    run = ids.new_id(ids.RUN)
    store.save_working(c, run, "plan", {"step": 1})
    store.save_summary(c, session.agent_id, "a summary")
    return SimpleNamespace(memory_session=session, memory_run=run)


def _view(store: Any, w: SimpleNamespace, scopes: Any) -> dict:
    out: dict = {}
    s = getattr(w, "memory_session", None)
    for sc in scopes:
        c = sc if not isinstance(sc, str) else ctx(sc)
        key = c.scope.canonical()
        out[f"sessions@{key}"] = store.list_sessions(c)
        if s is not None:
            out[f"conversation@{key}"] = store.load_conversation(c, s.agent_id, s.id)
            out[f"summaries@{key}"] = store.load_summaries(c, s.agent_id)
            try:
                out[f"working@{key}"] = store.load_working(c, w.memory_run, "plan")
            except WorkingMemoryNotFound:
                out[f"working@{key}"] = "<none>"
    return out


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    agent = ids.new_id(ids.AGENT)
    session = long_call("create_session", lambda: store.create_session(c, example(Session, agent_id=agent,
                                                                                  is_default=True)))
    long_scope_of("a created session", session, c.scope)
    long_call("save_conversation", lambda: store.save_conversation(c, agent, session.id, [Message(content="hi")]))
    long_check("load_conversation from the ancestor",
               [m.content for m in store.load_conversation(up, agent, session.id)], ["hi"])
    long_scope_of("get_session", store.get_session(up, session.id), c.scope)
    long_check("list_sessions from the ancestor", session.id in long_ids(store.list_sessions(up)), True)
    run = ids.new_id(ids.RUN)
    long_call("save_working", lambda: store.save_working(c, run, "k", {"v": 1}))
    long_call("save_working (replacing)", lambda: store.save_working(c, run, "k", {"v": 2}))
    long_check("load_working from the ancestor", store.load_working(up, run, "k"), {"v": 2})
    long_call("save_summary", lambda: store.save_summary(c, agent, "summary"))
    long_check("load_summaries from the ancestor", store.load_summaries(up, agent), ["summary"])
    long_call("clear_conversation", lambda: store.clear_conversation(c, agent, session.id))


#: The hand-written methods' examples (the sessions' generated ones come from the table).
EXAMPLES = Examples(
    "memory",
    long_scopes=_long_scopes,
    seed=_seed,
    view=_view,
    good={
        "delete_session": lambda s, c, w: s.delete_session(c, w.memory_session.id),
        "save_conversation": lambda s, c, w: s.save_conversation(c, w.memory_session.agent_id,
                                                                 w.memory_session.id, _msgs("more")),
        "load_conversation": lambda s, c, w: s.load_conversation(c, w.memory_session.agent_id,
                                                                 w.memory_session.id),
        "clear_conversation": lambda s, c, w: s.clear_conversation(c, w.memory_session.agent_id,
                                                                   w.memory_session.id),
        "save_working": lambda s, c, w: s.save_working(c, w.memory_run, "plan", [2]),
        "load_working": lambda s, c, w: s.load_working(c, w.memory_run, "plan"),
        "clear_working": lambda s, c, w: s.clear_working(c, w.memory_run),
        "save_summary": lambda s, c, w: s.save_summary(c, w.memory_session.agent_id, "again"),
        "load_summaries": lambda s, c, w: s.load_summaries(c, w.memory_session.agent_id),
    },
    bad={
        "delete_session": lambda s, c, w: s.delete_session(c, w.memory_run),
        "save_conversation": lambda s, c, w: s.save_conversation(c, w.memory_session.agent_id,
                                                                 w.memory_session.id, [Message(role="")]),
        "load_conversation": lambda s, c, w: s.load_conversation(c, w.memory_session.agent_id,
                                                                 w.memory_session.id, limit="2"),
        "clear_conversation": lambda s, c, w: s.clear_conversation(c, "agt_bad", w.memory_session.id),
        "save_working": lambda s, c, w: s.save_working(c, w.memory_run, "", 1),
        "load_working": lambda s, c, w: s.load_working(c, w.memory_session.id, "plan"),
        "clear_working": lambda s, c, w: s.clear_working(c, None),
        "save_summary": lambda s, c, w: s.save_summary(c, w.memory_session.agent_id, "a\x00b"),
        "load_summaries": lambda s, c, w: s.load_summaries(c, 5),
    },
)


# -- sessions (MEM-SES) ------------------------------------------------------------------------


@pytest.mark.clause("MEM-SES-1", "MEM-SES-3")
def test_a_new_session_starts_empty_and_names_any_agent(store):
    for field, value in (("message_count", 1), ("last_message", "x")):
        expect_raises("MEM-SES-1", InvalidArgument,
                      lambda: store.create_session(ctx(HOME), example(Session, agent_id=AGENT, **{field: value})),
                      f"create_session with {field}={value!r}")
    made = _session(store, agent=ids.new_id(ids.AGENT))
    expect("MEM-SES-3", (made.message_count, made.last_message), (0, ""), "a session of an unknown agent")


@pytest.mark.clause("MEM-SES-2", "MEM-SES-7")
def test_one_default_per_agent_and_exact_scope_through_updates(store):
    first = _session(store, is_default=True)
    other = _session(store)
    before = store.get_session(ctx(HOME), other.id)
    expect_raises("MEM-SES-7", AlreadyExists,
                  lambda: store.update_session(ctx(HOME), attrs.evolve(other, is_default=True)),
                  "an update making a second default of the agent at one scope")
    expect("MEM-SES-7", store.get_session(ctx(HOME), other.id), before, "the session after the refused update")
    for sc in ("ws=w1", "ws=w1/proj=p1/env=e1"):
        with clause("MEM-SES-2", what=f"the agent's default at {sc}"):
            _session(store, sc, is_default=True)
    with clause("MEM-SES-2", what="another agent's default at the same scope"):
        _session(store, agent=ids.new_id(ids.AGENT), is_default=True)
    for _ in range(3):
        with clause("MEM-SES-2", what="more sessions that are not default"):
            _session(store)
    store.update_session(ctx(HOME), attrs.evolve(first, is_default=False))
    with clause("MEM-SES-7", what="a default again once the first is no longer"):
        store.update_session(ctx(HOME), attrs.evolve(other, is_default=True))


@pytest.mark.clause("MEM-SES-5", "MEM-SES-6", "MEM-RACE-4")
def test_update_never_writes_the_counters_or_the_agent(store, clock):
    s = _session(store)
    store.save_conversation(ctx(HOME), AGENT, s.id, _msgs("a", "b", ""))
    clock.advance(milliseconds=3)
    stale = attrs.evolve(s, title="new title", metadata={"k": 1}, is_default=True, agent_id=ids.new_id(ids.AGENT),
                         message_count=0, last_message="stale")
    got = store.update_session(ctx("ws=w1"), stale)
    for row in (got, store.get_session(ctx(HOME), s.id)):
        expect("MEM-SES-5", (row.title, row.metadata, row.is_default, row.updated_at),
               ("new title", {"k": 1}, True, clock.now()), "the fields update_session writes")
        expect("MEM-SES-6", (row.agent_id, row.message_count, row.last_message, row.created_at, row.scope),
               (AGENT, 3, "b", s.created_at, S(HOME)), "the fields update_session never writes")


@pytest.mark.clause("MEM-SES-8", "MEM-SES-9", "MEM-CONV-7")
def test_delete_takes_the_messages_along(store):
    s = _session(store)
    keep = _session(store)
    store.save_conversation(ctx(HOME), AGENT, s.id, _msgs("one", "two"))
    store.save_conversation(ctx(HOME), AGENT, keep.id, _msgs("stays"))
    for caller in ("ws=w1/proj=p1/env=e1", "ws=w1/proj=p2", "ws=w10/proj=p1"):
        expect_raises("MEM-SES-8", SessionNotFound, lambda: store.delete_session(ctx(caller), s.id),
                      f"delete_session from {caller}")
    expect("MEM-SES-8", len(store.load_conversation(ctx(HOME), AGENT, s.id)), 2, "messages after refused deletes")
    store.delete_session(ctx("ws=w1"), s.id)
    expect_raises("MEM-SES-9", SessionNotFound, lambda: store.get_session(ctx(HOME), s.id), "the deleted session")
    expect("MEM-SES-9", store.load_conversation(ctx(HOME), AGENT, s.id), [], "the deleted session's conversation")
    expect("MEM-SES-9", [m.content for m in store.load_conversation(ctx(HOME), AGENT, keep.id)], ["stays"],
           "another session's conversation")
    expect_raises("MEM-SES-8", SessionNotFound, lambda: store.delete_session(ctx(HOME), s.id), "a second delete")


# -- conversation memory (MEM-CONV) -----------------------------------------------------------


@pytest.mark.clause("MEM-CONV-1")
def test_an_empty_batch_needs_no_session(store):
    for sid in (ids.new_id(ids.SESSION), _session(store, "ws=w2").id):
        with clause("MEM-CONV-1", what="an empty batch for a session the caller does not have"):
            expect_is("MEM-CONV-1", store.save_conversation(ctx(HOME), AGENT, sid, []), None,
                      "store.save_conversation(ctx(HOME), AGENT, sid, [])")
    expect_raises("MEM-CONV-1", InvalidArgument, lambda: store.save_conversation(ctx(HOME), "bad", ids.new_id(
        ids.SESSION), []), "an empty batch with a bad agent id")


@pytest.mark.clause("MEM-CONV-2", "MEM-CONV-10", "MC-GEN-11")
def test_saves_and_clears_need_the_session_at_exactly_the_callers_scope(store):
    s = _session(store)
    store.save_conversation(ctx(HOME), AGENT, s.id, _msgs("kept"))
    other_agent = ids.new_id(ids.AGENT)
    callers = [("ws=w1", AGENT), ("ws=w1/proj=p1/env=e1", AGENT), ("ws=w1/proj=p2", AGENT), (HOME, other_agent)]
    for caller, agent in callers:
        expect_raises("MEM-CONV-2", SessionNotFound,
                      lambda: store.save_conversation(ctx(caller), agent, s.id, _msgs("no")),
                      f"save_conversation from {caller} for agent {agent[-4:]}")
        expect_raises("MEM-CONV-10", SessionNotFound,
                      lambda: store.clear_conversation(ctx(caller), agent, s.id),
                      f"clear_conversation from {caller} for agent {agent[-4:]}")
    expect_raises("MEM-CONV-2", SessionNotFound,
                  lambda: store.save_conversation(ctx(HOME), AGENT, ids.new_id(ids.SESSION), _msgs("no")),
                  "save_conversation of a session that does not exist")
    got = store.get_session(ctx(HOME), s.id)
    expect("MEM-CONV-2", (got.message_count, [m.content for m in store.load_conversation(ctx(HOME), AGENT, s.id)]),
           (1, ["kept"]), "the session after the refused saves and clears")


@pytest.mark.clause("MEM-CONV-3", "MEM-CONV-4", "MEM-CONV-6", "MEM-CONV-8", "MEM-CONV-11")
def test_a_batch_is_appended_in_order_with_one_time_and_the_counters(store, clock):
    s = _session(store)
    c = ctx(HOME)
    # the same agent's other session, saved to between the batches: never part of this one
    other = _session(store)

    def chatter(i: int) -> None:
        store.save_conversation(c, AGENT, other.id, _msgs(f"other-{i}", f"other-{i}b"))

    clock.advance(milliseconds=5)
    # timestamps running backwards, within the batch and against the later batches
    first = [attrs.evolve(m, timestamp=clock.now() + timedelta_days(30 - i))
             for i, m in enumerate(_msgs("one", "two", ""))]
    store.save_conversation(c, AGENT, s.id, first)
    chatter(1)
    t1 = clock.now()
    got = store.get_session(c, s.id)
    expect("MEM-CONV-3", (got.message_count, got.updated_at), (3, t1), "the counters after a batch of 3")
    expect("MEM-CONV-4", got.last_message, "two", "last_message: the last non-empty content")
    clock.advance(milliseconds=5)
    store.save_conversation(c, AGENT, s.id, [Message(role="tool", content=""), Message(role="tool", content="")])
    chatter(2)
    expect("MEM-CONV-4", store.get_session(c, s.id).last_message, "two", "after a batch of empty contents")
    # a message's own timestamp plays no part in the order
    clock.advance(milliseconds=5)
    late = [Message(content="three", timestamp=t1 - timedelta_days(9)), Message(content="four", timestamp=t1)]
    store.save_conversation(c, AGENT, s.id, late)
    chatter(3)
    everything = first + [Message(role="tool", content="")] * 2 + late
    loaded = store.load_conversation(c, AGENT, s.id)
    with clause("MEM-CONV-8", what="every message read back, in saving order"):
        expect_strict("MEM-CONV-8", loaded, everything, "loaded" + ": " + shorten(loaded))
    for limit in (1, 2, 7, 8, 100, 0, -1):
        want = everything if limit <= 0 else everything[-limit:]
        expect("MEM-CONV-6", [m.content for m in store.load_conversation(c, AGENT, s.id, limit)],
               [m.content for m in want], f"load_conversation(limit={limit})")
    expect("MEM-CONV-11", store.get_session(c, s.id).message_count, len(everything), "message_count")
    expect("MEM-CONV-6", [m.content for m in store.load_conversation(c, AGENT, other.id, 3)],
           ["other-2b", "other-3", "other-3b"], "the newest 3 of the other session")
    expect("MEM-CONV-6", [m.content for m in store.load_conversation(ctx("ws=w1"), AGENT, s.id, 2)],
           ["three", "four"], "load_conversation from an ancestor")


def timedelta_days(n: int) -> Any:
    from datetime import timedelta

    return timedelta(days=n)


@pytest.mark.clause("MEM-CONV-7")
def test_unknown_unseen_or_empty_conversations_load_empty(store):
    s = _session(store)
    store.save_conversation(ctx(HOME), AGENT, s.id, _msgs("x"))
    for c, agent, sid in ((ctx(HOME), AGENT, ids.new_id(ids.SESSION)), (ctx("ws=w2"), AGENT, s.id),
                          (ctx("ws=w1/proj=p1/env=e1"), AGENT, s.id), (ctx(HOME), ids.new_id(ids.AGENT), s.id),
                          (ctx(HOME), AGENT, _session(store).id)):
        expect("MEM-CONV-7", store.load_conversation(c, agent, sid), [], "a conversation with nothing to load")


@pytest.mark.clause("MEM-CONV-9", "MEM-CONV-11")
def test_clear_deletes_and_resets_at_once(store, clock):
    s = _session(store)
    store.save_conversation(ctx(HOME), AGENT, s.id, _msgs("a", "b"))
    clock.advance(milliseconds=2)
    store.clear_conversation(ctx(HOME), AGENT, s.id)
    got = store.get_session(ctx(HOME), s.id)
    expect("MEM-CONV-9", (got.message_count, got.last_message, got.updated_at), (0, "", clock.now()),
           "the session after a clear")
    expect("MEM-CONV-9", store.load_conversation(ctx(HOME), AGENT, s.id), [], "the conversation after a clear")
    store.save_conversation(ctx(HOME), AGENT, s.id, _msgs("again"))
    expect("MEM-CONV-11", (store.get_session(ctx(HOME), s.id).message_count,
                           [m.content for m in store.load_conversation(ctx(HOME), AGENT, s.id)]), (1, ["again"]),
           "a save after the clear")


@pytest.mark.clause("MEM-CONV-8", "MC-GEN-12")
def test_bad_messages_are_refused_and_write_nothing(store):
    s = _session(store)
    store.save_conversation(ctx(HOME), AGENT, s.id, _msgs("kept"))
    bad = [[Message(role="")], [Message(role="x" * 256)], [Message(content="a\x00")], [Message(tool_calls={"a": 1})],
           [Message(tool_calls=[float("nan")])], [Message(metadata=[])], [Message(timestamp=__import__("datetime")
                                                                                   .datetime(2026, 1, 1))],
           [Message(), "not a message"], "not a list", None]
    for batch in bad:
        expect_raises("MC-GEN-12", InvalidArgument, lambda: store.save_conversation(ctx(HOME), AGENT, s.id, batch),
                      f"save_conversation({batch!r:.60})")
    expect("MC-GEN-11", (store.get_session(ctx(HOME), s.id).message_count,
                         [m.content for m in store.load_conversation(ctx(HOME), AGENT, s.id)]), (1, ["kept"]),
           "the conversation after the refused saves")


# -- working memory (MEM-WORK) ------------------------------------------------------------------


@pytest.mark.clause("MEM-WORK-1", "MEM-WORK-2", "MEM-WORK-5")
def test_working_values_are_upserted_with_their_types(store, clock):
    run = ids.new_id(ids.RUN)
    c = ctx(HOME)
    for value in (1, 1.0, True, None, "s", [1, 1.0, {"a": None}], {"k": 2**63 - 1}, 0.5):
        store.save_working(c, run, "k", value)
        with clause("MEM-WORK-5", what=f"load_working after saving {value!r}"):
            expect_strict("MEM-WORK-5", store.load_working(c, run, "k"), value, 'store.load_working(c, run, "k")')
    expect_raises("MEM-WORK-1", InvalidArgument, lambda: store.save_working(c, run, "", 1), "an empty key")
    for bad in (float("inf"), (1,), {1: 2}):
        expect_raises("MEM-WORK-5", InvalidArgument, lambda: store.save_working(c, run, "k", bad),
                      f"a working value {bad!r}")


@pytest.mark.clause("MEM-WORK-3", "MEM-WORK-4", "MEM-WORK-7", "MC-GEN-9")
def test_working_memory_is_keyed_by_scope(store, clock):
    """Several scopes hold the run's key: from above, the shallowest row
    wins, then the oldest, then the smallest canonical scope; a save never
    touches another scope's row; other tenants neither read nor overwrite."""
    run = ids.new_id(ids.RUN)
    store.save_working(ctx("ws=w1/proj=pB"), run, "k", "pB")
    store.save_working(ctx("ws=w1/proj=pA"), run, "k", "pA")  # the same instant
    expect_result("MEM-WORK-3", lambda: store.load_working(ctx("ws=w1/proj=pB"), run, "k"), "pB",
                  "pB's value after pA saved its own")
    expect("MC-GEN-9", store.load_working(ctx("ws=w1"), run, "k"), "pA",
           "equal depth and age: the smaller canonical scope")
    store.save_working(ctx("ws=w1/proj=pB"), run, "k", "pB again")  # a replacement keeps its age
    expect("MEM-WORK-4", store.load_working(ctx("ws=w1"), run, "k"), "pA", "after pB's value was replaced")
    clock.advance(milliseconds=1)
    store.save_working(ctx("ws=w1/proj=p0"), run, "k", "p0 later")
    expect("MEM-WORK-4", store.load_working(ctx("ws=w1"), run, "k"), "pA", "a younger row at the same depth")
    store.save_working(ctx("ws=w1/proj=pA/env=e1"), run, "k", "deep")
    clock.advance(milliseconds=1)
    store.save_working(ctx("ws=w1"), run, "k", "top")
    expect("MEM-WORK-4", store.load_working(ctx("ws=w1"), run, "k"), "top", "the shallowest row, though youngest")
    expect("MEM-WORK-3", store.load_working(ctx("ws=w1/proj=pA/env=e1"), run, "k"), "deep",
           "a save elsewhere never touched this row")
    expect("MEM-WORK-3", store.load_working(ctx("ws=w1/proj=pB"), run, "k"), "pB again", "pB's own row")
    for outsider in ("ws=w10", "ws=w1x", "org=w1", "ws=w2"):
        expect_raises("MEM-WORK-7", WorkingMemoryNotFound, lambda: store.load_working(ctx(outsider), run, "k"),
                      f"another tenant ({outsider}) reading the run's value")
        store.save_working(ctx(outsider), run, "k", "intruder")
    expect("MEM-WORK-7", store.load_working(ctx("ws=w1"), run, "k"), "top", "after other tenants saved theirs")
    expect_raises("MEM-WORK-4", WorkingMemoryNotFound, lambda: store.load_working(ctx("ws=w1"), run, "other"),
                  "a key never saved")


@pytest.mark.clause("MEM-WORK-6")
def test_clear_working_takes_every_visible_key_of_the_run(store):
    run, other = ids.new_id(ids.RUN), ids.new_id(ids.RUN)
    for sc in ("ws=w1", HOME, "ws=w1/proj=p1/env=e1", "ws=w1/proj=p2"):
        for key in ("a", "b"):
            store.save_working(ctx(sc), run, key, sc)
    store.save_working(ctx(HOME), other, "a", "other run")
    store.clear_working(ctx(HOME), run)
    for key in ("a", "b"):
        expect("MEM-WORK-6", store.load_working(ctx("ws=w1"), run, key), "ws=w1", "the ancestor's row stays")
        expect("MEM-WORK-6", store.load_working(ctx("ws=w1/proj=p2"), run, key), "ws=w1/proj=p2",
               "the sibling's row stays")
        for sc in (HOME, "ws=w1/proj=p1/env=e1"):
            expect_raises("MEM-WORK-6", WorkingMemoryNotFound, lambda: store.load_working(ctx(sc), run, key),
                          f"{key} at {sc} after the clear from {HOME}")
    expect("MEM-WORK-6", store.load_working(ctx(HOME), other, "a"), "other run", "another run's row")
    with clause("MEM-WORK-6", what="a clear with nothing to clear"):
        store.clear_working(ctx(HOME), ids.new_id(ids.RUN))


# -- summaries (MEM-SUM) ------------------------------------------------------------------------


@pytest.mark.clause("MEM-SUM-1", "MEM-SUM-2", "MEM-SUM-3")
def test_summaries_come_back_in_saving_order(store, clock):
    agent, other = ids.new_id(ids.AGENT), ids.new_id(ids.AGENT)
    texts = []
    for i, sc in enumerate(("ws=w1", HOME, HOME, "ws=w1/proj=p2", HOME)):
        if i == 3:
            clock.advance(milliseconds=1)
        text = "same" if i in (1, 2) else f"s{i}"
        store.save_summary(ctx(sc), agent, text)
        texts.append((sc, text))
        store.save_summary(ctx(sc), other, f"other-{i}")  # another agent's, at the same scopes: never listed
    store.save_summary(ctx("ws=w1/proj=p10"), agent, "look-alike")  # below ws=w1, not below HOME
    texts.append(("ws=w1/proj=p10", "look-alike"))
    expect("MEM-SUM-2", store.load_summaries(ctx("ws=w1"), agent), [t for _, t in texts],
           "every summary from the top, in saving order (equal texts kept)")
    expect("MEM-SUM-2", store.load_summaries(ctx(HOME), agent), [t for sc, t in texts if sc == HOME],
           "the summaries HOME sees")
    expect("MEM-SUM-2", store.load_summaries(ctx("ws=w2"), agent), [], "another tenant")
    expect("MEM-SUM-2", store.load_summaries(ctx(HOME), other), ["other-1", "other-2", "other-4"],
           "the other agent's summaries HOME sees")
    expect("MEM-SUM-3", [n for n in dir(store) if n.startswith(("delete_summ", "clear_summ"))], [],
           "no method deletes a summary")


# -- threaded races -----------------------------------------------------------------------------


@pytest.mark.clause("MEM-RACE-1", "MEM-CONV-5", "MEM-CONV-11")
def test_racing_saves_keep_batches_whole_and_counted(store, profile):
    s = _session(store)
    n = max(profile.race_threads, 2)
    for round_ in range(max(profile.race_rounds // 2, 1)):
        outcomes = race([functools.partial(store.save_conversation, ctx(HOME), AGENT, s.id,
                                           _msgs(*(f"r{round_}b{i}m{j}" for j in range(3))))
                         for i in range(n)])
        with clause("MEM-RACE-1", what="every racing save succeeded"):
            expect_true("MEM-RACE-1", all(o.ok for o in outcomes),
                        "all(o.ok for o in outcomes)" + ": " + shorten([o.error for o in outcomes if not o.ok]))
    loaded = [m.content for m in store.load_conversation(ctx(HOME), AGENT, s.id)]
    expect("MEM-CONV-11", store.get_session(ctx(HOME), s.id).message_count, len(loaded), "message_count")
    for start in range(0, len(loaded), 3):
        batch = loaded[start:start + 3]
        with clause("MEM-CONV-5", what=f"messages {start}..{start + 2} of the conversation"):
            prefix = batch[0][:-2]
            expect("MEM-CONV-5", batch, [f"{prefix}m{j}" for j in range(3)], "batch" + ": " + shorten(batch))


@pytest.mark.clause("MEM-RACE-2", "MEM-RACE-3", "MEM-CONV-11", "MEM-SES-9")
def test_saves_racing_clears_and_deletes(store, profile):
    for round_ in range(max(profile.race_rounds // 2, 1)):
        s = _session(store)
        store.save_conversation(ctx(HOME), AGENT, s.id, _msgs("old"))
        calls = [functools.partial(store.save_conversation, ctx(HOME), AGENT, s.id, _msgs("a", "b"))
                 for _ in range(3)]
        calls.insert(1, functools.partial(store.clear_conversation, ctx(HOME), AGENT, s.id))
        race(calls)
        loaded = store.load_conversation(ctx(HOME), AGENT, s.id)
        expect("MEM-RACE-2", store.get_session(ctx(HOME), s.id).message_count, len(loaded),
               "message_count after saves racing a clear")
        with clause("MEM-RACE-2", what="the message saved before the clear"):
            expect_op("MEM-RACE-2", "old", "not in", [m.content for m in loaded], '"old"')
        d = _session(store)
        outcomes = race([functools.partial(store.save_conversation, ctx(HOME), AGENT, d.id, _msgs("x")),
                         functools.partial(store.delete_session, ctx(HOME), d.id)] * 2)
        for o in outcomes:
            if not o.ok:
                with clause("MEM-RACE-3", what="a call that lost to the delete"):
                    expect_that("MEM-RACE-3", isinstance(o.error, SessionNotFound),
                                "o.error" + ": " + shorten(repr(o.error)), Said("an instance of SessionNotFound"),
                                o.error)
        expect("MEM-RACE-3", store.load_conversation(ctx(HOME), AGENT, d.id), [],
               "the conversation of a session deleted while saves ran")


@pytest.mark.clause("MEM-RACE-5", "MEM-RACE-6")
def test_racing_defaults_and_working_saves(store, profile):
    n = max(profile.race_threads, 2)
    for round_ in range(max(profile.race_rounds // 2, 1)):
        agent = ids.new_id(ids.AGENT)
        outcomes = race([functools.partial(store.create_session, ctx(HOME),
                                           example(Session, agent_id=agent, is_default=True)) for _ in range(n)])
        won = [o for o in outcomes if o.ok]
        expect("MEM-RACE-5", len(won), 1, "racing creates of the agent's default")
        with clause("MEM-RACE-5", what="the losers of the default race"):
            expect_true("MEM-RACE-5", all(isinstance(o.error, AlreadyExists) for o in outcomes if not o.ok),
                        "all(isinstance(o.error, AlreadyExists) for o in outcomes if not o.ok)")
        run = ids.new_id(ids.RUN)
        outcomes = race([functools.partial(store.save_working, ctx(HOME), run, "k", i) for i in range(n)])
        with clause("MEM-RACE-6", what="racing working saves"):
            expect_true("MEM-RACE-6", all(o.ok for o in outcomes),
                        "all(o.ok for o in outcomes)" + ": " + shorten([o.error for o in outcomes if not o.ok]))
            expect_op("MEM-RACE-6", store.load_working(ctx(HOME), run, "k"), "in", range(n),
                      'store.load_working(ctx(HOME), run, "k")')
