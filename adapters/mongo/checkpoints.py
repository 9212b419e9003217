"""Class ``checkpoints`` on MongoDB.

One document per checkpoint in the ``checkpoints`` collection, keyed by its
id.  ``resolve`` is a single ``find_one_and_update`` filtered on
``state: "pending"`` (CP-RESOLVE-1/4): of concurrent resolves exactly one
matches.  It is preceded by one read of the document, which classifies a
refusal (absent, already resolved) and measures the resolved row
(CP-RESOLVE-7); a checkpoint never returns to ``pending`` and is never
deleted, and a pending one changes only by a resolve, so an update whose
filter still finds it pending writes the row that read measured.
"""

from __future__ import annotations

from typing import Any

from cortex_spec import ids
from cortex_spec.checkpoints import (
    Checkpoint,
    CheckpointFilter,
    CheckpointState,
    Decision,
    resolved,
    validate_checkpoint_filter,
    validate_decision,
    validate_new_checkpoint,
)
from cortex_spec.context import Context, require_context, require_scope
from cortex_spec.entities import detach
from cortex_spec.errors import AlreadyExists, CheckpointNotFound, InvalidState, StoreError
from cortex_spec.validation import check_page

from .store import MongoStoreBase, decode, dt_in, dt_out, json_in, json_out, scope_filter, scope_in, scope_out

__all__ = ["CheckpointsMixin"]

_RETRIES = 100


def _decision_from_doc(doc: dict[str, Any] | None) -> Decision | None:
    return None if doc is None else Decision(
        approved=doc["approved"],
        decided_by=doc["decided_by"],
        reason=doc["reason"],
        decided_at=dt_in(doc["decided_at"]),
    )


def _checkpoint_from_doc(doc: dict[str, Any]) -> Checkpoint:
    return decode("a stored checkpoint", lambda: Checkpoint(
        id=doc["_id"],
        run_id=doc["run_id"],
        agent_id=doc["agent_id"],
        scope=scope_in(doc["scope"]),
        reason=doc["reason"],
        step_index=int(doc["step_index"]),
        state=CheckpointState(doc["state"]),
        decision=_decision_from_doc(doc["decision"]),
        metadata=json_in(doc["metadata"]),
        created_at=dt_in(doc["created_at"]),
        updated_at=dt_in(doc["updated_at"]),
    ))


class CheckpointsMixin(MongoStoreBase):
    def create_checkpoint(self, ctx: Context, checkpoint: Checkpoint) -> Checkpoint:
        from pymongo.errors import DuplicateKeyError

        require_scope(ctx)
        with self._guard():
            stored = validate_new_checkpoint(checkpoint, ctx, self._now())
            try:
                self._checkpoints.insert_one(
                    {
                        "_id": stored.id,
                        "run_id": stored.run_id,
                        "agent_id": stored.agent_id,
                        "scope": scope_out(stored.scope),
                        "reason": stored.reason,
                        "step_index": stored.step_index,
                        "state": CheckpointState.PENDING.value,
                        "decision": None,
                        "metadata": json_out(stored.metadata),
                        "created_at": dt_out(stored.created_at),
                        "updated_at": dt_out(stored.updated_at),
                    }
                )
            except DuplicateKeyError:
                raise AlreadyExists(f"checkpoint {stored.id} already exists") from None
            return detach(stored)

    def get_checkpoint(self, ctx: Context, checkpoint_id: str) -> Checkpoint:
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        with self._guard():
            doc = self._checkpoints.find_one({"_id": checkpoint_id, **scope_filter("scope", scope)})
            if doc is None:
                raise CheckpointNotFound(f"checkpoint {checkpoint_id} not found")  # CP-GET-1
            return _checkpoint_from_doc(doc)

    def resolve(self, ctx: Context, checkpoint_id: str, decision: Decision) -> Checkpoint:
        from pymongo import ReturnDocument

        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        decision = validate_decision(decision)
        with self._guard():
            now = self._now()
            visible = {"_id": checkpoint_id, **scope_filter("scope", scope)}
            update = {
                "$set": {
                    "state": CheckpointState.RESOLVED.value,
                    "decision": {
                        "approved": decision.approved,
                        "decided_by": decision.decided_by,
                        "reason": decision.reason,
                        "decided_at": dt_out(now),  # CP-RESOLVE-1: stamped here
                    },
                    "updated_at": dt_out(now),
                }
            }
            for _ in range(_RETRIES):
                doc = self._checkpoints.find_one(visible)
                if doc is None:
                    raise CheckpointNotFound(f"checkpoint {checkpoint_id} not found")
                if doc["state"] != CheckpointState.PENDING.value:
                    raise InvalidState(f"checkpoint {checkpoint_id} is already resolved")
                # CP-RESOLVE-7: measured from this read; a pending checkpoint's
                # fields change only by the resolve below, whose filter holds
                # ``pending``, so the row it writes is the row measured here
                resolved(_checkpoint_from_doc(doc), decision, now)
                doc = self._checkpoints.find_one_and_update(
                    {**visible, "state": CheckpointState.PENDING.value},
                    update,
                    return_document=ReturnDocument.AFTER,
                )
                if doc is not None:
                    return _checkpoint_from_doc(doc)
                # another resolve won between the read and the update: go
                # again, the read classifies it
            raise StoreError(f"the resolve of {checkpoint_id} kept racing concurrent writes")

    def _pending_query(
        self, ctx: Context, flt: CheckpointFilter | None
    ) -> tuple[dict[str, Any], CheckpointFilter]:
        scope = require_scope(ctx)
        flt = validate_checkpoint_filter(flt)
        query: dict[str, Any] = {"state": CheckpointState.PENDING.value, **scope_filter("scope", scope)}
        if flt.run_id is not None:
            query["run_id"] = flt.run_id
        return query, flt

    def list_pending(self, ctx: Context, filter: CheckpointFilter | None = None) -> list[Checkpoint]:
        query, flt = self._pending_query(ctx, filter)
        with self._guard():
            docs = self._find(
                self._checkpoints,
                query,
                sort=[("created_at", 1), ("_id", 1)],  # CP-LIST-2
                skip=flt.offset,
                limit=flt.limit,
            )
            return [_checkpoint_from_doc(d) for d in docs]

    def count_pending(self, ctx: Context, filter: CheckpointFilter | None = None) -> int:
        query, _ = self._pending_query(ctx, filter)
        with self._guard():
            return self._count(self._checkpoints, query)  # CP-LIST-3

    def list_pending_across_scopes(
        self, ctx: Context, after_id: str | None = None, limit: int = 0
    ) -> list[Checkpoint]:
        require_context(ctx)  # SCOPE-XS-2
        after = ids.check_optional_id(after_id, ids.CHECKPOINT, "after_id")
        limit, _ = check_page(limit)
        query: dict[str, Any] = {"state": CheckpointState.PENDING.value}
        if after is not None:
            query["_id"] = {"$gt": after}  # CP-XLIST-1: ids are ASCII, byte order
        with self._guard():
            docs = self._find(self._checkpoints, query, sort=[("_id", 1)], limit=limit)
            return [_checkpoint_from_doc(d) for d in docs]
