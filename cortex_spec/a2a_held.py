"""Conformance class ``a2a_held``: held asks and agent-reply pauses (spec:
a2a_held.md).

The seed's ``HeldAskStore``: a held question (stored with its pending ask,
not queued) is released — its deliveries queued — only while the asking run
is still exactly the pause the caller decided on (run id, suspension id,
run revision); an identical retry returns the original receipt, also after
the run was resumed.  And ``ListAgentReplyRuns``: the runs an agent reply
may still have to resume.

Receipts are an internal stored kind (:data:`RELEASES`, keyed by the
question's ``reply_with``).  The methods are written once
(:class:`HeldMethods`) over a backend's kinds storage and its
:class:`~cortex_spec.a2a.A2ARows`; the release is one
:meth:`~cortex_spec.kinds.Storage.atomic` step.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from . import ids
from .a2a import Delivery, DeliveryState, check_page_size, check_reply_with, e_visible, visible
from .context import Context, require_scope
from .entities import entity
from .errors import (
    AskAlreadyClaimed,
    AskNotFound,
    HeldAskConflict,
    HeldAskNotFound,
    InvalidArgument,
    MessageNotFound,
    NotSuspended,
    RunNotFound,
)
from .kinds import Count, Id, Query, Short, Strings, Table, check_protocol, created, field, scope_field
from .runs import RunState
from .scope import Scope
from .suspensions import SuspensionReason
from .validation import check_count

__all__ = [
    "HELD_ASK_METADATA",
    "HeldAskRequest",
    "HeldAskReceipt",
    "StoredRelease",
    "RELEASES",
    "TABLES",
    "SCHEMA_VERSION",
    "HeldMethods",
    "HeldAskStore",
    "is_held_question",
]

#: The metadata key that marks a held question (the seed's ``HeldAskMetadata``).
HELD_ASK_METADATA = "cortex.held_ask"
#: The ``schema_version`` of every receipt this contract describes.
SCHEMA_VERSION = 1


@entity
class HeldAskRequest:
    """The pause a release is pinned to, and the ids of the question's
    deliveries (one per receiver, in order)."""

    run_id: str
    suspension_id: str
    run_revision: int
    reply_with: str
    delivery_ids: tuple[str, ...] = ()


@entity
class HeldAskReceipt:
    """The receipt of a release; ``fresh`` is true only on the releasing
    call's acknowledgment."""

    schema_version: int
    scope: Scope
    orchestration_id: str
    request: HeldAskRequest
    message_id: str
    deliveries: tuple[str, ...]
    committed_at: datetime
    fresh: bool = False


@entity
class StoredRelease:
    """A release receipt as stored, keyed by the question's ``reply_with``;
    ``created_at`` is its ``committed_at``."""

    id: str = field(Short(nonempty=True), default="", role="key")
    scope: Scope = scope_field()
    partition: str = field(Short(), default="")
    run_id: str = field(Id(ids.RUN), default="")
    suspension_id: str = field(Id(ids.SUSPENSION), default="")
    run_revision: int = field(Count(), default=0)
    message_id: str = field(Id(ids.MESSAGE), default="")
    delivery_ids: tuple[str, ...] = field(Strings(Id(ids.DELIVERY)), factory=tuple)
    created_at: datetime | None = created()


RELEASES = Table(StoredRelease, "a2a_held_releases", "a2a_held", HeldAskNotFound,
                 "held ask release", "held ask releases", ops=(), internal=True)

#: Every stored kind of the class.
TABLES = (RELEASES,)


def is_held_question(metadata: dict[str, Any]) -> bool:
    """A held question's envelope carries ``"cortex.held_ask": true``."""
    return metadata.get(HELD_ASK_METADATA) is True


def _check_request(request: object) -> HeldAskRequest:
    if not isinstance(request, HeldAskRequest):
        raise InvalidArgument(f"request must be a HeldAskRequest, got {type(request).__name__}")
    dids = request.delivery_ids
    if not isinstance(dids, (tuple, list)):
        raise InvalidArgument(f"request.delivery_ids must be a tuple, got {type(dids).__name__}")
    checked = tuple(ids.check_id(d, ids.DELIVERY, f"request.delivery_ids[{i}]") for i, d in enumerate(dids))
    if not checked:
        raise InvalidArgument("request.delivery_ids must name at least one delivery")
    if len(set(checked)) != len(checked):
        raise InvalidArgument("request.delivery_ids names a delivery twice")
    return HeldAskRequest(
        run_id=ids.check_id(request.run_id, ids.RUN, "request.run_id"),
        suspension_id=ids.check_id(request.suspension_id, ids.SUSPENSION, "request.suspension_id"),
        run_revision=check_count(request.run_revision, "request.run_revision"),
        reply_with=check_reply_with(request.reply_with, "request.reply_with"),
        delivery_ids=checked,
    )


def receipt_of(row: StoredRelease, fresh: bool = False) -> HeldAskReceipt:
    assert row.created_at is not None
    return HeldAskReceipt(
        schema_version=SCHEMA_VERSION, scope=row.scope, orchestration_id=row.partition,
        request=_request_of(row), message_id=row.message_id, deliveries=row.delivery_ids,
        committed_at=row.created_at, fresh=fresh,
    )


def _request_of(row: StoredRelease) -> HeldAskRequest:
    return HeldAskRequest(run_id=row.run_id, suspension_id=row.suspension_id, run_revision=row.run_revision,
                          reply_with=row.id, delivery_ids=row.delivery_ids)


# -- the methods, once for every backend -------------------------------------------------------


class HeldMethods:
    """The class's methods on ``self._crud`` and ``self._a2a_rows(storage)``."""

    _crud: Any
    #: ``_a2a_rows(storage=None)``: the backend's :class:`~cortex_spec.a2a.A2ARows`
    #: in the atomic step of ``storage`` (None: outside any step)
    _a2a_rows: Any

    def release_held_ask(self, ctx: Context, request: HeldAskRequest) -> HeldAskReceipt:
        """A2A-HELD-2..8: validate the pinned pause and queue the question,
        in one step; an identical retry returns the receipt."""
        require_scope(ctx)
        req = _check_request(request)
        now = self._crud.now()

        def step(storage: Any) -> HeldAskReceipt:
            rows = self._a2a_rows(storage)
            ask = rows.ask(req.reply_with)
            if ask is None or not e_visible(ctx, ask):
                raise AskNotFound(f"pending ask {req.reply_with} not found")
            kept = storage.select(RELEASES, Query(None, where=(("id", req.reply_with),)))
            if kept:
                if _request_of(kept[0]) == req:
                    return receipt_of(kept[0])  # A2A-HELD-2: an identical retry, whatever happened since
                raise HeldAskConflict(f"the question {req.reply_with} was released with another request")
            if ask.asker_run_id != req.run_id:
                raise HeldAskConflict(f"the question {req.reply_with} was not asked by run {req.run_id}")
            if ask.claimed_at is not None:
                raise AskAlreadyClaimed(f"the ask {req.reply_with} is already claimed")
            question = rows.message(ask.message_id)
            if question is None or not visible(ctx, question):
                raise MessageNotFound(f"message {ask.message_id} not found")
            if not is_held_question(question.metadata):
                raise HeldAskConflict(f"message {question.id} is not a held question")
            if len(question.receivers) != len(req.delivery_ids):
                raise HeldAskConflict(f"the question has {len(question.receivers)} receivers, the request "
                                      f"{len(req.delivery_ids)} delivery ids")
            run = rows.run(req.run_id)
            if run is None or run.scope != ctx.scope:
                raise RunNotFound(f"run {req.run_id} not found")
            if run.state != RunState.PAUSED or run.revision != req.run_revision:
                raise HeldAskConflict(f"run {req.run_id} is not the pause the release was decided on")
            pause = rows.suspension(req.run_id)
            if pause is None or pause.scope != ctx.scope:
                raise NotSuspended(f"run {req.run_id} has no suspension")
            if pause.id != req.suspension_id or pause.reason != SuspensionReason.AGENT_REPLY:
                raise HeldAskConflict(f"run {req.run_id} is not paused on that agent reply")
            for did, receiver in zip(req.delivery_ids, question.receivers):
                rows.insert_delivery(Delivery(id=did, message_id=question.id, receiver=receiver,
                                              state=DeliveryState.QUEUED, scope=ctx.scope,
                                              partition=ctx.partition, created_at=now, updated_at=now))
            row = StoredRelease(id=req.reply_with, scope=ctx.scope, partition=ctx.partition, run_id=req.run_id,
                                suspension_id=req.suspension_id, run_revision=req.run_revision,
                                message_id=question.id, delivery_ids=req.delivery_ids, created_at=now)
            storage.insert(RELEASES, row)
            return receipt_of(row, fresh=True)

        return self._crud.storage.atomic(step)  # type: ignore[no-any-return]

    def get_held_ask_release(self, ctx: Context, reply_with: str) -> HeldAskReceipt:
        """A2A-HELD-9."""
        scope = require_scope(ctx)
        rw = check_reply_with(reply_with)
        rows = self._crud.storage.select(RELEASES, Query(scope, exact=True, where=(
            ("id", rw), ("partition", ctx.partition))))
        if not rows:
            raise HeldAskNotFound(f"no release of the question {rw}")
        return receipt_of(rows[0])

    def list_agent_reply_runs(self, ctx: Context, after: str | None, limit: int) -> list[str]:
        """A2A-AREPLY-1..3."""
        scope = require_scope(ctx)
        start = ids.check_optional_id(after, ids.RUN, "after")
        limit = check_page_size(limit)
        return self._a2a_rows().agent_reply_runs(scope, ctx.partition, start, limit)  # type: ignore[no-any-return]


@runtime_checkable
class HeldAskStore(Protocol):
    """What a store of class ``a2a_held`` provides (a2a_held.md)."""

    def release_held_ask(self, ctx: Context, request: HeldAskRequest) -> HeldAskReceipt: ...
    def get_held_ask_release(self, ctx: Context, reply_with: str) -> HeldAskReceipt: ...
    def list_agent_reply_runs(self, ctx: Context, after: str | None, limit: int) -> list[str]: ...


check_protocol(HeldAskStore, (), HeldMethods)
