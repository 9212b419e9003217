"""Class ``runs`` on MongoDB: runs, steps and tool calls.

A run lives in the ``run`` sub-document of its *run slot*: the one document
of the ``runs`` collection whose ``_id`` is the run id.  The same document
may also carry the run's suspension (``susp``, see :mod:`.suspensions`), and
it may exist before the run does, because a suspension may be created first
(SUSP-CREATE-4).  Every query on runs therefore filters on the run's stored
scope (``run.scope.n`` exists only where a run does), and creating a run
fills the ``run`` part of the slot only if it is empty (:meth:`RunsMixin._fill_slot`).

Runs, steps and tool calls are stored kinds (:data:`cortex_spec.runs.TABLES`),
read and written by :mod:`.kinds`: runs as the ``run`` part of their slots
(:data:`.kinds.PARTS`), steps and tool calls as plain documents of their own
collections.  :func:`run_doc`, :func:`run_from_doc` and :func:`lease_out`
are the generated codec, for the classes that claim runs with their own
operations (suspensions, leases, a2a).
"""

from __future__ import annotations

from typing import Any

from cortex_spec.errors import AlreadyExists, StoreError
from cortex_spec.runs import RUNS, Lease, Run, RunsMethods

from .kinds import doc_of, encode_field, entity_of
from .store import MongoStoreBase

__all__ = ["RunsMixin", "run_doc", "run_from_doc", "lease_out"]

#: how often a create retries when its slot appears or vanishes under it
_RETRIES = 100


def lease_out(lease: Lease | None) -> dict[str, Any] | None:
    """A run's lease as its slot stores it."""
    out: dict[str, Any] | None = encode_field(RUNS, "lease", lease)
    return out


def run_doc(run: Run) -> dict[str, Any]:
    """The ``run`` part of a slot for a validated run."""
    doc = doc_of(RUNS, run)
    del doc["_id"]
    return doc


def run_from_doc(run_id: str, doc: dict[str, Any]) -> Run:
    """The run the ``run`` part ``doc`` of slot ``run_id`` holds."""
    run: Run = entity_of(RUNS, {"_id": run_id, "run": doc})
    return run


class RunsMixin(RunsMethods, MongoStoreBase):
    """Runs, steps and tool calls: the generated methods of
    :data:`cortex_spec.runs.TABLES` and the shared ``update_run`` on the
    Mongo storage of :mod:`.kinds` (runs in their slots, collections
    ``steps`` and ``tool_calls``)."""

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
