"""Conformance class ``memory``: sessions, conversation memory, working memory
and summaries (spec: memory.md).

Sessions are a stored kind like the catalog's (:mod:`.kinds`), with two
store-owned fields a session's conversation keeps: ``message_count`` and
``last_message`` (MEM-CONV-11).  Messages, working-memory values and
summaries are *internal* tables: rows only this class's methods write.
Every method is written once, here (:class:`MemoryMethods`), on a
backend's storage primitives; each multi-row step — a batch saved with its
counters, a clear with its reset, a session deleted with its messages — is
one :meth:`~.kinds.Storage.atomic` step: one transaction on SQL and on
MongoDB, one hold of the lock in the reference.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

from . import ids
from .context import Context, require_scope
from .entities import entity
from .errors import AlreadyExists, InvalidArgument, SessionNotFound, WorkingMemoryNotFound
from .kinds import (
    SCOPE_DEPTH,
    SCOPE_TEXT,
    Bool,
    Count,
    Filter,
    Id,
    Json,
    JsonValue,
    Listing,
    Optional,
    Instant,
    Query,
    Short,
    Table,
    Text,
    Unique,
    check_protocol,
    check_record,
    created,
    field,
    install,
    key,
    owned,
    scope_field,
    updated,
)
from .scope import Scope
from .validation import check_entity_size, check_page

__all__ = [
    "Session",
    "Message",
    "StoredMessage",
    "WorkingValue",
    "Summary",
    "SESSIONS",
    "TABLES",
    "MemoryMethods",
    "AgentMemoryStore",
]


# -- sessions ----------------------------------------------------------------------------------


@entity
class Session:
    """A conversation of an agent (MEM-SES); ``message_count`` and
    ``last_message`` belong to the store (MEM-SES-1/6, MEM-CONV-11)."""

    id: str = key(ids.SESSION)
    agent_id: str = field(Id(ids.AGENT), default="")
    scope: Scope = scope_field()
    title: str = field(Short(), default="", update=True)
    metadata: dict[str, Any] = field(Json(), factory=dict, update=True)
    is_default: bool = field(Bool(), default=False, update=True)
    message_count: int = owned(Count(), 0, on_create="require")
    last_message: str = owned(Text(), "", on_create="require")
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


SESSIONS = Table(
    Session, "sessions", "memory", SessionNotFound, "session", "sessions",
    ops=("create", "get", "update"),
    # MEM-SES-2: one default session per (agent, exact scope)
    unique=(Unique(("agent_id",), where=(("is_default", True),), name="default"),),
    listings=(Listing("list_sessions", "count_sessions",
                      filters=(Filter("agent_id", "agent_id"), Filter("default_only", "is_default", flag=True)),
                      search="title"),),
    clauses={
        "create": "MC-GEN-4",
        "create.id": "MEM-SES-1",
        "create.unique": "MEM-SES-2",
        "get": "MEM-SES-4",
        "update": "MEM-SES-5",
        "update.immutable": "MEM-SES-6",
        "update.unique": "MEM-SES-7",
        "update.missing": "MEM-SES-8",
        "list": "MEM-SES-10",
        "count": "MC-GEN-8",
        "search": "MC-GEN-10",
        "fields": "MC-GEN-13",
        "race.unique": "MEM-RACE-5",
    },
)


# -- conversation memory -------------------------------------------------------------------------


@entity
class Message:
    """One message of a conversation, as saved and loaded (MEM-CONV)."""

    role: str = field(Short(nonempty=True), default="user")
    content: str = field(Text(), default="")
    tool_calls: list[Any] = field(JsonValue(), factory=list)
    metadata: dict[str, Any] = field(Json(), factory=dict)
    timestamp: datetime | None = field(Optional(Instant()), default=None)


def _message_key(session_id: str, seq: int) -> str:
    # a session's messages sort by key in the order they were saved
    return f"{session_id}/{seq:020d}"


@entity
class StoredMessage:
    """A message as stored: its session, its scope, and the batch's one
    ``created_at`` with the message's place in the session (``seq``)."""

    #: the session and the message's place in it (an internal key)
    id: str = field(Short(), default="", role="key")
    scope: Scope = scope_field()
    agent_id: str = field(Id(ids.AGENT), default="")
    session_id: str = field(Id(ids.SESSION), default="")
    seq: int = field(Count(), default=0)
    role: str = field(Short(nonempty=True), default="user")
    content: str = field(Text(), default="")
    tool_calls: list[Any] = field(JsonValue(), factory=list)
    metadata: dict[str, Any] = field(Json(), factory=dict)
    timestamp: datetime | None = field(Optional(Instant()), default=None)
    created_at: datetime | None = created()


MESSAGES = Table(StoredMessage, "memory_messages", "memory", SessionNotFound, "message", "messages",
                 ops=(), internal=True)

#: a conversation in the order it was saved (MEM-CONV-6): the batch's time, then its place
_CHRONOLOGICAL = (("created_at", False), ("id", False))
_NEWEST_FIRST = (("created_at", True), ("id", True))


# -- working memory and summaries -------------------------------------------------------------


@entity
class WorkingValue:
    """A run's scratch value under ``key`` at one exact scope (MEM-WORK)."""

    id: str = field(Short(), default="", role="key")
    scope: Scope = scope_field()
    run_id: str = field(Id(ids.RUN), default="")
    key: str = field(Short(nonempty=True), default="")
    value: Any = field(JsonValue(), default=None, update=True)
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


WORKING = Table(WorkingValue, "memory_working", "memory", WorkingMemoryNotFound, "working value",
                "working values", ops=(), internal=True)

#: MC-GEN-9 for working memory, which has no id: shallowest, oldest, smallest canonical scope
_WORKING_ORDER = ((SCOPE_DEPTH, False), ("created_at", False), (SCOPE_TEXT, False), ("id", False))


@entity
class Summary:
    """A summary of an agent's conversations; never deleted (MEM-SUM)."""

    id: str = field(Short(), default="", role="key")
    scope: Scope = scope_field()
    agent_id: str = field(Id(ids.AGENT), default="")
    seq: int = field(Count(), default=0)
    text: str = field(Text(), default="")
    created_at: datetime | None = created()


SUMMARIES = Table(Summary, "memory_summaries", "memory", SessionNotFound, "summary", "summaries",
                  ops=(), internal=True)

#: Every stored kind of the class.
TABLES = (SESSIONS, MESSAGES, WORKING, SUMMARIES)


def _working_key(run_id: str, name: str, scope: Scope) -> str:
    text = "\x00".join((run_id, name, scope.canonical()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _summary_key(agent_id: str, seq: int) -> str:
    return f"{agent_id}/{seq:020d}"


#: How often a step that lost a race for a key (two first saves, two summaries) goes again.
_RETRIES = 100


# -- the methods, once for every backend ---------------------------------------------------------


if TYPE_CHECKING:  # the methods install() generates below, declared for type checkers (cortex_spec.stubs)
    from .generated import GeneratedMemoryMethods as _Generated
else:
    _Generated = object


class MemoryMethods(_Generated):
    """The class's store methods on ``self._crud`` (a :class:`~.kinds.Crud`
    over the backend's storage).  A backend's memory mixin inherits this."""

    _crud: Any

    # -- sessions (MEM-SES) ------------------------------------------------------------------

    def delete_session(self, ctx: Context, session_id: str) -> None:
        """MEM-SES-8/9: the visible session and every message stored for it,
        in one atomic step."""
        scope = require_scope(ctx)
        sid = Id(ids.SESSION).check(session_id, "session_id")

        def step(storage: Any) -> None:
            rows = storage.select(SESSIONS, Query(scope, where=(("id", sid),)))
            if not rows:
                raise SessionNotFound(f"session {sid} not found")
            session = rows[0]
            storage.delete_where(MESSAGES, Query(None, where=(("agent_id", session.agent_id),
                                                             ("session_id", sid))))
            storage.delete(SESSIONS, sid, scope)

        self._crud.storage.atomic(step)

    # -- conversation memory (MEM-CONV) --------------------------------------------------------

    def save_conversation(self, ctx: Context, agent_id: str, session_id: str,
                          messages: Sequence[Message]) -> None:
        """MEM-CONV-1..5: append a batch to the caller's own session."""
        scope = require_scope(ctx)
        agent = Id(ids.AGENT).check(agent_id, "agent_id")
        sid = Id(ids.SESSION).check(session_id, "session_id")
        batch = _check_messages(messages)
        if not batch:
            return  # MEM-CONV-1: no storage read at all
        now = self._crud.now()

        def step(storage: Any) -> None:
            session = _own_session(storage, scope, agent, sid)
            last = storage.select(MESSAGES, Query(None, where=(("session_id", sid),), order=(("id", True),),
                                                  limit=1))
            seq = last[0].seq if last else 0
            for i, m in enumerate(batch, start=1):
                row = StoredMessage(id=_message_key(sid, seq + i), scope=session.scope, agent_id=agent,
                                    session_id=sid, seq=seq + i, role=m.role, content=m.content,
                                    tool_calls=m.tool_calls, metadata=m.metadata, timestamp=m.timestamp,
                                    created_at=now)
                check_entity_size(row, "message")
                storage.insert(MESSAGES, row)
            spoken = [m.content for m in batch if m.content]
            changes: dict[str, Any] = {"message_count": session.message_count + len(batch)}
            if spoken:
                changes["last_message"] = spoken[-1]  # MEM-CONV-4
            storage.update(SESSIONS, sid, scope, changes, now)

        self._crud.storage.atomic(step)

    def load_conversation(self, ctx: Context, agent_id: str, session_id: str, limit: int = 0) -> list[Message]:
        """MEM-CONV-6..8: the newest ``limit`` visible messages (``<= 0``:
        all), oldest first; one read, so a batch shows whole or not at all."""
        scope = require_scope(ctx)
        agent = Id(ids.AGENT).check(agent_id, "agent_id")
        sid = Id(ids.SESSION).check(session_id, "session_id")
        limit, _ = check_page(limit)
        where = (("agent_id", agent), ("session_id", sid))
        if limit:
            rows = self._crud.storage.select(MESSAGES, Query(scope, where=where, order=_NEWEST_FIRST, limit=limit))
            rows.reverse()
        else:
            rows = self._crud.storage.select(MESSAGES, Query(scope, where=where, order=_CHRONOLOGICAL))
        return [Message(role=r.role, content=r.content, tool_calls=r.tool_calls, metadata=r.metadata,
                        timestamp=r.timestamp) for r in rows]

    def clear_conversation(self, ctx: Context, agent_id: str, session_id: str) -> None:
        """MEM-CONV-9/10: every message of the caller's own session deleted
        and its counters reset, in one atomic step."""
        scope = require_scope(ctx)
        agent = Id(ids.AGENT).check(agent_id, "agent_id")
        sid = Id(ids.SESSION).check(session_id, "session_id")
        now = self._crud.now()

        def step(storage: Any) -> None:
            _own_session(storage, scope, agent, sid)
            storage.delete_where(MESSAGES, Query(None, where=(("agent_id", agent), ("session_id", sid))))
            storage.update(SESSIONS, sid, scope, {"message_count": 0, "last_message": ""}, now)

        self._crud.storage.atomic(step)

    # -- working memory (MEM-WORK) --------------------------------------------------------------

    def save_working(self, ctx: Context, run_id: str, key: str, value: Any) -> None:
        """MEM-WORK-1..3,5: insert the row of (run, key, exact scope) or
        replace its value (its creation time kept)."""
        scope = require_scope(ctx)
        run = Id(ids.RUN).check(run_id, "run_id")
        name = Short(nonempty=True).check(key, "key")
        value = JsonValue().check(value, "value")
        now = self._crud.now()
        row = WorkingValue(id=_working_key(run, name, scope), scope=scope, run_id=run, key=name, value=value,
                           created_at=now, updated_at=now)
        check_entity_size(row, "working value")
        storage = self._crud.storage
        for _ in range(_RETRIES):
            try:
                storage.insert(WORKING, row)
                return
            except AlreadyExists:
                pass  # the row exists: replace its value (if nobody cleared it meanwhile)
            if storage.update(WORKING, row.id, scope, {"value": value}, now) is not None:
                return
        raise AlreadyExists(f"working memory {name!r} of run {run} kept changing under the save")

    def load_working(self, ctx: Context, run_id: str, key: str) -> Any:
        """MEM-WORK-4: the value of the visible row of (run, key), chosen by
        MC-GEN-9 among several scopes."""
        scope = require_scope(ctx)
        run = Id(ids.RUN).check(run_id, "run_id")
        name = Short(nonempty=True).check(key, "key")
        rows = self._crud.storage.select(WORKING, Query(scope, where=(("run_id", run), ("key", name)),
                                                        order=_WORKING_ORDER, limit=1))
        if not rows:
            raise WorkingMemoryNotFound(f"no working memory {name!r} for run {run}")
        return rows[0].value

    def clear_working(self, ctx: Context, run_id: str) -> None:
        """MEM-WORK-6: every visible row of the run (every key, the caller's
        scope and below)."""
        scope = require_scope(ctx)
        run = Id(ids.RUN).check(run_id, "run_id")
        self._crud.storage.delete_where(WORKING, Query(scope, where=(("run_id", run),)))

    # -- summaries (MEM-SUM) ------------------------------------------------------------------

    def save_summary(self, ctx: Context, agent_id: str, text: str) -> None:
        """MEM-SUM-1: append a summary at the caller's scope."""
        scope = require_scope(ctx)
        agent = Id(ids.AGENT).check(agent_id, "agent_id")
        body = Text().check(text, "text")
        now = self._crud.now()

        def step(storage: Any) -> None:
            last = storage.select(SUMMARIES, Query(None, where=(("agent_id", agent),), order=(("id", True),),
                                                   limit=1))
            seq = (last[0].seq if last else 0) + 1
            row = Summary(id=_summary_key(agent, seq), scope=scope, agent_id=agent, seq=seq, text=body,
                          created_at=now)
            check_entity_size(row, "summary")
            storage.insert(SUMMARIES, row)

        for _ in range(_RETRIES):
            try:
                self._crud.storage.atomic(step)
                return
            except AlreadyExists:
                continue  # another summary of the agent took that place first: go again
        raise AlreadyExists(f"the summaries of agent {agent} kept racing")

    def load_summaries(self, ctx: Context, agent_id: str) -> list[str]:
        """MEM-SUM-2: the texts of the visible summaries of the agent, in the
        order they were saved."""
        scope = require_scope(ctx)
        agent = Id(ids.AGENT).check(agent_id, "agent_id")
        rows = self._crud.storage.select(SUMMARIES, Query(scope, where=(("agent_id", agent),),
                                                          order=(("created_at", False), ("id", False))))
        return [r.text for r in rows]


def _own_session(storage: Any, scope: Scope, agent: str, sid: str) -> Session:
    """MEM-CONV-2: the session itself, of that agent, at exactly the caller's
    scope — or ``SessionNotFound``."""
    rows = storage.select(SESSIONS, Query(scope, exact=True, where=(("id", sid), ("agent_id", agent))))
    if not rows:
        raise SessionNotFound(f"session {sid} not found")
    return rows[0]  # type: ignore[no-any-return]


def _check_messages(messages: object) -> list[Message]:
    if not isinstance(messages, (list, tuple)):
        raise InvalidArgument(f"messages must be a list, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        checked = check_record(Message, m, f"messages[{i}]")
        if not isinstance(checked.tool_calls, list):
            raise InvalidArgument(f"messages[{i}].tool_calls must be a JSON list")
        out.append(checked)
    return out


install(MemoryMethods, (SESSIONS,))


@runtime_checkable
class AgentMemoryStore(Protocol):
    """What a store of class ``memory`` provides (memory.md)."""

    def create_session(self, ctx: Context, session: Session) -> Session: ...
    def get_session(self, ctx: Context, session_id: str) -> Session: ...
    def update_session(self, ctx: Context, session: Session) -> Session: ...
    def delete_session(self, ctx: Context, session_id: str) -> None: ...
    def list_sessions(self, ctx: Context, *, agent_id: str | None = None, default_only: bool = False,
                      search: str | None = None, exact: bool = False, limit: int = 0,
                      offset: int = 0) -> list[Session]: ...
    def count_sessions(self, ctx: Context, *, agent_id: str | None = None, default_only: bool = False,
                       search: str | None = None, exact: bool = False) -> int: ...
    def save_conversation(self, ctx: Context, agent_id: str, session_id: str,
                          messages: Sequence[Message]) -> None: ...
    def load_conversation(self, ctx: Context, agent_id: str, session_id: str,
                          limit: int = 0) -> list[Message]: ...
    def clear_conversation(self, ctx: Context, agent_id: str, session_id: str) -> None: ...
    def save_working(self, ctx: Context, run_id: str, key: str, value: Any) -> None: ...
    def load_working(self, ctx: Context, run_id: str, key: str) -> Any: ...
    def clear_working(self, ctx: Context, run_id: str) -> None: ...
    def save_summary(self, ctx: Context, agent_id: str, text: str) -> None: ...
    def load_summaries(self, ctx: Context, agent_id: str) -> list[str]: ...


check_protocol(AgentMemoryStore, (SESSIONS,), MemoryMethods)
