"""Helpers for writing certification tests: contexts, builders, races.

These are what the clause suite is written with, and they are public so a
backend author can write extra tests in the same style::

    from cortex_spec.testing import ctx, make_run, race

    def test_my_extra(cortex_store):
        c = ctx("workspace=w1")
        cortex_store.create_run(c, make_run(state="paused"))
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any, Callable, Iterable, Iterator, Sequence

import attrs

from . import ids
from .a2a import Address, Conversation, Delivery, Envelope, PendingAsk, Performative
from .checkpoints import Checkpoint, Decision
from .context import Context
from .gateway import InboundMessage
from .runs import Run, RunState, Step, ToolCall
from .scope import Scope
from .suspensions import PendingCall, Suspension, SuspensionReason

__all__ = [
    "ClauseViolation",
    "clause",
    "expect",
    "expect_raises",
    "expect_result",
    "shorten",
    "ctx",
    "ZERO",
    "make_run",
    "make_step",
    "make_tool_call",
    "make_suspension",
    "make_checkpoint",
    "approve",
    "reject",
    "make_conversation",
    "make_envelope",
    "make_delivery",
    "make_ask",
    "Outcome",
    "race",
    "strict_equal",
    "assert_strict_equal",
    "FAR_FUTURE",
    "state_view",
    "make_message",
    "gateway_view",
]

#: A context with the zero scope.
ZERO = Context(Scope())


# -- entities of a described kind (cortex_spec.kinds) -------------------------------------


def example_value(kind: Any, variant: int = 0) -> Any:
    """A valid value of a field kind; ``variant`` 0, 1, 2… give distinct
    values (an update writes a variant different from what it replaces)."""
    from . import kinds as k

    n = variant
    if isinstance(kind, k.Optional):
        return None if n % 3 == 2 else example_value(kind.inner, n)
    if isinstance(kind, k.Id):
        return ids.new_id(kind.prefix)
    if isinstance(kind, k.Short):
        return ("short", "ünï 😀 %_", "Short value")[n % 3] + (f" {n}" if n >= 3 else "")
    if isinstance(kind, k.Text):
        return ("text", "line one\nline two", "")[n % 3] + (f" {n}" if n >= 3 else "")
    if isinstance(kind, k.Count):
        return (1, 0, 2**63 - 1)[n % 3]
    if isinstance(kind, k.Int):
        return (-2, 7, -(2**63))[n % 3]
    if isinstance(kind, k.Float):
        return (0.5, -1.0, 1e300)[n % 3]
    if isinstance(kind, k.Bool):
        return n % 2 == 0
    if isinstance(kind, k.Instant):
        return datetime(2026, 1, 2, tzinfo=timezone.utc) + timedelta(milliseconds=n)
    if isinstance(kind, k.Json):
        return ({"k": 1, "f": 1.0, "b": True, "n": None, "s": "x", "l": [1, "a"]}, {}, {"$a.b": {"": [2**63 - 1]}})[n % 3]
    if isinstance(kind, k.FloatMap):
        return ({"x": 0.5}, {}, {"a": -1.0, "b": 2.0})[n % 3]
    if isinstance(kind, k.JsonValue):
        return ([1, "a", 1.0], 7, {"k": None})[n % 3]
    if isinstance(kind, k.Choice):
        members = list(kind.enum)
        return members[n % len(members)]
    if isinstance(kind, k.Strings):
        return (("a", "b"), (), ("c",))[n % 3]
    if isinstance(kind, k.Records):
        return ((example(kind.record, variant=n), example(kind.record, variant=n + 1)), (),
                (example(kind.record, variant=n),))[n % 3]
    if isinstance(kind, k.Record):
        return example(kind.record, variant=n)
    raise TypeError(f"no example value for {kind!r}")


def example(cls: type, variant: int = 0, **fields: Any) -> Any:
    """A valid entity (or nested record) of a described class: a fresh key,
    a value of each data field's kind (``variant`` picks which), and the
    ``fields`` given; stamps and store-owned fields keep their defaults."""
    from . import kinds as k

    values: dict[str, Any] = {}
    for name, spec in k.specs(cls).items():
        if name in fields:
            continue
        if spec.role == k.KEY:
            values[name] = example_value(spec.kind)
        elif spec.role == k.DATA:
            kind = spec.kind
            if isinstance(kind, k.Short) and kind.nonempty:
                values[name] = f"{name}-{ids.new_id('x')[2:]}"
            else:
                values[name] = example_value(kind, variant)
    values.update(fields)
    return cls(**values)


# -- checks charged to one clause ---------------------------------------------------


def shorten(value: Any, limit: int = 160) -> str:
    """``repr(value)`` of at most about ``limit`` characters, cut at a word or
    item boundary (never inside a word) with the number of characters left
    out."""
    from .words import clip

    text = value if isinstance(value, str) and value.startswith("<") else repr(value)
    return clip(text, limit)


def _rule(clause_id: str) -> str:
    from .attribution import rule_of

    return rule_of(clause_id)


class ClauseViolation(AssertionError):
    """A check of one or more clauses failed.

    The message leads with the clause and its rule in words, then what was
    checked, what was expected and what was observed.  ``cortex_clauses``
    tells the certification report which clauses failed (the test's other
    clauses are not charged)."""

    def __init__(self, clauses: str | Sequence[str], what: str, expected: Any = None,
                 observed: Any = None, detail: str = "") -> None:
        ids = (clauses,) if isinstance(clauses, str) else tuple(clauses)
        lines = [f"{c} broken: {_rule(c)}" for c in ids]
        if what:
            lines.append(f"checked: {what}")
        if expected is not None or observed is not None:
            lines.append(f"expected: {shorten(expected)}")
            lines.append(f"observed: {shorten(observed)}")
        if detail:
            lines.append(detail)
        super().__init__("\n".join(lines))
        self.cortex_clauses = ids
        self.expected = expected
        self.observed = observed


@contextmanager
def clause(*ids: str, what: str = "") -> Iterator[None]:
    """Charge a failed check inside the block to ``ids`` (not to every clause
    the test names)::

        with clause("GW-ST-3", what="a second set_replied"):
            assert gateway.set_replied(c, "tg", "m0", "other") is False

    A failing ``assert`` (or an unexpected exception) becomes a
    :class:`ClauseViolation` of ``ids``; a violation raised by an inner
    check keeps its own, more precise clause."""
    try:
        yield
    except ClauseViolation:
        raise
    except AssertionError as exc:
        raise ClauseViolation(ids, what, detail=str(exc).strip()) from exc
    except Exception as exc:  # noqa: BLE001 - an unexpected error fails the clause too
        raise ClauseViolation(ids, what, detail=f"raised {type(exc).__name__}: {exc}") from exc


def expect(clause_id: str, observed: Any, expected: Any, what: str) -> None:
    """Fail ``clause_id`` unless ``observed == expected``."""
    if observed != expected:
        raise ClauseViolation(clause_id, what, expected, observed)


def expect_result(clause_id: str, call: Callable[[], Any], expected: Any, what: str) -> None:
    """Fail ``clause_id`` unless ``call()`` returns ``expected``: an error it
    raises is the observation (charged to ``clause_id``, not to the test)."""
    try:
        observed = call()
    except Exception as exc:  # noqa: BLE001 - the error is the observation
        raise ClauseViolation(clause_id, what, expected, f"{type(exc).__name__}: {exc}") from exc
    expect(clause_id, observed, expected, what)


def expect_raises(clause_id: str, error: type[BaseException], call: Callable[[], Any],
                  what: str) -> BaseException:
    """Fail ``clause_id`` unless ``call()`` raises exactly an ``error``; returns it."""
    try:
        value = call()
    except error as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - the wrong error is the observation
        raise ClauseViolation(clause_id, what, error.__name__, f"{type(exc).__name__}: {exc}") from exc
    raise ClauseViolation(clause_id, what, error.__name__, f"returned {shorten(value)}")


def ctx(scope: str | Scope, partition: str = "", principal: str | None = None) -> Context:
    """``ctx("workspace=w1/project=p1")``."""
    return Context.of(scope, partition, principal)


def make_run(state: RunState | str = RunState.CREATED, **fields: Any) -> Run:
    fields.setdefault("id", ids.new_id(ids.RUN))
    fields.setdefault("agent_id", ids.new_id(ids.AGENT))
    return Run(state=state, **fields)


def make_step(run_id: str | None = None, **fields: Any) -> Step:
    fields.setdefault("id", ids.new_id(ids.STEP))
    return Step(run_id=run_id or ids.new_id(ids.RUN), **fields)


def make_tool_call(step_id: str | None = None, run_id: str | None = None, **fields: Any) -> ToolCall:
    fields.setdefault("id", ids.new_id(ids.TOOL_CALL))
    fields.setdefault("tool_name", "search")
    return ToolCall(
        step_id=step_id or ids.new_id(ids.STEP), run_id=run_id or ids.new_id(ids.RUN), **fields
    )


def make_suspension(run_id: str, **fields: Any) -> Suspension:
    fields.setdefault("id", ids.new_id(ids.SUSPENSION))
    fields.setdefault("reason", SuspensionReason.APPROVAL)
    fields.setdefault(
        "pending", (PendingCall(id="call_1", name="deploy", arguments='{"env": "prod"}'),)
    )
    fields.setdefault("continuation", {"step": 3, "resume_token": "abc"})
    return Suspension(run_id=run_id, **fields)


def make_checkpoint(run_id: str | None = None, **fields: Any) -> Checkpoint:
    fields.setdefault("id", ids.new_id(ids.CHECKPOINT))
    fields.setdefault("agent_id", ids.new_id(ids.AGENT))
    fields.setdefault("reason", "approve the deployment")
    return Checkpoint(run_id=run_id or ids.new_id(ids.RUN), **fields)


def make_conversation(**fields: Any) -> Conversation:
    """An open conversation between ``planner`` and ``worker`` (8 hops)."""
    fields.setdefault("id", ids.new_id(ids.CONVERSATION))
    fields.setdefault("protocol", "fipa-request")
    fields.setdefault("initiator", Address("planner"))
    fields.setdefault("participants", (Address("planner"),))
    return Conversation(**fields)


def make_envelope(conversation_id: str, **fields: Any) -> Envelope:
    """A request from ``planner`` to ``worker`` on ``conversation_id``."""
    fields.setdefault("id", ids.new_id(ids.MESSAGE))
    fields.setdefault("performative", Performative.REQUEST)
    fields.setdefault("sender", Address("planner"))
    fields.setdefault("receivers", (Address("worker"),))
    fields.setdefault("content", "summarise the report")
    fields.setdefault("metadata", {"priority": 1, "ratio": 0.5, "urgent": True})
    return Envelope(conversation_id=conversation_id, **fields)


def make_delivery(message_id: str | None = None, **fields: Any) -> Delivery:
    """A delivery of ``message_id`` (a fresh id by default) to local ``worker``."""
    fields.setdefault("id", ids.new_id(ids.DELIVERY))
    fields.setdefault("receiver", Address("worker"))
    return Delivery(message_id=message_id or ids.new_id(ids.MESSAGE), **fields)


def make_ask(conversation_id: str | None = None, **fields: Any) -> PendingAsk:
    """A pending ask with a fresh ``reply_with`` token and no deadline."""
    fields.setdefault("reply_with", "rw-" + ids.new_id(ids.MESSAGE)[4:])
    fields.setdefault("message_id", ids.new_id(ids.MESSAGE))
    fields.setdefault("asker_run_id", ids.new_id(ids.RUN))
    fields.setdefault("asker_agent", "planner")
    fields.setdefault("tool_call_id", "call_1")
    fields.setdefault("expected", Address("worker"))
    return PendingAsk(conversation_id=conversation_id or ids.new_id(ids.CONVERSATION), **fields)


def approve(by: str = "alice", reason: str = "looks good") -> Decision:
    return Decision(approved=True, decided_by=by, reason=reason)


def reject(by: str = "bob", reason: str = "not now") -> Decision:
    return Decision(approved=False, decided_by=by, reason=reason)


@attrs.frozen
class Outcome:
    """What one racing call did: a value, or an exception."""

    value: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def race(calls: Sequence[Callable[[], Any]], timeout: float = 60.0) -> list[Outcome]:
    """Run each call in its own thread, all released by one barrier.

    Returns one :class:`Outcome` per call, in the order given.  A thread that
    does not finish within ``timeout`` seconds fails the race loudly (a hung
    store is a bug, not a pass).
    """
    barrier = threading.Barrier(len(calls))
    results: list[Outcome | None] = [None] * len(calls)

    def worker(i: int, call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[i] = Outcome(value=call())
        except BaseException as exc:  # noqa: BLE001 - the outcome is the data
            results[i] = Outcome(error=exc)

    threads = [
        threading.Thread(target=worker, args=(i, c), name=f"cortex-race-{i}", daemon=True)
        for i, c in enumerate(calls)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    if hung:
        raise AssertionError(f"{len(hung)} racing call(s) did not return within {timeout}s")
    return [r for r in results if r is not None]


def strict_equal(a: Any, b: Any) -> bool:
    """Deep equality that also requires equal types (``1`` is not ``1.0`` or
    ``True``), as RSC-GEN-7 demands of JSON round trips."""
    if isinstance(a, Enum) or isinstance(b, Enum):
        # str-valued enums (RunState, …) compare by value with their strings
        return isinstance(a, str) and isinstance(b, str) and str.__eq__(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if attrs.has(type(a)):
        return all(
            strict_equal(getattr(a, f.name), getattr(b, f.name)) for f in attrs.fields(type(a))
        )
    return a == b


def assert_strict_equal(actual: Any, expected: Any, what: str = "value") -> None:
    if not strict_equal(actual, expected):
        raise AssertionError(f"{what} differs (types included):\n  got      {actual!r}\n  expected {expected!r}")


#: An instant far in the future, for "every deadline has passed" views.
FAR_FUTURE = datetime(2999, 1, 1, tzinfo=timezone.utc)


def state_view(
    store: Any,
    scopes: Sequence[str | Scope | Context],
    *,
    run_ids: Sequence[str] = (),
    step_ids: Sequence[str] = (),
    delivery_ids: Sequence[str] = (),
    reply_withs: Sequence[str] = (),
    conversation_ids: Sequence[str] = (),
    classes: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Everything observable through the store's declared classes, as seen
    from each of ``scopes`` (and through the across-scope lists).

    Compare two views taken before and after a call to prove the call wrote
    nothing (a refused call writes nothing).  Only methods of declared
    classes are called; ``classes`` narrows the view to those classes and
    the classes they require (the rows a call of those classes can touch:
    classes share rows only through their requirements).  a2a rows are seen through the partition of each
    context (a ``Context`` may carry one); the scope-ignoring a2a lists are
    read for every partition of ``scopes`` and for the global one.
    """
    caps = frozenset(getattr(store, "capabilities", frozenset()))
    if classes is not None:
        from .classes import closure

        caps &= closure(frozenset(classes))
    view: dict[str, Any] = {}
    contexts = [s if isinstance(s, Context) else ctx(s) for s in scopes]
    for c in contexts:
        key = c.scope.canonical()
        if "runs" in caps:
            view[f"runs@{key}"] = store.list_runs(c)
            for rid in run_ids:
                view[f"steps[{rid}]@{key}"] = store.list_steps(c, rid)
            for sid in step_ids:
                view[f"tool_calls[{sid}]@{key}"] = store.list_tool_calls(c, sid)
        if "suspensions" in caps:
            view[f"expired@{key}"] = store.list_expired(c, FAR_FUTURE)
            for rid in run_ids:
                view[f"suspension[{rid}]@{key}"] = _try(store.get_suspension, c, rid)
        if "checkpoints" in caps:
            view[f"pending@{key}"] = store.list_pending(c)
        if "a2a" in caps:
            key = f"{key}#{c.partition}"
            view[f"messages@{key}"] = store.list_messages(c)
            view[f"conversations@{key}"] = store.list_conversations(c)
            view[f"expired_asks@{key}"] = store.list_expired_asks(c, FAR_FUTURE)
            view[f"inbox@{key}"] = store.list_inbox(c, "worker")
            for did in delivery_ids:
                view[f"delivery[{did}]@{key}"] = _try(store.get_delivery, c, did)
            for rw in reply_withs:
                view[f"ask[{rw}]@{key}"] = _try(store.get_pending_ask, c, rw)
            for cid in conversation_ids:
                view[f"conversation[{cid}]@{key}"] = _try(store.get_conversation, c, cid)
                view[f"pending_asks[{cid}]@{key}"] = store.list_pending_asks_by_conversation(c, cid)
    if "a2a" in caps:
        for partition in sorted({c.partition for c in contexts} | {""}):
            anywhere = Context(Scope(), partition)
            view[f"queued@*#{partition}"] = store.list_queued_deliveries(anywhere)
            view[f"expired_asks@*#{partition}"] = store.list_expired_asks_across_scopes(anywhere, FAR_FUTURE)
    if "suspensions" in caps:
        view["expired@*"] = store.list_expired_across_scopes(ZERO, FAR_FUTURE)
    if "checkpoints" in caps:
        view["pending@*"] = store.list_pending_across_scopes(ZERO)
    return view


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the error class is the observation
        return f"<{type(exc).__name__}>"


def make_message(channel: str = "telegram", message_id: str | None = None, **fields: Any) -> InboundMessage:
    """An :class:`InboundMessage` with every field set to something distinct."""
    if message_id is None:
        message_id = ids.new_id(ids.MESSAGE)
    fields.setdefault("conversation", "chat-42")
    fields.setdefault("principal", "user:alice")
    fields.setdefault("text", "deploy the staging branch, please")
    fields.setdefault("trusted", True)
    fields.setdefault("agent", "helper")
    fields.setdefault("project", "proj-7")
    return InboundMessage(channel=channel, message_id=message_id, **fields)


def gateway_view(
    gateway: Any,
    keys: Sequence[tuple[str, str]] = (),
    channels: Sequence[str] = (),
    conversations: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """Everything observable through a gateway store: both queues, the row of
    each of ``keys``, the offset of each of ``channels`` and the selection of
    each of ``conversations``.  Compare views before and after a call to
    prove it wrote nothing."""
    view: dict[str, Any] = {
        "pending": gateway.pending(ZERO),
        "pending_replies": gateway.pending_replies(ZERO),
    }
    for channel, message_id in keys:
        view[f"item[{channel!r},{message_id!r}]"] = gateway.get_item(ZERO, channel, message_id)
    for channel in channels:
        view[f"offset[{channel!r}]"] = gateway.offset(ZERO, channel)
    for channel, conversation in conversations:
        view[f"selection[{channel!r},{conversation!r}]"] = gateway.conversation(ZERO, channel, conversation)
    return view
