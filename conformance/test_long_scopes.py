"""Certifies SCOPE-CANON-6 on every declared class: rows written at the
longest scopes SCOPE-VAL allows — two and three levels whose keys and values
are 255 code points of text outside ASCII (three- and four-byte UTF-8, drawn
so that it does not compress) — are stored by every writing method and read
back equal, from their own scope and from an ancestor that sees them.

A backend that indexes the whole scope in a structure with an entry limit
(PostgreSQL's btree: about 2.7 KB per entry) refuses such rows with a storage
error; SCOPE-CANON-6 says it must index a digest or a part of the scope
instead.  Each class's calls are below, one function per class; a class whose
methods live on no scope (``gateway``) has none.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest

from cortex_spec import CLASSES, Context, Scope, ids
from cortex_spec.a2a import DeliveryState
from cortex_spec.clock import EPOCH
from cortex_spec.runs import RunState
from cortex_spec.testing import clause, ctx, example
from cortex_spec.a2a import make_ask, make_conversation, make_delivery, make_envelope
from cortex_spec.checkpoints import approve, make_checkpoint
from cortex_spec.runs import make_run, make_step, make_tool_call
from cortex_spec.suspensions import make_suspension

FAR = EPOCH + timedelta(days=365 * 100)
PAST = EPOCH - timedelta(hours=1)

#: code points of three UTF-8 bytes (CJK) and of four (emoji, CJK extension B)
_RANGES = ((0x4E00, 0x9FFF), (0x1F300, 0x1F64F), (0x20000, 0x2A6DF))


def _text(rng: random.Random, n: int = 255) -> str:
    out = []
    for _ in range(n):
        lo, hi = rng.choice(_RANGES)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def long_scope(depth: int, seed: int = 0) -> Scope:
    """A valid scope of ``depth`` levels, every key and value 255 code points
    of incompressible non-ASCII text."""
    rng = random.Random(1000 * depth + seed)
    return Scope(*((_text(rng), _text(rng)) for _ in range(depth)))


def _check(what: str, observed: Any, expected: Any) -> None:
    with clause("SCOPE-CANON-6", "SCOPE-CANON-5", what=what):
        assert observed == expected, f"{what}: expected {expected!r:.120}, observed {observed!r:.120}"


def _scope_of(what: str, row: Any, scope: Scope) -> None:
    with clause("SCOPE-CANON-6", "SCOPE-CANON-5", what=f"the scope {what} reads back with"):
        assert isinstance(row.scope, Scope) and row.scope == scope, f"{what} reads back at another scope"


def _ids(rows: list) -> set:
    return {getattr(r, "id", getattr(r, "reply_with", None)) for r in rows}


def _call(what: str, fn: Callable[[], Any]) -> Any:
    """``fn()``; an error (a storage limit hit) fails SCOPE-CANON-6 with the call named."""
    with clause("SCOPE-CANON-6", what=what):
        return fn()


# -- one function per class: write at ``c`` (the long scope), read from ``c`` and ``up`` ----


def _runs(store: Any, c: Context, up: Context) -> None:
    run = _call("create_run", lambda: store.create_run(c, make_run(state=RunState.PAUSED)))
    _scope_of("a created run", run, c.scope)
    _scope_of("get_run", _call("get_run", lambda: store.get_run(c, run.id)), c.scope)
    updated = _call("update_run", lambda: store.update_run(c, attrs.evolve(run, output="done")))
    _scope_of("an updated run", updated, c.scope)
    for who in (c, up):
        _check(f"list_runs from depth {who.scope.depth}", run.id in _ids(store.list_runs(who)), True)
        _check(f"count_runs from depth {who.scope.depth}", store.count_runs(who) >= 1, True)
    step = _call("create_step", lambda: store.create_step(c, make_step(run.id)))
    _check("list_steps", [s.id for s in store.list_steps(up, run.id)], [step.id])
    call = _call("create_tool_call", lambda: store.create_tool_call(c, make_tool_call(step.id, run.id)))
    _check("list_tool_calls", [t.id for t in store.list_tool_calls(up, step.id)], [call.id])


def _suspensions(store: Any, c: Context, up: Context) -> None:
    run = _call("create_run", lambda: store.create_run(c, make_run(state=RunState.PAUSED)))
    susp = _call("create_suspension", lambda: store.create_suspension(c, make_suspension(run.id, expires_at=PAST)))
    _scope_of("a created suspension", susp, c.scope)
    _scope_of("get_suspension", store.get_suspension(up, run.id), c.scope)
    for who in (c, up):
        _check(f"list_expired from depth {who.scope.depth}", susp.id in _ids(store.list_expired(who, FAR)), True)
    claimed = _call("claim_expired_suspension", lambda: store.claim_expired_suspension(c, run.id, EPOCH))
    _scope_of("a claimed suspension", claimed, c.scope)
    _call("delete_suspension", lambda: store.delete_suspension(c, run.id))


def _checkpoints(store: Any, c: Context, up: Context) -> None:
    cp = _call("create_checkpoint", lambda: store.create_checkpoint(c, make_checkpoint()))
    _scope_of("a created checkpoint", cp, c.scope)
    for who in (c, up):
        _check(f"list_pending from depth {who.scope.depth}", cp.id in _ids(store.list_pending(who)), True)
    resolved = _call("resolve", lambda: store.resolve(c, cp.id, approve()))
    _scope_of("a resolved checkpoint", resolved, c.scope)
    _scope_of("get_checkpoint", store.get_checkpoint(up, cp.id), c.scope)


def _a2a(store: Any, c: Context, up: Context) -> None:
    conv = _call("create_conversation", lambda: store.create_conversation(
        c, make_conversation(peer_node="peer", peer_context="thread")))
    _scope_of("a created conversation", conv, c.scope)
    _scope_of("get_conversation_by_peer_context",
              store.get_conversation_by_peer_context(up, "peer", "thread"), c.scope)
    msg = _call("record_message", lambda: store.record_message(c, make_envelope(conv.id)))
    _scope_of("a recorded message", msg, c.scope)
    for who in (c, up):
        _check(f"list_messages from depth {who.scope.depth}", msg.id in _ids(store.list_messages(who)), True)
        _check(f"list_conversations from depth {who.scope.depth}",
               conv.id in _ids(store.list_conversations(who)), True)
    updated = _call("update_conversation", lambda: store.update_conversation(
        c, attrs.evolve(store.get_conversation(c, conv.id), protocol="fipa-query")))
    _scope_of("an updated conversation", updated, c.scope)
    dlv = _call("create_delivery", lambda: store.create_delivery(c, make_delivery(msg.id)))
    claimed = _call("claim_delivery", lambda: store.claim_delivery(c, dlv.id))
    _call("bind_delivery_run", lambda: store.bind_delivery_run(c, dlv.id, claimed.claim_token, ids.new_id(ids.RUN)))
    done = _call("finish_delivery", lambda: store.finish_delivery(c, dlv.id, claimed.claim_token,
                                                                  DeliveryState.DELIVERED))
    _scope_of("a finished delivery", done, c.scope)
    _check("list_inbox from the ancestor", dlv.id in _ids(store.list_inbox(up, "worker")), True)
    _call("mark_delivery_read", lambda: store.mark_delivery_read(c, dlv.id))
    ask = _call("create_pending_ask", lambda: store.create_pending_ask(c, make_ask(conv.id, deadline=PAST)))
    _scope_of("a created pending ask", ask, c.scope)
    _check("list_expired_asks from the ancestor", ask.reply_with in _ids(store.list_expired_asks(up, FAR)), True)
    _check("list_pending_asks_by_conversation",
           [a.reply_with for a in store.list_pending_asks_by_conversation(up, conv.id)], [ask.reply_with])
    _scope_of("a claimed pending ask", _call("claim_pending_ask", lambda: store.claim_pending_ask(c, ask.reply_with)),
              c.scope)


def _memory(store: Any, c: Context, up: Context) -> None:
    from cortex_spec.memory import Message, Session

    agent = ids.new_id(ids.AGENT)
    session = _call("create_session", lambda: store.create_session(c, example(Session, agent_id=agent,
                                                                              is_default=True)))
    _scope_of("a created session", session, c.scope)
    _call("save_conversation", lambda: store.save_conversation(c, agent, session.id, [Message(content="hi")]))
    _check("load_conversation from the ancestor", [m.content for m in store.load_conversation(up, agent, session.id)],
           ["hi"])
    _scope_of("get_session", store.get_session(up, session.id), c.scope)
    _check("list_sessions from the ancestor", session.id in _ids(store.list_sessions(up)), True)
    run = ids.new_id(ids.RUN)
    _call("save_working", lambda: store.save_working(c, run, "k", {"v": 1}))
    _call("save_working (replacing)", lambda: store.save_working(c, run, "k", {"v": 2}))
    _check("load_working from the ancestor", store.load_working(up, run, "k"), {"v": 2})
    _call("save_summary", lambda: store.save_summary(c, agent, "summary"))
    _check("load_summaries from the ancestor", store.load_summaries(up, agent), ["summary"])
    _call("clear_conversation", lambda: store.clear_conversation(c, agent, session.id))


def _catalog(store: Any, c: Context, up: Context) -> None:
    from cortex_spec.catalog import TABLES

    _kinds(store, c, up, TABLES)


def _kinds(store: Any, c: Context, up: Context, tables: Any) -> None:
    """Every stored kind of ``tables``: a create, a get from the parent, an
    update and every listing from the parent."""
    for table in tables:
        if table.internal:
            continue
        held = {f: v for u in table.unique for f, v in u.where}
        create, update = getattr(store, table.method("create")), getattr(store, table.method("update"))
        fresh = example(table.entity, **held)
        row = _call(table.method("create"), lambda create=create, fresh=fresh: create(c, fresh))
        _scope_of(f"a created {table.singular}", row, c.scope)
        _scope_of(table.method("get"), getattr(store, table.method("get"))(up, row.id), c.scope)
        changed = attrs.evolve(example(table.entity, variant=1, **held), id=row.id)
        _scope_of(f"an updated {table.singular}",
                  _call(table.method("update"), lambda update=update, changed=changed: update(c, changed)), c.scope)
        for listing in table.listings:
            rows = getattr(store, listing.method)(up)
            _check(f"{listing.method} from the ancestor", row.id in _ids(rows), True)


def _progress(store: Any, c: Context, up: Context) -> None:
    from cortex_spec.progress import Progress

    run = ids.new_id(ids.RUN)
    saved = _call("save_progress", lambda: store.save_progress(c, Progress(run_id=run, step_index=1)))
    _scope_of("saved progress", saved, c.scope)
    _call("save_progress (replacing)", lambda: store.save_progress(c, Progress(run_id=run, step_index=2)))
    _check("get_progress", store.get_progress(c, run).step_index, 2)
    _call("delete_progress", lambda: store.delete_progress(c, run))


def _leases(store: Any, c: Context, up: Context) -> None:
    from cortex_spec.leases import Lease

    run = _call("create_run", lambda: store.create_run(c, make_run(RunState.RUNNING)))
    _call("hold_lease", lambda: store.hold_lease(c, run.id, Lease(owner="worker-a", expires_at=EPOCH)))
    _scope_of("a held run", store.get_run(up, run.id), c.scope)
    lapsed = store.list_lapsed_across_scopes(Context(Scope()), FAR)
    _check("list_lapsed_across_scopes", [r.scope for r in lapsed if r.id == run.id], [c.scope])
    _call("mark_notified", lambda: store.mark_notified(c, run.id, EPOCH))


def _orchestration(store: Any, c: Context, up: Context) -> None:
    from cortex_spec.orchestration import TABLES

    _kinds(store, c, up, TABLES)


def _preparation(store: Any, c: Context, up: Context) -> None:
    from cortex_spec.catalog import Agent

    agent = _call("create_agent", lambda: store.create_agent(c, example(Agent)))
    for who in (c, up):
        seen = _call("capture_preparation", lambda who=who: store.capture_preparation(
            who, lambda src: [a.id for a in src.list_agents()]))
        _check("the agents a capture lists", agent.id in seen, True)


def _a2a_resolutions(store: Any, c: Context, up: Context) -> None:
    from .test_a2a_resolutions import W

    w = W(store, c)
    ask = _call("create_pending_ask", w.ask)
    _call("read_pending_ask", lambda: store.read_pending_ask(c, ask.reply_with))
    _call("seal_ask_resolution", lambda: store.seal_ask_resolution(c, ask, w.reply("yes")))
    _call("get_ask_resolution", lambda: store.get_ask_resolution(c, ask.reply_with))
    _check("list_ask_resolutions", [r.ask.reply_with for r in store.list_ask_resolutions(c, "", 10).resolutions],
           [ask.reply_with])


def _a2a_replies(store: Any, c: Context, up: Context) -> None:
    from .test_a2a_replies import W, _commit

    w = W(store, c)
    delivery, run = _call("a bound delivery", w.bound)
    _check("list_deferred_recipients", len(store.list_deferred_recipients(c, None, 10)), 1)
    _call("commit_reserved_reply",
          lambda: store.commit_reserved_reply(c, delivery.id, delivery.claim_token, _commit(run)))
    _call("get_reserved_reply", lambda: store.get_reserved_reply(c, delivery.id))


def _a2a_held(store: Any, c: Context, up: Context) -> None:
    from .test_a2a_held import W

    w = W(store, c)
    request = _call("a held ask", w.held)[3]
    _call("release_held_ask", lambda: store.release_held_ask(c, request))
    _call("get_held_ask_release", lambda: store.get_held_ask_release(c, request.reply_with))
    _call("list_agent_reply_runs", lambda: store.list_agent_reply_runs(c, None, 10))


def _a2a_discovery(store: Any, c: Context, up: Context) -> None:
    delivery = _call("create_delivery", lambda: store.create_delivery(c, make_delivery()))
    _check("list_queued_deliveries_in_scope",
           [d.id for d in store.list_queued_deliveries_in_scope(c)], [delivery.id])
    _call("reclaim_stale_deliveries_in_scope", lambda: store.reclaim_stale_deliveries_in_scope(c, FAR))
    ask = _call("create_pending_ask", lambda: store.create_pending_ask(c, make_ask(deadline=PAST)))
    _check("list_expired_asks_in_scope",
           [a.reply_with for a in store.list_expired_asks_in_scope(c, FAR)], [ask.reply_with])


EXERCISES: dict[str, Callable[[Any, Context, Context], None]] = {
    "runs": _runs,
    "suspensions": _suspensions,
    "checkpoints": _checkpoints,
    "a2a": _a2a,
    "memory": _memory,
    "catalog": _catalog,
    "progress": _progress,
    "leases": _leases,
    "orchestration": _orchestration,
    "preparation": _preparation,
    "a2a_resolutions": _a2a_resolutions,
    "a2a_replies": _a2a_replies,
    "a2a_held": _a2a_held,
    "a2a_discovery": _a2a_discovery,
}


def _params() -> list:
    return [pytest.param(name, depth, marks=pytest.mark.cortex_classes(name), id=f"{name}-depth{depth}")
            for name in EXERCISES if name in CLASSES for depth in (2, 3)]


@pytest.mark.clause("SCOPE-CANON-6", "SCOPE-CANON-5", "SCOPE-VAL-5")
@pytest.mark.parametrize("cls, depth", _params())
def test_longest_valid_scopes_are_stored_by_every_method(store, cls, depth):
    """Every writing method of the class at a scope of ``depth`` levels of
    255-code-point keys and values (SCOPE-VAL-5's limit) succeeds, and the
    rows read back at that scope from it and from its parent."""
    scope = long_scope(depth)
    if not all(len(k) == 255 and len(v) == 255 for k, v in scope.levels):
        raise TypeError("long_scope must give 255-code-point keys and values")
    EXERCISES[cls](store, Context(scope), Context(scope.parent()))


@pytest.mark.clause("SCOPE-CANON-6")
def test_every_scoped_class_has_its_long_scope_calls():
    """A scoped class added to the catalogue without calls here would go
    unchecked: this fails instead."""
    scoped = {name for name, cls in CLASSES.items() if cls.scoped and cls.opened_by is None}
    missing = sorted(scoped - set(EXERCISES) - _ADMINISTRATIVE)
    with clause("SCOPE-CANON-6", what="classes without long-scope calls"):
        assert not missing, f"no long-scope calls for {missing}"


#: classes whose methods write no scoped rows and read the rows of every
#: scope alike (their own tests plant long scopes, test_admin.py)
_ADMINISTRATIVE = {"admin"}


def test_long_scope_is_valid_and_incompressible():
    """(A check of the test itself: the scope is valid and far beyond a
    btree entry if indexed whole.)"""
    s = long_scope(3)
    with clause("SCOPE-CANON-3", what="a long scope parsed back from its canonical form"):
        assert Scope.parse(s.canonical()) == s
    with clause("SCOPE-VAL-5", what="the long scope's canonical form in UTF-8 bytes"):
        assert len(s.canonical().encode("utf-8")) > 6 * 255 * 3
    ctx(s)  # a context can be made of it
