"""Class ``runs`` on MongoDB: runs, steps and tool calls.

A run lives in the ``run`` sub-document of its *run slot*: the one document
of the ``runs`` collection whose ``_id`` is the run id.  The same document
may also carry the run's suspension (``susp``, see :mod:`.suspensions`), and
it may exist before the run does, because a suspension may be created first
(SUSP-CREATE-4).  Every query on runs therefore filters on the run's stored
scope (``run.scope.n`` exists only where a run does), and creating a run
fills the ``run`` part of the slot only if it is empty.

Steps and tool calls are stored kinds (:data:`cortex_spec.runs.TABLES`):
plain documents of their own collections, keyed by their ids, written and
read by :mod:`.kinds`.
"""

from __future__ import annotations

from typing import Any

from cortex_spec import ids
from cortex_spec.context import Context, require_scope
from cortex_spec.entities import detach
from cortex_spec.errors import AlreadyExists, RunNotFound, StoreError
from cortex_spec.runs import (
    Lease,
    Run,
    RunFilter,
    RunState,
    RunsMethods,
    apply_run_update,
    validate_new_run,
    validate_run_filter,
    validate_run_update,
)

from .store import (
    MongoStoreBase,
    decode,
    dt_in,
    dt_out,
    json_in,
    json_out,
    opt_dt_in,
    scope_filter,
    scope_in,
    scope_out,
)

__all__ = ["RunsMixin", "run_doc", "run_from_doc", "lease_out"]

#: how often a create retries when its slot appears or vanishes under it
_RETRIES = 100


def _run_field_out(name: str, value: Any) -> Any:
    if name in ("started_at", "completed_at"):
        return dt_out(value)
    if name == "metadata":
        return json_out(value)
    if name == "state":
        return RunState(value).value
    return value


def lease_out(lease: Lease | None) -> dict[str, Any] | None:
    """A run's lease as its slot stores it."""
    return None if lease is None else {"owner": lease.owner, "expires_at": dt_out(lease.expires_at)}


def run_doc(run: Run) -> dict[str, Any]:
    """The ``run`` part of a slot for a validated run."""
    return {
        "agent_id": run.agent_id,
        "session_id": run.session_id,
        "scope": scope_out(run.scope),
        "state": RunState(run.state).value,
        "input": run.input,
        "output": run.output,
        "error": run.error,
        "step_count": run.step_count,
        "tokens_used": run.tokens_used,
        "started_at": dt_out(run.started_at),
        "completed_at": dt_out(run.completed_at),
        "persona_ref": run.persona_ref,
        "metadata": json_out(run.metadata),
        "principal": run.principal,
        "reply_route": json_out(run.reply_route),
        "lease": lease_out(run.lease),
        "reclaim_count": run.reclaim_count,
        "notified_at": dt_out(run.notified_at),
        "revision": run.revision,
        "created_at": dt_out(run.created_at),
        "updated_at": dt_out(run.updated_at),
    }


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a stored count is a {type(value).__name__}")
    return value


def run_from_doc(run_id: str, doc: dict[str, Any]) -> Run:
    return decode(f"stored run {run_id}", lambda: Run(
        id=run_id,
        agent_id=doc["agent_id"],
        session_id=doc["session_id"],
        scope=scope_in(doc["scope"]),
        state=RunState(doc["state"]),
        input=doc["input"],
        output=doc["output"],
        error=doc["error"],
        step_count=int(doc["step_count"]),
        tokens_used=int(doc["tokens_used"]),
        started_at=opt_dt_in(doc["started_at"]),
        completed_at=opt_dt_in(doc["completed_at"]),
        persona_ref=doc["persona_ref"],
        metadata=json_in(doc["metadata"]),
        principal=doc["principal"],
        reply_route=json_in(doc["reply_route"]),
        # RUN-ENT-2: written only by class `leases` (and cleared by update_run)
        lease=None if doc["lease"] is None else Lease(owner=doc["lease"]["owner"], expires_at=dt_in(doc["lease"]["expires_at"])),
        reclaim_count=int(doc["reclaim_count"]),
        notified_at=opt_dt_in(doc["notified_at"]),
        revision=_count(doc["revision"]),
        created_at=dt_in(doc["created_at"]),
        updated_at=dt_in(doc["updated_at"]),
    ))


class RunsMixin(RunsMethods, MongoStoreBase):
    """Runs by hand (in their slots); steps and tool calls are the generated
    methods of :data:`cortex_spec.runs.TABLES` on the Mongo storage of
    :mod:`.kinds` (collections ``steps`` and ``tool_calls``)."""


    # -- slots ---------------------------------------------------------------------

    def _fill_slot(self, slot_id: str, part: str, doc: dict[str, Any], taken: str) -> None:
        """Set ``part`` of the slot ``slot_id`` to ``doc`` if that part is empty.

        One conditional upsert: it fills an existing slot whose ``part`` is
        empty, or inserts the slot.  A duplicate key means the slot exists
        with ``part`` taken (→ ``AlreadyExists``, decided by one read of the
        slot), or another unique key is taken (the caller's ``on_duplicate``
        decides), or the slot appeared between our match and our insert (→
        try again: the next attempt matches it).
        """
        from pymongo.errors import DuplicateKeyError

        for _ in range(_RETRIES):
            try:
                self._runs.update_one(
                    {"_id": slot_id, part: {"$exists": False}},
                    {"$set": {part: doc}},
                    upsert=True,
                )
                return
            except DuplicateKeyError:
                slot = self._runs.find_one({"_id": slot_id}, projection={part: 1})
                if slot is not None and part in slot:
                    raise AlreadyExists(taken) from None
                self._on_duplicate(part, doc)
        raise StoreError(f"could not write {part} of {slot_id}: it kept changing under us")

    def _on_duplicate(self, part: str, doc: dict[str, Any]) -> None:
        """A duplicate key that is not the slot's own: overridden by suspensions."""

    # -- runs ----------------------------------------------------------------------

    def create_run(self, ctx: Context, run: Run) -> Run:
        require_scope(ctx)
        with self._guard():
            stored = validate_new_run(run, ctx, self._now())
            self._fill_slot(stored.id, "run", run_doc(stored), f"run {stored.id} already exists")
            return detach(stored)

    def get_run(self, ctx: Context, run_id: str) -> Run:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._guard():
            slot = self._runs.find_one(
                {"_id": run_id, **scope_filter("run.scope", scope)}, projection={"run": 1}
            )
            if slot is None:
                raise RunNotFound(f"run {run_id} not found")  # RUN-GET-1
            return run_from_doc(run_id, slot["run"])

    def update_run(self, ctx: Context, run: Run) -> Run:
        from pymongo import ReturnDocument

        scope = require_scope(ctx)
        run_id, fields = validate_run_update(run)
        with self._guard():
            now = self._now()
            visible = {"_id": run_id, **scope_filter("run.scope", scope)}
            slot = self._runs.find_one(visible, projection={"run": 1})
            if slot is None:
                raise RunNotFound(f"run {run_id} not found")  # RUN-UPD-1
            # RUN-UPD-7: the size limit applies to the run as it will be
            # stored.  It depends only on the written fields and on fields no
            # method ever changes (id, scope, principal, reply_route,
            # created_at), so this read cannot go stale before the write.
            apply_run_update(run_from_doc(run_id, slot["run"]), fields, now)
            changes = {f"run.{name}": _run_field_out(name, value) for name, value in fields.items()}
            changes["run.updated_at"] = dt_out(now)
            if fields["state"] != RunState.RUNNING:
                changes["run.lease"] = None  # LEASE-CLEAR-1, in the same update
            # RUN-UPD-2..6: one single-document update, unconditional on the
            # state, so it lands whole and the last writer wins; it advances
            # the revision in the same operation (RUN-REV-2).
            slot = self._runs.find_one_and_update(
                visible,
                {"$set": changes, "$inc": {"run.revision": 1}},
                projection={"run": 1},
                return_document=ReturnDocument.AFTER,
            )
            if slot is None:  # a run never leaves its slot nor changes scope
                raise RunNotFound(f"run {run_id} not found")
            return run_from_doc(run_id, slot["run"])

    def _run_query(self, ctx: Context, flt: RunFilter | None) -> tuple[dict[str, Any], RunFilter]:
        scope = require_scope(ctx)
        flt = validate_run_filter(flt)
        query = scope_filter("run.scope", scope, exact=flt.exact)  # RUN-LIST-1
        if flt.agent_id is not None:
            query["run.agent_id"] = flt.agent_id
        if flt.state is not None:
            query["run.state"] = RunState(flt.state).value
        return query, flt

    def list_runs(self, ctx: Context, filter: RunFilter | None = None) -> list[Run]:
        query, flt = self._run_query(ctx, filter)
        with self._guard():
            slots = self._find(
                self._runs,
                query,
                projection={"run": 1},
                sort=[("run.created_at", -1), ("_id", -1)],  # RUN-LIST-2
                skip=flt.offset,
                limit=flt.limit,
            )
            return [run_from_doc(s["_id"], s["run"]) for s in slots]

    def count_runs(self, ctx: Context, filter: RunFilter | None = None) -> int:
        query, _ = self._run_query(ctx, filter)
        with self._guard():
            return self._count(self._runs, query)  # RUN-LIST-4
